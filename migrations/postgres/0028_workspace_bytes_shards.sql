-- The workspace bytes of a tenant's open sessions in shards, like its spend totals (0021). A
-- session's measurement (after every mutating tool call, in the run's append) adds the change to
-- the tenant's total, and the row added to stays locked until that transaction has committed
-- (its WAL flushed): with one row per tenant, the appends of a tenant's runs that carried a
-- measurement went one commit at a time. Now the total has up to 16 rows (`shard`, from the
-- session id), added to independently and summed when read; the sum is the total as before.
ALTER TABLE tenant_workspace_bytes ADD COLUMN shard SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE tenant_workspace_bytes DROP CONSTRAINT tenant_workspace_bytes_pkey;
ALTER TABLE tenant_workspace_bytes ADD PRIMARY KEY (tenant_id, shard);

CREATE FUNCTION add_tenant_workspace_bytes(tenant TEXT, session TEXT, delta BIGINT) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO tenant_workspace_bytes (tenant_id, shard, bytes)
        VALUES (tenant, (hashtext(session) & 15)::SMALLINT, delta)
        ON CONFLICT (tenant_id, shard) DO UPDATE SET bytes = tenant_workspace_bytes.bytes + delta;
$$;

-- The two trigger functions of 0019, restated whole (CREATE OR REPLACE replaces a function
-- whole) with the session's id passed on.
CREATE OR REPLACE FUNCTION count_workspace_usage() RETURNS trigger LANGUAGE plpgsql AS $$
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
        PERFORM add_tenant_workspace_bytes(NEW.tenant_id, NEW.session_id, delta);
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION count_session_workspace() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    used BIGINT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status = 'active' THEN
            SELECT bytes INTO used FROM workspace_usage WHERE session_id = OLD.id;
            IF used IS NOT NULL THEN
                PERFORM add_tenant_workspace_bytes(OLD.tenant_id, OLD.id, -used);
            END IF;
        END IF;
        RETURN OLD;
    END IF;
    IF (OLD.status = 'active') <> (NEW.status = 'active') THEN
        SELECT bytes INTO used FROM workspace_usage WHERE session_id = NEW.id;
        IF used IS NOT NULL THEN
            PERFORM add_tenant_workspace_bytes(
                NEW.tenant_id, NEW.id, CASE WHEN NEW.status = 'active' THEN used ELSE -used END);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

DROP FUNCTION add_tenant_workspace_bytes(TEXT, BIGINT);
