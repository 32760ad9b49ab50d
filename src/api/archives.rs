//! Noa archives: the original messages of every range a session's model compressed.

use crate::api::extract::AppQuery;
use crate::api::runs::load_owned_session;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::store::NoaArchiveRecord;
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ArchivePageParams {
    /// Return archives written after this archive id (`a3`).
    pub after: Option<String>,
    /// Page size, 1..=500 (default 100).
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ArchivePage {
    /// In the order they were written, without their messages.
    pub archives: Vec<NoaArchiveRecord>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// Lists the session's Noa archives (empty for sessions that do not use Noa).
#[utoipa::path(get, path = "/v1/sessions/{id}/archives", tag = "sessions",
    params(("id" = String, Path, description = "Session id"), ArchivePageParams),
    responses((status = 200, body = ArchivePage), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_archives(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppQuery(params): AppQuery<ArchivePageParams>,
) -> ApiResult<Json<ArchivePage>> {
    principal.require(scopes::SESSIONS_READ)?;
    let limit = params.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 500"));
    }
    let after = match params.after.as_deref() {
        None => 0,
        Some(text) => crate::noa::parse_archive_id(text)
            .ok_or_else(|| ApiError::invalid("after must be an archive id (a1, a2, …)"))?,
    };
    let session = load_owned_session(&state, &principal, id).await?;
    let archives = state
        .store
        .list_noa_archives(&principal.tenant, &session.id, after, limit)
        .await?;
    let next_after = (archives.len() == limit as usize)
        .then(|| archives.last().map(|a| a.id.clone()))
        .flatten();
    Ok(Json(ArchivePage {
        archives,
        next_after,
    }))
}

/// One archive with its original messages, each with its ref.
#[utoipa::path(get, path = "/v1/sessions/{id}/archives/{archive_id}", tag = "sessions",
    params(("id" = String, Path, description = "Session id"),
           ("archive_id" = String, Path, description = "Archive id (`a1`, `a2`, …)")),
    responses((status = 200, body = NoaArchiveRecord), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_archive(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, archive_id)): Path<(String, String)>,
) -> ApiResult<Json<NoaArchiveRecord>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = load_owned_session(&state, &principal, id).await?;
    let ordinal =
        crate::noa::parse_archive_id(&archive_id).ok_or_else(|| ApiError::not_found("archive"))?;
    let archive = state
        .store
        .get_noa_archive(&principal.tenant, &session.id, ordinal)
        .await?
        .ok_or_else(|| ApiError::not_found("archive"))?;
    Ok(Json(archive))
}
