//! One MCP server of one session: started lazily in the command sandbox, its tool list, its
//! calls, its status, restarts with backoff after a crash, its stop when idle, and its end.

use super::client::{ClientState, McpClient};
use super::config::{McpServerConfig, McpTransport};
use super::guard::{CutOff, GuardLimits, OutputGuard};
use super::listing::{self, Listing};
use super::status::{McpServerState, McpServerStatus};
use crate::sandbox::Sandbox;
use crate::tools::builtin::SessionNetwork;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{RoleClient, ServiceExt};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// How long the start (spawn, handshake, tool list) may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reading the tool list again (after `tools/list_changed`) may take: it happens
/// before a model request, so a server slow to answer delays its run only this much (and
/// keeps its last list).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(10);
/// Consecutive crashes after which the server is not restarted any more.
const MAX_CRASHES: u32 = 5;
/// The end of the server's stderr kept for its status.
const STDERR_TAIL_BYTES: usize = 2048;

/// Why a call could not be answered by the server.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server is not running (failed, cut off, crashed and waiting to restart, stopped).
    #[error("{0}")]
    Unavailable(String),
    /// The server ended (or was cut off) during the call.
    #[error("{0}")]
    Lost(String),
    /// The server answered with a protocol error.
    #[error("{0}")]
    Protocol(String),
    #[error("the call took longer than {0} s")]
    Timeout(u64),
    #[error("the call was cancelled")]
    Cancelled,
}

struct Connection {
    service: RunningService<RoleClient, McpClient>,
    /// A stdio server's `mcp_processes` hold, released when the connection goes.
    process_hold: Option<crate::limits::HoldGuard>,
    child: Mutex<Option<tokio::process::Child>>,
    cut_off: CutOff,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
}

impl Connection {
    fn alive(&self) -> bool {
        !self.service.peer().is_transport_closed()
            && self
                .cut_off
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
    }

    fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).trim().to_owned()
    }

    fn kill(&self) {
        self.service.cancellation_token().cancel();
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.start_kill();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Health {
    state: McpServerState,
    error: Option<String>,
    crashes: u32,
    restarts: u32,
    retry_at: Option<Instant>,
    tools: Vec<String>,
    skipped: Vec<String>,
    /// The start (or end of the last call) after which the server counts as unused.
    last_used: Instant,
}

/// One call: which registry call it is, and where its progress goes.
pub struct CallSpec<'a> {
    pub tool: &'a str,
    pub tool_use_id: &'a str,
    /// The registry name (`mcp__<server>__<tool>`).
    pub tool_name: &'a str,
    pub progress: Option<crate::tools::ProgressSink>,
}

/// See the module docs.
pub struct McpServer {
    config: McpServerConfig,
    sandbox: Arc<Sandbox>,
    network: SessionNetwork,
    workspace: PathBuf,
    /// The outbound client of `http` servers.
    egress: crate::egress::EgressClient,
    limits: GuardLimits,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// Where a stdio server's process is counted (the tenant's `mcp_processes`).
    holds: crate::limits::SessionHolds,
    /// The last tool list (kept while the server is idle), shared with each run that reads it.
    listed: Mutex<Arc<Listing>>,
    client: Arc<ClientState>,
    health: Mutex<Health>,
}

/// The first tool list of a freshly connected server. rmcp's response cache is turned off
/// first: it would keep every page the server marks cacheable (up to 512 answers of 4 MiB,
/// kept past their expiry to serve on errors) beside the bounded [`Listing`], and could
/// answer a read after `tools/list_changed` with a stale page.
async fn list_tools(peer: &Peer<RoleClient>) -> Result<Listing, ServiceError> {
    peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
        .await;
    listing::read(peer).await
}

impl McpServer {
    pub fn new(
        config: McpServerConfig,
        sandbox: Arc<Sandbox>,
        network: SessionNetwork,
        workspace: PathBuf,
        egress: crate::egress::EgressClient,
        holds: crate::limits::SessionHolds,
    ) -> Self {
        Self {
            holds,
            client: ClientState::new(&config.name, config.sampling),
            config,
            sandbox,
            network,
            workspace,
            egress,
            limits: GuardLimits::default(),
            connection: tokio::sync::Mutex::new(None),
            listed: Mutex::new(Arc::default()),
            health: Mutex::new(Health {
                state: McpServerState::NotStarted,
                error: None,
                crashes: 0,
                restarts: 0,
                retry_at: None,
                tools: Vec::new(),
                skipped: Vec::new(),
                last_used: Instant::now(),
            }),
        }
    }

    /// What the server's connections share (the calls in flight, the run's elicitor).
    pub fn client(&self) -> &Arc<ClientState> {
        &self.client
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server's status as `GET /v1/sessions/{id}` shows it.
    pub fn status(&self) -> McpServerStatus {
        let health = self.health();
        McpServerStatus {
            name: self.config.name.clone(),
            state: health.state,
            error: health.error.clone(),
            tools: health.tools.clone(),
            skipped_tools: health.skipped.clone(),
            restarts: health.restarts,
        }
    }

    /// Records which registry tools the session offers and which the server listed but
    /// could not be offered (with why).
    pub fn set_offered(&self, tools: Vec<String>, skipped: Vec<String>) {
        let mut health = self.health();
        health.tools = tools;
        health.skipped = skipped;
    }

    /// The server's tools, starting it first when it is not running (an idle server is not
    /// started: its last list stands until a call starts it again). After the server said
    /// its list changed, the list is read again, with the same bounds as the first.
    pub async fn tools(&self) -> Result<Arc<Listing>, String> {
        if self.health().state == McpServerState::Idle {
            return Ok(self.listed().clone());
        }
        let connection = self.connect().await?;
        if self.client.take_tools_changed() {
            let listed =
                tokio::time::timeout(REFRESH_TIMEOUT, listing::read(connection.service.peer()))
                    .await;
            match listed {
                Ok(Ok(listing)) => {
                    tracing::info!(server = %self.config.name, tools = listing.tools.len(),
                        "MCP server tool list refreshed");
                    *self.listed() = Arc::new(listing);
                }
                Ok(Err(error)) => {
                    tracing::warn!(server = %self.config.name, %error, "tools/list refresh failed");
                }
                Err(_) => {
                    tracing::warn!(server = %self.config.name, "tools/list refresh timed out");
                }
            }
        }
        Ok(self.listed().clone())
    }

    fn listed(&self) -> std::sync::MutexGuard<'_, Arc<Listing>> {
        self.listed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the server when it has had no call in flight for `idle` (it starts again with
    /// the next call).
    pub async fn stop_if_idle(&self, idle: Duration) {
        let Ok(mut slot) = self.connection.try_lock() else {
            return;
        };
        if slot.is_none() || self.client.in_flight() > 0 {
            return;
        }
        {
            let health = self.health();
            if health.state != McpServerState::Ready || health.last_used.elapsed() < idle {
                return;
            }
        }
        if let Some(connection) = slot.take() {
            connection.kill();
        }
        // The next start reads the list afresh; until then the last one stands.
        self.client.take_tools_changed();
        let mut health = self.health();
        health.state = McpServerState::Idle;
        health.error = None;
        tracing::info!(server = %self.config.name, idle_seconds = idle.as_secs(), "MCP server stopped while idle");
    }

    /// A running connection: the current one, or a fresh start when the server is not
    /// running and may (re)start.
    async fn connect(&self) -> Result<Arc<Connection>, String> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref() {
            if connection.alive() {
                return Ok(connection.clone());
            }
            let connection = slot.take().expect("checked above");
            self.lost(&connection);
        }
        let from_idle;
        {
            let health = self.health();
            from_idle = health.state == McpServerState::Idle;
            match health.state {
                McpServerState::Failed | McpServerState::CutOff | McpServerState::Stopped => {
                    return Err(health
                        .error
                        .clone()
                        .unwrap_or_else(|| format!("{:?}", health.state)));
                }
                McpServerState::Crashed => {
                    if let Some(at) = health.retry_at.filter(|at| *at > Instant::now()) {
                        return Err(format!(
                            "{}; restarting in {} s",
                            health.error.clone().unwrap_or_default(),
                            at.saturating_duration_since(Instant::now()).as_secs() + 1
                        ));
                    }
                }
                _ => {}
            }
        }
        // A stdio server is a process on this host: it counts against the tenant's
        // `mcp_processes` while it runs. Refused, the server stays as it was (not started,
        // idle or crashed) and is tried again at its next use.
        let process_hold = match self.take_process_hold().await {
            Ok(hold) => hold,
            Err(why) => {
                self.health().error = Some(why.clone());
                return Err(why);
            }
        };
        self.health().state = McpServerState::Starting;
        match tokio::time::timeout(START_TIMEOUT, self.start()).await {
            Ok(Ok(mut connection)) => {
                connection.process_hold = process_hold;
                let connection = Arc::new(connection);
                {
                    let mut health = self.health();
                    if health.crashes > 0 && !from_idle {
                        health.restarts += 1;
                    }
                    health.state = McpServerState::Ready;
                    health.error = None;
                    health.last_used = Instant::now();
                }
                // A fresh list: no earlier change notice is pending for it.
                self.client.take_tools_changed();
                tracing::info!(server = %self.config.name, tools = self.listed().tools.len(), "MCP server ready");
                *slot = Some(connection.clone());
                Ok(connection)
            }
            Ok(Err(error)) => Err(self.start_failed(error)),
            Err(_) => Err(self.start_failed(format!(
                "no answer to the handshake within {} s",
                START_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The `mcp_processes` hold a stdio server's start needs (`None` for an `http` server);
    /// `Err` says why the start is refused.
    async fn take_process_hold(&self) -> Result<Option<crate::limits::HoldGuard>, String> {
        if self.config.transport != McpTransport::Stdio {
            return Ok(None);
        }
        self.holds
            .take(crate::limits::HoldKind::McpProcess)
            .await
            .map(Some)
            .map_err(|error| format!("the server was not started: {}", error.message))
    }

    fn start_failed(&self, error: String) -> String {
        let mut health = self.health();
        health.state = McpServerState::Failed;
        health.error = Some(format!("the server did not start: {error}"));
        tracing::warn!(server = %self.config.name, %error, "MCP server did not start");
        health.error.clone().unwrap_or_default()
    }

    /// Records the end of a connection that is no longer alive: cut off (final) or crashed
    /// (restarted later with backoff, until too many crashes in a row).
    fn lost(&self, connection: &Connection) -> String {
        connection.kill();
        let cut_off = connection
            .cut_off
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut health = self.health();
        if let Some(reason) = cut_off {
            health.state = McpServerState::CutOff;
            health.error = Some(format!("the server was cut off: {reason}"));
        } else {
            health.crashes += 1;
            let tail = connection.stderr_tail();
            let detail = if tail.is_empty() {
                String::new()
            } else {
                format!(" (stderr: {tail})")
            };
            if health.crashes >= MAX_CRASHES {
                health.state = McpServerState::Failed;
                health.error = Some(format!(
                    "the server ended {} times in a row{detail}",
                    health.crashes
                ));
            } else {
                let backoff = Duration::from_secs(1 << (health.crashes - 1).min(5));
                health.state = McpServerState::Crashed;
                health.retry_at = Some(Instant::now() + backoff);
                health.error = Some(format!("the server ended{detail}"));
            }
        }
        tracing::warn!(server = %self.config.name, state = ?health.state, "MCP server lost");
        health.error.clone().unwrap_or_default()
    }

    async fn start(&self) -> Result<Connection, String> {
        if self.config.transport == McpTransport::Http {
            return self.start_http().await;
        }
        let program: Vec<&str> = std::iter::once(self.config.command.as_str())
            .chain(self.config.args.iter().map(String::as_str))
            .collect();
        let env: Vec<(String, String)> = self
            .config
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // The session's command network: none, or only its egress proxy.
        let spec = self
            .network
            .launch_spec(&self.sandbox, &self.workspace, &program, "dumb")
            .map_err(|error| error.message)?
            .with_env(&env);
        let mut child = tokio::process::Command::new(&spec.program)
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot start the sandbox launcher: {error}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the server's pipes are missing".into());
        };
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(drain_stderr(stderr, stderr_tail.clone()));
        let cut_off = CutOff::default();
        let transport = AsyncRwTransport::new_client(
            OutputGuard::new(stdout, self.limits, cut_off.clone()),
            stdin,
        )
        .with_max_line_length(self.limits.max_line_bytes + 1);
        let tail = |what: &str, error: String| {
            let tail =
                String::from_utf8_lossy(&stderr_tail.lock().unwrap_or_else(|e| e.into_inner()))
                    .trim()
                    .to_owned();
            if tail.is_empty() {
                format!("{what}: {error}")
            } else {
                format!("{what}: {error} (stderr: {tail})")
            }
        };
        let client = McpClient {
            state: self.client.clone(),
        };
        let service = match client.serve(transport).await {
            Ok(service) => service,
            Err(error) => {
                // Give the stderr reader a moment to collect why the program ended.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(tail("handshake", error.to_string()));
            }
        };
        let listing = list_tools(service.peer())
            .await
            .map_err(|error| tail("tools/list", error.to_string()))?;
        *self.listed() = Arc::new(listing);
        Ok(Connection {
            service,
            process_hold: None,
            child: Mutex::new(Some(child)),
            cut_off,
            stderr_tail,
        })
    }

    /// Connects to an `http` server through the egress client (see `super::http`).
    async fn start_http(&self) -> Result<Connection, String> {
        let transport = super::http::transport(&self.config, &self.egress)?;
        let client = McpClient {
            state: self.client.clone(),
        };
        let service = client
            .serve(transport)
            .await
            .map_err(|error| format!("handshake: {error}"))?;
        let listing = list_tools(service.peer())
            .await
            .map_err(|error| format!("tools/list: {error}"))?;
        *self.listed() = Arc::new(listing);
        Ok(Connection {
            service,
            process_hold: None,
            child: Mutex::new(None),
            cut_off: CutOff::default(),
            stderr_tail: Arc::default(),
        })
    }

    /// Calls `call.tool` with `arguments`, bounded by the server's timeout and `cancel`.
    pub async fn call(
        &self,
        call: CallSpec<'_>,
        arguments: serde_json::Map<String, serde_json::Value>,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, CallError> {
        let _registered = self
            .client
            .begin_call(call.tool_use_id, call.tool_name, call.progress);
        let outcome = self.call_registered(call.tool, arguments, cancel).await;
        self.health().last_used = Instant::now();
        outcome
    }

    async fn call_registered(
        &self,
        tool: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, CallError> {
        let connection = self.connect().await.map_err(CallError::Unavailable)?;
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let timeout = Duration::from_secs(self.config.timeout_seconds);
        let peer = connection.service.peer().clone();
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(timeout, peer.call_tool(params)) => outcome,
            () = cancel.cancelled() => return Err(CallError::Cancelled),
        };
        match outcome {
            Err(_) => Err(CallError::Timeout(self.config.timeout_seconds)),
            Ok(Ok(result)) => Ok(result),
            Ok(Err(ServiceError::McpError(error))) => {
                Err(CallError::Protocol(error.message.to_string()))
            }
            Ok(Err(error)) => {
                // Let the transport notice the end (and the stderr reader its last words).
                tokio::time::sleep(Duration::from_millis(50)).await;
                let mut slot = self.connection.lock().await;
                let current = slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &connection));
                if connection.alive() {
                    return Err(CallError::Protocol(error.to_string()));
                }
                if current {
                    slot.take();
                    return Err(CallError::Lost(self.lost(&connection)));
                }
                Err(CallError::Lost(
                    self.health()
                        .error
                        .clone()
                        .unwrap_or_else(|| error.to_string()),
                ))
            }
        }
    }

    /// Stops the server for good (session closed or expired).
    pub async fn stop(&self) {
        if let Some(connection) = self.connection.lock().await.take() {
            connection.kill();
        }
        let mut health = self.health();
        health.state = McpServerState::Stopped;
        health.error = Some("the session ended".into());
    }
}

async fn drain_stderr(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > STDERR_TAIL_BYTES {
            let excess = tail.len() - STDERR_TAIL_BYTES;
            tail.drain(..excess);
        }
    }
}
