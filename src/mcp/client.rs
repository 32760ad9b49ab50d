//! The client side of one server's connection: what the client tells the server it can do
//! (form elicitation; sampling only when its entry allows it; no roots), and the requests and
//! notifications the server sends while the session lives — elicitations, sampling, progress,
//! `tools/list_changed` — routed to the call they belong to.
//!
//! Each call in flight is registered under its `tool_use_id`. The SDK gives every request a
//! progress token of its own, unknown to the caller: the first progress notification with a
//! token not seen before binds it to the one call in flight. An elicitation names no call, so
//! it is asked for the one call in flight. With none, or several at once (only tools of a
//! trusted server run concurrently), an unbound progress notification is dropped, an
//! elicitation is cancelled and a sampling request is refused.

use super::elicitation::{self, ElicitingCall};
use super::sampling::{self, McpSampling, Sampler, SamplingRequest};
use crate::tools::ToolProgress;
use crate::tools::pipeline::Approver;
// Sampling is deprecated by the protocol (SEP-2577); this client answers it only for
// servers whose entry allows it.
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, ProgressNotificationParam,
    ProgressToken, ProtocolVersion,
};
#[allow(deprecated)]
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// At most this many progress events per call…
const MAX_PROGRESS_EVENTS: u32 = 200;
/// …and at most one per this interval (extra notifications are dropped).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// A progress message is cut to this many characters.
const MAX_PROGRESS_MESSAGE_CHARS: usize = 500;

/// One call in flight.
pub struct CallScope {
    pub tool_use_id: String,
    /// The registry name (`mcp__<server>__<tool>`).
    pub tool_name: String,
    progress: Option<crate::tools::ProgressSink>,
    rate: Mutex<(u32, Option<Instant>)>,
    /// The request's progress token, once a notification told it.
    token: Mutex<Option<ProgressToken>>,
    /// Cancelled when the call ends: an elicitation still waiting is cancelled.
    done: CancellationToken,
    /// Sampling requests the server made during this call.
    samples: AtomicU32,
}

/// What a server and its connections share: the calls in flight, the run's approver for
/// elicitations, and whether the server said its tool list changed.
pub struct ClientState {
    server: String,
    calls: Mutex<HashMap<String, Arc<CallScope>>>,
    elicitor: Mutex<Option<Arc<dyn Approver>>>,
    tools_changed: AtomicBool,
    /// The entry's sampling bounds (`None`: sampling is refused).
    sampling: Option<McpSampling>,
    /// The current run's sampler (`None` between runs).
    sampler: Mutex<Option<Arc<dyn Sampler>>>,
}

/// Removes a call from the registry when it ends (whichever way).
pub struct CallGuard {
    state: Arc<ClientState>,
    token: String,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let scope = self
            .state
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.token);
        if let Some(scope) = scope {
            scope.done.cancel();
        }
    }
}

impl ClientState {
    pub fn new(server: &str, sampling: Option<McpSampling>) -> Arc<Self> {
        Arc::new(Self {
            server: server.to_owned(),
            calls: Mutex::default(),
            elicitor: Mutex::default(),
            tools_changed: AtomicBool::new(false),
            sampling,
            sampler: Mutex::default(),
        })
    }

    /// Registers a call until the returned guard is dropped.
    pub fn begin_call(
        self: &Arc<Self>,
        tool_use_id: &str,
        tool_name: &str,
        progress: Option<crate::tools::ProgressSink>,
    ) -> CallGuard {
        let scope = Arc::new(CallScope {
            tool_use_id: tool_use_id.to_owned(),
            tool_name: tool_name.to_owned(),
            progress,
            rate: Mutex::new((0, None)),
            token: Mutex::new(None),
            done: CancellationToken::new(),
            samples: AtomicU32::new(0),
        });
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tool_use_id.to_owned(), scope);
        CallGuard {
            state: self.clone(),
            token: tool_use_id.to_owned(),
        }
    }

    /// The call a progress token belongs to: the one it was bound to, or the one call in
    /// flight when it is new (then bound to it).
    fn call_of(&self, token: &ProgressToken) -> Option<Arc<CallScope>> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let bound = calls.values().find(|call| {
            call.token
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                == Some(token)
        });
        if let Some(call) = bound {
            return Some(call.clone());
        }
        let only = (calls.len() == 1)
            .then(|| calls.values().next())
            .flatten()?;
        let mut slot = only.token.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return None;
        }
        *slot = Some(token.clone());
        Some(only.clone())
    }

    /// How many calls are in flight.
    pub fn in_flight(&self) -> usize {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The approver the current run's elicitations are asked through.
    pub fn set_elicitor(&self, approver: Option<Arc<dyn Approver>>) {
        *self.elicitor.lock().unwrap_or_else(|e| e.into_inner()) = approver;
    }

    /// The sampler the current run's sampling requests are answered with.
    pub fn set_sampler(&self, sampler: Option<Arc<dyn Sampler>>) {
        *self.sampler.lock().unwrap_or_else(|e| e.into_inner()) = sampler;
    }

    /// Whether the server said its tool list changed since the last call of this (which
    /// clears it).
    pub fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::SeqCst)
    }

    /// Whether the server said its tool list changed and it was not read again yet.
    pub fn tools_changed(&self) -> bool {
        self.tools_changed.load(Ordering::SeqCst)
    }

    fn only_call(&self) -> Option<Arc<CallScope>> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        (calls.len() == 1)
            .then(|| calls.values().next().cloned())
            .flatten()
    }
}

/// The rmcp client handler of one connection.
pub struct McpClient {
    pub state: Arc<ClientState>,
}

/// What the client declares in `initialize`: form elicitation, and sampling when the entry
/// allows it.
pub fn client_config(sampling: bool) -> ClientConfig {
    #[allow(unused_mut)]
    let mut capabilities = ClientCapabilities::builder()
        .enable_elicitation_with(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::new().with_schema_validation(true)),
        )
        .build();
    if sampling {
        #[allow(deprecated)]
        {
            capabilities.sampling = Some(rmcp::model::SamplingCapability::default());
        }
    }
    ClientConfig::new(
        capabilities,
        Implementation::new("norma-server", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
}

impl ClientHandler for McpClient {
    fn get_info(&self) -> ClientConfig {
        client_config(self.state.sampling.is_some())
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let state = &self.state;
        let (message, schema) = elicitation::check_request(&request)
            .map_err(|why| ErrorData::invalid_params(why, None))?;
        let approver = state
            .elicitor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (Some(call), Some(approver)) = (state.only_call(), approver) else {
            tracing::warn!(server = %state.server, in_flight = state.in_flight(),
                "elicitation outside exactly one tool call; cancelled");
            return Ok(ElicitResult::new(ElicitationAction::Cancel));
        };
        // Only the names and the end signal are kept: the call's progress sink must not
        // outlive the call.
        let (tool_use_id, tool_name, done) = (
            call.tool_use_id.clone(),
            call.tool_name.clone(),
            call.done.clone(),
        );
        drop(call);
        let span = tracing::info_span!("mcp_elicitation", server = %state.server,
            tool_use_id = %tool_use_id);
        let asked = elicitation::ask(
            approver.as_ref(),
            ElicitingCall {
                server: &state.server,
                tool_use_id: &tool_use_id,
                tool_name: &tool_name,
            },
            message,
            schema,
        )
        .instrument(span);
        tokio::select! {
            result = asked => Ok(result),
            () = context.ct.cancelled() => Ok(ElicitResult::new(ElicitationAction::Cancel)),
            () = done.cancelled() => Ok(ElicitResult::new(ElicitationAction::Cancel)),
        }
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let state = &self.state;
        let refuse = |why: String| {
            tracing::info!(server = %state.server, reason = %why, "MCP sampling refused");
            Err(ErrorData::invalid_request(why, None))
        };
        let Some(limits) = state.sampling else {
            return refuse(format!(
                "sampling is not enabled for the MCP server `{}`: the session's model answers \
                 only servers whose entry sets `sampling`",
                state.server
            ));
        };
        let sampler = state
            .sampler
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (Some(call), Some(sampler)) = (state.only_call(), sampler) else {
            return refuse(
                "sampling is answered only during exactly one tool call of the \
                 server"
                    .into(),
            );
        };
        let made = call.samples.fetch_add(1, Ordering::SeqCst) + 1;
        if made > limits.max_requests_per_call {
            return refuse(format!(
                "this tool call already made {} sampling requests, the server's \
                 `sampling.max_requests_per_call`",
                limits.max_requests_per_call
            ));
        }
        let params = serde_json::to_value(&params).unwrap_or_default();
        let checked = match sampling::check_request(&params, &limits) {
            Ok(checked) => checked,
            Err(why) => return refuse(why),
        };
        let request = SamplingRequest {
            server: state.server.clone(),
            tool_use_id: call.tool_use_id.clone(),
            system: checked.system,
            messages: checked.messages,
            max_tokens: checked.max_tokens,
            temperature: checked.temperature,
        };
        let done = call.done.clone();
        drop(call);
        let span = tracing::info_span!("mcp_sampling", server = %state.server,
            tool_use_id = %request.tool_use_id);
        let answered = tokio::select! {
            answer = sampler.sample(request).instrument(span) => answer,
            () = context.ct.cancelled() => Err("the request was cancelled".into()),
            () = done.cancelled() => Err("the tool call ended".into()),
        };
        match answered {
            Ok(answer) => serde_json::from_value(sampling::result_json(&answer))
                .map_err(|error| ErrorData::internal_error(error.to_string(), None)),
            Err(why) => refuse(why),
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some(call) = self.state.call_of(&params.progress_token) else {
            return;
        };
        let Some(sink) = &call.progress else { return };
        {
            let mut rate = call.rate.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if rate.0 >= MAX_PROGRESS_EVENTS
                || rate
                    .1
                    .is_some_and(|last| now.duration_since(last) < PROGRESS_INTERVAL)
            {
                return;
            }
            *rate = (rate.0 + 1, Some(now));
        }
        let message: Option<String> = params
            .message
            .as_deref()
            .map(|m| m.chars().take(MAX_PROGRESS_MESSAGE_CHARS).collect());
        sink.send(ToolProgress {
            tool_use_id: call.tool_use_id.clone(),
            data: json!({
                "kind": "mcp_progress",
                "server": self.state.server,
                "progress": params.progress,
                "total": params.total,
                "message": message,
            }),
        });
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.state.tools_changed.store(true, Ordering::SeqCst);
    }
}
