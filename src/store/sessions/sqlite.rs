//! Sessions on SQLite.

use super::*;
use crate::ids::{SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::dialect::sqlite::{json_column, opt_ts_column, ts, ts_column};
use crate::store::events::sqlite_append::append_in;
use crate::store::sqlite::SqliteStore;
use crate::store::webhooks::sqlite::Outbox;
use crate::store::*;
use chrono::{DateTime, Utc};
use rusqlite::params;

/// A new session: `$1` id, `$2` tenant, `$3` config, `$4` time.
const INSERT_SESSION: &str = concat!(
    "INSERT INTO sessions (id, tenant_id, config, created_at, updated_at, active_at) \
     VALUES ($1, $2, $3, $4, $4, $4) RETURNING ",
    session_columns!()
);

pub(in crate::store) async fn create_session_keyed(
    store: &SqliteStore,
    session: NewSession,
    max_open: u32,
    key: Option<&NewIdempotencyKey>,
) -> StoreResult<SessionRecord> {
    let at = now();
    // Committed with the other writes waiting (the group writer, the one writer: the count
    // and the insert cannot interleave with another creation); the cap is checked before any
    // write and the key's insert is the first write, so either refusal fails alone.
    let key = key.cloned();
    store
        .group
        .write(move |db| {
            admit_session(db, &session.tenant, max_open)?;
            crate::store::idempotency::sqlite::insert(
                db,
                &session.tenant,
                key.as_ref(),
                session.id.as_str(),
                at,
            )?;
            insert_session(db, &session, at)
        })
        .await
}

/// `TenantLimit` when the tenant already has `max_open` open sessions (`u32::MAX`: no cap),
/// in the caller's transaction on the write connection.
fn admit_session(db: &rusqlite::Connection, tenant: &TenantId, max_open: u32) -> StoreResult<()> {
    if max_open == u32::MAX {
        return Ok(());
    }
    let open: i64 = db
        .prepare_cached(COUNT_OPEN_SESSIONS)?
        .query_row(params![tenant.as_str()], |row| row.get(0))?;
    crate::store::limits::over(crate::limits::Limit::Sessions, max_open, open)
}

/// Inserts a new session (a duplicate id is a `Conflict`) and returns its record
/// (`INSERT_SESSION`'s `$N` bind in order of first use).
fn insert_session(
    db: &rusqlite::Connection,
    session: &NewSession,
    at: DateTime<Utc>,
) -> StoreResult<SessionRecord> {
    let NewSession { id, tenant, config } = session;
    db.prepare_cached(INSERT_SESSION)?
        .query_and_then(
            params![id.as_str(), tenant.as_str(), config.to_string(), ts(at)],
            session_record,
        )?
        .next()
        .unwrap_or_else(|| Err(StoreError::Internal("the insert returned no row".into())))
}

/// The fork in one `IMMEDIATE` transaction on the write connection, the same path (and the
/// same append) as the group writer's.
pub(in crate::store) async fn fork_session(
    store: &SqliteStore,
    mut fork: NewFork,
) -> StoreResult<()> {
    let batch = StorableBatch::new(std::mem::take(&mut fork.batch));
    let written = store
        .writer
        .transaction(|db| fork_in(db, &store.outbox, &fork, &batch))
        .await;
    store.outbox.wake_if_written();
    written
}

fn fork_in(
    db: &rusqlite::Connection,
    outbox: &Outbox,
    fork: &NewFork,
    batch: &StorableBatch,
) -> StoreResult<()> {
    let at = now();
    admit_session(db, &fork.session.tenant, fork.max_open)?;
    insert_session(db, &fork.session, at)?;
    let (id, tenant, created) = (&fork.session.id, &fork.session.tenant, ts(at));
    append_in(db, outbox, tenant, id, batch)?;
    let Some(noa) = &fork.noa else {
        return Ok(());
    };
    db.prepare_cached(
        "INSERT INTO noa_states (session_id, tenant_id, version, state, updated_at) \
         VALUES (?1, ?2, 1, ?3, ?4)",
    )?
    .execute(params![
        id.as_str(),
        tenant.as_str(),
        noa.state.to_string(),
        created
    ])?;
    let ordinals = serde_json::to_string(&noa.archives)
        .map_err(|error| StoreError::Internal(error.to_string()))?;
    let copied = db
        .prepare_cached(
            "INSERT INTO noa_archives (session_id, tenant_id, ordinal, from_ref, to_ref, summary, \
             message_count, tokens, messages, created_at) \
         SELECT ?1, tenant_id, ordinal, from_ref, to_ref, summary, message_count, tokens, \
             messages, created_at FROM noa_archives \
         WHERE session_id = ?2 AND tenant_id = ?3 \
             AND ordinal IN (SELECT value FROM json_each(?4))",
        )?
        .execute(params![
            id.as_str(),
            fork.source.as_str(),
            tenant.as_str(),
            ordinals
        ])?;
    crate::store::sessions::archives_copied(copied as u64, noa)
}

/// A point read on the caller's thread (see `sqlite_reads`; `$1`, `$2` bind in order).
pub(in crate::store) async fn get_session(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &SessionId,
) -> StoreResult<Option<SessionRecord>> {
    store.reads.read(|db| {
        db.prepare_cached(SELECT_SESSION)?
            .query_and_then(params![id.as_str(), tenant.as_str()], session_record)?
            .next()
            .transpose()
    })
}

/// A [`SessionRow`] of [`SESSION_COLUMNS`], in order, read by `rusqlite`.
fn session_record(row: &rusqlite::Row<'_>) -> StoreResult<SessionRecord> {
    SessionRow {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        config: json_column(row, 2)?,
        status: row.get(3)?,
        created_at: ts_column(row, 4)?,
        updated_at: ts_column(row, 5)?,
        closed_at: opt_ts_column(row, 6)?,
        last_event_seq: row.get(7)?,
    }
    .try_into()
}

pub(in crate::store) async fn list_sessions(
    store: &SqliteStore,
    tenant: &TenantId,
    cursor: Option<&SessionCursor>,
    limit: u32,
) -> StoreResult<Vec<SessionRecord>> {
    let rows = match cursor {
        Some(cursor) => {
            let created = ts(cursor.created_at);
            sqlx::query(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? \
                 AND (created_at < ? OR (created_at = ? AND id < ?)) \
                 ORDER BY created_at DESC, id DESC LIMIT ?"
            ))
            .bind(tenant.as_str())
            .bind(&created)
            .bind(&created)
            .bind(cursor.id.as_str())
            .bind(i64::from(limit))
            .fetch_all(&store.pool)
            .await?
        }
        None => {
            sqlx::query(LIST_SESSIONS)
                .bind(tenant.as_str())
                .bind(i64::from(limit))
                .fetch_all(&store.pool)
                .await?
        }
    };
    rows.iter().map(session_from_row).collect()
}

pub(in crate::store) async fn close_session(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &SessionId,
) -> StoreResult<Option<SessionRecord>> {
    let closed_at = now();
    let at = ts(closed_at);
    // Explicit transaction: see `create_session`.
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    let row = sqlx::query(&format!(
        "UPDATE sessions SET status = 'closed', closed_at = COALESCE(closed_at, ?), \
             updated_at = ? \
         WHERE id = ? AND tenant_id = ? RETURNING {SESSION_COLUMNS}"
    ))
    .bind(&at)
    .bind(&at)
    .bind(id.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let record = row.as_ref().map(session_from_row).transpose()?;
    // This close closed it (an earlier one kept its own `closed_at`): notify, in the
    // same transaction.
    if record
        .as_ref()
        .is_some_and(|record| record.closed_at == Some(closed_at))
    {
        let notice = crate::webhooks::session_closed(id.as_str(), closed_at);
        store
            .outbox
            .insert(&mut tx, tenant, id, &at, std::slice::from_ref(&notice))
            .await?;
    }
    tx.commit().await?;
    store.outbox.wake_if_written();
    Ok(record)
}

pub(in crate::store) async fn list_idle_sessions(
    store: &SqliteStore,
    idle_before: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Vec<IdleSession>> {
    let rows: Vec<IdleRow> = sqlx::query_as(IDLE_SESSIONS)
        .bind(ts(idle_before))
        .bind(i64::from(limit))
        .fetch_all(&store.pool)
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(in crate::store) async fn count_open_sessions(
    store: &SqliteStore,
    tenant: &TenantId,
) -> StoreResult<i64> {
    // A point read on the caller's thread (see `sqlite_reads`; `$1` binds by position).
    store.reads.read(|db| {
        Ok(db
            .prepare_cached(COUNT_OPEN_SESSIONS)?
            .query_row(params![tenant.as_str()], |row| row.get(0))?)
    })
}

pub(in crate::store) async fn last_event_seqs(
    store: &SqliteStore,
    sessions: &[SessionId],
) -> StoreResult<Vec<(SessionId, i64)>> {
    if sessions.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = sessions.iter().map(SessionId::as_str).collect();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT id, last_event_seq FROM sessions WHERE id IN (SELECT value FROM json_each(?))",
    )
    .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
    .fetch_all(&store.pool)
    .await?;
    Ok(seqs(rows))
}

pub(in crate::store) async fn workspace_snapshot(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Option<String>> {
    let head: Option<Option<String>> = sqlx::query_scalar(WORKSPACE_SNAPSHOT)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(store.reader())
        .await?;
    Ok(head.flatten())
}
