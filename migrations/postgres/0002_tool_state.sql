-- State built-in tools keep: a session's todo list, a session's permission-mode override
-- (plan mode) and a tenant's memory notes. Same row-level security as 0001: a tenant-scoped
-- transaction (role norma_app + setting norma.tenant_id) sees only its tenant's rows.

CREATE TABLE session_todos (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id  TEXT NOT NULL,
    items      JSONB NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE session_modes (
    session_id    TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id     TEXT NOT NULL,
    mode          TEXT NOT NULL,
    previous_mode TEXT,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE memory_notes (
    tenant_id  TEXT NOT NULL,
    path       TEXT NOT NULL,
    content    TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    version    BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, path)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON session_todos, session_modes, memory_notes TO norma_app;

ALTER TABLE session_todos ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_modes ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_notes ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON session_todos TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON session_modes TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON memory_notes TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
