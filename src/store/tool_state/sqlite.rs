//! Tool state on SQLite.

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

// --- tool state (todos, memory, permission mode) ---
pub(in crate::store) async fn unlock_tools(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    names: &[String],
) -> StoreResult<()> {
    let mut tx = store.writer.begin().await?;
    let owned: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")
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
    let row = sqlx::query("SELECT items FROM session_todos WHERE session_id = ? AND tenant_id = ?")
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
    let done = sqlx::query(
        "INSERT INTO session_todos (session_id, tenant_id, items, updated_at) \
         SELECT id, tenant_id, ?, ? FROM sessions WHERE id = ? AND tenant_id = ? \
         ON CONFLICT (session_id) DO UPDATE SET items = excluded.items, \
             updated_at = excluded.updated_at",
    )
    .bind(items)
    .bind(ts(now()))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .execute(&store.writer)
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
    let row = sqlx::query(
        "SELECT mode, previous_mode FROM session_modes WHERE session_id = ? AND tenant_id = ?",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&store.pool)
    .await?;
    row.map(|row| mode_override_from(row.try_get("mode")?, row.try_get("previous_mode")?))
        .transpose()
}

pub(in crate::store) async fn set_mode_override(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    state: ModeOverride,
) -> StoreResult<()> {
    let done = sqlx::query(
        "INSERT INTO session_modes (session_id, tenant_id, mode, previous_mode, updated_at) \
         SELECT id, tenant_id, ?, ?, ? FROM sessions WHERE id = ? AND tenant_id = ? \
         ON CONFLICT (session_id) DO UPDATE SET mode = excluded.mode, \
             previous_mode = excluded.previous_mode, updated_at = excluded.updated_at",
    )
    .bind(mode_str(state.mode))
    .bind(state.previous.map(mode_str))
    .bind(ts(now()))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .execute(&store.writer)
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
    let row = sqlx::query(
        "SELECT path, content, version, created_at, updated_at FROM memory_notes \
         WHERE tenant_id = ? AND path = ?",
    )
    .bind(tenant.as_str())
    .bind(path)
    .fetch_optional(&store.pool)
    .await?;
    row.as_ref().map(sqlite_memory_note).transpose()
}

pub(in crate::store) async fn memory_list(
    store: &SqliteStore,
    tenant: &TenantId,
    prefix: &str,
) -> StoreResult<Vec<MemoryEntry>> {
    let rows = sqlx::query(
        "SELECT path, size_bytes, version, updated_at FROM memory_notes \
         WHERE tenant_id = ? AND substr(path, 1, length(?)) = ? ORDER BY path",
    )
    .bind(tenant.as_str())
    .bind(prefix)
    .bind(prefix)
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(MemoryEntry {
                path: row.try_get("path")?,
                size_bytes: row.try_get("size_bytes")?,
                version: row.try_get("version")?,
                updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
            })
        })
        .collect()
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
    let mut tx = store.writer.begin().await?;
    let row = match expect {
        MemoryExpect::Absent => {
            sqlx::query(
                "INSERT INTO memory_notes (tenant_id, path, content, size_bytes, version, \
                     created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?) \
                 ON CONFLICT (tenant_id, path) DO NOTHING \
                 RETURNING path, content, version, created_at, updated_at",
            )
            .bind(tenant.as_str())
            .bind(path)
            .bind(content)
            .bind(content.len() as i64)
            .bind(&at)
            .bind(&at)
            .fetch_optional(&mut *tx)
            .await?
        }
        MemoryExpect::Version(version) => {
            sqlx::query(
                "UPDATE memory_notes SET content = ?, size_bytes = ?, \
                     version = version + 1, updated_at = ? \
                 WHERE tenant_id = ? AND path = ? AND version = ? \
                 RETURNING path, content, version, created_at, updated_at",
            )
            .bind(content)
            .bind(content.len() as i64)
            .bind(&at)
            .bind(tenant.as_str())
            .bind(path)
            .bind(version)
            .fetch_optional(&mut *tx)
            .await?
        }
    };
    tx.commit().await?;
    let row = row.ok_or_else(|| memory_conflict(path, expect))?;
    sqlite_memory_note(&row)
}

pub(in crate::store) async fn memory_delete(
    store: &SqliteStore,
    tenant: &TenantId,
    path: &str,
) -> StoreResult<bool> {
    let done = sqlx::query("DELETE FROM memory_notes WHERE tenant_id = ? AND path = ?")
        .bind(tenant.as_str())
        .bind(path)
        .execute(&store.writer)
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

pub(in crate::store) fn sqlite_memory_note(row: &SqliteRow) -> StoreResult<MemoryNote> {
    Ok(MemoryNote {
        path: row.try_get("path")?,
        content: row.try_get("content")?,
        version: row.try_get("version")?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
    })
}
