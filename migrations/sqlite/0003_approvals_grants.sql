-- Approval requests (decided exactly once by a conditional update) and permission grants.

CREATE TABLE approvals (
    id              TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id       TEXT NOT NULL,
    run_id          TEXT,
    tool_use_id     TEXT NOT NULL,
    tool_name       TEXT NOT NULL,
    input           TEXT NOT NULL,
    input_sha256    TEXT NOT NULL,
    reason          TEXT NOT NULL,
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'allowed', 'denied', 'expired')),
    decided_by      TEXT,
    decided_at      TEXT,
    decision_reason TEXT,
    updated_input   TEXT,
    grant_id        TEXT,
    expires_at      TEXT NOT NULL,
    created_at      TEXT NOT NULL
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
    expires_at  TEXT,
    consumed_at TEXT,
    revoked_at  TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX grants_tenant ON grants (tenant_id, created_at);
