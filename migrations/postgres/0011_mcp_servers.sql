-- MCP servers a tenant's administrator registered (`/v1/mcp-servers`): one row per tenant and
-- server name. `config` is the entry as JSON (secrets included: the API never returns them).
-- The number of rows per tenant is bounded by `[limits] mcp_servers`, checked in the
-- inserting transaction under the tenant's advisory lock.

CREATE TABLE mcp_servers (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    config      JSONB NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_servers TO norma_app;
ALTER TABLE mcp_servers ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mcp_servers TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
