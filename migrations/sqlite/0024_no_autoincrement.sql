-- `runs` and `usage_records` keyed by a plain INTEGER PRIMARY KEY instead of AUTOINCREMENT.
--
-- AUTOINCREMENT keeps each table's largest key in `sqlite_sequence` and updates it at every
-- insert: one more page written to the WAL by each transaction that admits a run or records a
-- model call's usage (five per run of four model calls). A plain rowid key is still larger than
-- every key in the table when a row is inserted, which is all `position` promises (a session's
-- runs in the order they were admitted; its queue is taken in that order) and all a usage row's
-- `id` is (nothing refers to it). Rows are never deleted one by one, only with their session.
-- Every row keeps its key; the indexes are restated as they were.

CREATE TABLE runs_plain (
    position            INTEGER PRIMARY KEY,
    id                  TEXT NOT NULL UNIQUE,
    session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id           TEXT NOT NULL,
    prompt              TEXT NOT NULL,
    status              TEXT NOT NULL
                        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    owner               TEXT,
    lease_expires_at    TEXT,
    fence               INTEGER NOT NULL DEFAULT 0,
    terminal            TEXT,
    created_at          TEXT NOT NULL,
    started_at          TEXT,
    ended_at            TEXT,
    cancel_requested_at TEXT
);
INSERT INTO runs_plain (position, id, session_id, tenant_id, prompt, status, owner,
        lease_expires_at, fence, terminal, created_at, started_at, ended_at, cancel_requested_at)
    SELECT position, id, session_id, tenant_id, prompt, status, owner, lease_expires_at, fence,
        terminal, created_at, started_at, ended_at, cancel_requested_at
    FROM runs ORDER BY position;
DROP TABLE runs;
ALTER TABLE runs_plain RENAME TO runs;
CREATE INDEX runs_session ON runs (session_id, position);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running');
CREATE INDEX runs_cancel_requested ON runs (owner)
    WHERE status = 'running' AND cancel_requested_at IS NOT NULL;
CREATE INDEX runs_tenant_running ON runs (tenant_id, lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_tenant_queued ON runs (tenant_id, session_id) WHERE status = 'queued';
CREATE INDEX runs_owner_running ON runs (owner) WHERE status = 'running';

CREATE TABLE usage_records_plain (
    id                 INTEGER PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id             TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_pico          INTEGER,
    day                TEXT NOT NULL,
    created_at         TEXT NOT NULL
);
INSERT INTO usage_records_plain (id, tenant_id, session_id, run_id, provider, model,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_pico, day,
        created_at)
    SELECT id, tenant_id, session_id, run_id, provider, model, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, cost_pico, day, created_at
    FROM usage_records ORDER BY id;
DROP TABLE usage_records;
ALTER TABLE usage_records_plain RENAME TO usage_records;
CREATE INDEX usage_records_tenant_time ON usage_records (tenant_id, created_at);
CREATE INDEX usage_records_session_run ON usage_records (session_id, run_id);

DELETE FROM sqlite_sequence WHERE name IN ('runs', 'usage_records');
