-- Outbound event webhooks. A subscription sends a tenant's (or one session's) events to a
-- URL; `session_id` NULL means every session of the tenant. `events` holds the event names
-- between commas (`,run.completed,run.failed,`) so one `instr` finds a name. `secret` signs
-- the deliveries and is never returned after creation.
--
-- `webhook_deliveries` is the outbox and the delivery log: one row per notification and
-- subscription, written in the transaction that commits the event it reports. `id` is the
-- stable `webhook-id` of every attempt; `body` is the exact text signed and sent. The one
-- writer claims due rows (`status = 'pending'`, `next_attempt_at` passed, no live
-- `lease_until`); `attempt_log` is a JSON array of the attempts.

CREATE TABLE webhook_subscriptions (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    session_id  TEXT REFERENCES sessions (id) ON DELETE CASCADE,
    url         TEXT NOT NULL,
    events      TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX webhook_subscriptions_tenant ON webhook_subscriptions (tenant_id, session_id);

CREATE TABLE webhook_deliveries (
    position         INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    tenant_id        TEXT NOT NULL,
    webhook_id       TEXT NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    session_id       TEXT,
    event_type       TEXT NOT NULL,
    body             TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending',
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT NOT NULL,
    lease_until      TEXT,
    created_at       TEXT NOT NULL,
    delivered_at     TEXT,
    attempt_log      TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, position);
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (created_at)
    WHERE status <> 'pending';
