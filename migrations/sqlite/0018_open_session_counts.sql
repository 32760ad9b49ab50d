-- The open-session count of each tenant, kept by triggers in the transaction that changes a
-- session's status: the check that admits a new session (`[limits] sessions`, 10,000 by
-- default) reads one row instead of counting the tenant's open sessions, a cost that grew with
-- every session the tenant kept open.
CREATE TABLE tenant_open_sessions (
    tenant_id TEXT PRIMARY KEY,
    open      INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO tenant_open_sessions (tenant_id, open)
    SELECT tenant_id, count(*) FROM sessions WHERE status = 'active' GROUP BY tenant_id;

CREATE TRIGGER sessions_opened AFTER INSERT ON sessions WHEN NEW.status = 'active'
BEGIN
    INSERT INTO tenant_open_sessions (tenant_id, open) VALUES (NEW.tenant_id, 1)
        ON CONFLICT (tenant_id) DO UPDATE SET open = open + 1;
END;

CREATE TRIGGER sessions_status_changed AFTER UPDATE OF status ON sessions
    WHEN (OLD.status = 'active') <> (NEW.status = 'active')
BEGIN
    INSERT INTO tenant_open_sessions (tenant_id, open)
        VALUES (NEW.tenant_id, CASE WHEN NEW.status = 'active' THEN 1 ELSE -1 END)
        ON CONFLICT (tenant_id) DO UPDATE SET open = open + excluded.open;
END;

CREATE TRIGGER sessions_removed AFTER DELETE ON sessions WHEN OLD.status = 'active'
BEGIN
    UPDATE tenant_open_sessions SET open = open - 1 WHERE tenant_id = OLD.tenant_id;
END;
