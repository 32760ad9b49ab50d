-- The open-session count of each tenant, kept by a trigger in the transaction that changes a
-- session's status: the check that admits a new session (`[limits] sessions`, 10,000 by
-- default) reads one row instead of counting the tenant's open sessions, a cost that grew with
-- every session the tenant kept open.
CREATE TABLE tenant_open_sessions (
    tenant_id TEXT PRIMARY KEY,
    open      BIGINT NOT NULL
);

INSERT INTO tenant_open_sessions (tenant_id, open)
    SELECT tenant_id, count(*) FROM sessions WHERE status = 'active' GROUP BY tenant_id;

CREATE FUNCTION count_open_sessions() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta BIGINT := 0;
    tenant TEXT;
BEGIN
    IF TG_OP = 'INSERT' THEN
        tenant := NEW.tenant_id;
        IF NEW.status = 'active' THEN delta := 1; END IF;
    ELSIF TG_OP = 'DELETE' THEN
        tenant := OLD.tenant_id;
        IF OLD.status = 'active' THEN delta := -1; END IF;
    ELSE
        tenant := NEW.tenant_id;
        IF OLD.status = 'active' AND NEW.status <> 'active' THEN delta := -1;
        ELSIF OLD.status <> 'active' AND NEW.status = 'active' THEN delta := 1;
        END IF;
    END IF;
    IF delta <> 0 THEN
        INSERT INTO tenant_open_sessions (tenant_id, open) VALUES (tenant, delta)
            ON CONFLICT (tenant_id) DO UPDATE SET open = tenant_open_sessions.open + delta;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER sessions_open_count AFTER INSERT OR DELETE OR UPDATE OF status ON sessions
    FOR EACH ROW EXECUTE FUNCTION count_open_sessions();

GRANT SELECT, INSERT, UPDATE ON tenant_open_sessions TO norma_app;
ALTER TABLE tenant_open_sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_open_sessions TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
