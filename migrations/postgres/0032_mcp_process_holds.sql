-- A session's stdio MCP server process is held like a stream, a task or a shell: one
-- `tenant_holds` row of kind `mcp_process` while it runs, counted against the tenant's
-- `[limits] mcp_processes`. (SQLite keeps holds in memory, migration 0021: nothing to change.)
ALTER TABLE tenant_holds DROP CONSTRAINT tenant_holds_kind_check;
ALTER TABLE tenant_holds ADD CONSTRAINT tenant_holds_kind_check
    CHECK (kind IN ('sse_stream', 'task', 'shell', 'mcp_process'));
