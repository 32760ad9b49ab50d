-- A run is admitted only for an active session. `norma_create_run` inserted a run for any
-- session of the tenant, closed or not, and the server checked the status when it read the
-- session for the prompt: a close committed between that read and the run's insert (a
-- `UserPromptSubmit` hook can take seconds) left a run starting in a closed session. The
-- insert now reads the session `FOR SHARE`: a close in flight is waited for and its status
-- seen (no run), a close that comes after waits for the run's commit (and then cancels it).
-- Nothing is inserted for a closed session, as for another tenant's: the server answers that
-- the session was closed.

CREATE OR REPLACE FUNCTION norma_create_run(
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
    -- Nothing when the session is not the tenant's, or not active.
    RETURN QUERY
        INSERT INTO runs (id, session_id, tenant_id, prompt, status, owner, lease_expires_at,
                fence, created_at, started_at)
            SELECT p_id, s.id, s.tenant_id, p_prompt, p_status, p_owner, p_lease_expires_at,
                p_fence, p_created_at, p_started_at
            FROM sessions s
            WHERE s.id = p_session AND s.tenant_id = p_tenant AND s.status = 'active'
            FOR SHARE OF s
        RETURNING *;
END;
$$;
