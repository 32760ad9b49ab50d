-- Tenant limits counted across replicas (see the Postgres migration of the same name).

CREATE TABLE tenant_holds (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('sse_stream', 'task', 'shell')),
    replica     TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX tenant_holds_tenant ON tenant_holds (tenant_id, kind, expires_at);
CREATE INDEX tenant_holds_replica ON tenant_holds (replica);

CREATE INDEX runs_tenant_unfinished ON runs (tenant_id, status)
    WHERE status IN ('queued', 'running');

CREATE TABLE workspace_usage (
    session_id  TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id   TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX workspace_usage_tenant ON workspace_usage (tenant_id);
