-- Runs as persisted state (see the Postgres migration of the same name).

CREATE TABLE runs (
    position         INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id        TEXT NOT NULL,
    prompt           TEXT NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    owner            TEXT,
    lease_expires_at TEXT,
    fence            INTEGER NOT NULL DEFAULT 0,
    terminal         TEXT,
    created_at       TEXT NOT NULL,
    started_at       TEXT,
    ended_at         TEXT
);
CREATE INDEX runs_session ON runs (session_id, position);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running');

ALTER TABLE sessions DROP COLUMN lease_owner;
ALTER TABLE sessions DROP COLUMN lease_expires_at;
ALTER TABLE sessions DROP COLUMN lease_fence;
