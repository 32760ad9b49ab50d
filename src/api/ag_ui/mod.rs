//! AG-UI 1.0 endpoint: `POST /v1/sessions/{id}/ag-ui` takes a `RunAgentInput` and answers
//! `text/event-stream` with AG-UI events mapped from our events ([`mapping`]).
//!
//! - `threadId` must be the session id; the last `user` message is the prompt (sent like
//!   `POST …/prompts` with `busy: reject`); the server's history wins over the client's
//!   `messages` (only the last user message is read); client `tools`, `context`, `state` and
//!   `forwardedProps` are accepted and ignored.
//! - A run that waits on approvals ends with `RUN_FINISHED` `outcome.type = "interrupt"`, one
//!   interrupt per pending approval. The next request's `resume[]` answers them through the
//!   same exactly-once path as `POST …/approvals/{approval_id}` (needs `approvals:write`),
//!   then follows the resumed run; no new prompt is sent then. With a policy webhook
//!   configured, the stream stays open while the webhook decides (it ends with the interrupt
//!   only if delivering to the webhook fails).
//! - Errors before the stream starts are ordinary JSON errors with codes; once streaming, a
//!   failure is a `RUN_ERROR`.

pub mod mapping;
#[cfg(test)]
mod mapping_tests;

use crate::api::approvals::{ApprovalAnswerRequest, Verdict, decide_answer};
use crate::api::extract::AppJson;
use crate::app::AppState;
use crate::auth::{Principal, scopes};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::ids::{SessionId, TenantId};
use crate::run_event::RunEvent;
use crate::runtime::BusyPolicy;
use crate::session_config::SessionConfig;
use crate::store::{ApprovalStatus, Store};
use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use mapping::Mapper;
use serde::Deserialize;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;

/// Most messages a `RunAgentInput` may carry (the body size limit bounds the rest).
pub const MAX_MESSAGES: usize = 1000;
/// Most resume entries of one request.
pub const MAX_RESUME: usize = 100;
/// Longest `runId` / `threadId`.
pub const MAX_ID_CHARS: usize = 200;

/// The AG-UI `RunAgentInput` (unknown fields are allowed, as AG-UI clients add their own).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    /// Must be the session id.
    #[schema(max_length = 200)]
    pub thread_id: String,
    /// The client's run id, echoed in `RUN_STARTED` / `RUN_FINISHED`.
    #[schema(min_length = 1, max_length = 200)]
    pub run_id: String,
    /// The conversation as the client has it (AG-UI message objects); only the last `user`
    /// message is read (the prompt: its `content` text, or the `text` parts of a content
    /// array). At most 1000.
    #[schema(value_type = Vec<Object>, max_items = 1000)]
    pub messages: Vec<serde_json::Map<String, Value>>,
    /// Answers to the interrupts of the previous run (approval ids). At most 100.
    #[serde(default)]
    #[schema(max_items = 100)]
    pub resume: Vec<ResumeEntry>,
    /// The client's state (any JSON; ignored: the server's state wins).
    #[serde(default)]
    #[schema(value_type = Option<serde_json::Value>)]
    pub state: Option<Value>,
    /// Frontend tools (ignored: the session's tools run).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub tools: Option<Vec<serde_json::Map<String, Value>>>,
    /// Context entries (ignored).
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub context: Option<Vec<serde_json::Map<String, Value>>>,
    /// Any JSON (ignored).
    #[serde(default)]
    #[schema(value_type = Option<serde_json::Value>)]
    pub forwarded_props: Option<Value>,
    #[serde(default)]
    pub parent_run_id: Option<String>,
    #[serde(default)]
    pub protocol_version: Option<String>,
}

/// An answer to one interrupt (`interruptId` = approval id).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    /// `resolved` (answered by `payload`, default allow) or `cancelled` (deny).
    pub status: ResumeStatus,
    /// The approval answer: `{"decision": "allow"|"deny", "reason", "updated_input",
    /// "grant"}` as in `POST …/approvals/{approval_id}`; absent: allow.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

impl RunAgentInput {
    fn validate(&self, session: &str) -> ApiResult<()> {
        let field = |name: &str, message: String| {
            ApiError::invalid(message).with_details(json!({ "field": name }))
        };
        if self.thread_id != session {
            return Err(field(
                "threadId",
                "threadId must be the session id of the URL".into(),
            ));
        }
        if self.run_id.is_empty() || self.run_id.chars().count() > MAX_ID_CHARS {
            return Err(field(
                "runId",
                format!("runId must have 1 to {MAX_ID_CHARS} characters"),
            ));
        }
        if self.messages.len() > MAX_MESSAGES {
            return Err(field(
                "messages",
                format!("at most {MAX_MESSAGES} messages"),
            ));
        }
        if self.resume.len() > MAX_RESUME {
            return Err(field("resume", format!("at most {MAX_RESUME} entries")));
        }
        Ok(())
    }

    /// The text of the last `user` message.
    fn prompt(&self) -> ApiResult<String> {
        let message = self
            .messages
            .iter()
            .rev()
            .find(|m| m.get("role").is_some_and(|role| role == "user"))
            .ok_or_else(|| {
                ApiError::invalid("messages must end with a user message (the prompt)")
                    .with_details(json!({ "field": "messages" }))
            })?;
        let text = match message.get("content").unwrap_or(&Value::Null) {
            Value::String(text) => text.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter(|part| part["type"] == "text")
                .filter_map(|part| part["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        let chars = text.chars().count();
        if chars == 0 || chars > 200_000 {
            return Err(ApiError::invalid(
                "the user message must have 1 to 200000 characters of text",
            )
            .with_details(json!({ "field": "messages" })));
        }
        Ok(text)
    }
}

fn resume_answer(entry: &ResumeEntry) -> ApiResult<ApprovalAnswerRequest> {
    let invalid =
        |message: String| ApiError::invalid(message).with_details(json!({ "field": "resume" }));
    match (entry.status, &entry.payload) {
        (ResumeStatus::Cancelled, _) => Ok(ApprovalAnswerRequest {
            decision: Verdict::Deny,
            reason: Some("cancelled by the AG-UI client".into()),
            updated_input: None,
            grant: None,
        }),
        (ResumeStatus::Resolved, None | Some(Value::Null)) => Ok(ApprovalAnswerRequest {
            decision: Verdict::Allow,
            reason: None,
            updated_input: None,
            grant: None,
        }),
        (ResumeStatus::Resolved, Some(payload)) => ApprovalAnswerRequest::deserialize(payload)
            .map_err(|error| {
                invalid(format!(
                    "resume payload of {}: {error}",
                    entry.interrupt_id.chars().take(64).collect::<String>()
                ))
            }),
    }
}

/// Runs the session's agent for an AG-UI client: `RunAgentInput` in, AG-UI 1.0 events out.
///
/// Constraints: `threadId` = the session id, `runId` 1..=200 characters, at most 1000
/// `messages` whose last `user` message (1..=200,000 characters of text) is the prompt unless
/// `resume` is given; at most 100 `resume` entries, each answering a pending approval of the
/// session (`interruptId` = approval id).
#[utoipa::path(post, path = "/v1/sessions/{id}/ag-ui", tag = "runs",
    params(("id" = String, Path, description = "Session id (= threadId)")),
    request_body = RunAgentInput,
    responses((status = 200, description = "text/event-stream of AG-UI 1.0 events (`data:` lines)", content_type = "text/event-stream"),
              (status = 403, body = ErrorBody, description = "FORBIDDEN_SCOPE: sessions:write, and approvals:write with resume"),
              (status = 404, body = ErrorBody, description = "Unknown session, or a resume entry naming no approval of it"),
              (status = 409, body = ErrorBody, description = "SESSION_BUSY, SESSION_CLOSED, APPROVAL_PENDING, APPROVAL_ALREADY_DECIDED, APPROVAL_EXPIRED"),
              (status = 422, body = ErrorBody, description = "INVALID_REQUEST (threadId, runId, messages, resume), HOOK_BLOCKED: a UserPromptSubmit hook refused the prompt, or MODEL_NOT_PRICED (the tenant has a cost budget and the session's model has no price)"),
              (status = 429, body = ErrorBody, description = "TENANT_LIMIT: runs in flight or open event streams (`sse_streams`, which an AG-UI stream counts against), or BUDGET_EXCEEDED: a spend budget is spent (`Retry-After` and `details.resets_at` give the reset)",
               headers(("Retry-After" = u64, description = "With BUDGET_EXCEEDED: seconds until the spent budget resets"))),
              (status = 503, body = ErrorBody, description = "SHUTTING_DOWN: this replica is stopping; retry on another")),
    security(("bearer" = [])))]
pub async fn run(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    AppJson(input): AppJson<RunAgentInput>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    principal.require(scopes::SESSIONS_WRITE)?;
    // The stream counts against the tenant's `sse_streams` like `GET …/stream` (the hold is
    // dropped with the stream), taken before any run starts: a tenant cannot keep more event
    // streams open (each pinning its session's live channel) by asking over AG-UI.
    let (session, hold) =
        crate::api::events::stream_hold(&state, &principal, &SessionId::from_string(id)).await?;
    input.validate(session.id.as_str())?;
    let config = SessionConfig::from_json(session.config.clone())
        .map_err(|_| ApiError::new(crate::error::ErrorCode::Internal, "internal error"))?;
    let webhook = config.approvals.webhook.is_some();
    // Every event of the run comes after this position.
    let after = session.last_event_seq;
    let mut live = state
        .runtime
        .bus()
        .subscribe_for(&principal.tenant, &session.id);
    let mut resumed_calls = Vec::new();
    let run_id = if input.resume.is_empty() {
        let text = input.prompt()?;
        let (run_id, _) = state
            .runtime
            .submit(&session, text, BusyPolicy::Reject, None)
            .await?;
        run_id.to_string()
    } else {
        principal.require(scopes::APPROVALS_WRITE)?;
        let mut run_id = None;
        let mut decided = Vec::new();
        for entry in &input.resume {
            let answer = resume_answer(entry)?;
            let record = decide_answer(
                &state,
                &principal,
                &session.id,
                entry.interrupt_id.clone(),
                answer,
            )
            .await?;
            run_id = run_id.or(record.run_id.clone());
            decided.push(record);
        }
        resumed_calls = decided;
        run_id.ok_or_else(|| ApiError::invalid("the resumed approvals belong to no run"))?
    };
    tracing::info!(run_id = %run_id, "AG-UI run");
    let snapshot = state_snapshot(&state, &principal.tenant, &session.id, &config).await;
    let echo = json!({
        "threadId": input.thread_id,
        "runId": input.run_id,
        "messages": [],
    });
    let mut mapper = Mapper::new(session.id.as_str(), input.run_id.clone());
    let store = state.store.clone();
    let tenant = principal.tenant.clone();
    let session_id = session.id.clone();
    let resumed = !input.resume.is_empty();
    let bus = state.runtime.bus().clone();
    let subscribed = state.runtime.metrics().sse_subscribed();
    let events = async_stream::stream! {
        let _hold = hold;
        let _subscribed = subscribed;
        let mut opening = mapper.start(echo, snapshot);
        opening.extend(mapper.resumed_calls(&resumed_calls));
        for event in opening {
            yield Ok(frame(&event));
        }
        let mut last = after;
        // Whether the run may be waiting on approvals (a resumed run may wait on others).
        let mut pending = resumed;
        let mut webhook_failed = false;
        loop {
            let page = match store.list_events(&tenant, &session_id, last, 500).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, "AG-UI event read failed");
                    for event in mapper.error("STORE_UNAVAILABLE", "the store is unavailable") {
                        yield Ok(frame(&event));
                    }
                    return;
                }
            };
            for record in &page {
                last = record.seq;
                if record.run_id.as_deref() != Some(run_id.as_str()) {
                    continue;
                }
                let event = RunEvent::from_row(record);
                match &event {
                    RunEvent::ApprovalRequested(_) | RunEvent::RunParked(_) => pending = true,
                    RunEvent::ApprovalWebhookFailed(_) => {
                        pending = true;
                        webhook_failed = true;
                    }
                    _ => {}
                }
                for out in mapper.map(record.seq, &event) {
                    yield Ok(frame(&out));
                }
                if mapper.finished() {
                    return;
                }
            }
            if !page.is_empty() {
                continue;
            }
            // Nothing new: wait for the next live event of the session. After a quiet while,
            // a run waiting on approvals ends the AG-UI run with the interrupt (unless a
            // policy webhook decides them; then the stream stays open).
            let woke = match tokio::time::timeout(QUIET_WAIT, live.recv()).await {
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => {
                    live = bus.subscribe_for(&tenant, &session_id);
                    true
                }
                Ok(_) => true,
                Err(_) => false,
            };
            if woke || !pending || (webhook && !webhook_failed) {
                continue;
            }
            match waiting_approvals(&store, &tenant, &session_id, &run_id).await {
                Ok(approvals) if !approvals.is_empty() => {
                    for out in mapper.interrupt(&approvals) {
                        yield Ok(frame(&out));
                    }
                    return;
                }
                Ok(_) => pending = false,
                Err(error) => {
                    tracing::warn!(%error, "AG-UI approval read failed");
                    for event in mapper.error("STORE_UNAVAILABLE", "the store is unavailable") {
                        yield Ok(frame(&event));
                    }
                    return;
                }
            }
        }
    };
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// How long the stream waits for a live event before reading the store again.
const QUIET_WAIT: Duration = Duration::from_millis(250);

fn frame(event: &Value) -> Event {
    Event::default().data(event.to_string())
}

/// The session state AG-UI clients see: `{"todos": [...], "planMode": bool}`.
async fn state_snapshot(
    state: &AppState,
    tenant: &TenantId,
    session: &SessionId,
    config: &SessionConfig,
) -> Value {
    let todos = state
        .store
        .get_todos(tenant, session)
        .await
        .ok()
        .and_then(|todos| serde_json::to_value(todos).ok())
        .unwrap_or(json!([]));
    let mode = crate::tools::builtin::plan::effective_mode(
        state.store.as_ref(),
        tenant,
        session,
        config.permission.mode,
    )
    .await
    .unwrap_or(config.permission.mode);
    json!({ "todos": todos, "planMode": mode == crate::permission::PermissionMode::Plan })
}

/// The run's approvals still waiting for an answer.
async fn waiting_approvals(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    session: &SessionId,
    run_id: &str,
) -> Result<Vec<crate::store::ApprovalRecord>, crate::store::StoreError> {
    Ok(store
        .list_approvals(tenant, session, Some(ApprovalStatus::Pending))
        .await?
        .into_iter()
        .filter(|approval| approval.run_id.as_deref() == Some(run_id))
        .collect())
}
