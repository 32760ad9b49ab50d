//! The tool contract (N1, N2) and the types every tool and the pipeline share.
//!
//! A tool states its own security metadata; every method that a tool leaves at its default
//! closes safe (N2): mutating, exclusive, approval-required.

use crate::ids::{SessionId, TenantId};
use crate::message::Message;
use crate::permission::{SelfDecision, Subject};
pub mod builtin;

use async_trait::async_trait;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Stable machine-readable codes carried by model-visible tool errors.
pub mod codes {
    pub const TOOL_NOT_FOUND: &str = "TOOL_NOT_FOUND";
    pub const INPUT_SCHEMA_INVALID: &str = "INPUT_SCHEMA_INVALID";
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    pub const HOOK_BLOCKED: &str = "HOOK_BLOCKED";
    /// A fail-closed PreToolUse hook failed (the detail is in the server log only).
    pub const HOOK_FAILED: &str = crate::hooks::HOOK_FAILED;
    pub const TOOL_FAILED: &str = "TOOL_FAILED";
    /// A tenant limit (`[limits]`) stops the call, e.g. too many background tasks or shells.
    pub const TENANT_LIMIT: &str = "TENANT_LIMIT";
    /// The tenant's workspaces hold `limits.workspace_bytes` or more: mutating calls wait
    /// until it frees space.
    pub const WORKSPACE_QUOTA_EXCEEDED: &str = "WORKSPACE_QUOTA_EXCEEDED";
    pub const TOOL_TIMEOUT: &str = "TOOL_TIMEOUT";
    pub const CANCELLED: &str = "CANCELLED";
    pub const INTERRUPTED: &str = "INTERRUPTED";
    pub const APPROVAL_EXPIRED: &str = "APPROVAL_EXPIRED";
    /// Not a result the model ever sees: the call waits on an approval and its run parked
    /// (the run is resumed from the store when the answer comes).
    pub const PARKED: &str = "PARKED";
}

/// A model-visible tool failure: becomes an error tool_result paired with its tool_use id (N4).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// Stable UPPER_SNAKE code; see [`codes`] (tools may use their own, e.g. `EDIT_NOT_UNIQUE`).
    pub code: &'static str,
    /// The human text the model reads.
    pub message: String,
}

impl ToolError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(codes::TOOL_FAILED, message)
    }
}

/// What a successful call returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// The full text output; the pipeline caps and spills it (N11).
    pub text: String,
    /// Messages to append after the paired tool_result (step 8).
    pub extra_messages: Vec<Message>,
    /// Images for the model beside the text (bounded by the tool that makes them).
    pub images: Vec<crate::message::ToolImage>,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            extra_messages: Vec::new(),
            images: Vec::new(),
        }
    }
}

/// Progress a running tool reports; published as events as it happens.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolProgress {
    pub tool_use_id: String,
    pub data: Value,
}

/// Where a call's progress reports go: straight to the run's writer, as `tool_progress`
/// events in order with the call's other events (no channel, no task of its own per call).
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(ToolProgress) + Send + Sync>);

impl ProgressSink {
    pub fn new(report: impl Fn(ToolProgress) + Send + Sync + 'static) -> Self {
        Self(Arc::new(report))
    }

    /// Reports `progress` now.
    pub fn send(&self, progress: ToolProgress) {
        (self.0)(progress);
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// Where a file tool's small reads and writes run (see [`builtin::file_io`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileIo {
    /// The workspace is on this machine's own filesystem (`local` and `snapshot` storage): a
    /// file of at most [`builtin::INLINE_FILE_BYTES`] is read or written on the calling
    /// task's thread — a few system calls on cached pages, where a hand-off to the blocking
    /// pool and back costs two thread wake-ups.
    Local,
    /// The workspace may be on a network filesystem (`shared` storage), whose calls can wait
    /// on a server: every call goes to the blocking pool.
    #[default]
    Pooled,
}

/// Everything a call may use. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub tenant: TenantId,
    pub session_id: SessionId,
    pub tool_use_id: String,
    /// The session's server-owned workspace directory, when the session has one.
    pub workspace: Option<PathBuf>,
    /// Where the workspace's small file work runs.
    pub file_io: FileIo,
    /// Cancelled when the run is cancelled or the session closes.
    pub cancel: CancellationToken,
    pub progress: Option<ProgressSink>,
}

impl ToolContext {
    /// A context for tests and benchmarks: fresh ids, no workspace, no progress sink.
    pub fn for_tests() -> Self {
        Self {
            tenant: TenantId::new("test"),
            session_id: SessionId::generate(),
            tool_use_id: "toolu_test".into(),
            workspace: None,
            file_io: FileIo::Pooled,
            cancel: CancellationToken::new(),
            progress: None,
        }
    }

    pub fn report_progress(&self, data: Value) {
        if let Some(sink) = &self.progress {
            sink.send(ToolProgress {
                tool_use_id: self.tool_use_id.clone(),
                data,
            });
        }
    }
}

/// The tool contract (N1). Defaults close safe (N2).
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// Extra usage guidance shown to the model (may be empty).
    fn prompt(&self) -> &str {
        ""
    }
    /// JSON Schema of the input; validated at registration and before every call (D1).
    fn input_schema(&self) -> &Value;
    /// The same schema when it lives for the process (a built-in tool's): the registry then
    /// uses the validator compiled for it once, instead of looking it up for every run.
    fn static_schema(&self) -> Option<&'static schema::StaticSchema> {
        None
    }
    /// The schema, shared and already compiled by whoever made the tool (an MCP server's
    /// tools, compiled once per tool list for every run that offers them): the registry and
    /// the provider's tool list use it as it is, without compiling or copying it again.
    fn compiled_schema(&self) -> Option<(Arc<Value>, schema::CompiledSchema)> {
        None
    }
    /// RawInput tools skip central validation and parse their own input, but still expose
    /// their schema to the model.
    fn raw_input(&self) -> bool {
        false
    }
    fn is_read_only(&self, _input: &Value) -> bool {
        false
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        false
    }
    /// Write, Edit, MultiEdit, NotebookEdit: allowed by the `acceptEdits` mode.
    fn is_file_edit(&self) -> bool {
        false
    }
    /// The tool's own permission decision for this input.
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Ask
    }
    /// Why the tool denies this input itself, as the result's code and message, when
    /// [`Tool::self_decision`] is `Deny` and that decided (stage `tool_deny`). `None` keeps
    /// the generic `PERMISSION_DENIED`.
    fn self_denial(&self, _input: &Value) -> Option<(&'static str, String)> {
        None
    }
    /// What `Name(...)` permission rules match in this tool's input.
    fn permission_subject(&self) -> Subject {
        Subject::Name
    }
    /// Another tool name whose rules also judge this tool: the PTY shell tools answer to
    /// `Bash(...)` rules, so a session's command rules cannot be sidestepped through a shell.
    fn permission_rules_as(&self) -> Option<&'static str> {
        None
    }
    /// The subject text when it is more than the input field (ShellWrite: the unsubmitted line
    /// plus the typed text). `None` reads the field named by [`Tool::permission_subject`].
    fn permission_subject_text(&self, _input: &Value) -> Option<String> {
        None
    }
    /// How long one call may run before the pipeline ends it with `TOOL_TIMEOUT`: the
    /// pipeline's bound (`default`) unless the tool says otherwise. `None`: no time bound of
    /// the pipeline's — the call ends with what it waits on, or with its run's cancel (the
    /// `Agent` tool: its subagent's run is bounded by its own turns and budgets).
    fn call_timeout(&self, default: std::time::Duration) -> Option<std::time::Duration> {
        Some(default)
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// A shared handle to a tool.
pub type DynTool = Arc<dyn Tool>;

pub mod builder;
pub mod deferred;
pub mod gate;
pub mod output;
pub mod pipeline;
pub mod registry;
pub mod schema;
