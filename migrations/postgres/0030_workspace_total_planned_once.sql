-- `add_tenant_workspace_bytes` (0028), which a session's workspace measurement calls through
-- the trigger of `workspace_usage` after every mutating tool call, in PL/pgSQL: a SQL-language
-- function that is not inlined (one called by `PERFORM` is not) parses and plans its statement
-- at every call, where PL/pgSQL keeps the plan for the connection's life. Its statement was the
-- only one of a run planned anew at each call (~100 µs of an approval run's append).
CREATE OR REPLACE FUNCTION add_tenant_workspace_bytes(tenant TEXT, session TEXT, delta BIGINT)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tenant_workspace_bytes (tenant_id, shard, bytes)
        VALUES (tenant, (hashtext(session) & 15)::SMALLINT, delta)
        ON CONFLICT (tenant_id, shard) DO UPDATE SET bytes = tenant_workspace_bytes.bytes + delta;
END;
$$;
