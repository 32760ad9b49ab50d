use crate::store::sqlite::SqliteStore;

async fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("reads.db").display());
    let store = SqliteStore::connect(&url, &crate::store::ConnectOptions::default())
        .await
        .unwrap();
    (dir, store)
}

fn sessions(db: &rusqlite::Connection) -> crate::store::StoreResult<i64> {
    Ok(db.query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))?)
}

fn read_connections(store: &SqliteStore) -> usize {
    store.reads.idle.lock().unwrap().len()
}

/// A read takes the writer's connection while nothing holds it (no read connection is
/// opened), and a read connection while the writer holds it — without waiting for it.
#[tokio::test]
async fn a_read_takes_the_free_writers_connection_and_never_waits_for_a_held_one() {
    let (_dir, store) = store().await;
    assert_eq!(store.reads.read(sessions).unwrap(), 0);
    assert_eq!(
        read_connections(&store),
        0,
        "read on the free writer's connection"
    );

    // Held by a write: the read answers at once, on a read connection.
    let during = store
        .writer
        .with(|writer| {
            writer
                .execute(
                    "INSERT INTO sessions (id, tenant_id, status, config, created_at, \
                     updated_at, active_at) VALUES ('s1', 't', 'active', '{}', 'x', 'x', 'x')",
                    [],
                )
                .unwrap();
            store.reads.read(sessions).unwrap()
        })
        .await;
    assert_eq!(during, 1, "the writer's autocommit insert is committed");
    assert_eq!(read_connections(&store), 1, "read on a read connection");

    // Free again: the writer's connection, which sees every commit.
    assert_eq!(store.reads.read(sessions).unwrap(), 1);
    assert_eq!(read_connections(&store), 1);
}
