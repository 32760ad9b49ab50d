-- The workspace bytes of each tenant's open sessions, kept by triggers in the transaction that
-- records a session's measurement or changes its status: the quota check before every
-- mutating tool call (`[limits] workspace_bytes`) reads one row instead of summing the usage
-- of every session the tenant ever wrote to, a cost that grew with the tenant's history.
-- `workspace_usage` rows are never deleted except with their session (ON DELETE CASCADE),
-- which the session's own trigger accounts for before the rows go.
CREATE TABLE tenant_workspace_bytes (
    tenant_id TEXT PRIMARY KEY,
    bytes     INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO tenant_workspace_bytes (tenant_id, bytes)
    SELECT u.tenant_id, SUM(u.bytes) FROM workspace_usage u
        JOIN sessions s ON s.id = u.session_id
        WHERE s.status = 'active' GROUP BY u.tenant_id;

CREATE TRIGGER workspace_usage_recorded AFTER INSERT ON workspace_usage
    WHEN EXISTS (SELECT 1 FROM sessions WHERE id = NEW.session_id AND status = 'active')
BEGIN
    INSERT INTO tenant_workspace_bytes (tenant_id, bytes) VALUES (NEW.tenant_id, NEW.bytes)
        ON CONFLICT (tenant_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER workspace_usage_changed AFTER UPDATE OF bytes ON workspace_usage
    WHEN OLD.bytes <> NEW.bytes
        AND EXISTS (SELECT 1 FROM sessions WHERE id = NEW.session_id AND status = 'active')
BEGIN
    INSERT INTO tenant_workspace_bytes (tenant_id, bytes)
        VALUES (NEW.tenant_id, NEW.bytes - OLD.bytes)
        ON CONFLICT (tenant_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER sessions_workspace_status AFTER UPDATE OF status ON sessions
    WHEN (OLD.status = 'active') <> (NEW.status = 'active')
BEGIN
    INSERT INTO tenant_workspace_bytes (tenant_id, bytes)
        SELECT NEW.tenant_id, CASE WHEN NEW.status = 'active' THEN bytes ELSE -bytes END
        FROM workspace_usage WHERE session_id = NEW.id
        ON CONFLICT (tenant_id) DO UPDATE SET bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER sessions_workspace_removed BEFORE DELETE ON sessions WHEN OLD.status = 'active'
BEGIN
    UPDATE tenant_workspace_bytes
        SET bytes = bytes - COALESCE((SELECT bytes FROM workspace_usage WHERE session_id = OLD.id), 0)
        WHERE tenant_id = OLD.tenant_id;
END;
