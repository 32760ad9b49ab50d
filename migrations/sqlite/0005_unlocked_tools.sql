-- Deferred tools a session has unlocked (see the Postgres migration of the same name).

CREATE TABLE session_unlocked_tools (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id  TEXT NOT NULL,
    tool_name  TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (session_id, tool_name)
);
