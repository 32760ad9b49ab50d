-- Noa context compression: a session's state (refs' token snapshots, compressions, archive
-- counter; one versioned JSON row) and its archives (the original messages of every
-- compressed range). Written only for sessions whose context policy is "noa". Same
-- row-level security as 0001: a tenant-scoped transaction sees only its tenant's rows.

CREATE TABLE noa_states (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id  TEXT NOT NULL,
    version    BIGINT NOT NULL,
    state      JSONB NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE noa_archives (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id     TEXT NOT NULL,
    ordinal       BIGINT NOT NULL,
    from_ref      TEXT NOT NULL,
    to_ref        TEXT NOT NULL,
    summary       TEXT NOT NULL,
    message_count BIGINT NOT NULL,
    tokens        BIGINT NOT NULL,
    messages      JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, ordinal)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON noa_states, noa_archives TO norma_app;

ALTER TABLE noa_states ENABLE ROW LEVEL SECURITY;
ALTER TABLE noa_archives ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON noa_states TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON noa_archives TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
