-- An append's events, history and usage rows no longer each check that their session exists
-- (as Postgres' 0029). With `foreign_keys` on, every inserted row looked its session up in
-- the sessions' key index through a cursor of its own: ~42 lookups per benchmark run (33
-- events, 5 messages, 4 usage rows). Every append first updates the session's row by id and
-- tenant in the same transaction and writes nothing when that update matched no row
-- (`store::events::sqlite_append`), so the session exists until the commit. The server never
-- deletes a session (closing is a status); a session deleted by an operator still takes its
-- events, history and usage rows with it, now by a trigger.
--
-- SQLite cannot drop a column's constraint in place: each table is rebuilt with the same
-- columns, key, indexes and rows (the usage rows keep their ids).

CREATE TABLE events_unchecked (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    tenant_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    run_id     TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO events_unchecked (session_id, seq, tenant_id, kind, payload, run_id, created_at)
    SELECT session_id, seq, tenant_id, kind, payload, run_id, created_at FROM events
    ORDER BY rowid;
DROP TABLE events;
ALTER TABLE events_unchecked RENAME TO events;

CREATE TABLE messages_unchecked (
    session_id          TEXT NOT NULL,
    seq                 INTEGER NOT NULL,
    tenant_id           TEXT NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content             TEXT NOT NULL,
    run_id              TEXT,
    compaction_boundary INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO messages_unchecked (session_id, seq, tenant_id, role, content, run_id,
        compaction_boundary, created_at)
    SELECT session_id, seq, tenant_id, role, content, run_id, compaction_boundary, created_at
    FROM messages ORDER BY rowid;
DROP TABLE messages;
ALTER TABLE messages_unchecked RENAME TO messages;

CREATE TABLE usage_records_unchecked (
    id                 INTEGER PRIMARY KEY,
    tenant_id          TEXT NOT NULL,
    session_id         TEXT NOT NULL,
    run_id             TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    cost_pico          INTEGER,
    day                TEXT NOT NULL,
    created_at         TEXT NOT NULL
);
INSERT INTO usage_records_unchecked (id, tenant_id, session_id, run_id, provider, model,
        input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_pico, day,
        created_at)
    SELECT id, tenant_id, session_id, run_id, provider, model, input_tokens, output_tokens,
        cache_read_tokens, cache_write_tokens, cost_pico, day, created_at
    FROM usage_records ORDER BY id;
DROP TABLE usage_records;
ALTER TABLE usage_records_unchecked RENAME TO usage_records;
CREATE INDEX usage_records_tenant_time ON usage_records (tenant_id, created_at);
CREATE INDEX usage_records_session_run ON usage_records (session_id, run_id);

CREATE TRIGGER sessions_history_removed BEFORE DELETE ON sessions
BEGIN
    DELETE FROM events WHERE session_id = OLD.id;
    DELETE FROM messages WHERE session_id = OLD.id;
    DELETE FROM usage_records WHERE session_id = OLD.id;
END;
