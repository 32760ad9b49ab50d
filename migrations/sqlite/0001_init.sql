-- Sessions, history (messages), transcript (events) and spilled outputs.
-- SQLite has no row-level security: every query filters on tenant_id explicitly.
-- Timestamps are RFC 3339 text in UTC; JSON is text.

CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    config           TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    closed_at        TEXT,
    last_event_seq   INTEGER NOT NULL DEFAULT 0,
    last_message_seq INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    lease_fence      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sessions_tenant_newest ON sessions (tenant_id, created_at DESC, id DESC);

CREATE TABLE messages (
    session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq                 INTEGER NOT NULL,
    tenant_id           TEXT NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content             TEXT NOT NULL,
    run_id              TEXT,
    compaction_boundary INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    tenant_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    run_id     TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

CREATE TABLE outputs (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id   TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL,
    content     TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX outputs_created ON outputs (created_at);
