//! Replicas on SQLite.

use super::*;
use crate::store::dialect::sqlite::{parse_ts, ts};
use crate::store::dialect::{lease_span, now};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use sqlx::Row;

pub(in crate::store) async fn register_replica(
    store: &SqliteStore,
    name: &str,
    workspace_storage: &str,
) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO replicas (name, workspace_storage, heartbeat_at) VALUES (?, ?, ?) \
         ON CONFLICT (name) DO UPDATE SET workspace_storage = excluded.workspace_storage, \
         heartbeat_at = excluded.heartbeat_at",
    )
    .bind(name)
    .bind(workspace_storage)
    .bind(ts(now()))
    .execute(&mut *store.writer.sqlx().await?)
    .await?;
    Ok(())
}

pub(in crate::store) async fn live_replicas(
    store: &SqliteStore,
    within: Duration,
) -> StoreResult<Vec<ReplicaRecord>> {
    let rows = sqlx::query(
        "SELECT name, workspace_storage, heartbeat_at FROM replicas \
         WHERE heartbeat_at >= ? ORDER BY name",
    )
    .bind(ts(now() - lease_span(within)))
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(ReplicaRecord {
                name: row.try_get("name")?,
                workspace_storage: row.try_get("workspace_storage")?,
                heartbeat_at: parse_ts(&row.try_get::<String, _>("heartbeat_at")?)?,
            })
        })
        .collect()
}
