//! Standard-Webhooks-style signing (D4, D7): the headers `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`, the secret format
//! (`whsec_<base64>` or raw text), and verification with a replay window.
//!
//! Remote hooks sign their requests with this module; approval webhooks reuse it, and tests
//! (and receivers written in Rust) verify with [`verify`].

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::time::Duration;

type HmacSha256 = Hmac<Sha256>;

/// Header carrying the unique message id.
pub const HEADER_ID: &str = "webhook-id";
/// Header carrying the Unix timestamp (seconds) the message was signed at.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying one or more space-separated `v1,<base64>` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// Prefix of a base64-encoded secret in the Standard Webhooks format.
pub const SECRET_PREFIX: &str = "whsec_";
/// Default replay window for [`verify`].
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// Why a secret could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("webhook secret is empty")]
    Empty,
    #[error("webhook secret starts with `whsec_` but the rest is not valid base64")]
    InvalidBase64,
}

/// Why a signed message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("missing or non-text header `{0}`")]
    MissingHeader(&'static str),
    #[error("header `webhook-timestamp` is not a Unix timestamp")]
    BadTimestamp,
    #[error("timestamp is outside the allowed window of {tolerance_secs} s")]
    Stale { tolerance_secs: u64 },
    #[error("no signature matches")]
    BadSignature,
}

/// An HMAC key. `Debug` never prints the key.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    /// Parses `whsec_<base64>` (the key is the decoded bytes) or any other non-empty text (the
    /// key is the text's bytes).
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        if text.is_empty() {
            return Err(SecretError::Empty);
        }
        let key = match text.strip_prefix(SECRET_PREFIX) {
            Some(encoded) => BASE64
                .decode(encoded)
                .map_err(|_| SecretError::InvalidBase64)?,
            None => text.as_bytes().to_vec(),
        };
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Self(key))
    }

    /// Wraps raw key bytes.
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<Self, SecretError> {
        let key = key.into();
        if key.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Self(key))
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        <HmacSha256 as Mac>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// The three headers of one signed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedHeaders {
    pub id: String,
    pub timestamp: i64,
    /// `v1,<base64>`.
    pub signature: String,
}

impl SignedHeaders {
    /// Writes the three headers into a header map.
    pub fn apply(&self, headers: &mut HeaderMap) {
        // Ids we issue, decimal numbers and base64 are always valid header values.
        for (name, value) in [
            (HEADER_ID, self.id.clone()),
            (HEADER_TIMESTAMP, self.timestamp.to_string()),
            (HEADER_SIGNATURE, self.signature.clone()),
        ] {
            if let Ok(value) = value.parse() {
                headers.insert(name, value);
            }
        }
    }
}

/// The signature of one message: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub fn sign(secret: &WebhookSecret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = secret.mac();
    feed(&mut mac, id, timestamp, body);
    format!("v1,{}", BASE64.encode(mac.finalize().into_bytes()))
}

/// Signs `body` under a fresh message id (`msg_<uuid>`) at `timestamp` (Unix seconds).
pub fn sign_message(secret: &WebhookSecret, body: &[u8], timestamp: i64) -> SignedHeaders {
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    let signature = sign(secret, &id, timestamp, body);
    SignedHeaders {
        id,
        timestamp,
        signature,
    }
}

/// Verifies a received message: the timestamp must lie within `tolerance` of `now` (Unix
/// seconds, either direction) and at least one `v1,` signature must match (constant-time).
pub fn verify(
    secret: &WebhookSecret,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let header = |name: &'static str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .ok_or(VerifyError::MissingHeader(name))
    };
    let id = header(HEADER_ID)?;
    let timestamp: i64 = header(HEADER_TIMESTAMP)?
        .trim()
        .parse()
        .map_err(|_| VerifyError::BadTimestamp)?;
    let signatures = header(HEADER_SIGNATURE)?;
    let tolerance_secs = tolerance.as_secs();
    if now.abs_diff(timestamp) > tolerance_secs {
        return Err(VerifyError::Stale { tolerance_secs });
    }
    for candidate in signatures.split_whitespace() {
        let Some(encoded) = candidate.strip_prefix("v1,") else {
            continue;
        };
        let Ok(expected) = BASE64.decode(encoded) else {
            continue;
        };
        let mut mac = secret.mac();
        feed(&mut mac, id, timestamp, body);
        if mac.verify_slice(&expected).is_ok() {
            return Ok(());
        }
    }
    Err(VerifyError::BadSignature)
}

fn feed(mac: &mut HmacSha256, id: &str, timestamp: i64, body: &[u8]) {
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
}

#[cfg(test)]
#[path = "signing_tests.rs"]
mod tests;
