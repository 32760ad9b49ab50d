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

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
