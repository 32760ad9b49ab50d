-- Outbound event webhooks. A subscription sends a tenant's (or one session's) events to a
-- URL; `session_id` NULL means every session of the tenant. `events` lists the event names
-- (`run.completed`, …). `secret` signs the deliveries and is never returned after creation.
--
-- `webhook_deliveries` is the outbox and the delivery log: one row per notification and
-- subscription, written in the transaction that commits the event it reports. `id` is the
-- stable `webhook-id` of every attempt; `body` is the exact text signed and sent (TEXT, not
-- JSONB, so its bytes never change). A worker claims a due row (`status = 'pending'`,
-- `next_attempt_at` passed, no live `lease_until`) with FOR UPDATE SKIP LOCKED, so replicas
-- sharing the database never send the same attempt twice; a worker that dies loses its claim
-- when `lease_until` passes. `attempt_log` is a JSON array of the attempts.

CREATE TABLE webhook_subscriptions (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    session_id  TEXT REFERENCES sessions (id) ON DELETE CASCADE,
    url         TEXT NOT NULL,
    events      TEXT[] NOT NULL,
    secret      TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX webhook_subscriptions_tenant ON webhook_subscriptions (tenant_id, session_id);

CREATE TABLE webhook_deliveries (
    position         BIGSERIAL PRIMARY KEY,
    id               TEXT NOT NULL UNIQUE,
    tenant_id        TEXT NOT NULL,
    webhook_id       TEXT NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    session_id       TEXT,
    event_type       TEXT NOT NULL,
    body             TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending',
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ NOT NULL,
    lease_until      TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL,
    delivered_at     TIMESTAMPTZ,
    attempt_log      JSONB NOT NULL DEFAULT '[]'
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, position);
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (created_at)
    WHERE status <> 'pending';

GRANT SELECT, INSERT, UPDATE, DELETE ON webhook_subscriptions, webhook_deliveries TO norma_app;
GRANT USAGE, SELECT ON SEQUENCE webhook_deliveries_position_seq TO norma_app;
ALTER TABLE webhook_subscriptions ENABLE ROW LEVEL SECURITY;
ALTER TABLE webhook_deliveries ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_subscriptions TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
CREATE POLICY tenant_isolation ON webhook_deliveries TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));
