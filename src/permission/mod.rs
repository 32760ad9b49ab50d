//! Permission decisions (SPEC.md N5–N7, D2): the ladder, argument-aware rules, grants.
//!
//! Interface types live here; `rules` parses rule strings, `shell` extracts simple commands
//! from shell text, `decide` runs the ladder.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
