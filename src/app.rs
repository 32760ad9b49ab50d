//! Building and running the service: `build(settings)` gives a bound listener and state;
//! `run_until(shutdown)` serves until the shutdown future completes, then hands the runs off.

use crate::auth::jwt::KeyError;
use crate::auth::{HasVerifier, JwtVerifier};
use crate::config::Settings;
use crate::store::{self, ConnectOptions, Store, StoreError};
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Shared state of every handler. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub verifier: Arc<JwtVerifier>,
    pub settings: Arc<Settings>,
    pub runtime: Arc<crate::runtime::SessionRuntime>,
    /// The key of browser stream tickets ([`crate::api::stream_tickets`]).
    pub tickets: Arc<crate::api::stream_tickets::TicketKey>,
}

impl HasVerifier for AppState {
    fn verifier(&self) -> &Arc<JwtVerifier> {
        &self.verifier
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot set up token verification: {0}")]
    Keys(#[from] KeyError),
    #[error("cannot build the outbound HTTP client: {0}")]
    Egress(#[from] crate::egress::EgressError),
    #[error("cannot locate the sandbox launcher: {0}")]
    Launcher(std::io::Error),
    #[error(
        "the {what} {path} lies in a directory sandboxed commands can read ({dir}); move it \
         elsewhere (e.g. /var/lib/norma for data, /run/secrets for secrets)"
    )]
    SandboxExposure {
        what: &'static str,
        path: std::path::PathBuf,
        dir: std::path::PathBuf,
    },
    #[error(transparent)]
    Workspace(crate::config::ConfigError),
    /// `workspace.storage = "snapshot"` and the object store cannot be used.
    #[error("{0}")]
    Snapshot(String),
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Refuses a data dir, configuration file or secret file inside a directory that sandboxed
/// commands can read (a model could otherwise print the store, the signing key or the
/// configuration through Bash).
fn refuse_sandbox_exposure(
    settings: &Settings,
    sandbox: &crate::sandbox::SandboxConfig,
) -> Result<(), StartError> {
    let auth = &settings.auth;
    let mut files: Vec<(&'static str, &std::path::Path)> =
        vec![("data dir", settings.data_dir.as_path())];
    if let Some(file) = &settings.config_file {
        files.push(("configuration file", file));
    }
    if let Some(root) = &settings.workspace.shared_root {
        files.push(("shared workspace root", root));
    }
    if let Some(file) = &auth.hs256_secret_file {
        files.push(("HS256 secret file", file));
    }
    if let Some(file) = &auth.jwks_file {
        files.push(("JWKS file", file));
    }
    for key in &auth.public_keys {
        files.push(("public key file", &key.pem_file));
    }
    let dirs = sandbox.readable_dirs();
    for (what, path) in files {
        if let Some(dir) = crate::sandbox::rootfs::readable_dir_containing(path, &dirs) {
            return Err(StartError::SandboxExposure {
                what,
                path: path.to_path_buf(),
                dir,
            });
        }
    }
    Ok(())
}

/// Logs, at start-up, why command tools are off when a required sandbox part is missing.
fn warn_if_commands_unavailable(report: &crate::sandbox::SandboxReport) {
    if let Some(reason) = report
        .commands
        .reason
        .as_deref()
        .filter(|_| !report.commands.available)
    {
        tracing::warn!(
            reason,
            "command sandbox incomplete: Bash, background tasks and shells are unavailable"
        );
    }
    for part in crate::sandbox::SandboxPart::ALL {
        let field = report.part(part);
        if field.status == crate::sandbox::PartStatus::Unavailable {
            tracing::warn!(
                part = part.name(),
                reason = field.reason.as_deref().unwrap_or(""),
                "sandbox part unavailable"
            );
        }
    }
}

/// A built, bound, not yet serving application.
pub struct App {
    listener: TcpListener,
    /// The metrics listener (`metrics_bind`), when configured.
    metrics_listener: Option<TcpListener>,
    state: AppState,
}

impl App {
    /// Opens the store (applying migrations), sets up auth and binds the listener.
    pub async fn build(settings: Settings) -> Result<Self, StartError> {
        let launcher = match &settings.sandbox_launcher {
            Some(path) => path.clone(),
            None => std::env::current_exe().map_err(StartError::Launcher)?,
        };
        let sandbox = crate::sandbox::SandboxConfig::from_settings(launcher, &settings.sandbox);
        refuse_sandbox_exposure(&settings, &sandbox)?;
        let verifier = Arc::new(JwtVerifier::from_settings(
            &settings.auth,
            &settings.data_dir,
        )?);
        let files_root = settings
            .workspace
            .files_root(&settings.data_dir)
            .map_err(StartError::Workspace)?;
        let store = store::connect(
            &settings.database_url(),
            &ConnectOptions {
                max_connections: settings.database_max_connections,
                acquire_timeout: settings.acquire_timeout(),
            },
        )
        .await?;
        let snapshots = match settings.workspace.storage {
            crate::config::WorkspaceStorage::Snapshot => Some(Arc::new(
                crate::workspace_snapshot::SnapshotStore::connect(
                    &settings.workspace.snapshot,
                    &settings.replica_id(),
                )
                .await
                .map_err(StartError::Snapshot)?,
            )),
            _ => None,
        };
        let egress = crate::egress::EgressClient::with_stream_limits(
            settings
                .egress
                .address_policy(settings.allow_private_webhooks),
            settings.egress.stream_limits(),
        )?;
        // Providers are infrastructure traffic: an IP-literal endpoint the address policy
        // refuses is a start-up error (a host name is checked whenever it is resolved).
        let providers = std::iter::once(("provider".to_owned(), &settings.provider)).chain(
            settings
                .tenant_providers
                .iter()
                .map(|(tenant, provider)| (format!("tenant_providers.{tenant}"), provider)),
        );
        for (section, provider) in providers {
            if let Some(url) = &provider.base_url {
                egress.check_endpoint(url).map_err(|error| {
                    crate::egress::EgressError::Config(format!(
                        "{section}.base_url: {error} (list its block in \
                         egress.allow_private_cidrs to reach a provider there)"
                    ))
                })?;
            }
        }
        // So are search backends: an IP-literal endpoint outside the private allow-list is
        // a start-up error, not a tool that fails on every call.
        let search_endpoints = std::iter::once(("search".to_owned(), &settings.search.endpoint))
            .chain(
                settings.search.tenants.iter().map(|(tenant, backend)| {
                    (format!("search.tenants.{tenant}"), &backend.endpoint)
                }),
            );
        for (section, endpoint) in search_endpoints {
            if let Some(url) = endpoint {
                egress.check_endpoint(url).map_err(|error| {
                    crate::egress::EgressError::Config(format!(
                        "{section}.endpoint: {error} (list its block in \
                         egress.allow_private_cidrs to reach a backend there)"
                    ))
                })?;
            }
        }
        let broker = crate::egress::EgressBroker::new(Arc::new(
            settings
                .egress
                .policy(settings.allow_private_webhooks)
                .map_err(crate::egress::EgressError::Config)?,
        ));
        let runtime = crate::runtime::SessionRuntime::new(
            store.clone(),
            crate::runtime::RuntimeSettings {
                provider: offline_provider_with_demo(&settings),
                workspaces_dir: files_root.join("workspaces"),
                files_root,
                workspace_storage: settings.workspace.storage,
                snapshots,
                sandbox,
                limits: settings.limits.clone(),
                output_head_chars: settings.output_head_chars,
                tenant_providers: settings.tenant_providers.clone(),
                replica_id: settings.replica_id(),
                allow_session_scripts: settings.session_scripts_allowed(),
                run_lease: std::time::Duration::from_secs(settings.run_lease_seconds.max(1)),
                approval_park_after: (settings.approval_park_after_ms > 0)
                    .then(|| std::time::Duration::from_millis(settings.approval_park_after_ms)),
                fetch_limits: settings.egress.fetch_limits(),
                search: crate::search::SearchBackends::from_settings(&settings.search)
                    .map_err(crate::egress::EgressError::Config)?,
                prices: settings.prices.clone(),
                mcp: settings.mcp,
                metrics: crate::metrics::Metrics::from_settings(&settings),
                capture_content: settings.telemetry.capture_content,
            },
            egress,
            broker,
        );
        warn_if_commands_unavailable(runtime.sandbox().report());
        let listener =
            TcpListener::bind(settings.bind)
                .await
                .map_err(|source| StartError::Bind {
                    addr: settings.bind,
                    source,
                })?;
        let metrics_listener = match settings.metrics_bind {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::Bind { addr, source })?,
            ),
            None => None,
        };
        Ok(Self {
            listener,
            metrics_listener,
            state: AppState {
                tickets: Arc::new(crate::api::stream_tickets::TicketKey::from_settings(
                    &settings.browser,
                )),
                store,
                verifier,
                settings: Arc::new(settings),
                runtime,
            },
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The address the metrics listener bound (`None`: no `metrics_bind`).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|listener| listener.local_addr().ok())
    }

    /// Serves `GET /metrics` on the metrics listener until `stop` is cancelled.
    fn spawn_metrics(&mut self, stop: tokio_util::sync::CancellationToken) {
        let Some(listener) = self.metrics_listener.take() else {
            return;
        };
        let runtime = self.state.runtime.clone();
        let sample: crate::metrics::serve::Sampler =
            Arc::new(move |metrics| metrics.set_runs_queued(runtime.queued_runs()));
        tokio::spawn(crate::metrics::serve::serve(
            listener,
            self.state.runtime.metrics().clone(),
            sample,
            stop,
        ));
    }

    /// Deletes spilled outputs past the retention period, hourly (and once at start-up).
    fn spawn_retention(&self) {
        let hours = self.state.settings.output_retention_hours;
        if hours == 0 {
            return;
        }
        let store = self.state.store.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
            loop {
                tick.tick().await;
                match store
                    .purge_outputs(std::time::Duration::from_secs(hours * 3600))
                    .await
                {
                    Ok(0) => {}
                    Ok(purged) => tracing::info!(purged, "spilled outputs past retention deleted"),
                    Err(error) => tracing::warn!(%error, "output retention sweep failed"),
                }
            }
        });
    }

    /// Deletes expired `Idempotency-Key`s, hourly (and once at start-up); expired keys are
    /// ignored before they are swept.
    fn spawn_idempotency_sweep(&self) {
        let store = self.state.store.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(3600));
            loop {
                tick.tick().await;
                match store.purge_idempotency_keys().await {
                    Ok(0) => {}
                    Ok(purged) => tracing::info!(purged, "expired idempotency keys deleted"),
                    Err(error) => tracing::warn!(%error, "idempotency key sweep failed"),
                }
            }
        });
    }

    /// Closes sessions idle past `session_idle_expiry_seconds`, emitting SessionEnd.
    fn spawn_idle_expiry(&self) {
        let seconds = self.state.settings.session_idle_expiry_seconds;
        if seconds == 0 {
            return;
        }
        let state = self.state.clone();
        let period = std::time::Duration::from_millis((seconds * 500).clamp(200, 60_000));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                if let Err(error) =
                    crate::runtime::expire_idle_sessions(&state.store, &state.runtime, seconds)
                        .await
                {
                    tracing::warn!(%error, "idle-expiry sweep failed");
                }
            }
        });
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: the listener closes and
    /// no new prompt is taken, open event streams get `reconnect`, runs in flight hand off to
    /// the other replicas (see [`crate::runtime::handoff`]; at most `shutdown_grace_seconds`
    /// plus a few seconds), and connections still open after [`CONNECTION_DRAIN`] are dropped.
    pub async fn run_until(
        mut self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // Before the first request: what an earlier process under this replica id held open
        // is gone with it (this one's heartbeat would renew it for good).
        self.state.runtime.holds().release_earlier().await;
        self.spawn_retention();
        self.spawn_idempotency_sweep();
        self.spawn_idle_expiry();
        let runs_stop = tokio_util::sync::CancellationToken::new();
        // Scrapes go on through the hand-off; the listener closes when the runs stopped.
        self.spawn_metrics(runs_stop.clone());
        tokio::spawn(self.state.runtime.clone().maintain_runs(runs_stop.clone()));
        tokio::spawn(self.state.runtime.clone().follow_signals(runs_stop.clone()));
        tokio::spawn(crate::runtime::outbox::run(
            self.state.store.clone(),
            self.state.runtime.egress().clone(),
            self.state.settings.webhooks.clone(),
            self.state.runtime.metrics().clone(),
            runs_stop.clone(),
        ));
        let _stop_on_exit = runs_stop.clone().drop_guard();
        let runtime = self.state.runtime.clone();
        let grace = std::time::Duration::from_secs(self.state.settings.shutdown_grace_seconds);
        let router = crate::api::router(self.state);
        // Events are small and latency matters (SSE): no Nagle delay on accepted connections.
        let listener = axum::serve::ListenerExt::tap_io(self.listener, |tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY");
            }
        });
        let stop_listening = tokio_util::sync::CancellationToken::new();
        let mut server = tokio::spawn(
            // A clone of the finished router per connection (one `Arc`): serving the `Router`
            // itself would rebuild its route table for every connection accepted.
            axum::serve(listener, router.into_make_service())
                .with_graceful_shutdown(stop_listening.clone().cancelled_owned())
                .into_future(),
        );
        tokio::select! {
            () = shutdown => {}
            // The server stopped on its own (an accept loop failure).
            served = &mut server => return served.unwrap_or_else(|error| Err(std::io::Error::other(error))),
        }
        tracing::info!(
            grace_seconds = grace.as_secs(),
            "shutting down: handing runs off"
        );
        // No new prompt from here on, even on a connection accepted before.
        runtime.begin_shutdown();
        stop_listening.cancel();
        let report = runtime.hand_off(grace).await;
        tracing::info!(
            stopped = report.stopped,
            released = report.released,
            "runs handed off"
        );
        runs_stop.cancel();
        match tokio::time::timeout(CONNECTION_DRAIN, server).await {
            Ok(served) => served.unwrap_or_else(|error| Err(std::io::Error::other(error))),
            Err(_) => {
                tracing::warn!("connections still open after the shutdown; dropping them");
                Ok(())
            }
        }
    }
}

/// How long requests still in flight after the runs handed off may take to finish.
pub const CONNECTION_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// SIGTERM and SIGINT, listened to from creation on (so a signal arriving between two waits
/// is not lost).
pub struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes on the next SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {},
            _ = self.interrupt.recv() => {},
        }
    }
}

/// The server's provider settings; in development mode, an offline (scripted) provider without
/// a script plays the built-in demo agent ([`crate::llm::demo`]) instead of echoing.
fn offline_provider_with_demo(settings: &Settings) -> crate::llm::ProviderConfig {
    let mut provider = settings.provider.clone();
    if settings.auth.is_development()
        && provider.kind == crate::llm::ProviderKind::Scripted
        && provider.script.is_none()
    {
        provider.script = Some(crate::llm::demo::demo_script());
    }
    provider
}
