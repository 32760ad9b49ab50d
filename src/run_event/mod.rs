//! Run events: the one typed vocabulary of what happens in a session's transcript.
//!
//! Every event the server records is a [`RunEvent`] variant with its own payload struct (codex's
//! `EventMsg` is the model). The loop emits them, the writer and resume match on them, and they
//! become rows only at the store boundary ([`RunEvent::into_row`]) and come back from rows only
//! there ([`RunEvent::from_row`]). Nothing outside this module tells events apart by a string.
//!
//! **Wire format.** A variant's wire name (SSE `event:`, the row's `kind`, `type` in JSON
//! pages) is its snake_case name; its payload is the JSON object of its struct. This is the
//! format the server wrote before the enum existed, byte for byte once parsed: the fixture table
//! in `tests.rs` checks every variant against the JSON the server emitted then. A stored row
//! whose kind this build does not know, or whose payload no longer fits (rows of an older or
//! newer server), reads back as [`RunEvent::Other`] and is passed through unchanged.
//!
//! This module depends only on leaf types (messages, provider types, store rows, the permission
//! decision record), so the harness, the runtime, the store's callers and the API can all use it
//! without import cycles.

mod reasons;
#[cfg(test)]
mod tests;

pub use reasons::{BudgetKind, ContinueReason, SubagentTokens, TerminalReason, Usage};

use crate::llm::{StopReason, Usage as TurnUsage};
use crate::message::{Message, ToolResultBlock};
use crate::store::{ApprovalRecord, EventPayload, EventRecord, NewEvent};
use crate::tools::pipeline::DecisionRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a session's transcript.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum RunEvent {
    /// A run's prompt was written to history.
    RunStarted(RunStarted),
    /// The loop sends a request to the model.
    ModelRequest(ModelRequest),
    /// Streamed text of the response.
    AssistantDelta(AssistantDelta),
    /// The complete response, committed with history.
    AssistantMessage(AssistantMessage),
    /// The model asked for a tool call.
    ToolCall(ToolCall),
    /// The scheduler started a call.
    ToolStarted(ToolStarted),
    /// Durably written just before a call's code runs (resume never runs it twice).
    ToolExecuting(ToolExecuting),
    /// Progress a tool reported while running.
    ToolProgress(ToolProgress),
    /// A call's result.
    ToolResult(ToolResult),
    /// The results of a turn were committed to history.
    ToolResults(ToolResults),
    /// Why a call was (or was not) allowed.
    PermissionDecision(PermissionDecision),
    /// The provider refused a request (context overflow).
    ProviderError(CodedMessage),
    /// Why the loop makes another request.
    Continue(ContinueReason),
    /// The run's usage, committed with its end.
    Usage(Usage),
    /// The run ended; written in the transaction that ends the run.
    Terminal(TerminalReason),
    /// History was summarised.
    Compaction(Compaction),
    /// Summarising failed; the run goes on uncompacted.
    CompactionFailed(CodedMessage),
    /// Noa: the model compressed a batch of ranges (their originals were archived).
    Compression(Compression),
    /// Noa: consumed results of read-only calls were pruned from the view.
    ContextPruned(ContextEdit),
    /// Noa: consumed Compress/Expand calls were hidden from the view.
    ContextHidden(ContextEdit),
    /// Noa: the view was over the hard limit; its oldest unprotected blocks were dropped.
    ContextTruncated(ContextEdit),
    /// Noa: the view was over the soft limit; the model was nudged to compress.
    ContextNudge(ContextNudge),
    /// A run was resumed after a crash, restart or hand-off.
    RunResumed(RunResumed),
    /// A run parked on approvals.
    RunParked(RunParked),
    /// A run stopped on a replica shutting down, for another to resume.
    RunHandedOff(RunHandedOff),
    /// An approval request was persisted.
    ApprovalRequested(ApprovalEvent),
    /// The run read an approval's decision.
    ApprovalDecided(ApprovalEvent),
    /// Delivering an approval to the policy webhook failed (it stays answerable over REST).
    ApprovalWebhookFailed(ApprovalWebhookFailed),
    /// The session was closed for being idle.
    SessionExpired(SessionExpired),
    /// The session was forked from another one.
    Forked(Forked),
    /// An outbound request made for the session (WebFetch, WebSearch, a command's proxied
    /// connection, a hook, an approval webhook), allowed or refused.
    Egress(Egress),
    /// The `Agent` call `tool_use_id` started (or re-attached to) a subagent run.
    SubagentStarted(SubagentStarted),
    /// An event of a subagent's own session, nested in the parent's transcript.
    SubagentEvent(SubagentEvent),
    /// A subagent run ended; its usage counts into the parent run's token budget.
    SubagentFinished(SubagentFinished),
    /// An MCP server's sampling request answered by the run's model (its usage is counted
    /// like any model call's).
    McpSampling(McpSampling),
    /// The model loaded a skill with the `Skill` tool (see `crate::skills`).
    SkillLoaded(SkillLoaded),
    /// A stored event this build does not know (or whose payload no longer fits), passed
    /// through as stored. Never built by the server itself.
    #[serde(skip)]
    Other(RawEvent),
}

/// An event as stored: its wire name and its JSON payload.
#[derive(Clone, Debug, PartialEq)]
pub struct RawEvent {
    pub kind: String,
    pub payload: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    pub run_id: String,
    pub prompt: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// 1-based index of the request within the run.
    pub request: u32,
    pub main_turn: u32,
    /// The [`ContinueReason`] code that led to it (`None` for the first request).
    pub reason: Option<String>,
    /// Messages in the request.
    pub messages: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantDelta {
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    pub message: Message,
    pub stop_reason: StopReason,
    pub usage: TurnUsage,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub tool_use_id: String,
    pub name: String,
    pub input: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolStarted {
    pub tool_use_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolExecuting {
    pub tool_use_id: String,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    pub tool_use_id: String,
    pub data: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub tool_use_id: String,
    pub result: ToolResultBlock,
    /// `snapshot` workspace storage: the workspace snapshot taken after this (mutating) call;
    /// it becomes the session's head in the transaction that writes this event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_snapshot: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResults {
    pub count: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PermissionDecision {
    pub tool_use_id: String,
    /// The tool the decision is about (the inner tool of `ExecuteExtraTool`).
    pub tool: String,
    pub decision: DecisionRecord,
}

/// A stable code with human text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodedMessage {
    pub code: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub summarized_messages: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub forced: bool,
    /// Tokens of the summarising model call (absent in events of older servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TurnUsage>,
}

/// A sampling request of an MCP server, answered during one of its tool calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpSampling {
    pub server: String,
    pub tool_use_id: String,
    pub model: String,
    pub stop_reason: StopReason,
    pub usage: TurnUsage,
}

/// A Noa compression batch: its ranges and the view's estimated tokens before and after.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compression {
    pub ranges: Vec<CompressedRange>,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// One compressed range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompressedRange {
    pub archive_id: String,
    pub from_ref: String,
    pub to_ref: String,
    /// Messages archived.
    pub messages: usize,
    /// Their snapshot tokens.
    pub tokens: u64,
    /// Protected messages inside the range that stayed in the view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_refs: Vec<String>,
}

/// A change Noa made to one request view (never to history).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextEdit {
    /// Messages pruned, hidden or dropped.
    pub messages: usize,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// The model was nudged to compress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextNudge {
    pub projected_tokens: u64,
    pub soft_limit_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResumed {
    pub run_id: String,
    pub replica: String,
    /// Calls that were executing when the run stopped: they get an `INTERRUPTED` result.
    pub interrupted: Vec<String>,
    /// Calls that had not started: they run now.
    pub rerun: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunParked {
    pub run_id: String,
    pub approval_ids: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunHandedOff {
    pub run_id: String,
    pub replica: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalEvent {
    pub approval: ApprovalRecord,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalWebhookFailed {
    pub approval_id: String,
    pub code: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionExpired {
    pub idle_seconds: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Forked {
    pub from_session: String,
    pub messages_copied: usize,
}

/// One outbound request as recorded (event kind `egress`). Built by `crate::egress` from what
/// each path saw; the names are the stable ones of `EgressRefusal` reasons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Egress {
    /// `web_fetch`, `web_search`, `command`, `remote_hook`, `approval_webhook`.
    pub purpose: String,
    pub host: String,
    pub port: u16,
    /// `allowed` or `denied`; `failed` for a hook's or webhook's request that got no 2xx
    /// answer (no reason given: the tenant learns as little as from `HOOK_FAILED`).
    pub decision: String,
    /// Why it was denied or failed (`private_address`, `not_allowed`, `timeout`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The egress rule that listed or denied the host, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The HTTP status, when an answer came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Bytes received (the answer body; for a command's connection, every byte relayed in).
    pub bytes: u64,
    /// Bytes sent, where counted (a command's proxied connection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_out: Option<u64>,
    /// 0 for the request itself, 1.. for redirect hops.
    #[serde(default)]
    pub hop: usize,
    /// The tool call that made the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
}

/// A subagent run started by an `Agent` call (`session_id`/`run_id` are the subagent's own:
/// its events and history are readable there).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubagentStarted {
    pub tool_use_id: String,
    pub agent: String,
    pub session_id: String,
    pub run_id: String,
    pub depth: u8,
    /// True when a resumed parent re-attached to a subagent started before the restart.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reattached: bool,
}

/// One event of a subagent's session (`seq` in that session), tagged with the parent's
/// `Agent` call and the agent type. Text deltas are not nested (the subagent's session has
/// them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubagentEvent {
    pub tool_use_id: String,
    pub agent: String,
    pub session_id: String,
    pub seq: i64,
    /// The nested event's wire name and payload.
    pub kind: String,
    pub payload: Value,
}

/// A subagent run ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubagentFinished {
    pub tool_use_id: String,
    pub agent: String,
    pub session_id: String,
    pub run_id: String,
    /// The subagent run's terminal reason (as its `terminal` event).
    pub terminal: Value,
    /// Its model calls, tokens and cost (from its usage ledger), its own subagents'
    /// included (`usage.subagents` says which part).
    pub usage: crate::usage::UsageWithSubagents,
}

/// A skill the model loaded (event kind `skill_loaded`), written before the `Skill` call's
/// result: which skill, from where, and what became of the tools it lists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkillLoaded {
    pub tool_use_id: String,
    pub name: String,
    /// `registered` (`/v1/skills`) or `workspace` (`.norma/skills/<name>/SKILL.md`).
    pub source: String,
    /// Deferred tools the load unlocked (stored in the session's unlock set).
    pub unlocked: Vec<String>,
    /// Listed tools the session already offers (nothing to unlock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub available: Vec<String>,
    /// Listed tools not unlocked, each with why: `denied` (a deny rule names the tool) or
    /// `not_in_session` (the session does not have it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<SkillToolRefusal>,
}

/// A tool a skill lists that its load did not unlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillToolRefusal {
    pub tool: String,
    pub reason: String,
}

/// The wire names of the events resume reads (see `runtime::resume`).
pub mod kinds {
    pub const RUN_STARTED: &str = "run_started";
    pub const MODEL_REQUEST: &str = "model_request";
    pub const ASSISTANT_DELTA: &str = "assistant_delta";
    pub const TOOL_CALL: &str = "tool_call";
    pub const TOOL_EXECUTING: &str = "tool_executing";
    pub const TOOL_RESULT: &str = "tool_result";
    pub const APPROVAL_DECIDED: &str = "approval_decided";
    pub const SUBAGENT_STARTED: &str = "subagent_started";
    pub const SUBAGENT_FINISHED: &str = "subagent_finished";
}

impl RunEvent {
    /// The event's wire name and JSON payload.
    pub fn to_parts(&self) -> (String, Value) {
        if let Self::Other(raw) = self {
            return (raw.kind.clone(), raw.payload.clone());
        }
        match serde_json::to_value(self) {
            Ok(Value::Object(mut tagged)) => {
                let kind = match tagged.remove("type") {
                    Some(Value::String(kind)) => kind,
                    _ => String::new(),
                };
                (kind, tagged.remove("payload").unwrap_or(Value::Null))
            }
            // Unreachable for these payload types (string keys, no failing serializers).
            _ => (String::new(), Value::Null),
        }
    }

    /// The typed event of a stored `(kind, payload)`; [`RunEvent::Other`] when this build
    /// does not know the kind or the payload does not fit it.
    pub fn from_parts(kind: &str, payload: Value) -> Self {
        let tagged = serde_json::json!({ "type": kind, "payload": payload });
        serde_json::from_value(tagged).unwrap_or_else(|_| {
            Self::Other(RawEvent {
                kind: kind.to_owned(),
                payload,
            })
        })
    }

    /// The row that stores this event, its payload's JSON text rendered straight from the typed
    /// event (no `Value` in between, see [`crate::store::EventPayload`]).
    pub fn into_row(self, run_id: Option<String>) -> NewEvent {
        let (kind, payload) = match self {
            Self::Other(raw) => (raw.kind, EventPayload::of(&raw.payload)),
            typed => typed.row_parts(),
        };
        NewEvent {
            kind,
            payload,
            run_id,
        }
    }

    /// The wire name and payload text of a typed event, cut out of its tagged JSON: serde writes
    /// an adjacently tagged variant as `{"type":"<kind>","payload":<payload>}`, the tag first,
    /// and a wire name is a snake_case identifier (nothing in it is escaped). Anything else
    /// (never seen) takes the way through a `Value`.
    fn row_parts(&self) -> (String, EventPayload) {
        const HEAD: &str = "{\"type\":\"";
        const MIDDLE: &str = "\",\"payload\":";
        if let Ok(mut text) = crate::json_text::json_text(self) {
            let kind_end = text
                .strip_prefix(HEAD)
                .and_then(|rest| rest.find('"'))
                .map(|at| HEAD.len() + at);
            if let Some(kind_end) = kind_end
                && text[kind_end..].starts_with(MIDDLE)
                && text.ends_with('}')
            {
                let kind = text[HEAD.len()..kind_end].to_owned();
                text.pop();
                text.drain(..kind_end + MIDDLE.len());
                return (kind, EventPayload::from_json_text(text));
            }
        }
        let (kind, payload) = self.to_parts();
        (kind, EventPayload::of(&payload))
    }

    /// The typed event of a stored row.
    pub fn from_row(record: &EventRecord) -> Self {
        Self::from_parts(&record.kind, record.payload.value())
    }
}
