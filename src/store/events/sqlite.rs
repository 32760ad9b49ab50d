//! Events on SQLite.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::store::dialect::sqlite::{parse_json, parse_opt_ts, parse_ts, ts};
use crate::store::dialect::{lease_span, now};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

pub(in crate::store) async fn append(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    mut batch: AppendBatch,
) -> StoreResult<AppendResult> {
    crate::store::storable::append_batch(&mut batch);
    store
        .appends
        .append(tenant.clone(), session.clone(), batch)
        .await
}

pub(in crate::store) async fn list_events(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let rows = sqlx::query(
        "SELECT seq, kind, payload, run_id, created_at FROM events \
         WHERE session_id = ? AND tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(event_from_row).collect()
}

pub(in crate::store) async fn list_run_events(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
    kinds: &[&str],
) -> StoreResult<Vec<EventRecord>> {
    let rows = sqlx::query(
        "SELECT seq, kind, payload, run_id, created_at FROM events \
         WHERE session_id = ? AND tenant_id = ? AND run_id = ? \
             AND kind IN (SELECT value FROM json_each(?)) ORDER BY seq",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(run.as_str())
    .bind(serde_json::to_string(kinds).unwrap_or_else(|_| "[]".into()))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(event_from_row).collect()
}

pub(in crate::store) async fn list_messages(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    after: i64,
    limit: u32,
) -> StoreResult<Vec<MessageRecord>> {
    let rows = sqlx::query(
        "SELECT seq, role, content, run_id, compaction_boundary, created_at FROM messages \
         WHERE session_id = ? AND tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            let role: String = row.try_get("role")?;
            Ok(MessageRecord {
                seq: row.try_get("seq")?,
                role: parse_role(&role)?,
                content: parse_json::<Vec<ContentBlock>>(&row.try_get::<String, _>("content")?)?,
                run_id: row.try_get("run_id")?,
                compaction_boundary: row.try_get("compaction_boundary")?,
                created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
            })
        })
        .collect()
}

pub(in crate::store) async fn get_output(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &OutputId,
) -> StoreResult<Option<OutputRecord>> {
    let row = sqlx::query(
        "SELECT id, session_id, tool_use_id, tool_name, sha256, size_bytes, content, created_at \
         FROM outputs WHERE id = ? AND session_id = ? AND tenant_id = ?",
    )
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&store.pool)
    .await?;
    row.map(|row| {
        Ok(OutputRecord {
            id: row.try_get("id")?,
            session_id: row.try_get("session_id")?,
            tool_use_id: row.try_get("tool_use_id")?,
            tool_name: row.try_get("tool_name")?,
            sha256: row.try_get("sha256")?,
            size_bytes: row.try_get("size_bytes")?,
            content: row.try_get("content")?,
            created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        })
    })
    .transpose()
}

pub(in crate::store) async fn purge_outputs(
    store: &SqliteStore,
    older_than: Duration,
) -> StoreResult<u64> {
    let cutoff = now()
        - chrono::Duration::from_std(older_than)
            .map_err(|error| StoreError::Internal(error.to_string()))?;
    let done = sqlx::query("DELETE FROM outputs WHERE created_at < ?")
        .bind(ts(cutoff))
        .execute(&store.writer)
        .await?;
    Ok(done.rows_affected())
}

pub(in crate::store) fn event_from_row(row: &SqliteRow) -> StoreResult<EventRecord> {
    Ok(EventRecord {
        seq: row.try_get("seq")?,
        kind: row.try_get("kind")?,
        payload: parse_json::<Value>(&row.try_get::<String, _>("payload")?)?,
        run_id: row.try_get("run_id")?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}
