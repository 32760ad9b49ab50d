//! What `GET /v1/sessions/{id}` shows of each MCP server (`mcp_servers`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The state of one MCP server of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    /// Not started yet: servers start with the session's first run.
    NotStarted,
    /// Starting (spawn, handshake, tool list).
    Starting,
    /// Running; its tools are offered.
    Ready,
    /// Stopped after `mcp.idle_stop_seconds` without a call; started again by the next call
    /// (its last tool list stays offered meanwhile).
    Idle,
    /// Ended unexpectedly; restarted with backoff at the next use (see `error`).
    Crashed,
    /// Did not start, or crashed too often: not restarted (see `error`).
    Failed,
    /// Wrote garbage, an oversized message or a flood on stdout: stopped, not restarted.
    CutOff,
    /// Stopped with the session.
    Stopped,
}

/// One MCP server's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpServerStatus {
    pub name: String,
    pub state: McpServerState,
    /// Why the server is not ready (absent when it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The registry tools it offers the session (`mcp__<server>__<tool>`).
    pub tools: Vec<String>,
    /// Tools it lists that are not offered, each with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_tools: Vec<String>,
    /// How often it was restarted after a crash.
    pub restarts: u32,
}

impl McpServerStatus {
    /// The status of a server that has not started.
    pub fn not_started(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: McpServerState::NotStarted,
            error: None,
            tools: Vec::new(),
            skipped_tools: Vec::new(),
            restarts: 0,
        }
    }
}
