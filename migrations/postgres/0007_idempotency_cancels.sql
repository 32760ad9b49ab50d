-- Safe client retries, idempotent run writes and stored cancels (issue 18).
--
-- `idempotency_keys`: the first outcome of a `POST /v1/sessions` or `POST …/prompts` sent with
-- an `Idempotency-Key` header, written in the transaction that created the session or accepted
-- the prompt. `scope` is `session` for session creation and `prompt:<session id>` for prompts;
-- `request_sha256` is the digest of the request, so the same key with another body is refused.
-- `status`/`response` are filled right after the commit (a replay before that answers from
-- the created resource). Rows expire (`expires_at`) and are swept; live rows count against
-- the tenant's `idempotency_keys` limit.
CREATE TABLE idempotency_keys (
    tenant_id       TEXT NOT NULL,
    scope           TEXT NOT NULL,
    key             TEXT NOT NULL,
    request_sha256  TEXT NOT NULL,
    resource_id     TEXT NOT NULL,
    status          INTEGER,
    response        JSONB,
    created_at      TIMESTAMPTZ NOT NULL,
    expires_at      TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, scope, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO norma_app;
ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON idempotency_keys TO norma_app
    USING (tenant_id = current_setting('norma.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('norma.tenant_id', true));

-- The id of the last batch `Store::append` committed for the session: a write retried after
-- a lost commit answer finds its own id here and is not stored twice.
ALTER TABLE sessions ADD COLUMN last_append_id TEXT;

-- A cancel of a running run, recorded for the replica holding it (its signal may be lost
-- while that replica's listening connection is down; it reconciles from here).
ALTER TABLE runs ADD COLUMN cancel_requested_at TIMESTAMPTZ;
CREATE INDEX runs_cancel_requested ON runs (owner)
    WHERE status = 'running' AND cancel_requested_at IS NOT NULL;
