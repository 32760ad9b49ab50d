-- The replicas sharing this store. Each replica upserts its row at start-up and on every
-- lease heartbeat, with how it stores session workspaces (`local` or `shared`), so a replica
-- notices another one that would not find its files after a takeover. System-level: only
-- the login role reads or writes it, never a tenant's transaction.
CREATE TABLE replicas (
    name               TEXT PRIMARY KEY,
    workspace_storage  TEXT NOT NULL,
    heartbeat_at       TIMESTAMPTZ NOT NULL
);
