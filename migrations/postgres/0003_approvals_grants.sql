-- Approval requests (decided exactly once by a conditional update) and permission grants.

CREATE TABLE approvals (
    id              TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id       TEXT NOT NULL,
    run_id          TEXT,
    tool_use_id     TEXT NOT NULL,
    tool_name       TEXT NOT NULL,
    input           JSONB NOT NULL,
    input_sha256    TEXT NOT NULL,
    reason          TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
    decided_by      TEXT,
    decided_at      TIMESTAMPTZ,
    decision_reason TEXT,
    updated_input   JSONB,
    grant_id        TEXT,
    expires_at      TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX approvals_session_status ON approvals (session_id, status, created_at);

CREATE TABLE grants (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    session_id  TEXT REFERENCES sessions (id) ON DELETE CASCADE,
    scope       TEXT NOT NULL CHECK (scope IN ('once', 'session', 'tenant')),
    rule        TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    approval_id TEXT,
    expires_at  TIMESTAMPTZ,
    consumed_at TIMESTAMPTZ,
    revoked_at  TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX grants_tenant ON grants (tenant_id, created_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON approvals, grants TO norma_app;
ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
ALTER TABLE grants ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON approvals TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON grants TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
