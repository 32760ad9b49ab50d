-- The per-tenant count that admits an approval request reads only the tenant's pending
-- requests, however many decided ones are stored (the run counts already have
-- `runs_tenant_unfinished`, which Postgres proves usable for `status = 'running'`).
CREATE INDEX approvals_tenant_pending ON approvals (tenant_id, expires_at) WHERE status = 'pending';

-- A session's live grants (read when each run starts) among the tenant's grants, without the
-- revoked and consumed ones that accumulate.
CREATE INDEX grants_live ON grants (tenant_id, created_at, id) WHERE revoked_at IS NULL AND consumed_at IS NULL;
