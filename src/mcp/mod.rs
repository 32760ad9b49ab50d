//! The MCP client (issue 12): a session's MCP servers (`mcp_servers` of its configuration)
//! and their tools in the registry as `mcp__<server>__<tool>`.
//!
//! A stdio server runs in the command sandbox (the same launcher as Bash: scrubbed
//! environment plus only the variables its entry names, the session workspace as the only
//! writable tree, no network), one process per session and server, started with the
//! session's first run, kept between runs, stopped when the session closes or expires, and
//! restarted with backoff after a crash. Its stdout passes an [`guard::OutputGuard`] that cuts
//! the server off on garbage, oversized messages or floods. An `http` server is reached over
//! Streamable HTTP through the egress client ([`http`]). A tenant admin registers servers
//! once for the tenant ([`registry`], `/v1/mcp-servers`); a session takes the ones it names
//! in `use_mcp_servers`. Built on the `rmcp` SDK.

pub mod config;
pub mod guard;
pub mod http;
pub mod registry;
pub mod secret;
pub mod server;
pub mod status;
pub mod tools;

pub use config::{McpServerConfig, McpTransport};
pub use status::{McpServerState, McpServerStatus};

use crate::sandbox::Sandbox;
use crate::tools::DynTool;
use server::McpServer;
use std::path::Path;
use std::sync::Arc;

/// The MCP servers of one session.
pub struct SessionMcp {
    servers: Vec<Arc<McpServer>>,
}

/// A session's MCP tools for one run.
#[derive(Default)]
pub struct McpTools {
    /// Tools shown to the model.
    pub visible: Vec<DynTool>,
    /// Tools of `deferred` servers (found with `SearchExtraTools`).
    pub deferred: Vec<DynTool>,
}

impl SessionMcp {
    /// The servers of `configs`: `stdio` ones run in `sandbox` in `workspace`, `http` ones
    /// are reached through `egress`.
    pub fn new(
        configs: &[McpServerConfig],
        sandbox: Arc<Sandbox>,
        workspace: &Path,
        egress: &crate::egress::EgressClient,
    ) -> Self {
        Self {
            servers: configs
                .iter()
                .map(|config| {
                    Arc::new(McpServer::new(
                        config.clone(),
                        sandbox.clone(),
                        workspace.to_owned(),
                        egress.clone(),
                    ))
                })
                .collect(),
        }
    }

    /// Starts the servers that are not running (each on its own; one that fails only shows
    /// in its status) and returns their tools.
    pub async fn tools(&self) -> McpTools {
        let listed = futures::future::join_all(self.servers.iter().map(|s| s.tools())).await;
        let mut tools = McpTools::default();
        for (server, listed) in self.servers.iter().zip(listed) {
            let Ok(listed) = listed else {
                server.set_offered(Vec::new(), Vec::new());
                continue;
            };
            let (offered, skipped) = tools::registry_tools(server, &listed);
            server.set_offered(
                offered.iter().map(|tool| tool.name().to_owned()).collect(),
                skipped,
            );
            if server.config().deferred {
                tools.deferred.extend(offered);
            } else {
                tools.visible.extend(offered);
            }
        }
        tools
    }

    pub fn statuses(&self) -> Vec<McpServerStatus> {
        self.servers.iter().map(|server| server.status()).collect()
    }

    /// Whether the session has no MCP server (else its resources are kept between runs, so
    /// servers keep running and their statuses stay visible until the session ends).
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Stops every server (session closed or expired).
    pub async fn shutdown(&self) {
        for server in &self.servers {
            server.stop().await;
        }
    }
}
