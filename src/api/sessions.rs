//! Sessions: create, list, get, close.

use crate::api::extract::{AppJson, AppQuery};
use crate::api::idempotency::{Keyed, replay};
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::ids::SessionId;
use crate::run_event::{Forked, RunEvent};
use crate::session_config::SessionConfig;
use crate::store::{
    IdempotencyRecord, NewSession, SessionCursor, SessionRecord, SessionStatus, StoreError,
};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

/// A session as the API shows it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionResponse {
    /// Server-issued, unguessable id.
    pub id: String,
    pub status: SessionStatus,
    /// The validated configuration as stored.
    pub config: SessionConfig,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<DateTime<Utc>>,
    /// The highest event sequence number written so far.
    pub last_event_seq: i64,
    /// What the command sandbox enforces for this session's Bash, tasks and shells: per part
    /// (`env`, `filesystem`, `mount`, `network`, `pid`, `rlimits`) a `status` of `enforced`,
    /// `unavailable` (with a `reason`) or `disabled`; `required` (the parts that must be
    /// enforced), `commands` (`available`, and the `reason` when command tools answer
    /// `SANDBOX_UNAVAILABLE`) and `session_network` (`mode` `none` or `egress` as configured,
    /// `available`, `reason`: how commands reach the network, or why they cannot).
    #[schema(value_type = Object)]
    pub sandbox: crate::sandbox::SandboxReport,
    /// Tools this server does not offer the session, each with the reason (`WebSearch` when
    /// no search backend is configured for the tenant). Empty when every tool is offered.
    #[serde(default)]
    pub absent_tools: Vec<crate::runtime::AbsentTool>,
    /// Sums over the usage ledger of the session's runs, with their cost, plus those of the
    /// subagents they started (nested ones included; `subagents` says which part: the
    /// subagents' own rows are in the ledger under their own sessions); shown by
    /// `GET /v1/sessions/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::UsageWithSubagents>,
    /// Each MCP server of the session: `state` (`not_started`, `starting`, `ready`,
    /// `crashed`, `failed`, `cut_off`, `stopped`), `error` when it is not ready, the registry
    /// `tools` it offers, `skipped_tools` with reasons, `restarts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<crate::mcp::McpServerStatus>,
}

impl SessionResponse {
    pub fn from_record(record: SessionRecord, state: &AppState) -> ApiResult<Self> {
        let config: SessionConfig = serde_json::from_value(record.config).map_err(|error| {
            tracing::error!(%error, "stored session config does not parse");
            ApiError::new(crate::error::ErrorCode::Internal, "internal error")
        })?;
        let sandbox = state.runtime.sandbox().session_report(config.network);
        let mcp_servers = state.runtime.mcp_statuses(&record.id, &config);
        Ok(Self {
            id: record.id.to_string(),
            status: record.status,
            config: config.redacted(),
            created_at: record.created_at,
            updated_at: record.updated_at,
            closed_at: record.closed_at,
            last_event_seq: record.last_event_seq,
            absent_tools: state.runtime.absent_tools(&record.tenant),
            mcp_servers,
            sandbox,
            usage: None,
        })
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionResponse>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Page size, 1..=100 (default 20); outside that range `422 INVALID_REQUEST`.
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Creates a session. The body is the session configuration (every field optional).
///
/// With an `Idempotency-Key`, a retry of the same request (same tenant and body) answers the
/// first request's status and body (header `Idempotency-Replayed: true`) instead of creating
/// a second session; see "Faults and recovery" in the README.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions",
    request_body = SessionConfig,
    params(("Idempotency-Key" = Option<String>, Header,
            description = "1..=255 printable ASCII characters; a retry with the same key and body returns the first outcome (kept 24 h)")),
    responses((status = 201, body = SessionResponse),
              (status = 409, description = "IDEMPOTENCY_KEY_IN_USE: a concurrent request with this key is being answered; retry", body = ErrorBody),
              (status = 422, description = "INVALID_REQUEST (`details.field` names the config field), IDEMPOTENCY_KEY_REUSED: the key was used with another body, or MODEL_NOT_PRICED: the tenant has a cost budget and the session's model has no price", body = ErrorBody),
              (status = 429, description = "TENANT_LIMIT: open sessions or idempotency keys", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn create_session(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    AppJson(body): AppJson<Value>,
) -> ApiResult<Response> {
    principal.require(scopes::SESSIONS_WRITE)?;
    let keyed = Keyed::from_headers(&state, &headers, &principal.tenant, "session".into(), &body)?;
    if let Some(keyed) = &keyed
        && let Some(earlier) = keyed.earlier(&state).await?
    {
        return replay_session(&state, &principal, earlier).await;
    }
    let mut config = SessionConfig::from_json(body).map_err(|violation| {
        let details = match violation.reason {
            Some(reason) => json!({ "field": violation.field, "reason": reason }),
            None => json!({ "field": violation.field }),
        };
        ApiError::invalid(format!("invalid session config: {violation}")).with_details(details)
    })?;
    ensure_script_allowed(&state, config.model.script.is_some())?;
    crate::api::subagents::check_creation(&state, &config)?;
    if config.mcp_servers.iter().any(|server| server.trusted) {
        principal.require(crate::auth::scopes::TENANT_ADMIN)?;
    }
    // Registered servers were checked (and marked trusted, if so) by a tenant admin.
    crate::mcp::registry::resolve(
        state.store.as_ref(),
        &principal.tenant,
        &config.use_mcp_servers,
        &mut config.mcp_servers,
    )
    .await
    .map_err(|error| match error {
        crate::mcp::registry::ResolveError::Invalid { field, message } => {
            ApiError::invalid(format!("invalid session config: {field}: {message}"))
                .with_details(json!({ "field": field }))
        }
        crate::mcp::registry::ResolveError::Store(error) => error.into(),
        crate::mcp::registry::ResolveError::BadRecord(error) => error.into(),
    })?;
    crate::api::skills::check_session_skills(&state, &principal.tenant, &config.skills).await?;
    let max_hooks = state.settings.limits.hooks_per_session;
    if config.hooks.len() > max_hooks as usize {
        return Err(ApiError::invalid(format!(
            "invalid session config: hooks: at most {max_hooks} hooks per session"
        ))
        .with_details(
            json!({ "field": "hooks", "limit": "hooks_per_session", "max": max_hooks }),
        ));
    }
    if let Some(webhook) = &config.approvals.webhook {
        webhook
            .validate(
                &state
                    .settings
                    .egress
                    .address_policy(state.settings.allow_private_webhooks),
            )
            .map_err(|message| {
                ApiError::invalid(format!(
                    "invalid session config: approvals.webhook: {message}"
                ))
                .with_details(json!({ "field": "approvals.webhook" }))
            })?;
    }
    state
        .runtime
        .ensure_model_priced(&principal.tenant, &config)
        .await?;
    let id = SessionId::generate();
    tracing::Span::current().record("session_id", id.as_str());
    let stored = serde_json::to_value(&config).map_err(|error| {
        tracing::error!(%error, "cannot serialize session config");
        ApiError::new(crate::error::ErrorCode::Internal, "internal error")
    })?;
    let created = state
        .store
        .create_session_keyed(
            NewSession {
                id,
                tenant: principal.tenant.clone(),
                config: stored,
            },
            state.settings.limits.sessions,
            keyed.as_ref().map(|keyed| &keyed.key),
        )
        .await;
    let record = match (created, &keyed) {
        (Ok(record), _) => record,
        (Err(StoreError::IdempotencyKeyTaken), Some(keyed)) => {
            let earlier = keyed.taken(&state).await?;
            return replay_session(&state, &principal, earlier).await;
        }
        (Err(error), _) => return Err(error.into()),
    };
    state
        .runtime
        .session_hooks(
            &record,
            crate::hooks::HookPayload::SessionStart {
                source: "create".into(),
            },
        )
        .await;
    tracing::info!("session created");
    let body = SessionResponse::from_record(record, &state)?;
    if let Some(keyed) = &keyed {
        let json = serde_json::to_value(&body).unwrap_or_default();
        keyed.remember(&state, StatusCode::CREATED, &json).await;
    }
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// The first answer of a session creation with the same `Idempotency-Key`: as kept, or the
/// session as it is now when the answer was not kept.
async fn replay_session(
    state: &AppState,
    principal: &Principal,
    earlier: IdempotencyRecord,
) -> ApiResult<Response> {
    let fallback = match &earlier.response {
        Some(_) => Value::Null,
        None => {
            let record =
                crate::api::runs::load_owned_session(state, principal, earlier.resource_id.clone())
                    .await?;
            serde_json::to_value(SessionResponse::from_record(record, state)?).unwrap_or_default()
        }
    };
    tracing::info!(session_id = %earlier.resource_id, "session creation replayed (Idempotency-Key)");
    Ok(replay(earlier, (StatusCode::CREATED, fallback)))
}

/// Lists the caller's sessions, newest first.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(ListParams),
    responses((status = 200, body = SessionList)),
    security(("bearer" = [])))]
pub async fn list_sessions(
    State(state): State<AppState>,
    principal: Principal,
    AppQuery(params): AppQuery<ListParams>,
) -> ApiResult<Json<SessionList>> {
    principal.require(scopes::SESSIONS_READ)?;
    let limit = params.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 100"));
    }
    let cursor = params
        .cursor
        .as_deref()
        .map(SessionCursor::decode)
        .transpose()?;
    // One extra row tells whether another page exists.
    let mut records = state
        .store
        .list_sessions(&principal.tenant, cursor.as_ref(), limit + 1)
        .await?;
    let next_cursor = if records.len() > limit as usize {
        records.truncate(limit as usize);
        records
            .last()
            .map(|last| SessionCursor::after(last).encode())
    } else {
        None
    };
    let sessions = records
        .into_iter()
        .map(|record| SessionResponse::from_record(record, &state))
        .collect::<ApiResult<_>>()?;
    Ok(Json(SessionList {
        sessions,
        next_cursor,
    }))
}

/// Reads one session, open or closed (a closed session stays readable: `status: closed`).
/// Another tenant's session answers 404 exactly like a missing one.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = SessionResponse)),
    security(("bearer" = [])))]
pub async fn get_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<SessionResponse>> {
    principal.require(scopes::SESSIONS_READ)?;
    let record = crate::api::runs::load_owned_session(&state, &principal, id).await?;
    let usage = if crate::subagents::defines_agents(&record.config) {
        crate::runtime::subagent_usage::session_usage(
            state.store.as_ref(),
            &principal.tenant,
            &record.id,
        )
        .await?
    } else {
        crate::usage::UsageWithSubagents::own(
            state
                .store
                .usage_totals(
                    &principal.tenant,
                    crate::usage::UsageScope::Session(record.id.as_str()),
                )
                .await?,
        )
    };
    let mut response = SessionResponse::from_record(record, &state)?;
    response.usage = Some(usage);
    Ok(Json(response))
}

/// Closes a session (idempotent): its runs are cancelled, its background work stopped and its
/// SessionEnd hooks run once. Closing is not erasing: the session, its transcript, history,
/// runs, approvals and outputs stay readable (`GET` answers it with `status: closed` and
/// `closed_at`), and writes to it answer `409 SESSION_CLOSED`. A second `DELETE` answers the
/// closed session again.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "Session id")),
    responses((status = 200, body = SessionResponse, description = "The closed session (`status: closed`)")),
    security(("bearer" = [])))]
pub async fn close_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<SessionResponse>> {
    principal.require(scopes::SESSIONS_WRITE)?;
    let id = SessionId::from_string(id);
    tracing::Span::current().record("session_id", id.as_str());
    let record = state
        .store
        .close_session(&principal.tenant, &id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    state.runtime.close(&record.tenant, &record.id).await;
    // Its subagent sessions close with it (recursively); a second close finds them closed.
    if crate::subagents::defines_agents(&record.config) {
        state
            .runtime
            .close_subagents(&record.tenant, &record.id)
            .await;
    }
    // SessionEnd hooks really run (D4), once, on the close that closed it; the close stands
    // whatever they answer. A subagent's session runs none (its top-level session does).
    if record.closed_at == Some(record.updated_at) && record.config.get("subagent").is_none() {
        state
            .runtime
            .session_hooks(
                &record,
                crate::hooks::HookPayload::SessionEnd {
                    reason: "closed".into(),
                },
            )
            .await;
    }
    tracing::info!("session closed");
    Ok(Json(SessionResponse::from_record(record, &state)?))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Copy history up to and including this message `seq` (default: all of it); it must be
    /// the `seq` of one of the session's messages (`GET …/messages`).
    #[schema(minimum = 1)]
    pub up_to_seq: Option<i64>,
}

/// Forks a session: a new session of the same tenant and configuration whose history is a
/// copy of this one's up to a message. The cut may not split a tool call from its result.
#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions",
    params(("id" = String, Path, description = "Session id")),
    request_body = ForkRequest,
    responses((status = 201, body = SessionResponse),
              (status = 422, body = ErrorBody, description = "INVALID_REQUEST: `up_to_seq` names no message of the session or would split a tool call from its result (`details.field` = `up_to_seq`), or the session has a `model.script` this server does not allow"),
              (status = 429, body = ErrorBody, description = "TENANT_LIMIT: open sessions")),
    security(("bearer" = [])))]
pub async fn fork_session(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppJson(request): AppJson<ForkRequest>,
) -> ApiResult<(StatusCode, Json<SessionResponse>)> {
    principal.require(scopes::SESSIONS_WRITE)?;
    let source = crate::api::runs::load_owned_session(&state, &principal, id).await?;
    ensure_script_allowed(&state, !source.config["model"]["script"].is_null())?;
    crate::api::subagents::check_fork(&state, &source.config)?;
    let mut messages = state
        .store
        .list_messages(&principal.tenant, &source.id, 0, u32::MAX)
        .await?;
    if let Some(up_to) = request.up_to_seq {
        if up_to < 0 || !messages.iter().any(|m| m.seq == up_to) {
            return Err(
                ApiError::invalid("up_to_seq names no message of this session")
                    .with_details(json!({ "field": "up_to_seq" })),
            );
        }
        messages.retain(|m| m.seq <= up_to);
    }
    if messages.last().is_some_and(|m| {
        m.content
            .iter()
            .any(|b| matches!(b, crate::message::ContentBlock::ToolUse { .. }))
    }) {
        return Err(
            ApiError::invalid("the cut would split a tool call from its result")
                .with_details(json!({ "field": "up_to_seq" })),
        );
    }
    let noa = forked_noa(&state, &principal, &source.id, messages.len()).await?;
    let id = SessionId::generate();
    let copied = messages.len();
    state
        .store
        .fork_session(crate::store::NewFork {
            session: NewSession {
                id: id.clone(),
                tenant: principal.tenant.clone(),
                config: source.config.clone(),
            },
            source: source.id.clone(),
            batch: crate::store::AppendBatch {
                messages: messages
                    .into_iter()
                    .map(|m| crate::store::NewMessage {
                        message: m.to_message(),
                        run_id: None,
                        compaction_boundary: m.compaction_boundary,
                    })
                    .collect(),
                events: vec![
                    RunEvent::Forked(Forked {
                        from_session: source.id.to_string(),
                        messages_copied: copied,
                    })
                    .into_row(None),
                ],
                outputs: vec![],
                ..Default::default()
            },
            noa,
            max_open: state.settings.limits.sessions,
        })
        .await?;
    let record = state
        .store
        .get_session(&principal.tenant, &id)
        .await?
        .ok_or_else(|| StoreError::Internal("the fork was not found after its commit".into()))?;
    Ok((
        StatusCode::CREATED,
        Json(SessionResponse::from_record(record, &state)?),
    ))
}

/// The Noa state a fork of a Noa session starts with: the source's state cut to the
/// `messages` it copies (see [`crate::noa::state::NoaState::forked`]) and the archives that
/// state names. `None` for a session without Noa state.
async fn forked_noa(
    state: &AppState,
    principal: &Principal,
    source: &SessionId,
    messages: usize,
) -> ApiResult<Option<crate::store::ForkedNoa>> {
    let Some(record) = state.store.noa_state(&principal.tenant, source).await? else {
        return Ok(None);
    };
    let noa: crate::noa::state::NoaState = serde_json::from_value(record.state)
        .map_err(|error| StoreError::Internal(format!("stored Noa state: {error}")))?;
    let forked = noa.forked(messages);
    Ok(Some(crate::store::ForkedNoa {
        archives: forked.archive_ordinals(),
        state: serde_json::to_value(&forked)
            .map_err(|error| StoreError::Internal(error.to_string()))?,
    }))
}

/// Refuses a session config with a model script (`model.script`) unless this server allows
/// them (development mode or `allow_session_scripts`): `422 INVALID_REQUEST`, field
/// `model.script`.
fn ensure_script_allowed(state: &AppState, has_script: bool) -> ApiResult<()> {
    if has_script && !state.settings.session_scripts_allowed() {
        return Err(ApiError::invalid(
            "invalid session config: model.script: scripted model turns are a development and \
             test feature and this server does not allow them (the operator enables them with \
             `allow_session_scripts`)",
        )
        .with_details(json!({ "field": "model.script" })));
    }
    Ok(())
}
