//! Prompts and runs: `POST …/prompts` starts (or queues) a run; runs can be listed, read and
//! cancelled. A run is a persisted state machine: queued → running → completed / failed /
//! cancelled; a running run is held by one replica's lease.

use crate::api::extract::{AppJson, AppQuery};
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::ids::{RunId, SessionId};
use crate::runtime::{BusyPolicy, PromptStatus, RuntimeError};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRequest {
    /// The user's message (1..=200,000 characters).
    pub text: String,
    /// What to do when the session is already running (default `reject`).
    #[serde(default)]
    pub busy: BusyPolicy,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PromptAccepted {
    pub run_id: String,
    pub status: PromptStatus,
}

impl From<RuntimeError> for ApiError {
    fn from(error: RuntimeError) -> Self {
        match error {
            RuntimeError::Busy(run) => ApiError::new(
                ErrorCode::SessionBusy,
                "the session is running another prompt",
            )
            .with_details(serde_json::json!({ "run_id": run })),
            RuntimeError::ApprovalPending(ids) => ApiError::new(
                ErrorCode::ApprovalPending,
                "the session's run waits on an approval; answer it first",
            )
            .with_details(serde_json::json!({ "approval_ids": ids })),
            RuntimeError::Closed => {
                ApiError::new(ErrorCode::SessionClosed, "the session is closed")
            }
            RuntimeError::PromptBlocked(block) => ApiError::new(
                ErrorCode::HookBlocked,
                format!(
                    "a UserPromptSubmit hook blocked the prompt: {}",
                    block.reason
                ),
            )
            .with_details(if block.failed {
                serde_json::json!({ "hook": block.hook, "hook_code": crate::hooks::HOOK_FAILED })
            } else {
                serde_json::json!({ "hook": block.hook })
            }),
            RuntimeError::NoSuchRun => ApiError::not_found("run"),
            RuntimeError::ShuttingDown => ApiError::new(
                ErrorCode::ShuttingDown,
                "this replica is shutting down; retry the prompt on another replica",
            ),
            RuntimeError::Store(error) => error.into(),
            RuntimeError::ScriptsNotAllowed => ApiError::invalid(error.to_string())
                .with_details(serde_json::json!({ "field": "model.script" })),
            RuntimeError::Setup(reason) => {
                tracing::error!(%reason, "cannot prepare run");
                ApiError::new(ErrorCode::Internal, "internal error")
            }
        }
    }
}

pub(crate) async fn load_owned_session(
    state: &AppState,
    principal: &Principal,
    id: String,
) -> ApiResult<crate::store::SessionRecord> {
    let id = SessionId::from_string(id);
    tracing::Span::current().record("session_id", id.as_str());
    state
        .store
        .get_session(&principal.tenant, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))
}

/// Sends a prompt. `202` with the run id; the run's progress is in the session's events.
#[utoipa::path(post, path = "/v1/sessions/{id}/prompts", tag = "runs",
    params(("id" = String, Path, description = "Session id")),
    request_body = PromptRequest,
    responses((status = 202, body = PromptAccepted),
              (status = 404, body = ErrorBody),
              (status = 409, description = "SESSION_BUSY, SESSION_CLOSED or APPROVAL_PENDING", body = ErrorBody),
              (status = 422, body = ErrorBody),
              (status = 429, description = "TENANT_LIMIT: runs in flight or queued prompts", body = ErrorBody),
              (status = 503, description = "SHUTTING_DOWN: this replica is stopping; retry on another", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn post_prompt(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppJson(request): AppJson<PromptRequest>,
) -> ApiResult<(StatusCode, Json<PromptAccepted>)> {
    principal.require(scopes::SESSIONS_WRITE)?;
    let chars = request.text.chars().count();
    if chars == 0 || chars > 200_000 {
        return Err(ApiError::invalid("text must have 1 to 200000 characters")
            .with_details(serde_json::json!({ "field": "text" })));
    }
    let session = load_owned_session(&state, &principal, id).await?;
    let (run_id, status) = state
        .runtime
        .submit(&session, request.text, request.busy)
        .await?;
    tracing::info!(run_id = %run_id, ?status, "prompt accepted");
    Ok((
        StatusCode::ACCEPTED,
        Json(PromptAccepted {
            run_id: run_id.to_string(),
            status,
        }),
    ))
}

/// Cancels a running or queued run. Every unfinished tool call gets a `CANCELLED` result.
#[utoipa::path(post, path = "/v1/sessions/{id}/runs/{run_id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "Session id"), ("run_id" = String, Path, description = "Run id")),
    responses((status = 202, description = "cancellation requested"), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn cancel_run(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, run_id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    principal.require(scopes::SESSIONS_WRITE)?;
    let session = load_owned_session(&state, &principal, id).await?;
    state
        .runtime
        .cancel(&session.tenant, &session.id, &RunId::from_string(run_id))
        .await?;
    Ok(StatusCode::ACCEPTED)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RunPageParams {
    /// Return runs submitted after this run id.
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100).
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunPage {
    /// In submission order.
    pub runs: Vec<crate::store::RunRecord>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// Lists the session's runs in submission order.
#[utoipa::path(get, path = "/v1/sessions/{id}/runs", tag = "runs",
    params(("id" = String, Path, description = "Session id"), RunPageParams),
    responses((status = 200, body = RunPage), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_runs(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppQuery(params): AppQuery<RunPageParams>,
) -> ApiResult<Json<RunPage>> {
    principal.require(scopes::SESSIONS_READ)?;
    let limit = params.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 1000"));
    }
    let session = load_owned_session(&state, &principal, id).await?;
    let after = params.after.map(RunId::from_string);
    let runs = state
        .store
        .list_runs(&principal.tenant, &session.id, after.as_ref(), limit)
        .await?;
    let next_after = (runs.len() == limit as usize)
        .then(|| runs.last().map(|run| run.id.clone()))
        .flatten();
    Ok(Json(RunPage { runs, next_after }))
}

/// One run: its status, prompt, lease holder and terminal reason.
#[utoipa::path(get, path = "/v1/sessions/{id}/runs/{run_id}", tag = "runs",
    params(("id" = String, Path, description = "Session id"), ("run_id" = String, Path, description = "Run id")),
    responses((status = 200, body = crate::store::RunRecord), (status = 404, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_run(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, run_id)): Path<(String, String)>,
) -> ApiResult<Json<crate::store::RunRecord>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = load_owned_session(&state, &principal, id).await?;
    state
        .store
        .get_run(&principal.tenant, &session.id, &RunId::from_string(run_id))
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("run"))
}
