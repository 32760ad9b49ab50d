//! Tool state on SQLite.

use super::*;
use crate::ids::{SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::dialect::sqlite::{parse_json, ts};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use rusqlite::OptionalExtension;
use sqlx::Row;

// --- tool state (todos, memory, permission mode) ---
pub(in crate::store) async fn unlock_tools(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    names: &[String],
) -> StoreResult<()> {
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    let owned: Option<i64> = sqlx::query_scalar(SESSION_OWNED)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if owned.is_none() {
        return Err(StoreError::NotFound);
    }
    for name in names {
        sqlx::query(
            "INSERT INTO session_unlocked_tools (session_id, tenant_id, tool_name) \
             VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(in crate::store) async fn unlocked_tools(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<String>> {
    let names = sqlx::query_scalar(
        "SELECT tool_name FROM session_unlocked_tools WHERE session_id = ? AND tenant_id = ? \
         ORDER BY tool_name",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_all(&store.pool)
    .await?;
    Ok(names)
}

pub(in crate::store) async fn get_todos(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<TodoItem>> {
    let row = sqlx::query(GET_TODOS)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&store.pool)
        .await?;
    match row {
        Some(row) => parse_json(&row.try_get::<String, _>("items")?),
        None => Ok(Vec::new()),
    }
}

pub(in crate::store) async fn put_todos(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    items: &[TodoItem],
) -> StoreResult<()> {
    let items = crate::store::storable::todos(items);
    let items: &[TodoItem] = &items;
    let items =
        serde_json::to_string(items).map_err(|error| StoreError::Internal(error.to_string()))?;
    let done = sqlx::query(PUT_TODOS)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(items)
        .bind(ts(now()))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

pub(in crate::store) async fn get_mode_override(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Option<ModeOverride>> {
    // A point read on the caller's thread (see `sqlite_reads`; `$1`, `$2` bind in order).
    let row = store.reads.read(|db| {
        Ok(db
            .prepare_cached(GET_MODE)?
            .query_row(
                rusqlite::params![session.as_str(), tenant.as_str()],
                |row| Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?)),
            )
            .optional()?)
    })?;
    row.map(|(mode, previous)| mode_override_from(mode, previous))
        .transpose()
}

pub(in crate::store) async fn set_mode_override(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    state: ModeOverride,
) -> StoreResult<()> {
    let done = sqlx::query(SET_MODE)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(mode_str(state.mode))
        .bind(state.previous.map(mode_str))
        .bind(ts(now()))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

pub(in crate::store) async fn memory_get(
    store: &SqliteStore,
    tenant: &TenantId,
    path: &str,
) -> StoreResult<Option<MemoryNote>> {
    let row = sqlx::query(MEMORY_GET)
        .bind(tenant.as_str())
        .bind(path)
        .fetch_optional(&store.pool)
        .await?;
    row.as_ref().map(memory_note).transpose()
}

pub(in crate::store) async fn memory_list(
    store: &SqliteStore,
    tenant: &TenantId,
    prefix: &str,
) -> StoreResult<Vec<MemoryEntry>> {
    let rows: Vec<MemoryEntryRow> = sqlx::query_as(MEMORY_LIST)
        .bind(tenant.as_str())
        .bind(prefix)
        .fetch_all(&store.pool)
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(in crate::store) async fn memory_put(
    store: &SqliteStore,
    tenant: &TenantId,
    path: &str,
    content: &str,
    expect: MemoryExpect,
) -> StoreResult<MemoryNote> {
    let content = crate::store::storable::text(content);
    let content: &str = &content;
    let at = ts(now());
    // Explicit transaction: see `create_session`.
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    let row = match expect {
        MemoryExpect::Absent => {
            sqlx::query(MEMORY_INSERT)
                .bind(tenant.as_str())
                .bind(path)
                .bind(content)
                .bind(content.len() as i64)
                .bind(&at)
                .fetch_optional(&mut *tx)
                .await?
        }
        MemoryExpect::Version(version) => {
            sqlx::query(MEMORY_UPDATE)
                .bind(tenant.as_str())
                .bind(path)
                .bind(content)
                .bind(content.len() as i64)
                .bind(&at)
                .bind(version)
                .fetch_optional(&mut *tx)
                .await?
        }
    };
    tx.commit().await?;
    let row = row.ok_or_else(|| memory_conflict(path, expect))?;
    memory_note(&row)
}

pub(in crate::store) async fn memory_delete(
    store: &SqliteStore,
    tenant: &TenantId,
    path: &str,
) -> StoreResult<bool> {
    let done = sqlx::query(MEMORY_DELETE)
        .bind(tenant.as_str())
        .bind(path)
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    Ok(done.rows_affected() > 0)
}

pub(in crate::store) async fn memory_usage(
    store: &SqliteStore,
    tenant: &TenantId,
) -> StoreResult<MemoryUsage> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS notes, COALESCE(SUM(size_bytes), 0) AS bytes \
         FROM memory_notes WHERE tenant_id = ?",
    )
    .bind(tenant.as_str())
    .fetch_one(&store.pool)
    .await?;
    Ok(MemoryUsage {
        notes: row.try_get("notes")?,
        bytes: row.try_get("bytes")?,
    })
}
