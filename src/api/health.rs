//! Liveness and readiness.

use crate::app::AppState;
use crate::error::{ApiError, ApiResult, ErrorCode};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use std::time::Duration;
use utoipa::ToSchema;

#[derive(Serialize, ToSchema)]
pub struct HealthResponse {
    /// `ok` (process up) or `ready` (store reachable).
    pub status: &'static str,
    /// The store backend, on readiness answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<&'static str>,
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, body = HealthResponse)))]
pub async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok",
        store: None,
    })
}

/// The store answers within two seconds.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, body = HealthResponse),
              (status = 503, description = "STORE_UNAVAILABLE", body = crate::error::ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<HealthResponse>> {
    match tokio::time::timeout(Duration::from_secs(2), state.store.ping()).await {
        Ok(Ok(())) => Ok(Json(HealthResponse {
            status: "ready",
            store: Some(state.store.backend()),
        })),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => Err(ApiError::new(
            ErrorCode::StoreUnavailable,
            "the store did not answer in time",
        )),
    }
}
