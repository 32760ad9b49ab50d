//! The tenant's MCP server registry (`/v1/mcp-servers`): entries a tenant administrator
//! registers once, which sessions then name in `use_mcp_servers`.
//!
//! A session takes a copy of each entry it names when it is created (into its
//! `mcp_servers`), so it keeps working the same way if the entry is replaced or deleted later,
//! and a resumed session restarts exactly the servers it had; changes apply to sessions
//! created afterwards. A name the session also declares itself in `mcp_servers` is refused
//! (`422`), as is a name nobody registered.

use super::config::{MAX_SERVERS, McpServerConfig, is_valid_server_name};
use crate::ids::TenantId;
use crate::store::{McpServerRecord, Store, StoreError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A registered MCP server as the API shows it (secrets redacted).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RegisteredMcpServer {
    /// The entry, with environment values, header values and the bearer token shown as
    /// `<redacted>` when set.
    pub server: McpServerConfig,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The registry's servers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RegisteredMcpServers {
    pub servers: Vec<RegisteredMcpServer>,
}

/// A stored entry that does not parse any more (it was written by this server, so this is
/// an internal error, logged without its content).
#[derive(Debug, thiserror::Error)]
#[error("the registered MCP server `{0}` does not parse")]
pub struct BadRecord(pub String);

/// The entry of a stored row, secrets included.
pub fn entry(record: &McpServerRecord) -> Result<McpServerConfig, BadRecord> {
    serde_json::from_value(record.config.clone()).map_err(|error| {
        tracing::error!(server = %record.name, %error, "stored MCP server entry does not parse");
        BadRecord(record.name.clone())
    })
}

/// What the API answers for a stored row.
pub fn shown(record: &McpServerRecord) -> Result<RegisteredMcpServer, BadRecord> {
    Ok(RegisteredMcpServer {
        server: entry(record)?.redacted(),
        created_at: record.created_at,
        updated_at: record.updated_at,
    })
}

/// Why a session's `use_mcp_servers` cannot be resolved: `(field, message)`, or the store.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    BadRecord(#[from] BadRecord),
}

/// Checks the shape of `use_mcp_servers` (names, duplicates, count).
pub fn validate_uses(uses: &[String]) -> Result<(), (String, String)> {
    if uses.len() > MAX_SERVERS {
        return Err((
            "use_mcp_servers".into(),
            format!("at most {MAX_SERVERS} servers"),
        ));
    }
    for (index, name) in uses.iter().enumerate() {
        let field = format!("use_mcp_servers[{index}]");
        if !is_valid_server_name(name) {
            return Err((field, "not a valid MCP server name".into()));
        }
        if uses[..index].contains(name) {
            return Err((field, format!("`{name}` is named twice")));
        }
    }
    Ok(())
}

/// Appends to `servers` (a session's own entries) the registered entries `uses` names.
pub async fn resolve(
    store: &dyn Store,
    tenant: &TenantId,
    uses: &[String],
    servers: &mut Vec<McpServerConfig>,
) -> Result<(), ResolveError> {
    let invalid = |field: String, message: String| ResolveError::Invalid { field, message };
    for (index, name) in uses.iter().enumerate() {
        let field = format!("use_mcp_servers[{index}]");
        if servers.iter().any(|server| &server.name == name) {
            return Err(invalid(
                field,
                format!("`{name}` is also declared in mcp_servers: rename one of them"),
            ));
        }
        let Some(record) = store.get_mcp_server(tenant, name).await? else {
            return Err(invalid(
                field,
                format!("no MCP server named `{name}` is registered"),
            ));
        };
        servers.push(entry(&record)?);
    }
    if servers.len() > MAX_SERVERS {
        return Err(invalid(
            "use_mcp_servers".into(),
            format!("at most {MAX_SERVERS} MCP servers per session, declared and registered"),
        ));
    }
    Ok(())
}
