//! SQLite's memory statistics are off once `disable_memory_statistics` ran before SQLite's
//! first use in the process (a test binary of its own: it must be the process's first SQLite
//! call). With them on, `sqlite3_memory_used` counts every allocation SQLite holds.

#[test]
fn sqlite_memory_statistics_are_off_when_disabled_first() {
    assert!(norma::store::sqlite::disable_memory_statistics());
    let db = rusqlite::Connection::open_in_memory().unwrap();
    db.execute_batch(
        "CREATE TABLE t (a TEXT); \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
         INSERT INTO t SELECT hex(randomblob(64)) FROM n;",
    )
    .unwrap();
    let rows: i64 = db
        .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1000);
    // SQLite holds its page cache and schema now; uncounted, the total stays 0.
    assert_eq!(unsafe { rusqlite::ffi::sqlite3_memory_used() }, 0);
    // Too late a second time: the library is initialised.
    assert!(!norma::store::sqlite::disable_memory_statistics());
}
