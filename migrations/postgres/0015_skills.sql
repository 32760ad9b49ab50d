-- Skills a tenant's administrator registered (`/v1/skills`): one row per tenant and skill
-- name. `content` is the whole SKILL.md; `name`, `description` and `tools` are what its front
-- matter says, kept apart so a run's catalog reads no content; `files` is an array of
-- {path, content}. The number of rows per tenant is bounded by `[limits] skills`, checked in
-- the inserting transaction under the tenant's advisory lock.

CREATE TABLE skills (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    tools       JSONB NOT NULL,
    content     TEXT NOT NULL,
    files       JSONB NOT NULL,
    size_bytes  BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON skills TO norma_app;
ALTER TABLE skills ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON skills TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
