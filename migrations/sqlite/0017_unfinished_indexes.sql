-- The per-tenant counts that admit a run or an approval request, and the lease heartbeat, read
-- only the rows still unfinished, however many finished ones a tenant has accumulated. SQLite
-- uses a partial index only when the query repeats the index's own condition, so each index
-- here has the condition of its query (`status = 'running'`): `runs_tenant_unfinished`
-- (`status IN ('queued', 'running')`) was never chosen, and each of these statements scanned
-- every run or approval ever stored.
DROP INDEX runs_tenant_unfinished;
CREATE INDEX runs_tenant_running ON runs (tenant_id, lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_tenant_queued ON runs (tenant_id, session_id) WHERE status = 'queued';
CREATE INDEX runs_owner_running ON runs (owner) WHERE status = 'running';
CREATE INDEX approvals_tenant_pending ON approvals (tenant_id, expires_at) WHERE status = 'pending';

-- A session's live grants (read when each run starts) among the tenant's grants, without the
-- revoked and consumed ones that accumulate.
CREATE INDEX grants_live ON grants (tenant_id, created_at, id) WHERE revoked_at IS NULL AND consumed_at IS NULL;
