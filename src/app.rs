//! Building and running the service: `build(settings)` gives a bound listener and state;
//! `run_until(shutdown)` serves until the shutdown future completes.

use crate::auth::jwt::KeyError;
use crate::auth::{HasVerifier, JwtVerifier};
use crate::config::Settings;
use crate::store::{self, ConnectOptions, Store, StoreError};
use std::future::Future;
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
        let store = store::connect(
            &settings.database_url(),
            &ConnectOptions {
                max_connections: settings.database_max_connections,
                acquire_timeout: settings.acquire_timeout(),
            },
        )
        .await?;
        let egress = crate::egress::EgressClient::new(
            crate::egress::AddressPolicy::from_allow_private(settings.allow_private_webhooks),
        )?;
        let runtime = crate::runtime::SessionRuntime::new(
            store.clone(),
            crate::runtime::RuntimeSettings {
                provider: settings.provider.clone(),
                workspaces_dir: settings.data_dir.join("workspaces"),
                data_dir: settings.data_dir.clone(),
                sandbox,
                limits: settings.limits.clone(),
                output_head_chars: settings.output_head_chars,
                tenant_providers: settings.tenant_providers.clone(),
                replica_id: settings.replica_id(),
                allow_session_scripts: settings.session_scripts_allowed(),
                run_lease: std::time::Duration::from_secs(settings.run_lease_seconds.max(1)),
                approval_park_after: (settings.approval_park_after_ms > 0)
                    .then(|| std::time::Duration::from_millis(settings.approval_park_after_ms)),
            },
            egress,
        );
        warn_if_commands_unavailable(runtime.sandbox().report());
        let listener =
            TcpListener::bind(settings.bind)
                .await
                .map_err(|source| StartError::Bind {
                    addr: settings.bind,
                    source,
                })?;
        Ok(Self {
            listener,
            state: AppState {
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

    /// Serves until `shutdown` completes, then finishes in-flight requests.
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

    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.spawn_retention();
        self.spawn_idle_expiry();
        let runs_stop = tokio_util::sync::CancellationToken::new();
        tokio::spawn(self.state.runtime.clone().maintain_runs(runs_stop.clone()));
        tokio::spawn(self.state.runtime.clone().follow_signals(runs_stop.clone()));
        let _stop_on_exit = runs_stop.drop_guard();
        let router = crate::api::router(self.state);
        // Events are small and latency matters (SSE): no Nagle delay on accepted connections.
        let listener = axum::serve::ListenerExt::tap_io(self.listener, |tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY");
            }
        });
        axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await
    }
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received");
}
