-- MCP servers a tenant's administrator registered (`/v1/mcp-servers`): one row per tenant and
-- server name. `config` is the entry as JSON (secrets included: the API never returns them).
-- The number of rows per tenant is bounded by `[limits] mcp_servers`, checked in the
-- inserting transaction (SQLite has one writer).

CREATE TABLE mcp_servers (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    config      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
