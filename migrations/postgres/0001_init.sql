-- Sessions, history (messages), transcript (events) and spilled outputs.
-- Every tenant-owned row carries tenant_id; row-level security makes a tenant-scoped
-- transaction (role norma_app + setting norma.tenant_id) see only its tenant's rows.

CREATE TABLE sessions (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    config           JSONB NOT NULL,
    status           TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    closed_at        TIMESTAMPTZ,
    last_event_seq   BIGINT NOT NULL DEFAULT 0,
    last_message_seq BIGINT NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at TIMESTAMPTZ,
    lease_fence      BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX sessions_tenant_newest ON sessions (tenant_id, created_at DESC, id DESC);

CREATE TABLE messages (
    session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq                 BIGINT NOT NULL,
    tenant_id           TEXT NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content             JSONB NOT NULL,
    run_id              TEXT,
    compaction_boundary BOOLEAN NOT NULL DEFAULT false,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        BIGINT NOT NULL,
    tenant_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    payload    JSONB NOT NULL,
    run_id     TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE outputs (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tenant_id   TEXT NOT NULL,
    tool_use_id TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    content     TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX outputs_created ON outputs (created_at);

-- The role tenant-scoped transactions switch to. Roles are cluster-wide, so creating it must
-- tolerate another database (or a concurrent migration) having created it already.
DO $$
BEGIN
    CREATE ROLE norma_app NOLOGIN NOSUPERUSER NOBYPASSRLS;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

GRANT USAGE ON SCHEMA public TO norma_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON sessions, messages, events, outputs TO norma_app;

ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE outputs ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON sessions TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON messages TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON events TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON outputs TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
