//! `Idempotency-Key`s: what the store keeps of the first outcome of a keyed request.
//!
//! A key is written in the transaction that creates what the request creates (a session, a
//! run), so "created" and "the key names it" commit together: a concurrent request with the
//! same key either waits for that commit and then conflicts (the primary key
//! `(tenant, scope, key)`), or finds the key already there. Only successful outcomes are
//! kept: a request that failed created nothing, and its retry runs again. Keys live
//! [`IDEMPOTENCY_KEY_TTL`]; expired keys are ignored, replaced by a new request with the same
//! key, and swept. Live keys count against the tenant's `idempotency_keys` limit, checked in
//! the same transaction (on Postgres two concurrent first requests may both pass the count:
//! the table is still bounded, by the limit plus the requests in flight).

use super::{StoreError, StoreResult};
use crate::ids::TenantId;
use crate::limits::{Limit, LimitExceeded};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

/// How long a key is remembered after its request.
pub const IDEMPOTENCY_KEY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A key to record with what a request creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewIdempotencyKey {
    /// `session` for session creation, `prompt:<session id>` for a session's prompts.
    pub scope: String,
    /// The client's key (validated by the API: 1..=255 printable ASCII characters).
    pub key: String,
    /// The digest of the request, so the same key with another request is refused.
    pub request_sha256: String,
    /// The tenant's `idempotency_keys` limit.
    pub max_live: u32,
}

/// A remembered key.
#[derive(Clone, Debug, PartialEq)]
pub struct IdempotencyRecord {
    pub request_sha256: String,
    /// The session or run the first request created.
    pub resource_id: String,
    /// The first answer's status and body, once recorded (right after the commit).
    pub response: Option<(u16, Value)>,
    pub expires_at: DateTime<Utc>,
}

fn over_limit(key: &NewIdempotencyKey, live: i64) -> StoreResult<()> {
    if live >= i64::from(key.max_live) {
        return Err(LimitExceeded {
            limit: Limit::IdempotencyKeys,
            max: u64::from(key.max_live),
        }
        .into());
    }
    Ok(())
}

/// A unique violation on the key's primary key: a concurrent request with the key committed.
fn taken(error: sqlx::Error) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::IdempotencyKeyTaken,
        _ => error.into(),
    }
}

fn ttl() -> chrono::Duration {
    chrono::Duration::from_std(IDEMPOTENCY_KEY_TTL).unwrap_or_else(|_| chrono::Duration::days(1))
}

pub(super) mod sqlite {
    use super::*;
    use crate::store::sqlite::{parse_ts, ts};
    use sqlx::{Row, SqliteConnection};

    /// Records `key` for `resource` in the caller's transaction.
    pub async fn insert(
        conn: &mut SqliteConnection,
        tenant: &TenantId,
        key: &NewIdempotencyKey,
        resource: &str,
        at: DateTime<Utc>,
    ) -> StoreResult<()> {
        let now = ts(at);
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE tenant_id = ? AND scope = ? AND key = ? \
                 AND expires_at <= ?",
        )
        .bind(tenant.as_str())
        .bind(&key.scope)
        .bind(&key.key)
        .bind(&now)
        .execute(&mut *conn)
        .await?;
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM idempotency_keys WHERE tenant_id = ? AND expires_at > ?",
        )
        .bind(tenant.as_str())
        .bind(&now)
        .fetch_one(&mut *conn)
        .await?;
        over_limit(key, live)?;
        sqlx::query(
            "INSERT INTO idempotency_keys (tenant_id, scope, key, request_sha256, resource_id, \
                 created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(tenant.as_str())
        .bind(&key.scope)
        .bind(&key.key)
        .bind(&key.request_sha256)
        .bind(resource)
        .bind(&now)
        .bind(ts(at + ttl()))
        .execute(&mut *conn)
        .await
        .map_err(taken)?;
        Ok(())
    }

    pub fn record_of(row: &sqlx::sqlite::SqliteRow) -> StoreResult<IdempotencyRecord> {
        let status: Option<i64> = row.try_get("status")?;
        let response: Option<String> = row.try_get("response")?;
        let response = match (status, response) {
            (Some(status), Some(body)) => Some((
                u16::try_from(status).unwrap_or(200),
                serde_json::from_str(&body)
                    .map_err(|error| StoreError::Internal(error.to_string()))?,
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
}

pub(super) mod postgres {
    use super::*;
    use sqlx::{PgConnection, Row};

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
}
