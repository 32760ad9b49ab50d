-- Per-tenant spend budgets.
--
-- `tenant_budgets`: a tenant's budget set by the operator API, replacing the configured
-- default (`[limits.budget]`) for that tenant; NULL is no limit for that period. Read at every
-- check.
--
-- `tenant_spend`: the running totals a budget is checked against, one row per tenant and UTC
-- period (`period` is `day` or `month`, `period_key` `YYYY-MM-DD` or `YYYY-MM`), added to in
-- the transaction that writes the usage ledger rows (so they always equal the ledger's sums).
-- `cost_pico` is the exact cost of the priced calls in millionths of a micro-unit.

CREATE TABLE tenant_budgets (
    tenant_id              TEXT PRIMARY KEY,
    tokens_per_day         INTEGER,
    tokens_per_month       INTEGER,
    cost_micros_per_day    INTEGER,
    cost_micros_per_month  INTEGER,
    updated_at             TEXT NOT NULL
);

CREATE TABLE tenant_spend (
    tenant_id   TEXT NOT NULL,
    period      TEXT NOT NULL,
    period_key  TEXT NOT NULL,
    tokens      INTEGER NOT NULL,
    cost_pico   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, period, period_key)
);

-- Usage recorded before this migration counts.
INSERT INTO tenant_spend (tenant_id, period, period_key, tokens, cost_pico)
SELECT tenant_id, 'day', day,
       SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens),
       COALESCE(SUM(cost_pico), 0)
FROM usage_records GROUP BY tenant_id, day;
INSERT INTO tenant_spend (tenant_id, period, period_key, tokens, cost_pico)
SELECT tenant_id, 'month', substr(day, 1, 7),
       SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens),
       COALESCE(SUM(cost_pico), 0)
FROM usage_records GROUP BY tenant_id, substr(day, 1, 7);
