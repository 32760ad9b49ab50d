//! Idempotency on SQLite.

use super::*;
use crate::ids::TenantId;
use crate::store::dialect::now;
use crate::store::dialect::sqlite::{parse_ts, ts};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use rusqlite::params;
use sqlx::Row;

/// `IdempotencyKeyTaken` when `key` (if any) is live: a write that checks other things
/// before [`insert`] asks this first, so a duplicate request is told so whatever else it
/// would be refused for, and without writing anything.
pub fn ensure_free(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    key: Option<&NewIdempotencyKey>,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    let Some(key) = key else {
        return Ok(());
    };
    let taken = db
        .prepare_cached(
            "SELECT 1 FROM idempotency_keys WHERE tenant_id = ? AND scope = ? AND key = ? \
                 AND expires_at > ?",
        )?
        .exists(params![tenant.as_str(), key.scope, key.key, ts(at)])?;
    if taken {
        return Err(StoreError::IdempotencyKeyTaken);
    }
    Ok(())
}

/// Records `key` (when the request had one) for `resource` in the caller's transaction on the
/// write connection (see `sqlite_writer::Writer::transaction`).
pub fn insert(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    key: Option<&NewIdempotencyKey>,
    resource: &str,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    let Some(key) = key else {
        return Ok(());
    };
    let now = ts(at);
    db.prepare_cached(
        "DELETE FROM idempotency_keys WHERE tenant_id = ? AND scope = ? AND key = ? \
             AND expires_at <= ?",
    )?
    .execute(params![tenant.as_str(), key.scope, key.key, now])?;
    let live: i64 = db
        .prepare_cached(
            "SELECT count(*) FROM idempotency_keys WHERE tenant_id = ? AND expires_at > ?",
        )?
        .query_row(params![tenant.as_str(), now], |row| row.get(0))?;
    over_limit(key, live)?;
    db.prepare_cached(
        "INSERT INTO idempotency_keys (tenant_id, scope, key, request_sha256, resource_id, \
             created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        tenant.as_str(),
        key.scope,
        key.key,
        key.request_sha256,
        resource,
        now,
        ts(at + ttl()),
    ])
    .map_err(|error| match StoreError::from(error) {
        StoreError::Conflict(_) => StoreError::IdempotencyKeyTaken,
        other => other,
    })?;
    Ok(())
}

pub fn record_of(row: &sqlx::sqlite::SqliteRow) -> StoreResult<IdempotencyRecord> {
    let status: Option<i64> = row.try_get("status")?;
    let response: Option<String> = row.try_get("response")?;
    let response = match (status, response) {
        (Some(status), Some(body)) => Some((
            u16::try_from(status).unwrap_or(200),
            serde_json::from_str(&body).map_err(|error| StoreError::Internal(error.to_string()))?,
        )),
        _ => None,
    };
    Ok(IdempotencyRecord {
        request_sha256: row.try_get("request_sha256")?,
        resource_id: row.try_get("resource_id")?,
        response,
        expires_at: parse_ts(&row.try_get::<String, _>("expires_at")?)?,
    })
}

pub(in crate::store) async fn idempotency_key(
    store: &SqliteStore,
    tenant: &TenantId,
    scope: &str,
    key: &str,
) -> StoreResult<Option<IdempotencyRecord>> {
    let row = sqlx::query(
        "SELECT request_sha256, resource_id, status, response, expires_at \
         FROM idempotency_keys WHERE tenant_id = ? AND scope = ? AND key = ? AND expires_at > ?",
    )
    .bind(tenant.as_str())
    .bind(scope)
    .bind(key)
    .bind(ts(now()))
    .fetch_optional(&store.pool)
    .await?;
    row.as_ref()
        .map(crate::store::idempotency::sqlite::record_of)
        .transpose()
}

pub(in crate::store) async fn record_idempotent_response(
    store: &SqliteStore,
    tenant: &TenantId,
    scope: &str,
    key: &str,
    status: u16,
    body: &serde_json::Value,
) -> StoreResult<()> {
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    sqlx::query(
        "UPDATE idempotency_keys SET status = ?, response = ? \
         WHERE tenant_id = ? AND scope = ? AND key = ? AND status IS NULL",
    )
    .bind(i64::from(status))
    .bind(body.to_string())
    .bind(tenant.as_str())
    .bind(scope)
    .bind(key)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

pub(in crate::store) async fn purge_idempotency_keys(store: &SqliteStore) -> StoreResult<u64> {
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    let done = sqlx::query("DELETE FROM idempotency_keys WHERE expires_at <= ?")
        .bind(ts(now()))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
