//! SQLite migrations keep what is stored: the history tables rebuilt as rowid tables
//! (migration 0020), `runs` and `usage_records` rebuilt without AUTOINCREMENT (migration
//! 0024) and the history tables rebuilt without a foreign key to their session (migration
//! 0026) hold the same rows, keep their key, their indexes and their removal with a deleted
//! session (a cascade, since 0026 a trigger for the history tables).

use rusqlite::{Connection, params};
use std::path::PathBuf;

/// The SQLite migration files, in order, whose version is below `before` (or all).
fn migrations(before: Option<u32>) -> Vec<(u32, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("migrations/sqlite");
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(&dir)
        .expect("migrations dir")
        .map(|entry| entry.expect("entry").path())
        .filter_map(|path| {
            let version = path
                .file_name()?
                .to_str()?
                .split('_')
                .next()?
                .parse()
                .ok()?;
            Some((version, path))
        })
        .collect();
    files.sort();
    files
        .into_iter()
        .filter(|(version, _)| before.is_none_or(|before| *version < before))
        .map(|(version, path)| (version, std::fs::read_to_string(path).expect("migration")))
        .collect()
}

fn rows(db: &Connection, sql: &str) -> Vec<Vec<rusqlite::types::Value>> {
    let mut statement = db.prepare(sql).expect("prepare");
    let columns = statement.column_count();
    statement
        .query_map([], |row| {
            (0..columns)
                .map(|i| row.get::<_, rusqlite::types::Value>(i))
                .collect()
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// A database in `dir` migrated up to (not including) migration `before`, foreign keys on.
fn database_before(dir: &std::path::Path, before: u32) -> Connection {
    let db = Connection::open(dir.join("old.db")).expect("open");
    db.pragma_update(None, "foreign_keys", true)
        .expect("foreign keys");
    for (_, sql) in migrations(Some(before)) {
        db.execute_batch(&sql).expect("an older migration");
    }
    db
}

/// Applies migration `from` and every later one, each in its own transaction.
fn migrate_from(db: &Connection, from: u32) {
    for (version, sql) in migrations(None).into_iter().filter(|(v, _)| *v >= from) {
        db.execute_batch(&format!("BEGIN; {sql} COMMIT;"))
            .unwrap_or_else(|error| panic!("migration {version}: {error}"));
    }
}

/// The `CREATE` statement of `table`.
fn table_sql(db: &Connection, table: &str) -> String {
    db.query_row(
        "SELECT sql FROM sqlite_master WHERE name = ?1",
        [table],
        |row| row.get(0),
    )
    .expect("schema")
}

/// Rows that break a foreign key (none expected).
fn broken_keys(db: &Connection) -> Vec<Vec<rusqlite::types::Value>> {
    rows(db, "PRAGMA foreign_key_check")
}

/// A session row of tenant `acme` created and updated `at`.
fn insert_session(db: &Connection, id: &str, at: &str) {
    db.execute(
        "INSERT INTO sessions (id, tenant_id, config, created_at, updated_at) \
         VALUES (?1, 'acme', '{}', ?2, ?2)",
        params![id, at],
    )
    .expect("session");
}

const EVENTS: &str = "SELECT session_id, seq, tenant_id, kind, payload, run_id, created_at \
                      FROM events ORDER BY session_id, seq";
const MESSAGES: &str = "SELECT session_id, seq, tenant_id, role, content, run_id, \
                        compaction_boundary, created_at FROM messages ORDER BY session_id, seq";

#[test]
fn the_history_tables_rebuilt_as_rowid_tables_keep_every_row_and_their_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = database_before(dir.path(), 20);
    let at = "2026-12-06T09:30:01.123456Z";
    for session in ["ses_a", "ses_b"] {
        insert_session(&db, session, at);
        for seq in 1..=5_i64 {
            // A payload larger than a page, one of a few KB, small ones.
            let payload = format!(
                "{{\"text\":\"{}\"}}",
                "é".repeat(300 * seq as usize * seq as usize)
            );
            db.execute(
                "INSERT INTO events (session_id, seq, tenant_id, kind, payload, run_id, created_at) \
                 VALUES (?1, ?2, 'acme', 'tool_result', ?3, ?4, ?5)",
                params![session, seq, payload, (seq % 2 == 0).then_some("run_1"), at],
            )
            .expect("event");
            db.execute(
                "INSERT INTO messages (session_id, seq, tenant_id, role, content, run_id, \
                     compaction_boundary, created_at) VALUES (?1, ?2, 'acme', ?3, ?4, NULL, ?5, ?6)",
                params![session, seq, if seq % 2 == 0 { "assistant" } else { "user" }, payload, seq == 3, at],
            )
            .expect("message");
        }
    }
    let (events, messages) = (rows(&db, EVENTS), rows(&db, MESSAGES));
    migrate_from(&db, 20);
    assert_eq!(rows(&db, EVENTS), events);
    assert_eq!(rows(&db, MESSAGES), messages);
    for table in ["events", "messages"] {
        let sql = table_sql(&db, table);
        assert!(!sql.to_uppercase().contains("WITHOUT ROWID"), "{sql}");
        // The key still refuses a second row for a (session, seq).
        let duplicate = db.execute(
            &format!(
                "INSERT INTO {table} SELECT * FROM {table} WHERE session_id = 'ses_a' AND seq = 1"
            ),
            [],
        );
        assert!(duplicate.is_err(), "{table} accepted a duplicate key");
    }
    // Closing a session's rows still cascades from `sessions`.
    db.execute("DELETE FROM sessions WHERE id = 'ses_a'", [])
        .expect("delete");
    let left: i64 = db
        .query_row(
            "SELECT count(*) FROM events WHERE session_id = 'ses_a'",
            [],
            |row| row.get(0),
        )
        .expect("count");
    assert_eq!(left, 0);
    assert_eq!(rows(&db, EVENTS).len(), 5);
    let broken = broken_keys(&db);
    assert!(broken.is_empty(), "{broken:?}");
}

const RUNS: &str = "SELECT position, id, session_id, tenant_id, prompt, status, owner, \
                    lease_expires_at, fence, terminal, created_at, started_at, ended_at, \
                    cancel_requested_at FROM runs ORDER BY position";
const USAGE: &str = "SELECT * FROM usage_records ORDER BY id";
const INDEXES: &str = "SELECT name, tbl_name, sql FROM sqlite_master \
                       WHERE type = 'index' AND tbl_name IN ('runs', 'usage_records') ORDER BY name";

fn insert_run(db: &Connection, position: Option<i64>, id: &str, session: &str) {
    db.execute(
        "INSERT INTO runs (position, id, session_id, tenant_id, prompt, status, created_at) \
         VALUES (?1, ?2, ?3, 'acme', 'p', 'completed', '2026-12-06T09:30:01Z')",
        params![position, id, session],
    )
    .expect("run");
}

fn insert_usage(db: &Connection, session: &str, run: &str) {
    db.execute(
        "INSERT INTO usage_records (tenant_id, session_id, run_id, provider, model, input_tokens, \
             output_tokens, cache_read_tokens, cache_write_tokens, cost_pico, day, created_at) \
         VALUES ('acme', ?1, ?2, 'anthropic', 'm', 10, 20, 0, 0, NULL, '2026-12-06', \
             '2026-12-06T09:30:01Z')",
        params![session, run],
    )
    .expect("usage");
}

fn sequence_rows(db: &Connection) -> i64 {
    db.query_row(
        "SELECT count(*) FROM sqlite_sequence WHERE name IN ('runs', 'usage_records')",
        [],
        |row| row.get(0),
    )
    .expect("sqlite_sequence")
}

#[test]
fn runs_and_usage_rows_keep_their_keys_and_order_without_autoincrement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = database_before(dir.path(), 24);
    for session in ["ses_a", "ses_b"] {
        insert_session(&db, session, "2026-12-06T09:30:01Z");
    }
    // Keys with a gap (a position given explicitly).
    insert_run(&db, None, "run_1", "ses_a");
    insert_run(&db, Some(7), "run_2", "ses_b");
    insert_run(&db, None, "run_3", "ses_a");
    for run in ["run_1", "run_2", "run_3"] {
        insert_usage(&db, if run == "run_2" { "ses_b" } else { "ses_a" }, run);
    }
    assert_eq!(
        sequence_rows(&db),
        2,
        "AUTOINCREMENT kept its counters before"
    );
    let (runs, usage, indexes) = (rows(&db, RUNS), rows(&db, USAGE), rows(&db, INDEXES));

    migrate_from(&db, 24);
    assert_eq!(rows(&db, RUNS), runs);
    assert_eq!(rows(&db, USAGE), usage);
    assert_eq!(
        rows(&db, INDEXES),
        indexes,
        "the indexes are restated as they were"
    );
    for table in ["runs", "usage_records"] {
        let sql = table_sql(&db, table);
        assert!(!sql.to_uppercase().contains("AUTOINCREMENT"), "{sql}");
    }

    // A new run comes after every run stored; inserts keep no counter (no page written for it).
    insert_run(&db, None, "run_4", "ses_a");
    insert_usage(&db, "ses_a", "run_4");
    assert_eq!(sequence_rows(&db), 0);
    let order: Vec<String> = db
        .prepare("SELECT id FROM runs WHERE session_id = 'ses_a' ORDER BY position")
        .expect("prepare")
        .query_map([], |row| row.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("ids");
    assert_eq!(order, ["run_1", "run_3", "run_4"]);
    let position: i64 = db
        .query_row("SELECT position FROM runs WHERE id = 'run_4'", [], |row| {
            row.get(0)
        })
        .expect("position");
    assert_eq!(position, 9, "the largest key stored + 1");
    // The status check and the cascade from `sessions` still hold.
    let bad = db.execute("UPDATE runs SET status = 'lost' WHERE id = 'run_4'", []);
    assert!(bad.is_err(), "a status outside the check was accepted");
    db.execute("DELETE FROM sessions WHERE id = 'ses_a'", [])
        .expect("delete");
    assert_eq!(rows(&db, RUNS).len(), 1);
    assert_eq!(rows(&db, USAGE).len(), 1);
    let broken = broken_keys(&db);
    assert!(broken.is_empty(), "{broken:?}");
}

const HISTORY_INDEXES: &str = "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' \
                               AND tbl_name IN ('events', 'messages', 'usage_records') ORDER BY name";

/// Rows of `session`'s in `table`.
fn count(db: &Connection, table: &str, session: &str) -> i64 {
    db.query_row(
        &format!("SELECT count(*) FROM {table} WHERE session_id = ?1"),
        [session],
        |row| row.get(0),
    )
    .expect("count")
}

#[test]
fn the_history_tables_without_row_checks_keep_their_rows_keys_and_removal_with_the_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = database_before(dir.path(), 26);
    let at = "2026-12-07T09:30:01.123456Z";
    for session in ["ses_a", "ses_b"] {
        insert_session(&db, session, at);
        for seq in 1..=3_i64 {
            let payload = format!("{{\"text\":\"{}\"}}", "é".repeat(1_500 * seq as usize));
            db.execute(
                "INSERT INTO events (session_id, seq, tenant_id, kind, payload, run_id, created_at) \
                 VALUES (?1, ?2, 'acme', 'tool_result', ?3, 'run_1', ?4)",
                params![session, seq, payload, at],
            )
            .expect("event");
            db.execute(
                "INSERT INTO messages (session_id, seq, tenant_id, role, content, run_id, \
                     compaction_boundary, created_at) VALUES (?1, ?2, 'acme', 'user', ?3, NULL, 0, ?4)",
                params![session, seq, payload, at],
            )
            .expect("message");
            insert_usage(&db, session, "run_1");
        }
    }
    let before = (
        rows(&db, EVENTS),
        rows(&db, MESSAGES),
        rows(&db, USAGE),
        rows(&db, HISTORY_INDEXES),
    );

    migrate_from(&db, 26);
    let after = (
        rows(&db, EVENTS),
        rows(&db, MESSAGES),
        rows(&db, USAGE),
        rows(&db, HISTORY_INDEXES),
    );
    assert_eq!(after, before, "rows, usage ids and indexes as they were");
    for table in ["events", "messages", "usage_records"] {
        let keys = rows(&db, &format!("PRAGMA foreign_key_list({table})"));
        assert!(
            keys.is_empty(),
            "{table} still checks its session: {keys:?}"
        );
    }
    // The key still refuses a second row for a (session, seq); new rows go after the old.
    let duplicate = db.execute(
        "INSERT INTO events SELECT * FROM events WHERE session_id = 'ses_a' AND seq = 1",
        [],
    );
    assert!(
        duplicate.is_err(),
        "a duplicate (session, seq) was accepted"
    );
    insert_usage(&db, "ses_a", "run_2");
    let newest: String = db
        .query_row(
            "SELECT run_id FROM usage_records ORDER BY id DESC LIMIT 1",
            [],
            |row| row.get(0),
        )
        .expect("newest");
    assert_eq!(newest, "run_2");

    // A deleted session still takes its history with it; the other keeps its own.
    db.execute("DELETE FROM sessions WHERE id = 'ses_a'", [])
        .expect("delete");
    for table in ["events", "messages", "usage_records"] {
        assert_eq!(
            count(&db, table, "ses_a"),
            0,
            "{table} kept a deleted session's rows"
        );
        assert_eq!(
            count(&db, table, "ses_b"),
            3,
            "{table} lost another session's rows"
        );
    }
    let broken = broken_keys(&db);
    assert!(broken.is_empty(), "{broken:?}");
}
