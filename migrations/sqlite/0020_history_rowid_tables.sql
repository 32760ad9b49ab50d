-- Events and messages become rowid tables keyed by (session_id, seq) through their primary
-- key's index, instead of WITHOUT ROWID tables clustered on it.
--
-- A WITHOUT ROWID table keeps a row whole in its key's b-tree, where a cell holds at most about
-- a quarter of a page: a tool result of 1.5 KB spilled into an overflow page of its own (4 KiB
-- written to the WAL for it), and the rows of the sessions running at once went to as many
-- leaves, each written at every group commit. A rowid table appends every new row at its right
-- edge (the rows of a group commit share their pages; rows up to ~4 KB stay in the leaf) and the
-- primary key's index holds only the small (session_id, seq) entries. Reads by session and seq
-- go through that index as before.

CREATE TABLE events_by_rowid (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    tenant_id  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    run_id     TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO events_by_rowid (session_id, seq, tenant_id, kind, payload, run_id, created_at)
    SELECT session_id, seq, tenant_id, kind, payload, run_id, created_at FROM events
    ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_by_rowid RENAME TO events;

CREATE TABLE messages_by_rowid (
    session_id          TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq                 INTEGER NOT NULL,
    tenant_id           TEXT NOT NULL,
    role                TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    content             TEXT NOT NULL,
    run_id              TEXT,
    compaction_boundary INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO messages_by_rowid (session_id, seq, tenant_id, role, content, run_id,
        compaction_boundary, created_at)
    SELECT session_id, seq, tenant_id, role, content, run_id, compaction_boundary, created_at
    FROM messages ORDER BY session_id, seq;
DROP TABLE messages;
ALTER TABLE messages_by_rowid RENAME TO messages;
