//! Tool state on Postgres.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::store::dialect::postgres::notify;
use crate::store::dialect::{lease_span, now};
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

// --- tool state (todos, memory, permission mode) ---
pub(in crate::store) async fn unlock_tools(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    names: &[String],
) -> StoreResult<()> {
    let mut tx = store.tenant_tx(tenant).await?;
    let owned: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2")
            .bind(session.as_str())
            .bind(tenant.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    if owned.is_none() {
        return Err(StoreError::NotFound);
    }
    sqlx::query(
        "INSERT INTO session_unlocked_tools (session_id, tenant_id, tool_name) \
         SELECT $1, $2, name FROM UNNEST($3::text[]) AS t(name) ON CONFLICT DO NOTHING",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(names)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(in crate::store) async fn unlocked_tools(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<String>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let names = sqlx::query_scalar(
        "SELECT tool_name FROM session_unlocked_tools WHERE session_id = $1 ORDER BY tool_name",
    )
    .bind(session.as_str())
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(names)
}

pub(in crate::store) async fn get_todos(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<TodoItem>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row =
        sqlx::query("SELECT items FROM session_todos WHERE session_id = $1 AND tenant_id = $2")
            .bind(session.as_str())
            .bind(tenant.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    tx.commit().await?;
    match row {
        Some(row) => Ok(row.try_get::<Json<Vec<TodoItem>>, _>("items")?.0),
        None => Ok(Vec::new()),
    }
}

pub(in crate::store) async fn put_todos(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    items: &[TodoItem],
) -> StoreResult<()> {
    let items = crate::store::storable::todos(items);
    let items: &[TodoItem] = &items;
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(
        "INSERT INTO session_todos (session_id, tenant_id, items, updated_at) \
         SELECT id, tenant_id, $3, $4 FROM sessions WHERE id = $1 AND tenant_id = $2 \
         ON CONFLICT (session_id) DO UPDATE SET items = EXCLUDED.items, \
             updated_at = EXCLUDED.updated_at",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(Json(items))
    .bind(now())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

pub(in crate::store) async fn get_mode_override(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Option<ModeOverride>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(
        "SELECT mode, previous_mode FROM session_modes \
         WHERE session_id = $1 AND tenant_id = $2",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.map(|row| mode_override_from(row.try_get("mode")?, row.try_get("previous_mode")?))
        .transpose()
}

pub(in crate::store) async fn set_mode_override(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    state: ModeOverride,
) -> StoreResult<()> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(
        "INSERT INTO session_modes (session_id, tenant_id, mode, previous_mode, updated_at) \
         SELECT id, tenant_id, $3, $4, $5 FROM sessions WHERE id = $1 AND tenant_id = $2 \
         ON CONFLICT (session_id) DO UPDATE SET mode = EXCLUDED.mode, \
             previous_mode = EXCLUDED.previous_mode, updated_at = EXCLUDED.updated_at",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(mode_str(state.mode))
    .bind(state.previous.map(mode_str))
    .bind(now())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}

pub(in crate::store) async fn memory_get(
    store: &PgStore,
    tenant: &TenantId,
    path: &str,
) -> StoreResult<Option<MemoryNote>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(
        "SELECT path, content, version, created_at, updated_at FROM memory_notes \
         WHERE tenant_id = $1 AND path = $2",
    )
    .bind(tenant.as_str())
    .bind(path)
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.as_ref().map(pg_memory_note).transpose()
}

pub(in crate::store) async fn memory_list(
    store: &PgStore,
    tenant: &TenantId,
    prefix: &str,
) -> StoreResult<Vec<MemoryEntry>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let rows = sqlx::query(
        "SELECT path, size_bytes, version, updated_at FROM memory_notes \
         WHERE tenant_id = $1 AND substr(path, 1, length($2)) = $2 ORDER BY path",
    )
    .bind(tenant.as_str())
    .bind(prefix)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    rows.iter()
        .map(|row| {
            Ok(MemoryEntry {
                path: row.try_get("path")?,
                size_bytes: row.try_get("size_bytes")?,
                version: row.try_get("version")?,
                updated_at: row.try_get("updated_at")?,
            })
        })
        .collect()
}

pub(in crate::store) async fn memory_put(
    store: &PgStore,
    tenant: &TenantId,
    path: &str,
    content: &str,
    expect: MemoryExpect,
) -> StoreResult<MemoryNote> {
    let content = crate::store::storable::text(content);
    let content: &str = &content;
    let mut tx = store.tenant_tx(tenant).await?;
    let at = now();
    let row = match expect {
        MemoryExpect::Absent => {
            sqlx::query(
                "INSERT INTO memory_notes (tenant_id, path, content, size_bytes, version, \
                     created_at, updated_at) VALUES ($1, $2, $3, $4, 1, $5, $5) \
                 ON CONFLICT (tenant_id, path) DO NOTHING \
                 RETURNING path, content, version, created_at, updated_at",
            )
            .bind(tenant.as_str())
            .bind(path)
            .bind(content)
            .bind(content.len() as i64)
            .bind(at)
            .fetch_optional(&mut *tx)
            .await?
        }
        MemoryExpect::Version(version) => {
            sqlx::query(
                "UPDATE memory_notes SET content = $3, size_bytes = $4, \
                     version = version + 1, updated_at = $5 \
                 WHERE tenant_id = $1 AND path = $2 AND version = $6 \
                 RETURNING path, content, version, created_at, updated_at",
            )
            .bind(tenant.as_str())
            .bind(path)
            .bind(content)
            .bind(content.len() as i64)
            .bind(at)
            .bind(version)
            .fetch_optional(&mut *tx)
            .await?
        }
    };
    tx.commit().await?;
    let row = row.ok_or_else(|| memory_conflict(path, expect))?;
    pg_memory_note(&row)
}

pub(in crate::store) async fn memory_delete(
    store: &PgStore,
    tenant: &TenantId,
    path: &str,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query("DELETE FROM memory_notes WHERE tenant_id = $1 AND path = $2")
        .bind(tenant.as_str())
        .bind(path)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

pub(in crate::store) async fn memory_usage(
    store: &PgStore,
    tenant: &TenantId,
) -> StoreResult<MemoryUsage> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(
        "SELECT COUNT(*)::bigint AS notes, COALESCE(SUM(size_bytes), 0)::bigint AS bytes \
         FROM memory_notes WHERE tenant_id = $1",
    )
    .bind(tenant.as_str())
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(MemoryUsage {
        notes: row.try_get("notes")?,
        bytes: row.try_get("bytes")?,
    })
}

pub(in crate::store) fn pg_memory_note(row: &PgRow) -> StoreResult<MemoryNote> {
    Ok(MemoryNote {
        path: row.try_get("path")?,
        content: row.try_get("content")?,
        version: row.try_get("version")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}
