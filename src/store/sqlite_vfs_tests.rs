//! The WAL-gathering VFS: a commit is one write, in the file before the commit returns (a copy
//! of the files taken right then recovers it), and what SQLite reads back is what it wrote —
//! across checkpoints, WAL restarts, two writing connections, large and rolled-back
//! transactions.

use rusqlite::{Connection, params};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

thread_local! {
    /// Writes this thread's WAL handles made through `unix-excl`.
    pub(in crate::store) static WAL_WRITES: Cell<u64> = const { Cell::new(0) };
}

fn wal_writes() -> u64 {
    WAL_WRITES.with(Cell::get)
}

/// A connection as the store opens them: this VFS, WAL, `synchronous = NORMAL`.
fn connect(path: &Path) -> Connection {
    let db = crate::store::sqlite::open_connection(path, Duration::from_secs(5), true).unwrap();
    db.pragma_update(None, "journal_mode", "WAL").unwrap();
    db.pragma_update(None, "synchronous", "NORMAL").unwrap();
    db
}

fn schema(db: &Connection) {
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, k TEXT NOT NULL, body BLOB NOT NULL);
         CREATE INDEX IF NOT EXISTS t_k ON t (k);",
    )
    .unwrap();
}

/// Inserts `rows` rows of `size` bytes in one transaction, starting at id `from`.
fn insert(db: &Connection, from: i64, rows: i64, size: usize) {
    let tx = db.unchecked_transaction().unwrap();
    insert_in(&tx, from, rows, size);
    tx.commit().unwrap();
}

/// Inserts `rows` rows from id `from` with `size`-byte bodies in the transaction open on `db`.
fn insert_in(db: &Connection, from: i64, rows: i64, size: usize) {
    for id in from..from + rows {
        db.execute(
            "INSERT INTO t (id, k, body) VALUES (?1, ?2, ?3)",
            params![id, format!("key-{id:08}"), vec![(id % 251) as u8; size]],
        )
        .unwrap();
    }
}

fn count(db: &Connection) -> i64 {
    db.query_row("SELECT count(*) FROM t", [], |row| row.get(0))
        .unwrap()
}

fn integrity(db: &Connection) -> String {
    db.query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

/// The WAL's frames as the file holds them (32-byte header, then 24 + 4096 bytes a frame).
fn frames_in_file(path: &Path) -> u64 {
    let len = std::fs::metadata(wal_path(path)).map_or(0, |meta| meta.len());
    len.saturating_sub(32) / (24 + 4096)
}

fn wal_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", path.display()))
}

/// What a process killed right now would leave: copies of the database and WAL files, opened
/// by a fresh connection through SQLite's default VFS (which recovers the WAL).
fn crash_image(path: &Path, into: &Path) -> Connection {
    std::fs::create_dir_all(into).unwrap();
    let copy = into.join("copy.db");
    std::fs::copy(path, &copy).unwrap();
    std::fs::copy(wal_path(path), wal_path(&copy)).unwrap();
    Connection::open(&copy).unwrap()
}

/// Asserts that a [`crash_image`] taken now holds `rows` rows and passes `integrity_check`;
/// answers it for further checks.
fn assert_recovers(path: &Path, into: &Path, rows: i64) -> Connection {
    let image = crash_image(path, into);
    assert_eq!(count(&image), rows);
    assert_eq!(integrity(&image), "ok");
    image
}

#[tokio::test]
async fn every_store_connection_runs_without_cache_spill() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("n.db").display());
    let store = crate::store::sqlite::SqliteStore::connect(&url, &Default::default())
        .await
        .unwrap();
    const SPILL: &str = "PRAGMA cache_spill";
    let read: i64 = sqlx::query_scalar(SPILL)
        .fetch_one(&store.pool)
        .await
        .unwrap();
    let write: i64 = {
        let mut turn = store.writer.sqlx().await.unwrap();
        sqlx::query_scalar(SPILL)
            .fetch_one(&mut *turn)
            .await
            .unwrap()
    };
    let hot: i64 = store
        .writer
        .with(|db| db.query_row(SPILL, [], |row| row.get(0)))
        .await
        .unwrap();
    let direct = connect(&dir.path().join("n.db"));
    let opened: i64 = direct.query_row(SPILL, [], |row| row.get(0)).unwrap();
    assert_eq!((read, write, hot, opened), (0, 0, 0, 0));
}

#[test]
fn a_commit_of_many_pages_is_one_write_and_in_the_file_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.db");
    let db = connect(&path);
    schema(&db);
    insert(&db, 0, 1, 10);
    let reader = connect(&path);
    for round in 0..5 {
        let frames_before = frames_in_file(&path);
        let writes_before = wal_writes();
        // ~40 KiB of rows and their index entries: a dozen pages or more.
        insert(&db, 1 + round * 40, 40, 1_000);
        let frames = frames_in_file(&path) - frames_before;
        assert!(frames >= 10, "round {round}: {frames} frames");
        assert_eq!(
            wal_writes() - writes_before,
            1,
            "round {round}: {frames} frames"
        );
        assert_eq!(count(&reader), 1 + (round + 1) * 40);
        assert_recovers(
            &path,
            &dir.path().join(format!("image-{round}")),
            1 + (round + 1) * 40,
        );
    }
}

#[test]
fn a_commit_larger_than_one_write_is_written_in_parts_and_recovers_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.db");
    let db = connect(&path);
    schema(&db);
    let before = wal_writes();
    // ~3 MiB in one transaction: at most 128 KiB a write, 31 frames of 4 KiB.
    insert(&db, 0, 3_000, 1_000);
    let writes = wal_writes() - before;
    let frames = frames_in_file(&path);
    assert!(frames > 700, "{frames} frames");
    assert!(
        writes >= frames / 31 && writes <= frames / 25,
        "{writes} writes for {frames} frames"
    );
    assert_recovers(&path, &dir.path().join("image"), 3_000);
}

#[test]
fn two_writers_checkpoints_and_wal_restarts_keep_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.db");
    let first = connect(&path);
    schema(&first);
    let second = connect(&path);
    let reader = connect(&path);
    // Checkpoint often, so the WAL restarts from its start many times.
    for db in [&first, &second] {
        db.pragma_update(None, "wal_autocheckpoint", 20).unwrap();
    }
    let mut expected = 0;
    for round in 0..60 {
        let db = if round % 2 == 0 { &first } else { &second };
        let rows = 1 + (round % 7) * 5;
        insert(db, expected, rows, 300 + (round as usize % 5) * 700);
        expected += rows;
        // Rewrite earlier rows too: pages written by the other connection's commits.
        db.execute(
            "UPDATE t SET body = zeroblob(200) WHERE id % 13 = ?1",
            params![round % 13],
        )
        .unwrap();
        if round % 17 == 16 {
            db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        }
        assert_eq!(count(&reader), expected, "round {round}");
        let rows_read: i64 = reader
            .query_row(
                "SELECT count(*) FROM t INDEXED BY t_k WHERE k >= ''",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(rows_read, expected, "round {round}");
    }
    assert_eq!(integrity(&reader), "ok");
    assert_recovers(&path, &dir.path().join("image"), expected);
}

#[test]
fn a_rolled_back_transaction_larger_than_the_cache_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.db");
    let first = connect(&path);
    schema(&first);
    insert(&first, 0, 10, 100);
    let second = connect(&path);
    // A page cache of 20 pages and a transaction of ~5 MiB: spilled early if spilling were on.
    first.pragma_update(None, "cache_size", 20).unwrap();
    let frames_before = frames_in_file(&path);
    {
        let tx = first.unchecked_transaction().unwrap();
        insert_in(&tx, 100, 5_000, 1_000);
        // Nothing reached the WAL before the commit (no spill).
        assert_eq!(frames_in_file(&path), frames_before);
        tx.rollback().unwrap();
    }
    // The other connection commits where the rolled-back frames would have gone …
    insert(&second, 10, 200, 500);
    // … and the first reads and writes again: nothing of its rolled-back work surfaces.
    assert_eq!(count(&first), 210);
    insert(&first, 210, 5, 100);
    assert_eq!(count(&second), 215);
    assert_eq!(integrity(&second), "ok");
    assert_recovers(&path, &dir.path().join("image"), 215);
}

#[test]
fn checksums_rewritten_after_a_spill_reach_the_file_with_the_commit() {
    // A connection that does spill (not how the store opens them), with a tiny page cache: a
    // transaction's pages reach the WAL early, pages spilled and changed again overwrite their
    // frames, and the commit rewrites the checksums of the frames after the first overwritten
    // one — headers written where the handle has just read, never gathered, so the commit
    // frame's new checksum is in the file when the commit returns.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.db");
    let db = connect(&path);
    schema(&db);
    db.pragma_update(None, "cache_spill", "ON").unwrap();
    db.pragma_update(None, "cache_size", 10).unwrap();
    let frames_before = frames_in_file(&path);
    let tx = db.unchecked_transaction().unwrap();
    insert_in(&tx, 0, 2_000, 500);
    assert!(
        frames_in_file(&path) > frames_before,
        "the transaction spilled"
    );
    tx.execute("UPDATE t SET body = zeroblob(300) WHERE id < 200", [])
        .unwrap();
    tx.commit().unwrap();
    let image = assert_recovers(&path, &dir.path().join("image"), 2_000);
    let rewritten: i64 = image
        .query_row(
            "SELECT count(*) FROM t WHERE id < 200 AND length(body) = 300",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(rewritten, 200);
}
