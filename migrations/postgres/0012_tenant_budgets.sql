-- Per-tenant spend budgets.
--
-- `tenant_budgets`: a tenant's budget set by the operator API, replacing the configured
-- default (`[limits.budget]`) for that tenant; NULL is no limit for that period. Read at every
-- check, so a change reaches every replica at once.
--
-- `tenant_spend`: the running totals a budget is checked against, one row per tenant and UTC
-- period (`period` is `day` or `month`, `period_key` `YYYY-MM-DD` or `YYYY-MM`), added to in
-- the transaction that writes the usage ledger rows (so they always equal the ledger's sums).
-- `cost_pico` is the exact cost of the priced calls in millionths of a micro-unit.

CREATE TABLE tenant_budgets (
    tenant_id              TEXT PRIMARY KEY,
    tokens_per_day         BIGINT,
    tokens_per_month       BIGINT,
    cost_micros_per_day    BIGINT,
    cost_micros_per_month  BIGINT,
    updated_at             TIMESTAMPTZ NOT NULL
);

CREATE TABLE tenant_spend (
    tenant_id   TEXT NOT NULL,
    period      TEXT NOT NULL,
    period_key  TEXT NOT NULL,
    tokens      BIGINT NOT NULL,
    cost_pico   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, period, period_key)
);

-- Usage recorded before this migration counts.
INSERT INTO tenant_spend (tenant_id, period, period_key, tokens, cost_pico)
SELECT tenant_id, 'day', day,
       LEAST(SUM(input_tokens::numeric + output_tokens + cache_read_tokens + cache_write_tokens),
             9223372036854775807)::bigint,
       LEAST(COALESCE(SUM(cost_pico::numeric), 0), 9223372036854775807)::bigint
FROM usage_records GROUP BY tenant_id, day;
INSERT INTO tenant_spend (tenant_id, period, period_key, tokens, cost_pico)
SELECT tenant_id, 'month', substr(day, 1, 7),
       LEAST(SUM(input_tokens::numeric + output_tokens + cache_read_tokens + cache_write_tokens),
             9223372036854775807)::bigint,
       LEAST(COALESCE(SUM(cost_pico::numeric), 0), 9223372036854775807)::bigint
FROM usage_records GROUP BY tenant_id, substr(day, 1, 7);

GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_budgets TO norma_app;
GRANT SELECT, INSERT, UPDATE ON tenant_spend TO norma_app;
ALTER TABLE tenant_budgets ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_budgets TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
ALTER TABLE tenant_spend ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_spend TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
