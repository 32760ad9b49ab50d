//! The MCP server registry on Postgres: tenant-scoped transactions (row-level security); a
//! new row is counted against the tenant's limit under the tenant's advisory lock, so
//! replicas sharing the database cannot both take the last slot.

use super::mcp_servers::McpServerRecord;
use super::postgres::PgStore;
use super::*;
use chrono::{SubsecRound, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

const COLUMNS: &str = "name, config, created_at, updated_at";

fn record(row: &PgRow) -> StoreResult<McpServerRecord> {
    Ok(McpServerRecord {
        name: row.try_get("name")?,
        config: row.try_get::<Json<Value>, _>("config")?.0,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) async fn create(
    store: &PgStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
    max: u32,
) -> StoreResult<McpServerRecord> {
    let mut tx = store.tenant_tx(tenant).await?;
    super::postgres_limits::lock_tenant(&mut tx, tenant).await?;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM mcp_servers WHERE tenant_id = $1")
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if count >= i64::from(max) {
        return Err(crate::limits::LimitExceeded {
            limit: crate::limits::Limit::McpServers,
            max: u64::from(max),
        }
        .into());
    }
    let at = Utc::now().trunc_subsecs(6);
    let row = sqlx::query(&format!(
        "INSERT INTO mcp_servers (tenant_id, name, config, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $4) ON CONFLICT (tenant_id, name) DO NOTHING \
         RETURNING {COLUMNS}"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .bind(Json(config))
    .bind(at)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(StoreError::Conflict(format!(
            "an MCP server named `{name}` is registered"
        )));
    };
    tx.commit().await?;
    record(&row)
}

pub(super) async fn replace(
    store: &PgStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
) -> StoreResult<Option<McpServerRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(&format!(
        "UPDATE mcp_servers SET config = $3, updated_at = $4 \
         WHERE tenant_id = $1 AND name = $2 RETURNING {COLUMNS}"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .bind(Json(config))
    .bind(Utc::now().trunc_subsecs(6))
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.as_ref().map(record).transpose()
}

pub(super) async fn get(
    store: &PgStore,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<Option<McpServerRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE tenant_id = $1 AND name = $2"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.as_ref().map(record).transpose()
}

pub(super) async fn list(
    store: &PgStore,
    tenant: &TenantId,
    limit: u32,
) -> StoreResult<Vec<McpServerRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE tenant_id = $1 ORDER BY name LIMIT $2"
    ))
    .bind(tenant.as_str())
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    rows.iter().map(record).collect()
}

pub(super) async fn delete(store: &PgStore, tenant: &TenantId, name: &str) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query("DELETE FROM mcp_servers WHERE tenant_id = $1 AND name = $2")
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}
