-- Safe client retries, idempotent run writes and stored cancels (see the Postgres migration
-- of the same name).
CREATE TABLE idempotency_keys (
    tenant_id       TEXT NOT NULL,
    scope           TEXT NOT NULL,
    key             TEXT NOT NULL,
    request_sha256  TEXT NOT NULL,
    resource_id     TEXT NOT NULL,
    status          INTEGER,
    response        TEXT,
    created_at      TEXT NOT NULL,
    expires_at      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, scope, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

ALTER TABLE sessions ADD COLUMN last_append_id TEXT;

ALTER TABLE runs ADD COLUMN cancel_requested_at TEXT;
CREATE INDEX runs_cancel_requested ON runs (owner)
    WHERE status = 'running' AND cancel_requested_at IS NOT NULL;
