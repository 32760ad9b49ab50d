//! Extractors whose rejections speak our error shape (`{code, message}`), never plain text.

use crate::error::{ApiError, ErrorCode};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

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
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
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
