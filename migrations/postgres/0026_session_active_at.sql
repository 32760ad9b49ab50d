-- The idle sweep reads `active_at`, a clock an append moves only when it was set in an
-- earlier second (`store::sessions::active_at_after_append`), instead of `updated_at`, which
-- every append moves.
-- With no indexed column changed, the append's update of the session row can be a HOT update
-- (no new entry in any of the session's four indexes); room left on each page keeps the new
-- row version on the old one's page.
ALTER TABLE sessions ADD COLUMN active_at TIMESTAMPTZ NOT NULL DEFAULT now();
UPDATE sessions SET active_at = updated_at;
DROP INDEX sessions_idle_active;
CREATE INDEX sessions_idle_active ON sessions (active_at) WHERE status = 'active';
ALTER TABLE sessions SET (fillfactor = 80);

-- norma_create_session of 0022, restated whole (CREATE OR REPLACE replaces a function whole)
-- with the new session's `active_at` its creation time, as the server's clock gives it.
CREATE OR REPLACE FUNCTION norma_create_session(
    p_cap BIGINT,
    p_id TEXT, p_tenant TEXT, p_config JSONB, p_at TIMESTAMPTZ
) RETURNS SETOF sessions LANGUAGE plpgsql AS $$
DECLARE
    n_open BIGINT;
BEGIN
    IF p_cap IS NOT NULL THEN
        SELECT open INTO n_open FROM tenant_open_sessions WHERE tenant_id = p_tenant FOR UPDATE;
        IF NOT FOUND THEN
            -- The tenant's first session: make the row to take turns on.
            INSERT INTO tenant_open_sessions (tenant_id, open) VALUES (p_tenant, 0)
                ON CONFLICT (tenant_id) DO NOTHING;
            SELECT open INTO n_open FROM tenant_open_sessions WHERE tenant_id = p_tenant
                FOR UPDATE;
        END IF;
        IF n_open >= p_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'NL001', MESSAGE = 'sessions';
        END IF;
    END IF;
    RETURN QUERY
        INSERT INTO sessions (id, tenant_id, config, created_at, updated_at, active_at)
            VALUES (p_id, p_tenant, p_config, p_at, p_at, p_at)
        RETURNING *;
END;
$$;
