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
