-- The usage ledger: one row per completed model call of a run (main responses, recoveries,
-- hook continuations, compaction summaries), written in the transaction that commits the
-- call's events. Totals per run, session, day and model are sums over these rows.
--
-- `day` is the UTC date of `created_at` (YYYY-MM-DD). `cost_pico` is the exact cost in
-- millionths of a micro-unit (tokens × the price in micro-units per million tokens); NULL
-- when the model had no price.

CREATE TABLE usage_records (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
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
CREATE INDEX usage_records_tenant_time ON usage_records (tenant_id, created_at);
CREATE INDEX usage_records_run ON usage_records (run_id);
CREATE INDEX usage_records_session ON usage_records (session_id);
