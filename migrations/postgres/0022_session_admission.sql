-- A new session under the tenant's cap on open sessions, in one statement (see 0020 for why
-- a function). The count is the tenant's row of `tenant_open_sessions` (kept by the trigger
-- of 0018), read `FOR UPDATE`: concurrent creations of a tenant take turns on that row — as
-- their inserts already did through the trigger — and each reads the count the one before it
-- committed, so creations on any replica never pass the cap. NULL cap: not capped. A refusal
-- is SQLSTATE `NL001` with the message `sessions`.
CREATE FUNCTION norma_create_session(
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
        INSERT INTO sessions (id, tenant_id, config, created_at, updated_at)
            VALUES (p_id, p_tenant, p_config, p_at, p_at)
        RETURNING *;
END;
$$;
