-- A stream's opening in one statement: the session as the caller's tenant reads it (nothing,
-- and no hold, when the session is not that tenant's), then its hold taken exactly as
-- `norma_take_hold` takes one (under the tenant's limits lock, its commit not waiting for the
-- flush: migration 0023). One round trip where the session's read and the hold were two.

CREATE FUNCTION norma_take_session_hold(
    p_lock_space INTEGER,
    p_tenant TEXT, p_kind TEXT, p_session TEXT, p_id TEXT, p_replica TEXT,
    p_expires_at TIMESTAMPTZ, p_at TIMESTAMPTZ,
    p_session_cap BIGINT,          -- NULL: not capped per session
    p_tenant_cap BIGINT
) RETURNS TABLE (
    id TEXT, tenant_id TEXT, config JSONB, status TEXT, created_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ, closed_at TIMESTAMPTZ, last_event_seq BIGINT,
    in_session BIGINT, in_tenant BIGINT, inserted BIGINT
) LANGUAGE plpgsql AS $$
DECLARE
    session_row sessions%ROWTYPE;
BEGIN
    SELECT * INTO session_row FROM sessions s WHERE s.id = p_session AND s.tenant_id = p_tenant;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT session_row.id, session_row.tenant_id, session_row.config, session_row.status,
            session_row.created_at, session_row.updated_at, session_row.closed_at,
            session_row.last_event_seq, h.in_session, h.in_tenant, h.inserted
        FROM norma_take_hold(p_lock_space, p_tenant, p_kind, p_session, p_id, p_replica,
            p_expires_at, p_at, p_session_cap, p_tenant_cap) AS h;
END;
$$;
