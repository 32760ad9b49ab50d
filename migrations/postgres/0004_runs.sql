-- Runs as persisted state: queued prompts survive a restart, and a running run is owned by one
-- replica through a lease (owner, expiry renewed by heartbeat, fence bumped on every claim).
-- Writes of a run check its fence, so a replica that lost the lease cannot write any more.

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id        TEXT NOT NULL,
    prompt           TEXT NOT NULL,
    status           TEXT NOT NULL
                     CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    owner            TEXT,
    lease_expires_at TIMESTAMPTZ,
    fence            BIGINT NOT NULL DEFAULT 0,
    terminal         JSONB,
    created_at       TIMESTAMPTZ NOT NULL,
    started_at       TIMESTAMPTZ,
    ended_at         TIMESTAMPTZ,
    position         BIGSERIAL
);
CREATE INDEX runs_session ON runs (session_id, position);
CREATE INDEX runs_unfinished ON runs (status) WHERE status IN ('queued', 'running');

-- The session-level lease columns of 0001 were never used: ownership is per run.
ALTER TABLE sessions DROP COLUMN lease_owner, DROP COLUMN lease_expires_at, DROP COLUMN lease_fence;

GRANT SELECT, INSERT, UPDATE, DELETE ON runs TO norma_app;
GRANT USAGE ON SEQUENCE runs_position_seq TO norma_app;
ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON runs TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
