//! Extractors whose rejections speak our error shape (`{code, message}`), never plain text.
//!
//! [`AppJson`] is the one place every JSON request body passes, so it also refuses text the
//! store cannot keep: a NUL character (`\u0000`) anywhere in a string or a key is
//! `422 INVALID_REQUEST` with `details.field` naming where (Postgres `text` and `jsonb` reject
//! it, so it would otherwise surface as a `500` on one backend only). Valid JSON can carry a
//! NUL only as that escape, so a byte scan finds candidates and only then is the body parsed
//! to name the field.

use crate::error::{ApiError, ErrorCode};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// `axum::Json` with rejections mapped to `INVALID_JSON`, `UNSUPPORTED_MEDIA_TYPE`,
/// `PAYLOAD_TOO_LARGE` or `INVALID_REQUEST`.
pub struct AppJson<T>(pub T);

impl<S, T> FromRequest<S> for AppJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "expected `Content-Type: application/json`",
            ));
        }
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(bytes_rejection)?;
        if let Some(field) = nul_field(&bytes) {
            return Err(ApiError::invalid(format!(
                "{field}: text must not contain NUL characters (\\u0000)"
            ))
            .with_details(json!({ "field": field })));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// `application/json` or any `application/*+json`, like `axum::Json`.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json") || subtype.to_ascii_lowercase().ends_with("+json"))
}

fn bytes_rejection(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(ErrorCode::PayloadTooLarge, "request body too large")
    } else {
        ApiError::new(ErrorCode::InvalidJson, rejection.body_text())
    }
}

/// Where the body's first NUL character is (a dotted path like `metadata.note` or
/// `edits[2].text`; `(root)` for a bare string), or `None`. Cheap when there is none: a byte
/// scan for the `\u0000` escape outside another escape; only a hit parses the body.
pub fn nul_field(body: &[u8]) -> Option<String> {
    if !has_nul_escape(body) {
        return None;
    }
    // Invalid JSON: the deserializer reports it as such.
    let value: Value = serde_json::from_slice(body).ok()?;
    let mut path = String::new();
    find_nul(&value, &mut path).then(|| {
        if path.is_empty() {
            "(root)".to_owned()
        } else {
            path
        }
    })
}

/// A `\u0000` escape that is not itself escaped (`\\u0000` is a backslash and text).
fn has_nul_escape(body: &[u8]) -> bool {
    let mut i = 0;
    while let Some(offset) = body[i..].iter().position(|&b| b == b'\\') {
        let at = i + offset;
        if body.get(at + 1) == Some(&b'u') && body.get(at + 2..at + 6) == Some(b"0000") {
            return true;
        }
        // Skip the escaped character, whatever it is.
        i = at + 2;
        if i >= body.len() {
            return false;
        }
    }
    false
}

/// Depth-first search for a NUL in a string or key; leaves its path in `path`. Recursion is
/// bounded by `serde_json`'s nesting limit (128) on parsed input.
fn find_nul(value: &Value, path: &mut String) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().enumerate().any(|(index, item)| {
            let len = path.len();
            path.push_str(&format!("[{index}]"));
            let found = find_nul(item, path);
            if !found {
                path.truncate(len);
            }
            found
        }),
        Value::Object(map) => map.iter().any(|(key, item)| {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key.replace('\0', "\u{fffd}"));
            let found = key.contains('\0') || find_nul(item, path);
            if !found {
                path.truncate(len);
            }
            found
        }),
        _ => false,
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let text = rejection.body_text();
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "expected `Content-Type: application/json`",
        ),
        JsonRejection::JsonSyntaxError(_) => ApiError::new(ErrorCode::InvalidJson, text),
        JsonRejection::JsonDataError(_) => ApiError::new(ErrorCode::InvalidRequest, text),
        JsonRejection::BytesRejection(bytes) if bytes.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(ErrorCode::PayloadTooLarge, "request body too large")
        }
        _ => ApiError::new(ErrorCode::InvalidJson, text),
    }
}

/// `axum::extract::Query` with rejections mapped to `INVALID_REQUEST`.
pub struct AppQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for AppQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|rejection: QueryRejection| {
                ApiError::new(ErrorCode::InvalidRequest, rejection.body_text())
            })
    }
}
