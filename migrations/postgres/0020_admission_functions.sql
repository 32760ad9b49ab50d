-- Admission in one round trip. A capped write (a new run under the tenant's run caps, a hold
-- under the holds' caps, an approval request under the pending cap) must count and insert under the tenant's limits lock with the count
-- seeing every write that held the lock before it. From the server, that was a transaction
-- of four round trips (BEGIN with the lock, count, insert, COMMIT). A statement
-- cannot take the lock itself (its snapshot is older than the lock), but a function's
-- statements each take a fresh snapshot, so these functions lock, count and insert in one
-- statement, its own transaction. They run as the caller (`norma_app`, row-level security in
-- force). A refusal is an error of SQLSTATE `NL001` whose message names the limit (the
-- server maps it to `TENANT_LIMIT`).

CREATE FUNCTION norma_create_run(
    p_lock_space INTEGER,
    p_running_cap BIGINT,          -- NULL: running runs are not capped
    p_queued_session_cap BIGINT,   -- NULL (with the next): queued runs are not capped
    p_queued_tenant_cap BIGINT,
    p_id TEXT, p_session TEXT, p_tenant TEXT, p_prompt TEXT, p_status TEXT, p_owner TEXT,
    p_lease_expires_at TIMESTAMPTZ, p_fence BIGINT, p_created_at TIMESTAMPTZ,
    p_started_at TIMESTAMPTZ
) RETURNS SETOF runs LANGUAGE plpgsql AS $$
DECLARE
    in_session BIGINT;
    in_tenant BIGINT;
BEGIN
    IF p_running_cap IS NOT NULL OR p_queued_session_cap IS NOT NULL
        OR p_queued_tenant_cap IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(p_lock_space, hashtext(p_tenant));
    END IF;
    IF p_running_cap IS NOT NULL THEN
        SELECT count(*) INTO in_tenant FROM runs
            WHERE tenant_id = p_tenant AND status = 'running'
                AND lease_expires_at > p_created_at;
        IF in_tenant >= p_running_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'NL001', MESSAGE = 'concurrent_runs';
        END IF;
    END IF;
    IF p_queued_session_cap IS NOT NULL OR p_queued_tenant_cap IS NOT NULL THEN
        SELECT count(*) FILTER (WHERE session_id = p_session), count(*)
            INTO in_session, in_tenant
            FROM runs WHERE tenant_id = p_tenant AND status = 'queued';
        IF in_session >= p_queued_session_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'NL001', MESSAGE = 'queued_prompts_per_session';
        END IF;
        IF in_tenant >= p_queued_tenant_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'NL001', MESSAGE = 'queued_prompts';
        END IF;
    END IF;
    -- Nothing when the session is not the tenant's.
    RETURN QUERY
        INSERT INTO runs (id, session_id, tenant_id, prompt, status, owner, lease_expires_at,
                fence, created_at, started_at)
            SELECT p_id, s.id, s.tenant_id, p_prompt, p_status, p_owner, p_lease_expires_at,
                p_fence, p_created_at, p_started_at
            FROM sessions s WHERE s.id = p_session AND s.tenant_id = p_tenant
        RETURNING *;
END;
$$;

-- One statement counts the live holds, sweeps the expired ones and inserts the hold when the
-- counts allow it (the count reads the snapshot before the sweep, so it skips expired holds
-- itself); the counts and whether it was inserted are returned.
CREATE FUNCTION norma_take_hold(
    p_lock_space INTEGER,
    p_tenant TEXT, p_kind TEXT, p_session TEXT, p_id TEXT, p_replica TEXT,
    p_expires_at TIMESTAMPTZ, p_at TIMESTAMPTZ,
    p_session_cap BIGINT,          -- NULL: not capped per session
    p_tenant_cap BIGINT
) RETURNS TABLE (in_session BIGINT, in_tenant BIGINT, inserted BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
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

-- An approval request under the tenant's cap on pending, unexpired requests (NULL: no cap).
CREATE FUNCTION norma_create_approval(
    p_lock_space INTEGER,
    p_pending_cap BIGINT,
    p_id TEXT, p_session TEXT, p_tenant TEXT, p_run TEXT, p_tool_use_id TEXT, p_tool_name TEXT,
    p_input JSONB, p_input_sha256 TEXT, p_reason TEXT, p_expires_at TIMESTAMPTZ,
    p_created_at TIMESTAMPTZ
) RETURNS SETOF approvals LANGUAGE plpgsql AS $$
DECLARE
    pending BIGINT;
BEGIN
    IF p_pending_cap IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(p_lock_space, hashtext(p_tenant));
        SELECT count(*) INTO pending FROM approvals
            WHERE tenant_id = p_tenant AND status = 'pending' AND expires_at > p_created_at;
        IF pending >= p_pending_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'NL001', MESSAGE = 'pending_approvals';
        END IF;
    END IF;
    RETURN QUERY
        INSERT INTO approvals (id, session_id, tenant_id, run_id, tool_use_id, tool_name, input,
                input_sha256, reason, expires_at, created_at)
            VALUES (p_id, p_session, p_tenant, p_run, p_tool_use_id, p_tool_name, p_input,
                p_input_sha256, p_reason, p_expires_at, p_created_at)
        RETURNING *;
END;
$$;
