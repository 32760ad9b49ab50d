//! The MCP server registry on SQLite: writes on the one writer connection (so the count of a
//! tenant's servers and the insert are one serialized transaction), reads from the read pool.

use super::mcp_servers::McpServerRecord;
use super::sqlite::{SqliteStore, parse_ts, ts};
use super::*;
use chrono::{SubsecRound, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

const COLUMNS: &str = "name, config, created_at, updated_at";

fn record(row: &SqliteRow) -> StoreResult<McpServerRecord> {
    let config: String = row.try_get("config")?;
    Ok(McpServerRecord {
        name: row.try_get("name")?,
        config: serde_json::from_str(&config)
            .map_err(|error| StoreError::Internal(format!("bad MCP server row: {error}")))?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
    })
}

pub(super) async fn create(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
    max: u32,
) -> StoreResult<McpServerRecord> {
    let at = ts(Utc::now().trunc_subsecs(6));
    let mut tx = store.writer().begin().await?;
    // A write first, so the transaction holds the write lock before it counts.
    let row = sqlx::query(&format!(
        "INSERT INTO mcp_servers (tenant_id, name, config, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant_id, name) DO NOTHING RETURNING {COLUMNS}"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .bind(config.to_string())
    .bind(&at)
    .bind(&at)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(StoreError::Conflict(format!(
            "an MCP server named `{name}` is registered"
        )));
    };
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM mcp_servers WHERE tenant_id = ?")
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if count > i64::from(max) {
        // Dropping the transaction rolls the insert back.
        return Err(crate::limits::LimitExceeded {
            limit: crate::limits::Limit::McpServers,
            max: u64::from(max),
        }
        .into());
    }
    tx.commit().await?;
    record(&row)
}

pub(super) async fn replace(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
) -> StoreResult<Option<McpServerRecord>> {
    let mut tx = store.writer().begin().await?;
    let row = sqlx::query(&format!(
        "UPDATE mcp_servers SET config = ?, updated_at = ? \
         WHERE tenant_id = ? AND name = ? RETURNING {COLUMNS}"
    ))
    .bind(config.to_string())
    .bind(ts(Utc::now().trunc_subsecs(6)))
    .bind(tenant.as_str())
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.as_ref().map(record).transpose()
}

pub(super) async fn get(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<Option<McpServerRecord>> {
    let row = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE tenant_id = ? AND name = ?"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .fetch_optional(store.reader())
    .await?;
    row.as_ref().map(record).transpose()
}

pub(super) async fn list(
    store: &SqliteStore,
    tenant: &TenantId,
    limit: u32,
) -> StoreResult<Vec<McpServerRecord>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE tenant_id = ? ORDER BY name LIMIT ?"
    ))
    .bind(tenant.as_str())
    .bind(i64::from(limit))
    .fetch_all(store.reader())
    .await?;
    rows.iter().map(record).collect()
}

pub(super) async fn delete(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<bool> {
    let mut tx = store.writer().begin().await?;
    let done = sqlx::query("DELETE FROM mcp_servers WHERE tenant_id = ? AND name = ?")
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}
