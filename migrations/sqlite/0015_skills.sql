-- Skills a tenant's administrator registered (`/v1/skills`): one row per tenant and skill
-- name. `content` is the whole SKILL.md; `name`, `description` and `tools` (a JSON array) are
-- what its front matter says, kept apart so a run's catalog reads no content; `files` is a
-- JSON array of {path, content}. The number of rows per tenant is bounded by `[limits]
-- skills`, checked in the inserting transaction (SQLite has one writer).

CREATE TABLE skills (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    tools       TEXT NOT NULL,
    content     TEXT NOT NULL,
    files       TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
