-- A run's start reads the live grants that apply to its session: the tenant's tenant-wide
-- grants and the session's own. Through `grants_live` (tenant, then time) it read every live
-- grant of the tenant — session-scoped ones of all its sessions, which nothing caps — and kept
-- those two kinds. Now each kind has an index of its own and the statement reads each through
-- it (`store::approvals::live_grants_of_session`): what a run's start reads is what applies.
CREATE INDEX grants_live_tenant_wide ON grants (tenant_id, created_at, id)
    WHERE revoked_at IS NULL AND consumed_at IS NULL AND scope = 'tenant';
CREATE INDEX grants_live_session ON grants (session_id, created_at, id)
    WHERE revoked_at IS NULL AND consumed_at IS NULL;
DROP INDEX grants_live;
