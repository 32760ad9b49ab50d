//! `Idempotency-Key` on `POST /v1/sessions` and `POST /v1/sessions/{id}/prompts`.
//!
//! A client that retries a request (after a `503`, a timeout or a cut connection) with the same
//! key gets the first request's outcome — the same status and body, the same session or run —
//! instead of a second session or run. The key is recorded in the transaction that creates the
//! session or accepts the prompt (see `store::idempotency`), so of concurrent requests with one
//! key exactly one creates; the others answer with its outcome. Keys are per tenant, and for
//! prompts per session; they live 24 hours ([`crate::store::IDEMPOTENCY_KEY_TTL`]) and count
//! against the tenant's `idempotency_keys` limit (`429 TENANT_LIMIT`). Only successes are
//! remembered: a request that failed created nothing and its retry runs again.
//!
//! Hostile input: a key must be 1..=255 printable ASCII characters, sent once (`422
//! INVALID_REQUEST`, `details.header`); the same key with another request body is `422
//! IDEMPOTENCY_KEY_REUSED`.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult, ErrorCode};
use crate::ids::TenantId;
use crate::store::{IdempotencyRecord, NewIdempotencyKey};
use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The request header.
pub const HEADER: &str = "idempotency-key";
/// Set (`true`) on an answer replayed from an earlier request with the same key.
pub const REPLAYED_HEADER: &str = "idempotency-replayed";
/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// The key of a request, validated, with what identifies the request.
pub struct Keyed {
    pub key: NewIdempotencyKey,
    pub tenant: TenantId,
}

impl Keyed {
    /// The key sent with `headers`, if any, for `scope` and the request digested from
    /// `request` (its canonical JSON).
    pub fn from_headers(
        state: &AppState,
        headers: &HeaderMap,
        tenant: &TenantId,
        scope: String,
        request: &Value,
    ) -> ApiResult<Option<Self>> {
        let mut values = headers.get_all(HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(invalid("send one Idempotency-Key header"));
        }
        let key = valid_key(value)?;
        Ok(Some(Self {
            key: NewIdempotencyKey {
                scope,
                key,
                request_sha256: hex::encode(Sha256::digest(request.to_string().as_bytes())),
                max_live: state.settings.limits.idempotency_keys,
            },
            tenant: tenant.clone(),
        }))
    }

    /// The remembered outcome of this key, if any: `Err(IDEMPOTENCY_KEY_REUSED)` when it
    /// belongs to another request; `Ok(None)` when the key is new.
    pub async fn earlier(&self, state: &AppState) -> ApiResult<Option<IdempotencyRecord>> {
        let Some(record) = state
            .store
            .idempotency_key(&self.tenant, &self.key.scope, &self.key.key)
            .await?
        else {
            return Ok(None);
        };
        if record.request_sha256 != self.key.request_sha256 {
            return Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used for a different request; use a new key",
            )
            .with_details(json!({ "header": "Idempotency-Key" })));
        }
        Ok(Some(record))
    }

    /// The earlier outcome after the store said a concurrent request took the key first.
    pub async fn taken(&self, state: &AppState) -> ApiResult<IdempotencyRecord> {
        self.earlier(state).await?.ok_or_else(|| {
            ApiError::new(
                ErrorCode::IdempotencyKeyInUse,
                "a concurrent request with this Idempotency-Key is being answered; retry",
            )
        })
    }

    /// Keeps the first answer (after the commit that created what it names). A failure only
    /// costs exactness: a replay then answers from the created resource as it is now.
    pub async fn remember(&self, state: &AppState, status: StatusCode, body: &Value) {
        if let Err(error) = state
            .store
            .record_idempotent_response(
                &self.tenant,
                &self.key.scope,
                &self.key.key,
                status.as_u16(),
                body,
            )
            .await
        {
            tracing::warn!(%error, "cannot keep the answer of an idempotent request");
        }
    }
}

/// The answer of a replayed request: its stored status and body, or `fallback` when the first
/// answer was not kept.
pub fn replay(record: IdempotencyRecord, fallback: (StatusCode, Value)) -> Response {
    let (status, body) = match record.response {
        Some((status, body)) => (StatusCode::from_u16(status).unwrap_or(fallback.0), body),
        None => fallback,
    };
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    response
}

fn valid_key(value: &HeaderValue) -> ApiResult<String> {
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_KEY_LEN {
        return Err(invalid("Idempotency-Key must have 1 to 255 characters"));
    }
    if !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(invalid("Idempotency-Key must be printable ASCII"));
    }
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn invalid(message: &str) -> ApiError {
    ApiError::invalid(message).with_details(json!({ "header": "Idempotency-Key" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_printable_ascii() {
        assert_eq!(
            valid_key(&HeaderValue::from_static("a-key_1 ~")).unwrap(),
            "a-key_1 ~"
        );
        assert!(valid_key(&HeaderValue::from_static("")).is_err());
        assert!(valid_key(&HeaderValue::from_str(&"k".repeat(255)).unwrap()).is_ok());
        assert!(valid_key(&HeaderValue::from_str(&"k".repeat(256)).unwrap()).is_err());
        assert!(valid_key(&HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap()).is_err());
        assert!(valid_key(&HeaderValue::from_bytes(b"tab\there").unwrap()).is_err());
    }
}
