//! Spilled tool outputs: the full text behind a capped tool result, with its digest.

use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult};
use crate::ids::{OutputId, SessionId};
use crate::store::OutputRecord;
use axum::Json;
use axum::extract::{Path, State};

/// The full output of a capped tool result, with its SHA-256 digest and provenance.
#[utoipa::path(get, path = "/v1/sessions/{id}/outputs/{output_id}", tag = "outputs",
    params(("id" = String, Path, description = "Session id"),
           ("output_id" = String, Path, description = "Output id from a capped tool result")),
    responses((status = 200, body = OutputRecord)),
    security(("bearer" = [])))]
pub async fn get_output(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, output_id)): Path<(String, String)>,
) -> ApiResult<Json<OutputRecord>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = SessionId::from_string(id);
    tracing::Span::current().record("session_id", session.as_str());
    let output = state
        .store
        .get_output(
            &principal.tenant,
            &session,
            &OutputId::from_string(output_id),
        )
        .await?
        .ok_or_else(|| ApiError::not_found("output"))?;
    Ok(Json(output))
}
