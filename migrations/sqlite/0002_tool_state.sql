-- State built-in tools keep: a session's todo list, a session's permission-mode override
-- (plan mode) and a tenant's memory notes. No row-level security in SQLite: every query
-- filters on tenant_id explicitly.

CREATE TABLE session_todos (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id  TEXT NOT NULL,
    items      TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE TABLE session_modes (
    session_id    TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id     TEXT NOT NULL,
    mode          TEXT NOT NULL,
    previous_mode TEXT,
    updated_at    TEXT NOT NULL
);

CREATE TABLE memory_notes (
    tenant_id  TEXT NOT NULL,
    path       TEXT NOT NULL,
    content    TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant_id, path)
) WITHOUT ROWID;
