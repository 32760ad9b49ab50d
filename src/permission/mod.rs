//! Permission decisions (SPEC.md N5–N7, D2): the ladder, argument-aware rules, grants.
//!
//! Interface types live here; `rules` parses rule strings, `shell` extracts simple commands
//! from shell text, `decide` runs the ladder.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub mod decide;
pub mod rules;
pub mod shell;

pub use decide::{DecisionInput, GrantRule, decide};

#[cfg(test)]
#[path = "command_rules_tests.rs"]
mod command_rules_tests;
#[cfg(test)]
#[path = "shell_tools_tests.rs"]
mod shell_tools_tests;
pub use rules::{Rule, RuleError, RuleSet};

/// The session's permission mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    #[default]
    Default,
    AcceptEdits,
    Plan,
    Bypass,
    DontAsk,
    Auto,
}

/// A tool's own decision about one input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelfDecision {
    /// No opinion.
    None,
    Allow,
    Deny,
    /// Approval-required (the closed default, N2).
    #[default]
    Ask,
}

/// What the argument part of a `Name(...)` rule is matched against for a tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// Only the tool name is matched; `Name(...)` rules with arguments never match.
    Name,
    /// A shell command in the given input field (`Bash(git status:*)`).
    Command { field: &'static str },
    /// A workspace path in the given input field (`Read(src/**)`).
    Path { field: &'static str },
    /// A URL in the given input field (`WebFetch(domain:docs.rs)`).
    Url { field: &'static str },
}

/// Which step of the ladder decided. Serialized names are stable and shown to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Disallowed,
    ToolDeny,
    ModeBypass,
    ModePlan,
    Allowed,
    /// A stored grant (from an earlier approval) matched.
    Grant,
    AcceptEdits,
    ReadOnly,
    ToolAllow,
    ModeDontAsk,
    ModeAuto,
    /// The approval callback decided.
    Callback,
    /// The ladder reached "ask" but no approval callback exists.
    NoCallback,
}

impl Stage {
    /// The serialized name (a metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disallowed => "disallowed",
            Self::ToolDeny => "tool_deny",
            Self::ModeBypass => "mode_bypass",
            Self::ModePlan => "mode_plan",
            Self::Allowed => "allowed",
            Self::Grant => "grant",
            Self::AcceptEdits => "accept_edits",
            Self::ReadOnly => "read_only",
            Self::ToolAllow => "tool_allow",
            Self::ModeDontAsk => "mode_dont_ask",
            Self::ModeAuto => "mode_auto",
            Self::Callback => "callback",
            Self::NoCallback => "no_callback",
        }
    }
}

/// Why a decision was made: the stage, and the rule or grant that matched, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Reason {
    pub stage: Stage,
    /// The rule text as configured (e.g. `Bash(git status:*)`), when a rule decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The grant id, when a grant decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// Human text (presentation only).
    pub message: String,
}

impl Reason {
    /// A reason without a rule or grant.
    pub fn new(stage: Stage, message: impl Into<String>) -> Self {
        Self {
            stage,
            rule: None,
            grant_id: None,
            message: message.into(),
        }
    }

    /// The denial used when the ladder reaches "ask" and no approval callback exists.
    pub fn no_callback(tool: &str) -> Self {
        Self::new(
            Stage::NoCallback,
            format!("{tool} needs approval, and no approval callback is configured"),
        )
    }
}

/// The ladder's answer before any callback is consulted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow(Reason),
    Deny(Reason),
    /// The ladder reached the callback step: consult the approval callback if one exists,
    /// otherwise deny with [`Stage::NoCallback`].
    Ask,
}

/// The facts about one tool that the ladder reads.
#[derive(Clone, Debug)]
pub struct ToolFacts<'a> {
    pub name: &'a str,
    pub read_only: bool,
    pub self_decision: SelfDecision,
    pub file_edit: bool,
    pub subject: Subject,
    /// Another tool name whose rules also apply (`Bash` for ShellStart and ShellWrite).
    pub rules_as: Option<&'a str>,
    /// The subject text, when the tool computes it instead of reading its input field.
    pub subject_text: Option<String>,
}
