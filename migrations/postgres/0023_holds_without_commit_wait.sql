-- Holds commit without waiting for their WAL flush. A hold (a live SSE stream, a running run's
-- slot) is state of a live connection: it is renewed by its replica's heartbeat and expires by
-- itself. A Postgres crash in the moment after a hold was taken may forget it (the tenant's
-- count is one short until that stream ends) or, after a release, bring it back (it expires
-- with its lease); nothing else is lost, and every later commit that waits for its flush
-- flushes the holds before it. In return the tenant's limits lock, which a hold takes, is no
-- longer held across a disk flush: the admissions of a busy tenant no longer queue behind
-- each other's fsync.

CREATE OR REPLACE FUNCTION norma_take_hold(
    p_lock_space INTEGER,
    p_tenant TEXT, p_kind TEXT, p_session TEXT, p_id TEXT, p_replica TEXT,
    p_expires_at TIMESTAMPTZ, p_at TIMESTAMPTZ,
    p_session_cap BIGINT,          -- NULL: not capped per session
    p_tenant_cap BIGINT
) RETURNS TABLE (in_session BIGINT, in_tenant BIGINT, inserted BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    -- Until the end of this statement's transaction (its own).
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_advisory_xact_lock(p_lock_space, hashtext(p_tenant));
    RETURN QUERY
        WITH live AS (
            SELECT count(*) FILTER (WHERE h.session_id = p_session) AS n_session,
                count(*) AS n_tenant
            FROM tenant_holds h
            WHERE h.tenant_id = p_tenant AND h.kind = p_kind AND h.expires_at > p_at),
        swept AS (DELETE FROM tenant_holds h WHERE h.tenant_id = p_tenant AND h.expires_at <= p_at),
        added AS (
            INSERT INTO tenant_holds (id, tenant_id, session_id, kind, replica, expires_at,
                    created_at)
                SELECT p_id, p_tenant, p_session, p_kind, p_replica, p_expires_at, p_at
                FROM live
                WHERE (p_session_cap IS NULL OR live.n_session < p_session_cap)
                    AND live.n_tenant < p_tenant_cap
                RETURNING 1)
        SELECT live.n_session, live.n_tenant, (SELECT count(*) FROM added) FROM live;
END;
$$;

-- Releases a hold (nothing when it is gone), committed like a take.
CREATE FUNCTION norma_release_hold(p_id TEXT) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    DELETE FROM tenant_holds WHERE id = p_id;
END;
$$;
