-- Open sessions indexed apart from closed and expired ones: the per-tenant count that admits
-- a new session (`[limits] sessions`) and the idle-expiry sweep (oldest `updated_at` first)
-- read only the tenant's active sessions, however many closed ones it has accumulated.
CREATE INDEX sessions_tenant_active ON sessions (tenant_id) WHERE status = 'active';
CREATE INDEX sessions_idle_active ON sessions (updated_at) WHERE status = 'active';
