//! Hooks (N8–N10, D3, D4): the eight events, the JSON event a hook receives, the answer it
//! gives, and the [`Hook`] trait shared by in-process (Rust) hooks and remote (HTTP) hooks.
//! [`runner`] runs them with timeouts, panic containment and a per-hook failure policy;
//! [`remote`] posts signed events to a URL.

pub mod remote;
pub mod runner;

pub use remote::{RemoteHook, RemoteHookError, RemoteTarget};
pub use runner::{
    DEFAULT_HOOK_TIMEOUT, FailurePolicy, HOOK_FAILED, HookBlock, HookCatalog, HookConfig,
    HookConfigError, HookHandlerConfig, HookOutcome, HookRegistration, HookRunner, HookStatus,
    HookStatusToken, MissingReason, StopOutcome,
};

use crate::ids::{SessionId, TenantId};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The hook events (N8). Serialized in PascalCase, as configured and as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum HookEventName {
    PreToolUse,
    PostToolUse,
    PostToolUseFailure,
    UserPromptSubmit,
    SessionStart,
    SessionEnd,
    Stop,
    SubagentStart,
}

impl HookEventName {
    /// Every event, in a stable order.
    pub const ALL: [HookEventName; 8] = [
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::UserPromptSubmit,
        Self::SessionStart,
        Self::SessionEnd,
        Self::Stop,
        Self::SubagentStart,
    ];

    /// Events about one tool call: the only ones a tool-name matcher applies to.
    pub fn is_tool_event(self) -> bool {
        match self {
            Self::PreToolUse | Self::PostToolUse | Self::PostToolUseFailure => true,
            Self::UserPromptSubmit
            | Self::SessionStart
            | Self::SessionEnd
            | Self::Stop
            | Self::SubagentStart => false,
        }
    }

    /// The event name as configured and sent (`PreToolUse`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::SessionStart => "SessionStart",
            Self::SessionEnd => "SessionEnd",
            Self::Stop => "Stop",
            Self::SubagentStart => "SubagentStart",
        }
    }
}

impl std::fmt::Display for HookEventName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a hook receives: the session it concerns and the event's own fields. This is also
/// the JSON body a remote hook is posted (`hook_event_name` names the event).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HookEvent {
    pub session_id: SessionId,
    pub tenant: TenantId,
    #[serde(flatten)]
    pub payload: HookPayload,
}

/// The event-specific part of a [`HookEvent`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook_event_name")]
pub enum HookPayload {
    PreToolUse {
        tool_use_id: String,
        tool_name: String,
        tool_input: Value,
    },
    PostToolUse {
        tool_use_id: String,
        tool_name: String,
        tool_input: Value,
        /// The (capped) text the model will read.
        tool_response: String,
        /// Set when the output was capped and spilled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_id: Option<String>,
    },
    PostToolUseFailure {
        tool_use_id: String,
        tool_name: String,
        tool_input: Value,
        /// `TOOL_FAILED`, `TOOL_TIMEOUT`, `CANCELLED` or a tool's own code.
        error_code: String,
        error: String,
    },
    UserPromptSubmit {
        prompt: String,
    },
    SessionStart {
        /// `create`, `resume` or `fork`.
        source: String,
    },
    SessionEnd {
        /// `closed`, `expired`, …
        reason: String,
    },
    Stop {
        /// True when this stop follows a continuation a Stop hook already forced.
        stop_hook_active: bool,
    },
    SubagentStart {
        agent_type: String,
        description: String,
    },
}

impl HookPayload {
    /// Which event this payload belongs to.
    pub fn event_name(&self) -> HookEventName {
        match self {
            Self::PreToolUse { .. } => HookEventName::PreToolUse,
            Self::PostToolUse { .. } => HookEventName::PostToolUse,
            Self::PostToolUseFailure { .. } => HookEventName::PostToolUseFailure,
            Self::UserPromptSubmit { .. } => HookEventName::UserPromptSubmit,
            Self::SessionStart { .. } => HookEventName::SessionStart,
            Self::SessionEnd { .. } => HookEventName::SessionEnd,
            Self::Stop { .. } => HookEventName::Stop,
            Self::SubagentStart { .. } => HookEventName::SubagentStart,
        }
    }

    /// The tool name for tool events.
    pub fn tool_name(&self) -> Option<&str> {
        match self {
            Self::PreToolUse { tool_name, .. }
            | Self::PostToolUse { tool_name, .. }
            | Self::PostToolUseFailure { tool_name, .. } => Some(tool_name),
            Self::UserPromptSubmit { .. }
            | Self::SessionStart { .. }
            | Self::SessionEnd { .. }
            | Self::Stop { .. }
            | Self::SubagentStart { .. } => None,
        }
    }
}

impl HookEvent {
    /// Which event this is.
    pub fn event_name(&self) -> HookEventName {
        self.payload.event_name()
    }
}

/// A hook's verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookDecision {
    /// Go on.
    #[default]
    Continue,
    /// PreToolUse: refuse the call. Stop: do not stop — inject the reason and make one more
    /// request (blocking continuation). UserPromptSubmit/SubagentStart: refuse.
    Block,
    /// Stop: end now, no continuation (hard prevent). Elsewhere treated as `Block`.
    Prevent,
}

/// A hook's answer (also the JSON a remote hook returns; every field is optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HookResponse {
    #[serde(default)]
    pub decision: HookDecision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// PreToolUse: a replacement input (`null` or `{}` mean "no rewrite").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// Text added to what the model sees next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
}

impl HookResponse {
    /// Go on, no changes.
    pub fn proceed() -> Self {
        Self::default()
    }

    /// Block (see [`HookDecision::Block`]) with a reason.
    pub fn block(reason: impl Into<String>) -> Self {
        Self {
            decision: HookDecision::Block,
            reason: Some(reason.into()),
            ..Self::default()
        }
    }

    /// Hard prevent (see [`HookDecision::Prevent`]) with a reason.
    pub fn prevent(reason: impl Into<String>) -> Self {
        Self {
            decision: HookDecision::Prevent,
            reason: Some(reason.into()),
            ..Self::default()
        }
    }

    /// Go on with a replacement input.
    pub fn rewrite(input: Value) -> Self {
        Self {
            updated_input: Some(input),
            ..Self::default()
        }
    }

    /// Adds context for the model.
    pub fn with_context(mut self, text: impl Into<String>) -> Self {
        self.additional_context = Some(text.into());
        self
    }

    /// The rewrite, when non-empty.
    pub fn rewritten_input(&self) -> Option<&Value> {
        self.updated_input.as_ref().filter(|value| match value {
            Value::Null => false,
            Value::Object(map) => !map.is_empty(),
            Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => true,
        })
    }
}

/// A hook failed (as opposed to answering `block`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error("hook timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("hook panicked")]
    Panicked,
    #[error("hook failed: {0}")]
    Failed(String),
}

/// A hook: in-process (Rust) or remote. Must be safe to call concurrently.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// Answers one event. An `Err` is a hook failure, handled by the hook's failure policy.
    async fn handle(&self, event: &HookEvent) -> Result<HookResponse, HookError>;

    /// Whether this hook can serve `event` (configuring it for another event reports
    /// `HOOK_UNSUPPORTED`). Defaults to every event.
    fn supports(&self, _event: HookEventName) -> bool {
        true
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
