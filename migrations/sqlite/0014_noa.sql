-- Noa context compression: a session's state (refs' token snapshots, compressions, archive
-- counter; one versioned JSON row) and its archives (the original messages of every
-- compressed range). Written only for sessions whose context policy is "noa". No row-level
-- security in SQLite: every query filters on tenant_id explicitly.

CREATE TABLE noa_states (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id  TEXT NOT NULL,
    version    INTEGER NOT NULL,
    state      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE noa_archives (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id     TEXT NOT NULL,
    ordinal       INTEGER NOT NULL,
    from_ref      TEXT NOT NULL,
    to_ref        TEXT NOT NULL,
    summary       TEXT NOT NULL,
    message_count INTEGER NOT NULL,
    tokens        INTEGER NOT NULL,
    messages      TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (session_id, ordinal)
);
