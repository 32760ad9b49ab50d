//! SQLite migrations keep what is stored: the history tables rebuilt as rowid tables
//! (migration 0020) hold the same rows, keep their key and their cascade from `sessions`.

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

const EVENTS: &str = "SELECT session_id, seq, tenant_id, kind, payload, run_id, created_at \
                      FROM events ORDER BY session_id, seq";
const MESSAGES: &str = "SELECT session_id, seq, tenant_id, role, content, run_id, \
                        compaction_boundary, created_at FROM messages ORDER BY session_id, seq";

#[test]
fn the_history_tables_rebuilt_as_rowid_tables_keep_every_row_and_their_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Connection::open(dir.path().join("old.db")).expect("open");
    db.pragma_update(None, "foreign_keys", true)
        .expect("foreign keys");
    for (_, sql) in migrations(Some(20)) {
        db.execute_batch(&sql).expect("an older migration");
    }
    let at = "2026-12-06T09:30:01.123456Z";
    for session in ["ses_a", "ses_b"] {
        db.execute(
            "INSERT INTO sessions (id, tenant_id, config, created_at, updated_at) \
             VALUES (?1, 'acme', '{}', ?2, ?2)",
            params![session, at],
        )
        .expect("session");
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
    for (version, sql) in migrations(None).into_iter().filter(|(v, _)| *v >= 20) {
        db.execute_batch(&format!("BEGIN; {sql} COMMIT;"))
            .unwrap_or_else(|error| panic!("migration {version}: {error}"));
    }
    assert_eq!(rows(&db, EVENTS), events);
    assert_eq!(rows(&db, MESSAGES), messages);
    for table in ["events", "messages"] {
        let sql: String = db
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = ?1",
                [table],
                |row| row.get(0),
            )
            .expect("schema");
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
    let broken: Vec<Vec<rusqlite::types::Value>> = rows(&db, "PRAGMA foreign_key_check");
    assert!(broken.is_empty(), "{broken:?}");
}
