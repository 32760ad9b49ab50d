//! Prompts and runs: `POST …/prompts` starts (or queues) a run; runs can be listed, read and
//! cancelled. A run is a persisted state machine: queued → running → completed / failed /
//! cancelled; a running run is held by one replica's lease.

use crate::api::extract::{AppJson, AppQuery};
use crate::api::idempotency::{Keyed, replay};
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody, ErrorCode};
use crate::ids::{RunId, SessionId};
use crate::runtime::{BusyPolicy, PromptStatus, RuntimeError};
use crate::store::{IdempotencyRecord, StoreError};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptRequest {
    /// The user's message (1..=200,000 characters).
    #[schema(min_length = 1, max_length = 200_000)]
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
            RuntimeError::BudgetExceeded(exceeded) => exceeded.into(),
            RuntimeError::ModelNotPriced {
                ref provider,
                ref model,
            } => ApiError::new(ErrorCode::ModelNotPriced, error.to_string())
                .with_details(serde_json::json!({ "provider": provider, "model": model })),
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
///
/// With an `Idempotency-Key`, a retry of the same prompt on the same session answers the first
/// request's status and body (header `Idempotency-Replayed: true`) instead of starting a
/// second run.
#[utoipa::path(post, path = "/v1/sessions/{id}/prompts", tag = "runs",
    params(("id" = String, Path, description = "Session id"),
           ("Idempotency-Key" = Option<String>, Header,
            description = "1..=255 printable ASCII characters; a retry with the same key and body on this session returns the first outcome (kept 24 h)")),
    request_body = PromptRequest,
    responses((status = 202, body = PromptAccepted),
              (status = 409, description = "SESSION_BUSY, SESSION_CLOSED, APPROVAL_PENDING, or IDEMPOTENCY_KEY_IN_USE: a concurrent request with this key is being answered; retry", body = ErrorBody),
              (status = 422, description = "INVALID_REQUEST, HOOK_BLOCKED: a UserPromptSubmit hook refused the prompt, IDEMPOTENCY_KEY_REUSED: the key was used with another body, or MODEL_NOT_PRICED: the tenant has a cost budget and the session's model has no price", body = ErrorBody),
              (status = 429, description = "TENANT_LIMIT: runs in flight, queued prompts or idempotency keys; BUDGET_EXCEEDED: a spend budget is spent (`Retry-After` and `details.resets_at` give the reset)", body = ErrorBody,
               headers(("Retry-After" = u64, description = "With BUDGET_EXCEEDED: seconds until the spent budget resets"))),
              (status = 503, description = "SHUTTING_DOWN: this replica is stopping; retry on another", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn post_prompt(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    headers: HeaderMap,
    AppJson(request): AppJson<PromptRequest>,
) -> ApiResult<Response> {
    principal.require(scopes::SESSIONS_WRITE)?;
    let chars = request.text.chars().count();
    if chars == 0 || chars > 200_000 {
        return Err(ApiError::invalid("text must have 1 to 200000 characters")
            .with_details(serde_json::json!({ "field": "text" })));
    }
    let session = load_owned_session(&state, &principal, id).await?;
    let keyed = Keyed::from_headers(
        &state,
        &headers,
        &principal.tenant,
        format!("prompt:{}", session.id),
        &serde_json::json!({ "text": request.text, "busy": request.busy }),
    )?;
    if let Some(keyed) = &keyed
        && let Some(earlier) = keyed.earlier(&state).await?
    {
        return replay_prompt(&state, &session, earlier).await;
    }
    let submitted = state
        .runtime
        .submit(
            &session,
            request.text,
            request.busy,
            keyed.as_ref().map(|keyed| &keyed.key),
        )
        .await;
    let (run_id, status) = match (submitted, &keyed) {
        (Ok(accepted), _) => accepted,
        (Err(RuntimeError::Store(StoreError::IdempotencyKeyTaken)), Some(keyed)) => {
            let earlier = keyed.taken(&state).await?;
            return replay_prompt(&state, &session, earlier).await;
        }
        (Err(RuntimeError::Busy(run)), Some(keyed)) => {
            // The session may be busy with the run of a concurrent request with this very key
            // that has not committed yet: wait for it a little (bounded) before answering busy.
            for _ in 0..KEYED_BUSY_POLLS {
                if let Some(earlier) = keyed.earlier(&state).await? {
                    return replay_prompt(&state, &session, earlier).await;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            return Err(RuntimeError::Busy(run).into());
        }
        (Err(error), _) => return Err(error.into()),
    };
    tracing::info!(run_id = %run_id, ?status, "prompt accepted");
    let body = PromptAccepted {
        run_id: run_id.to_string(),
        status,
    };
    if let Some(keyed) = &keyed {
        let json = serde_json::to_value(&body).unwrap_or_default();
        keyed.remember(&state, StatusCode::ACCEPTED, &json).await;
    }
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// How many times (50 ms apart) a keyed prompt refused as busy looks for a concurrent request
/// with the same key before it answers `SESSION_BUSY`.
const KEYED_BUSY_POLLS: usize = 20;

/// The first answer of a prompt with the same `Idempotency-Key`: as kept, or from the run as
/// it is now when the answer was not kept.
async fn replay_prompt(
    state: &AppState,
    session: &crate::store::SessionRecord,
    earlier: IdempotencyRecord,
) -> ApiResult<Response> {
    let fallback = match &earlier.response {
        Some(_) => serde_json::Value::Null,
        None => {
            let run = state
                .store
                .get_run(
                    &session.tenant,
                    &session.id,
                    &RunId::from_string(earlier.resource_id.clone()),
                )
                .await?
                .ok_or_else(|| ApiError::not_found("run"))?;
            let status = if run.status == crate::store::RunStatus::Queued {
                PromptStatus::Queued
            } else {
                PromptStatus::Started
            };
            serde_json::to_value(PromptAccepted {
                run_id: run.id,
                status,
            })
            .unwrap_or_default()
        }
    };
    tracing::info!(run_id = %earlier.resource_id, "prompt replayed (Idempotency-Key)");
    Ok(replay(earlier, (StatusCode::ACCEPTED, fallback)))
}

/// Cancels a running or queued run. Every unfinished tool call gets a `CANCELLED` result.
#[utoipa::path(post, path = "/v1/sessions/{id}/runs/{run_id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "Session id"), ("run_id" = String, Path, description = "Run id")),
    responses((status = 202, description = "Cancellation requested; the run ends `cancelled` (its `terminal` event follows)"),
              (status = 404, body = ErrorBody, description = "NOT_FOUND: no such session or run, or the run is no longer queued or running")),
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
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RunPageParams {
    /// Return runs submitted after this run id (the `next_after` of the previous page).
    pub after: Option<String>,
    /// Page size, 1..=1000 (default 100); outside that range `422 INVALID_REQUEST`. A page
    /// also ends after the run that brings it to 4 MiB of prompts (one larger run comes
    /// alone).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunPage {
    /// In submission order.
    pub runs: Vec<crate::store::RunRecord>,
    /// Pass as `after` for the next page; absent on the last page (present on a page that
    /// ended at its limit or byte bound, whose next page may be empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// Lists the session's runs in submission order.
#[utoipa::path(get, path = "/v1/sessions/{id}/runs", tag = "runs",
    params(("id" = String, Path, description = "Session id"), RunPageParams),
    responses((status = 200, body = RunPage)),
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
    let next_after =
        crate::api::next_after(&runs, limit, crate::store::RunRecord::page_bytes, |run| {
            run.id.as_str()
        });
    Ok(Json(RunPage { runs, next_after }))
}

/// A run as `GET …/runs/{run_id}` shows it: the record plus its usage.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunResponse {
    #[serde(flatten)]
    pub run: crate::store::RunRecord,
    /// Sums over the run's usage ledger — every completed model call of the run, before and
    /// after any resume, with its cost — plus those of the subagents it started (nested
    /// ones included; `subagents` says which part). The subagents' own rows are in the
    /// ledger under their own sessions.
    pub usage: crate::usage::UsageWithSubagents,
}

/// One run: its status, prompt, lease holder, terminal reason and usage.
#[utoipa::path(get, path = "/v1/sessions/{id}/runs/{run_id}", tag = "runs",
    params(("id" = String, Path, description = "Session id"), ("run_id" = String, Path, description = "Run id")),
    responses((status = 200, body = RunResponse)),
    security(("bearer" = [])))]
pub async fn get_run(
    State(state): State<AppState>,
    principal: Principal,
    Path((id, run_id)): Path<(String, String)>,
) -> ApiResult<Json<RunResponse>> {
    principal.require(scopes::SESSIONS_READ)?;
    let session = load_owned_session(&state, &principal, id).await?;
    let run = state
        .store
        .get_run(&principal.tenant, &session.id, &RunId::from_string(run_id))
        .await?
        .ok_or_else(|| ApiError::not_found("run"))?;
    let usage = if crate::subagents::defines_agents(&session.config) {
        crate::runtime::subagent_usage::run_usage(
            state.store.as_ref(),
            &principal.tenant,
            &session.id,
            &RunId::from_string(run.id.clone()),
        )
        .await?
    } else {
        crate::usage::UsageWithSubagents::own(
            state
                .store
                .usage_totals(
                    &principal.tenant,
                    crate::usage::UsageScope::Run {
                        session: &run.session_id,
                        run: &run.id,
                    },
                )
                .await?,
        )
    };
    Ok(Json(RunResponse { run, usage }))
}
