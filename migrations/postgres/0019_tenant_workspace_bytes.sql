-- The workspace bytes of each tenant's open sessions, kept by triggers in the transaction that
-- records a session's measurement or changes its status: the quota check before every
-- mutating tool call (`[limits] workspace_bytes`) reads one row instead of summing the usage
-- of every session the tenant ever wrote to, a cost that grew with the tenant's history.
-- `workspace_usage` rows are never deleted except with their session (ON DELETE CASCADE),
-- which the session's own trigger accounts for before the rows go.
CREATE TABLE tenant_workspace_bytes (
    tenant_id TEXT PRIMARY KEY,
    bytes     BIGINT NOT NULL
);

INSERT INTO tenant_workspace_bytes (tenant_id, bytes)
    SELECT u.tenant_id, SUM(u.bytes) FROM workspace_usage u
        JOIN sessions s ON s.id = u.session_id
        WHERE s.status = 'active' GROUP BY u.tenant_id;

CREATE FUNCTION add_tenant_workspace_bytes(tenant TEXT, delta BIGINT) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO tenant_workspace_bytes (tenant_id, bytes) VALUES (tenant, delta)
        ON CONFLICT (tenant_id) DO UPDATE SET bytes = tenant_workspace_bytes.bytes + delta;
$$;

-- A session's measurement recorded or changed while the session is open.
CREATE FUNCTION count_workspace_usage() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta BIGINT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        delta := NEW.bytes;
    ELSE
        delta := NEW.bytes - OLD.bytes;
    END IF;
    IF delta <> 0
        AND EXISTS (SELECT 1 FROM sessions WHERE id = NEW.session_id AND status = 'active') THEN
        PERFORM add_tenant_workspace_bytes(NEW.tenant_id, delta);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER workspace_usage_total AFTER INSERT OR UPDATE OF bytes ON workspace_usage
    FOR EACH ROW EXECUTE FUNCTION count_workspace_usage();

-- A session closed or reopened (its usage leaves or joins the total), or deleted while open
-- (before its usage rows go with it).
CREATE FUNCTION count_session_workspace() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    used BIGINT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status = 'active' THEN
            SELECT bytes INTO used FROM workspace_usage WHERE session_id = OLD.id;
            IF used IS NOT NULL THEN
                PERFORM add_tenant_workspace_bytes(OLD.tenant_id, -used);
            END IF;
        END IF;
        RETURN OLD;
    END IF;
    IF (OLD.status = 'active') <> (NEW.status = 'active') THEN
        SELECT bytes INTO used FROM workspace_usage WHERE session_id = NEW.id;
        IF used IS NOT NULL THEN
            PERFORM add_tenant_workspace_bytes(
                NEW.tenant_id, CASE WHEN NEW.status = 'active' THEN used ELSE -used END);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER sessions_workspace_status AFTER UPDATE OF status ON sessions
    FOR EACH ROW EXECUTE FUNCTION count_session_workspace();
CREATE TRIGGER sessions_workspace_removed BEFORE DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION count_session_workspace();

GRANT SELECT, INSERT, UPDATE ON tenant_workspace_bytes TO norma_app;
ALTER TABLE tenant_workspace_bytes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_workspace_bytes TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
