-- The per-tenant count that admits an approval request reads only the tenant's pending
-- requests, however many decided ones are stored (the run counts already have
-- `runs_tenant_unfinished`, which Postgres proves usable for `status = 'running'`).
CREATE INDEX approvals_tenant_pending ON approvals (tenant_id, expires_at) WHERE status = 'pending';
