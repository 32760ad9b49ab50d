//! What an append writes to SQLite's write-ahead log: every page a commit changes is one 4 KiB
//! frame appended to the WAL (and copied into the database at the next checkpoint), so a page
//! an append has no reason to change must not be in its commit.

use norma::ids::TenantId;
use norma::store::{AppendBatch, Store};
use std::path::Path;
use std::sync::Arc;

/// The page numbers of each commit in the WAL file at `path`, oldest first (only the frames of
/// the WAL's current generation: their salts are the header's).
fn wal_commits(path: &Path) -> Vec<Vec<u32>> {
    let wal = std::fs::read(path).unwrap();
    let be = |at: usize| u32::from_be_bytes(wal[at..at + 4].try_into().unwrap());
    let (page_size, salts) = (be(8) as usize, (be(16), be(20)));
    let mut commits = vec![];
    let mut pages = vec![];
    let mut at = 32;
    while at + 24 + page_size <= wal.len() && (be(at + 8), be(at + 12)) == salts {
        pages.push(be(at));
        if be(at + 4) != 0 {
            commits.push(std::mem::take(&mut pages));
        }
        at += 24 + page_size;
    }
    commits
}

/// The root page of each table and index (each one page in a small database).
fn root_pages(db: &Path) -> std::collections::HashMap<String, u32> {
    let db = rusqlite::Connection::open(db).unwrap();
    let mut roots = db
        .prepare("SELECT name, rootpage FROM sqlite_schema WHERE rootpage > 0")
        .unwrap();
    roots
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// An append within the second of the session's idle clock (`active_at`) leaves the clock's
/// index (`sessions_idle_active`) out of its commit: SQLite rewrites an index entry whenever an
/// `UPDATE` sets one of its columns, even to the value it had, so the append must not set it.
#[tokio::test]
async fn an_append_within_the_second_writes_no_page_of_the_idle_index() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.db");
    let store: Arc<dyn Store> =
        norma::store::connect(&format!("sqlite://{}", file.display()), &Default::default())
            .await
            .unwrap();
    let tenant = TenantId::new("acme");
    let session = crate::store::new_session(&store, "acme").await;
    let append = |n: i64| {
        let (store, tenant, session) = (store.clone(), tenant.clone(), session.clone());
        async move {
            let batch = AppendBatch {
                events: vec![crate::store::event("tick", n)],
                ..Default::default()
            };
            let appended = store.append(&tenant, &session, batch).await.unwrap();
            appended.events[0].created_at
        }
    };
    // Two appends in the same second: the first may move the clock, the second must not.
    let mut last_commit = None;
    for n in 0..10 {
        let first = append(2 * n).await;
        let second = append(2 * n + 1).await;
        if first.timestamp() == second.timestamp() {
            last_commit = wal_commits(&dir.path().join("t.db-wal")).pop();
            break;
        }
    }
    let last_commit = last_commit.expect("two appends within one second");
    drop(store);
    let roots = root_pages(&file);
    assert!(
        last_commit.contains(&roots["sessions"]),
        "the append updates the session's row: {last_commit:?} {roots:?}"
    );
    assert!(
        last_commit.contains(&roots["events"]),
        "and stores its event: {last_commit:?} {roots:?}"
    );
    assert!(
        !last_commit.contains(&roots["sessions_idle_active"]),
        "but writes no page of the idle clock's index: {last_commit:?} {roots:?}"
    );
}
