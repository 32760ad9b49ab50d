//! Events on SQLite.

use super::*;
use crate::ids::{OutputId, RunId, SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::dialect::sqlite::{json_column, ts, ts_column};
use crate::store::sqlite::SqliteStore;
use crate::store::*;

pub(in crate::store) async fn append(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    batch: StorableBatch,
) -> StoreResult<Appended> {
    store
        .group
        .append(tenant.clone(), session.clone(), batch)
        .await
}

/// A page of events (at most `limit`, at most `max_bytes`: see [`PAGE_BYTES`]), read on the
/// caller's thread (see `sqlite_reads`: the SSE backlog and catch-up read pages of a bounded
/// size).
pub(in crate::store) async fn list_events(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    after: i64,
    limit: u32,
    max_bytes: usize,
) -> StoreResult<Vec<EventRecord>> {
    store.reads.read(|db| {
        let mut list = db.prepare_cached(LIST_EVENTS)?;
        let rows = list.query_and_then(
            rusqlite::params![session.as_str(), tenant.as_str(), after, i64::from(limit)],
            event_record,
        )?;
        PageBytes::new(max_bytes).collect(rows, event_bytes)
    })
}

/// An [`EventRow`] of `seq, kind, payload, run_id, created_at`, read by `rusqlite`.
fn event_record(row: &rusqlite::Row<'_>) -> StoreResult<EventRecord> {
    Ok(EventRow {
        seq: row.get(0)?,
        kind: row.get(1)?,
        payload: json_column(row, 2)?,
        run_id: row.get(3)?,
        created_at: ts_column(row, 4)?,
    }
    .into())
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

pub(in crate::store) async fn list_session_events(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    kinds: &[&str],
    after: i64,
    limit: u32,
) -> StoreResult<Vec<EventRecord>> {
    let rows = sqlx::query(
        "SELECT seq, kind, payload, run_id, created_at FROM events \
         WHERE session_id = ? AND tenant_id = ? AND seq > ? \
             AND kind IN (SELECT value FROM json_each(?)) ORDER BY seq LIMIT ?",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(after)
    .bind(serde_json::to_string(kinds).unwrap_or_else(|_| "[]".into()))
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(event_from_row).collect()
}

/// Messages read on the caller's thread before the rest of a longer history goes to sqlx's
/// worker: a run's start reads its session's whole history, which is short for most sessions
/// (no hop to a worker thread) and can be thousands of messages for a long one (read on the
/// worker, not on the caller's thread).
const MESSAGES_ON_CALLER: u32 = 64;

/// Up to `limit` messages after `after`, at most `max_bytes` (see [`PAGE_BYTES`]): the first
/// [`MESSAGES_ON_CALLER`] on the caller's thread (see `sqlite_reads`), the rest, if any,
/// through sqlx from where they ended. The history is append-only, so the two reads give the
/// same rows as one.
pub(in crate::store) async fn list_messages(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    after: i64,
    limit: u32,
    max_bytes: usize,
) -> StoreResult<Vec<MessageRecord>> {
    let first = limit.min(MESSAGES_ON_CALLER);
    let mut bytes = PageBytes::new(max_bytes);
    let mut records = store.reads.read(|db| {
        let mut list = db.prepare_cached(LIST_MESSAGES)?;
        let rows = list.query_and_then(
            rusqlite::params![session.as_str(), tenant.as_str(), after, i64::from(first)],
            message_record,
        )?;
        bytes.collect(rows, message_bytes)
    })?;
    let Some(last) = records.last().map(|record| record.seq) else {
        return Ok(records);
    };
    if records.len() < first as usize || limit == first || bytes.full() {
        return Ok(records);
    }
    let rows = sqlx::query_as::<_, MessageRow>(LIST_MESSAGES)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(last)
        .bind(i64::from(limit - first))
        .fetch(&store.pool);
    let rest = bytes
        .collect_stream(rows, MessageRecord::try_from, message_bytes)
        .await?;
    records.extend(rest);
    Ok(records)
}

/// A [`MessageRow`] of `seq, role, content, run_id, compaction_boundary, created_at`, read by
/// `rusqlite`.
fn message_record(row: &rusqlite::Row<'_>) -> StoreResult<MessageRecord> {
    MessageRow {
        seq: row.get(0)?,
        role: row.get(1)?,
        content: json_column(row, 2)?,
        run_id: row.get(3)?,
        compaction_boundary: row.get(4)?,
        created_at: ts_column(row, 5)?,
    }
    .try_into()
}

pub(in crate::store) async fn get_output(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &OutputId,
) -> StoreResult<Option<OutputRecord>> {
    let row: Option<OutputRow> = sqlx::query_as(GET_OUTPUT)
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&store.pool)
        .await?;
    Ok(row.map(Into::into))
}

pub(in crate::store) async fn purge_outputs(
    store: &SqliteStore,
    older_than: Duration,
) -> StoreResult<u64> {
    let cutoff = now()
        - chrono::Duration::from_std(older_than)
            .map_err(|error| StoreError::Internal(error.to_string()))?;
    let done = sqlx::query(PURGE_OUTPUTS)
        .bind(ts(cutoff))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    Ok(done.rows_affected())
}
