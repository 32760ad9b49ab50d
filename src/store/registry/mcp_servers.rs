//! The rows of a tenant's MCP server registry (`/v1/mcp-servers`): the entry as JSON, keyed
//! by tenant and server name. The store keeps the JSON as it is given; the MCP layer parses
//! and checks it (`crate::mcp::registry`).

use chrono::{DateTime, Utc};

/// One registered MCP server.
#[derive(Clone, PartialEq)]
pub struct McpServerRecord {
    pub name: String,
    /// The entry, secrets included (never logged: see the `Debug` impl).
    pub config: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl std::fmt::Debug for McpServerRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerRecord")
            .field("name", &self.name)
            .field("updated_at", &self.updated_at)
            .finish_non_exhaustive()
    }
}
