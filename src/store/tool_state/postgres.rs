//! Tool state on Postgres.

use super::*;
use crate::ids::{SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::postgres::PgStore;
use crate::store::*;
use sqlx::Row;
use sqlx::types::Json;

// --- tool state (todos, memory, permission mode) ---
pub(in crate::store) async fn unlock_tools(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    names: &[String],
) -> StoreResult<()> {
    let mut tx = store.tenant_tx(tenant).await?;
    let owned: Option<i32> = sqlx::query_scalar(SESSION_OWNED)
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
    let mut conn = store.tenant_conn(tenant).await?;
    let names = sqlx::query_scalar(
        "SELECT tool_name FROM session_unlocked_tools WHERE session_id = $1 ORDER BY tool_name",
    )
    .bind(session.as_str())
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    Ok(names)
}

pub(in crate::store) async fn get_todos(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<TodoItem>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(GET_TODOS)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
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
    let done = sqlx::query(PUT_TODOS)
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
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(GET_MODE)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
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
    let done = sqlx::query(SET_MODE)
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
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(MEMORY_GET)
        .bind(tenant.as_str())
        .bind(path)
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    row.as_ref().map(memory_note).transpose()
}

pub(in crate::store) async fn memory_list(
    store: &PgStore,
    tenant: &TenantId,
    prefix: &str,
) -> StoreResult<Vec<MemoryEntry>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows: Vec<MemoryEntryRow> = sqlx::query_as(MEMORY_LIST)
        .bind(tenant.as_str())
        .bind(prefix)
        .fetch_all(&mut *conn)
        .await?;
    conn.commit().await?;
    Ok(rows.into_iter().map(Into::into).collect())
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
            sqlx::query(MEMORY_INSERT)
                .bind(tenant.as_str())
                .bind(path)
                .bind(content)
                .bind(content.len() as i64)
                .bind(at)
                .fetch_optional(&mut *tx)
                .await?
        }
        MemoryExpect::Version(version) => {
            sqlx::query(MEMORY_UPDATE)
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
    memory_note(&row)
}

pub(in crate::store) async fn memory_delete(
    store: &PgStore,
    tenant: &TenantId,
    path: &str,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(MEMORY_DELETE)
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
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(
        "SELECT COUNT(*)::bigint AS notes, COALESCE(SUM(size_bytes), 0)::bigint AS bytes \
         FROM memory_notes WHERE tenant_id = $1",
    )
    .bind(tenant.as_str())
    .fetch_one(&mut *conn)
    .await?;
    conn.commit().await?;
    Ok(MemoryUsage {
        notes: row.try_get("notes")?,
        bytes: row.try_get("bytes")?,
    })
}
