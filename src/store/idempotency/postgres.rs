//! Idempotency on Postgres.

use super::*;
use crate::ids::TenantId;
use crate::store::dialect::now;
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use sqlx::Row;
use sqlx::types::Json;

/// Records `key` for `resource` in the caller's (tenant) transaction.
pub async fn insert(
    conn: &mut PgConnection,
    tenant: &TenantId,
    key: &NewIdempotencyKey,
    resource: &str,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    sqlx::query(
        "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND scope = $2 AND key = $3 \
             AND expires_at <= $4",
    )
    .bind(tenant.as_str())
    .bind(&key.scope)
    .bind(&key.key)
    .bind(at)
    .execute(&mut *conn)
    .await?;
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1 AND expires_at > $2",
    )
    .bind(tenant.as_str())
    .bind(at)
    .fetch_one(&mut *conn)
    .await?;
    over_limit(key, live)?;
    sqlx::query(
        "INSERT INTO idempotency_keys (tenant_id, scope, key, request_sha256, resource_id, \
             created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenant.as_str())
    .bind(&key.scope)
    .bind(&key.key)
    .bind(&key.request_sha256)
    .bind(resource)
    .bind(at)
    .bind(at + ttl())
    .execute(&mut *conn)
    .await
    .map_err(taken)?;
    Ok(())
}

pub fn record_of(row: &sqlx::postgres::PgRow) -> StoreResult<IdempotencyRecord> {
    let status: Option<i32> = row.try_get("status")?;
    let response: Option<sqlx::types::Json<Value>> = row.try_get("response")?;
    Ok(IdempotencyRecord {
        request_sha256: row.try_get("request_sha256")?,
        resource_id: row.try_get("resource_id")?,
        response: match (status, response) {
            (Some(status), Some(body)) => Some((u16::try_from(status).unwrap_or(200), body.0)),
            _ => None,
        },
        expires_at: row.try_get("expires_at")?,
    })
}

pub(in crate::store) async fn idempotency_key(
    store: &PgStore,
    tenant: &TenantId,
    scope: &str,
    key: &str,
) -> StoreResult<Option<IdempotencyRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(
        "SELECT request_sha256, resource_id, status, response, expires_at \
         FROM idempotency_keys \
         WHERE tenant_id = $1 AND scope = $2 AND key = $3 AND expires_at > $4",
    )
    .bind(tenant.as_str())
    .bind(scope)
    .bind(key)
    .bind(now())
    .fetch_optional(&mut *conn)
    .await?;
    conn.commit().await?;
    row.as_ref()
        .map(crate::store::idempotency::postgres::record_of)
        .transpose()
}

pub(in crate::store) async fn record_idempotent_response(
    store: &PgStore,
    tenant: &TenantId,
    scope: &str,
    key: &str,
    status: u16,
    body: &serde_json::Value,
) -> StoreResult<()> {
    let mut tx = store.tenant_tx(tenant).await?;
    sqlx::query(
        "UPDATE idempotency_keys SET status = $4, response = $5 \
         WHERE tenant_id = $1 AND scope = $2 AND key = $3 AND status IS NULL",
    )
    .bind(tenant.as_str())
    .bind(scope)
    .bind(key)
    .bind(i32::from(status))
    .bind(Json(body))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(in crate::store) async fn purge_idempotency_keys(store: &PgStore) -> StoreResult<u64> {
    // System-level (login role), like the outputs' purge.
    let done = sqlx::query("DELETE FROM idempotency_keys WHERE expires_at <= $1")
        .bind(now())
        .execute(&store.pool)
        .await?;
    Ok(done.rows_affected())
}
