//! The MCP client (issue 12): a session's MCP servers (`mcp_servers` of its configuration)
//! and their tools in the registry as `mcp__<server>__<tool>`.
//!
//! A stdio server runs in the command sandbox (the same launcher as Bash: scrubbed
//! environment plus only the variables its entry names, the session workspace as the only
//! writable tree, and the session's command network: none, or only its egress proxy), one
//! process per session and server, started with the session's first run, kept between runs,
//! stopped after `mcp.idle_stop_seconds` without a call (and started again by the next one),
//! stopped when the session closes or expires, and restarted with backoff after a crash. Its
//! stdout passes an [`guard::OutputGuard`] that cuts the server off on garbage, oversized
//! messages or floods. An `http` server is reached over Streamable HTTP through the egress
//! client ([`http`]). A tenant admin registers servers once for the tenant ([`registry`],
//! `/v1/mcp-servers`); a session takes the ones it names in `use_mcp_servers`. Requests and
//! notifications from the server (elicitation, sampling, progress, `tools/list_changed`) are
//! handled in [`client`]; sampling is answered by the run's model when the entry allows it
//! ([`sampling`]); a changed tool list is read again before the run's next model request
//! ([`refresh`]). Built on the `rmcp` SDK.

pub mod client;
pub mod config;
pub mod elicitation;
pub mod guard;
pub mod http;
pub mod listing;
pub mod refresh;
pub mod registry;
pub mod sampling;
pub mod secret;
pub mod server;
pub mod settings;
pub mod status;
pub mod tools;

pub use config::{McpServerConfig, McpTransport};
pub use settings::McpSettings;
pub use status::{McpServerState, McpServerStatus};

use crate::sandbox::Sandbox;
use crate::tools::DynTool;
use crate::tools::builtin::SessionNetwork;
use crate::tools::pipeline::Approver;
use server::McpServer;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

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
    /// The session's servers (none started yet): `stdio` ones run in `sandbox` in
    /// `workspace` with the session's command `network`, `http` ones are reached through
    /// `egress`; each stdio server's process counts against the tenant's `mcp_processes`
    /// through `holds` while it runs. With `idle_stop`, a task (ending with the session's
    /// servers) stops each one unused for that long; it needs a Tokio runtime.
    pub fn new(
        configs: &[McpServerConfig],
        sandbox: Arc<Sandbox>,
        network: SessionNetwork,
        workspace: &Path,
        egress: &crate::egress::EgressClient,
        idle_stop: Option<Duration>,
        holds: crate::limits::SessionHolds,
    ) -> Self {
        let servers: Vec<Arc<McpServer>> = configs
            .iter()
            .map(|config| {
                Arc::new(McpServer::new(
                    config.clone(),
                    sandbox.clone(),
                    network.clone(),
                    workspace.to_owned(),
                    egress.clone(),
                    holds.clone(),
                ))
            })
            .collect();
        if let Some(idle) = idle_stop.filter(|_| !servers.is_empty()) {
            let watched: Vec<Weak<McpServer>> = servers.iter().map(Arc::downgrade).collect();
            tokio::spawn(stop_idle_servers(watched, idle));
        }
        Self { servers }
    }

    /// The approver through which the current run's elicitations are asked (`None` after
    /// the run).
    pub fn set_elicitor(&self, approver: Option<Arc<dyn Approver>>) {
        for server in &self.servers {
            server.client().set_elicitor(approver.clone());
        }
    }

    /// The sampler through which the current run answers its servers' sampling requests
    /// (`None` after the run; only servers whose entry sets `sampling` are answered).
    pub fn set_sampler(&self, sampler: Option<Arc<dyn sampling::Sampler>>) {
        for server in &self.servers {
            server.client().set_sampler(sampler.clone());
        }
    }

    /// Whether a server said its tool list changed since it was last read (cheap: one
    /// flag per server).
    pub fn tools_changed(&self) -> bool {
        self.servers.iter().any(|s| s.client().tools_changed())
    }

    /// Reads again the lists of the servers that said theirs changed, and returns, for each
    /// one read, its name and the tools it now offers. A server whose list cannot be read
    /// keeps its tools (and is not in the answer).
    pub async fn refresh_changed(&self) -> Vec<(String, McpTools)> {
        let changed: Vec<&Arc<McpServer>> = self
            .servers
            .iter()
            .filter(|s| s.client().tools_changed())
            .collect();
        let listed = futures::future::join_all(changed.iter().map(|s| s.tools())).await;
        let mut refreshed = Vec::new();
        for (server, listed) in changed.into_iter().zip(listed) {
            let Ok(listed) = listed else { continue };
            refreshed.push((server.config().name.clone(), Self::offer(server, &listed)));
        }
        refreshed
    }

    /// The registry tools of one server's list, recorded in its status.
    fn offer(server: &Arc<McpServer>, listed: &listing::Listing) -> McpTools {
        let (offered, skipped) = tools::registry_tools(server, listed);
        server.set_offered(
            offered.iter().map(|tool| tool.name().to_owned()).collect(),
            skipped,
        );
        if server.config().deferred {
            McpTools {
                visible: Vec::new(),
                deferred: offered,
            }
        } else {
            McpTools {
                visible: offered,
                deferred: Vec::new(),
            }
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
            let offered = Self::offer(server, &listed);
            tools.visible.extend(offered.visible);
            tools.deferred.extend(offered.deferred);
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

/// Stops the servers unused for `idle`, checking a few times per `idle`, until the session's
/// servers are gone.
async fn stop_idle_servers(servers: Vec<Weak<McpServer>>, idle: Duration) {
    let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    loop {
        tokio::time::sleep(tick).await;
        let live: Vec<Arc<McpServer>> = servers.iter().filter_map(Weak::upgrade).collect();
        if live.is_empty() {
            return;
        }
        for server in live {
            server.stop_if_idle(idle).await;
        }
    }
}
