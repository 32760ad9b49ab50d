//! The operator's MCP settings (`[mcp]`, `NORMA_MCP__*`).

use serde::{Deserialize, Serialize};

/// See the fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSettings {
    /// A stdio server no call has used for this many seconds is stopped while its session
    /// lives (status `idle`) and started again by the next call; `0` never stops one.
    pub idle_stop_seconds: u64,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            idle_stop_seconds: 900,
        }
    }
}

impl McpSettings {
    /// The idle time after which a server is stopped (`None`: never).
    pub fn idle_stop(&self) -> Option<std::time::Duration> {
        (self.idle_stop_seconds > 0).then(|| std::time::Duration::from_secs(self.idle_stop_seconds))
    }
}
