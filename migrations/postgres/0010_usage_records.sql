-- The usage ledger: one row per completed model call of a run (main responses, recoveries,
-- hook continuations, compaction summaries), written in the transaction that commits the
-- call's events. Totals per run, session, day and model are sums over these rows.
--
-- `day` is the UTC date of `created_at` (YYYY-MM-DD), kept as text so both backends group
-- alike. `cost_pico` is the exact cost in millionths of a micro-unit (tokens × the price in
-- micro-units per million tokens); NULL when the model had no price.

CREATE TABLE usage_records (
    id                 BIGSERIAL PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id             TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    input_tokens       BIGINT NOT NULL,
    output_tokens      BIGINT NOT NULL,
    cache_read_tokens  BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost_pico          BIGINT,
    day                TEXT NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL
);
CREATE INDEX usage_records_tenant_time ON usage_records (tenant_id, created_at);
CREATE INDEX usage_records_run ON usage_records (run_id);
CREATE INDEX usage_records_session ON usage_records (session_id);

GRANT SELECT, INSERT ON usage_records TO norma_app;
GRANT USAGE, SELECT ON SEQUENCE usage_records_id_seq TO norma_app;
ALTER TABLE usage_records ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON usage_records TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
