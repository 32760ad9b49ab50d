-- Tenant limits counted across replicas.
--
-- A hold is something one replica keeps open for a tenant (an SSE stream, a background task,
-- a PTY shell): one row per holder, with the replica's name and an expiry the replica's
-- heartbeat renews. Closing it deletes the row; a replica that dies stops renewing, so its
-- holds expire and stop counting. Counts include live rows only.

CREATE TABLE tenant_holds (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('sse_stream', 'task', 'shell')),
    replica     TEXT NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX tenant_holds_tenant ON tenant_holds (tenant_id, kind, expires_at);
CREATE INDEX tenant_holds_replica ON tenant_holds (replica);

-- Runs in flight and queued prompts are counted per tenant when a run is admitted.
CREATE INDEX runs_tenant_unfinished ON runs (tenant_id, status)
    WHERE status IN ('queued', 'running');

GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_holds TO norma_app;
ALTER TABLE tenant_holds ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_holds TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));

-- Bytes in each session's workspace, measured after every mutating tool call; the tenant's
-- workspace quota is the sum over its open sessions.
CREATE TABLE workspace_usage (
    session_id  TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id   TEXT NOT NULL,
    bytes       BIGINT NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX workspace_usage_tenant ON workspace_usage (tenant_id);

GRANT SELECT, INSERT, UPDATE, DELETE ON workspace_usage TO norma_app;
ALTER TABLE workspace_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON workspace_usage TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
