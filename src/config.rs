//! Server settings: defaults < TOML file < environment (`NORMA_*`) < command-line flags.
//!
//! Nested keys use `__` in the environment: `NORMA_AUTH__ISSUER=…` sets `auth.issuer`.
//! Secrets are `SecretString`s: they never print in `Debug` output or logs.
//!
//! Every `NORMA_*` variable must be a setting: a typo such as `NORMA_DATABSE_URL` stops
//! start-up instead of silently running on the default SQLite store. The only exceptions are
//! the variables other programs put into the environment, listed in [`ignored_env_suffix`]:
//! what Kubernetes injects for a Service whose name starts with `norma` (`NORMA_SERVICE_HOST`,
//! `NORMA_PORT_8080_TCP`, …), the terminal client's `NORMA_URL` / `NORMA_TOKEN`, `NORMA_CONFIG`
//! (the `--config` flag) and the test and benchmark harnesses' `NORMA_TEST_*` / `NORMA_BENCH_*`.
//! `norma serve` logs each ignored name once at start-up (never its value).
//!
//! Development mode (no verification key configured) binds loopback only unless `dev = true`
//! (`--dev`, `NORMA_DEV=true`) says the exposure is intended ([`Settings::check_serving`]).

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every setting of `norma serve`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Address the HTTP API listens on.
    pub bind: SocketAddr,
    /// Address of the Prometheus metrics listener (`GET /metrics`, no token): loopback or a
    /// cluster-internal address, never the public one. Unset (the default): no metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_bind: Option<SocketAddr>,
    /// Traces (`[telemetry]`): what spans may carry beyond ids, names and counts.
    pub telemetry: TelemetrySettings,
    /// Where the embedded store, the development signing key and workspaces live.
    pub data_dir: PathBuf,
    /// `postgres://…` or `sqlite://…`; defaults to `sqlite://<data_dir>/norma.db`.
    #[serde(skip_serializing)]
    pub database_url: Option<SecretString>,
    /// Connections in the store's pool.
    pub database_max_connections: u32,
    /// How long a request waits for a store connection before answering `STORE_UNAVAILABLE`.
    pub database_acquire_timeout_ms: u64,
    /// Threads that run the server's async work (HTTP, runs, streams), 1 to
    /// [`MAX_WORKER_THREADS`]. Unset: one per core (or `TOKIO_WORKER_THREADS`). Fewer workers
    /// than cores spend less CPU per run at low load (fewer hand-offs between workers) and wait
    /// longer under load (`benches/ROUNDS.md`, twenty-second round: one worker on two
    /// cores, −10 to −20 % server CPU per lone run, +40 % approval round trip at 16 in flight).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<usize>,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Open sessions with no activity for this many seconds are closed (SessionEnd hooks run
    /// with reason `expired`); 0 disables expiry.
    pub session_idle_expiry_seconds: u64,
    /// Let outbound requests (webhooks, hooks, WebFetch) reach every loopback, private and
    /// link-local address (tests, labs): an alias of listing every block in
    /// `egress.allow_private_cidrs`.
    pub allow_private_webhooks: bool,
    /// Outbound requests: private blocks allowed, domain rules, WebFetch bounds (`[egress]`).
    pub egress: crate::egress::EgressSettings,
    /// The WebSearch backend of the server and of tenants (`[search]`); none: no WebSearch.
    pub search: crate::search::SearchSettings,
    /// Tenant limits (`[limits]`, `NORMA_LIMITS__*`): `429 TENANT_LIMIT` (or a tool result
    /// with code `TENANT_LIMIT`) beyond each, counted across replicas sharing the store.
    pub limits: crate::limits::TenantLimits,
    /// Characters of a tool output the model reads before it is capped and spilled.
    pub output_head_chars: usize,
    /// Provider settings per tenant id, replacing `provider` for that tenant's sessions
    /// (TOML: `[tenant_providers.acme]`).
    pub tenant_providers: std::collections::BTreeMap<String, crate::llm::ProviderConfig>,
    /// Spilled tool outputs older than this many hours are deleted (0 keeps them forever).
    pub output_retention_hours: u64,
    pub auth: AuthSettings,
    pub log: LogSettings,
    /// The default model provider (kind, endpoint, model, key, retries). Sessions may
    /// override the model name, and the script of the scripted provider.
    pub provider: crate::llm::ProviderConfig,
    /// The executable that runs sandboxed commands (`norma __sandbox-exec …`); defaults to
    /// this server's own binary.
    pub sandbox_launcher: Option<PathBuf>,
    /// Which command-sandbox parts are required and which are turned off (`[sandbox]`).
    pub sandbox: crate::sandbox::SandboxSettings,
    /// The configuration file these settings were loaded from (set by [`Settings::load`];
    /// start-up refuses it inside a directory sandboxed commands can read).
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
    /// This replica's name in run leases; defaults to the host name. Replicas sharing one
    /// database need distinct names; a restarted replica with the same name takes its
    /// unfinished runs back at once (others wait for the lease to expire).
    pub replica_id: Option<String>,
    /// How long a run's lease lasts without a heartbeat (renewed every third of it); a
    /// crashed replica's runs are taken over after this.
    pub run_lease_seconds: u64,
    /// How long a tool call waits in process for its approval before the run parks (no task
    /// waits for a human: the run resumes from the store on the answer or at expiry); `0`
    /// never parks.
    pub approval_park_after_ms: u64,
    /// Allows development mode (no verification key configured) on a non-loopback address.
    pub dev: bool,
    /// Lets session configs carry a model script (`model.script`, the scripted provider): a
    /// development and test feature. Always allowed in development mode.
    pub allow_session_scripts: bool,
    /// On SIGTERM/SIGINT: how long tool calls already executing may run on to record their
    /// results before the server stops them (their runs are handed off either way).
    pub shutdown_grace_seconds: u64,
    /// Where session workspaces live and how they follow a run to another replica
    /// (`[workspace]`, `NORMA_WORKSPACE__*`).
    pub workspace: WorkspaceSettings,
    /// Browser access: CORS origins and stream tickets (`[browser]`, `NORMA_BROWSER__*`).
    pub browser: crate::api::cors::BrowserSettings,
    /// The price table (`[[prices]]`): micro-units per million tokens of each kind for a
    /// provider's model; gives every usage ledger row a cost.
    pub prices: Vec<crate::usage::Price>,
    /// Outbound event webhooks: subscription caps, retries, delivery concurrency
    /// (`[webhooks]`, `NORMA_WEBHOOKS__*`).
    pub webhooks: crate::webhooks::WebhookSettings,
    /// MCP servers of sessions (`[mcp]`, `NORMA_MCP__*`): when an unused stdio server stops.
    pub mcp: crate::mcp::McpSettings,
    /// The operator API's credential (`[operator]`, `NORMA_OPERATOR__*`); none: no operator
    /// API.
    pub operator: crate::api::operator::OperatorSettings,
}

impl Settings {
    /// Whether sessions may bring a model script: in development mode, or when the operator
    /// set `allow_session_scripts`.
    pub fn session_scripts_allowed(&self) -> bool {
        self.allow_session_scripts || self.auth.is_development()
    }

    /// Checks that only `norma serve` needs: development mode (anyone holding a token minted
    /// with the generated key is any tenant) is refused on a non-loopback address unless
    /// `dev` is set.
    pub fn check_serving(&self) -> Result<(), ConfigError> {
        if let Some(metrics) = self.metrics_bind
            && metrics.port() == self.bind.port()
            && (metrics.ip() == self.bind.ip()
                || metrics.ip().is_unspecified()
                || self.bind.ip().is_unspecified())
        {
            return Err(ConfigError::Invalid(format!(
                "`metrics_bind` ({metrics}) overlaps `bind` ({}): metrics are never served on \
                 the public listener; give them their own (loopback or cluster-internal) port",
                self.bind
            )));
        }
        if self.auth.is_development() && !self.bind.ip().is_loopback() && !self.dev {
            return Err(ConfigError::Invalid(format!(
                "no auth key is configured (development mode) and `bind` is {}, which is not a \
                 loopback address: configure a key (auth.hs256_secret, auth.hs256_secret_file, \
                 auth.public_keys or auth.jwks_file), bind 127.0.0.1, or pass `--dev` \
                 (NORMA_DEV=true) to expose development mode on purpose",
                self.bind
            )));
        }
        Ok(())
    }

    /// The configured replica name, or the host name.
    pub fn replica_id(&self) -> String {
        self.replica_id.clone().unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|name| name.into_string().ok())
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| "local".into())
        })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            metrics_bind: None,
            telemetry: TelemetrySettings::default(),
            data_dir: PathBuf::from("data"),
            database_url: None,
            database_max_connections: 16,
            database_acquire_timeout_ms: 3_000,
            worker_threads: None,
            max_body_bytes: 1024 * 1024,
            output_retention_hours: 24 * 30,
            output_head_chars: 30_000,
            tenant_providers: Default::default(),
            limits: crate::limits::TenantLimits::default(),
            allow_private_webhooks: false,
            egress: Default::default(),
            search: Default::default(),
            session_idle_expiry_seconds: 7 * 24 * 3600,
            auth: AuthSettings::default(),
            log: LogSettings::default(),
            provider: crate::llm::ProviderConfig::default(),
            sandbox_launcher: None,
            sandbox: Default::default(),
            config_file: None,
            replica_id: None,
            run_lease_seconds: 30,
            approval_park_after_ms: 5_000,
            dev: false,
            allow_session_scripts: false,
            shutdown_grace_seconds: 10,
            workspace: WorkspaceSettings::default(),
            browser: Default::default(),
            prices: Vec::new(),
            webhooks: crate::webhooks::WebhookSettings::default(),
            mcp: Default::default(),
            operator: Default::default(),
        }
    }
}

/// How session workspaces are stored (`workspace.storage`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceStorage {
    /// `<data_dir>/workspaces` on this replica's own disk: a run taken over by another
    /// replica does not find its files. Single replica only (start-up warns when the store
    /// shows another live replica).
    #[default]
    Local,
    /// `<shared_root>/workspaces` on a filesystem every replica mounts (NFS, EFS, CephFS: a
    /// ReadWriteMany volume); task logs in `<shared_root>/tasks`. A replica that cannot renew
    /// its run leases stops its commands, tasks and shells before the leases can expire.
    Shared,
    /// `<data_dir>/workspaces` on this replica's disk, synced to S3-compatible object storage
    /// (`[workspace.snapshot]`) after every mutating tool call and restored on the replica
    /// that takes a run over (see [`crate::workspace_snapshot`]).
    Snapshot,
}

impl WorkspaceStorage {
    /// The name in the configuration and in the replica registry.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Shared => "shared",
            Self::Snapshot => "snapshot",
        }
    }
}

/// `[workspace]`: the storage of session workspaces.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspaceSettings {
    /// `local` (default), `shared` or `snapshot`.
    pub storage: WorkspaceStorage,
    /// The shared filesystem's mount point (required with `shared`, refused otherwise).
    pub shared_root: Option<PathBuf>,
    /// The object store of `snapshot` storage (`[workspace.snapshot]`,
    /// `NORMA_WORKSPACE__SNAPSHOT__*`).
    pub snapshot: SnapshotSettings,
}

/// `[workspace.snapshot]`: the S3-compatible object store workspaces are snapshotted to.
/// Credentials come from here or from the usual `AWS_*` variables; they are never logged.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotSettings {
    /// The S3 API endpoint (`http://minio:9000`); none means AWS S3 of `region`.
    pub endpoint: Option<String>,
    /// The bucket (required with `snapshot` storage; it must exist).
    pub bucket: Option<String>,
    pub region: String,
    /// Key prefix of every object this server writes.
    pub prefix: String,
    #[serde(skip_serializing)]
    pub access_key_id: Option<SecretString>,
    #[serde(skip_serializing)]
    pub secret_access_key: Option<SecretString>,
    /// Allows a plain `http://` endpoint (a store on the same host or a private network).
    pub allow_http: bool,
    /// Most entries (files, directories, links) one workspace snapshot may hold.
    pub max_files: usize,
    /// Bytes read and written per object request part (bounds memory per transfer).
    pub part_bytes: usize,
}

impl Default for SnapshotSettings {
    fn default() -> Self {
        Self {
            endpoint: None,
            bucket: None,
            region: "us-east-1".into(),
            prefix: "norma".into(),
            access_key_id: None,
            secret_access_key: None,
            allow_http: false,
            max_files: 50_000,
            part_bytes: 8 * 1024 * 1024,
        }
    }
}

impl WorkspaceSettings {
    /// The directory holding `workspaces/` and `tasks/`: the data dir, or the shared root.
    pub fn files_root(&self, data_dir: &Path) -> Result<PathBuf, ConfigError> {
        match (self.storage, &self.shared_root) {
            (WorkspaceStorage::Local, None) => Ok(data_dir.to_path_buf()),
            (WorkspaceStorage::Local, Some(_)) => Err(ConfigError::Invalid(
                "workspace.shared_root is set but workspace.storage is `local`: set                  workspace.storage = \"shared\" or remove shared_root"
                    .into(),
            )),
            (WorkspaceStorage::Shared, None) => Err(ConfigError::Invalid(
                "workspace.storage is `shared` but workspace.shared_root is not set: give the                  mount point of the filesystem every replica shares"
                    .into(),
            )),
            (WorkspaceStorage::Shared, Some(root)) if !root.is_absolute() => {
                Err(ConfigError::Invalid(format!(
                    "workspace.shared_root {} must be an absolute path",
                    root.display()
                )))
            }
            (WorkspaceStorage::Shared, Some(root)) => Ok(root.clone()),
            (WorkspaceStorage::Snapshot, Some(_)) => Err(ConfigError::Invalid(
                "workspace.shared_root is set but workspace.storage is `snapshot`: snapshot \
                 storage keeps workspaces on the data dir; remove shared_root"
                    .into(),
            )),
            (WorkspaceStorage::Snapshot, None) => {
                let snapshot = &self.snapshot;
                if snapshot.bucket.as_deref().is_none_or(str::is_empty) {
                    return Err(ConfigError::Invalid(
                        "workspace.storage is `snapshot` but workspace.snapshot.bucket is not \
                         set: give the S3 bucket workspaces are snapshotted to"
                            .into(),
                    ));
                }
                if snapshot.access_key_id.is_some() != snapshot.secret_access_key.is_some() {
                    return Err(ConfigError::Invalid(
                        "workspace.snapshot.access_key_id and secret_access_key go together"
                            .into(),
                    ));
                }
                if snapshot.max_files == 0 {
                    return Err(ConfigError::Invalid(
                        "workspace.snapshot.max_files must be at least 1".into(),
                    ));
                }
                if snapshot.part_bytes < 5 * 1024 * 1024 {
                    return Err(ConfigError::Invalid(
                        "workspace.snapshot.part_bytes must be at least 5 MiB (the S3 part \
                         minimum)"
                            .into(),
                    ));
                }
                if let Some(endpoint) = &snapshot.endpoint {
                    let url = url::Url::parse(endpoint).map_err(|error| {
                        ConfigError::Invalid(format!(
                            "workspace.snapshot.endpoint is not a URL: {error}"
                        ))
                    })?;
                    if url.scheme() == "http" && !snapshot.allow_http {
                        return Err(ConfigError::Invalid(
                            "workspace.snapshot.endpoint is plain http: set \
                             workspace.snapshot.allow_http = true to allow it"
                                .into(),
                        ));
                    }
                }
                Ok(data_dir.to_path_buf())
            }
        }
    }
}

/// How bearer tokens are verified. With no key configured at all the server runs in
/// development mode: it generates an HS256 key in the data dir and prints a token.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// Required `iss` claim.
    pub issuer: String,
    /// Required `aud` claim.
    pub audience: String,
    /// The claim that carries the tenant id.
    pub tenant_claim: String,
    /// Clock skew tolerated for `exp` and `nbf`, in seconds.
    pub leeway_seconds: u64,
    /// HS256 shared secret.
    #[serde(skip_serializing)]
    pub hs256_secret: Option<SecretString>,
    /// File holding the HS256 shared secret.
    pub hs256_secret_file: Option<PathBuf>,
    /// RS256 / ES256 public keys in PEM files, each with a key id.
    pub public_keys: Vec<PublicKeySettings>,
    /// A JWKS file (RS256 / ES256 keys by `kid`), re-read when an unknown `kid` shows up.
    pub jwks_file: Option<PathBuf>,
    /// Minimum seconds between two re-reads of the JWKS file triggered by unknown `kid`s.
    pub jwks_min_reload_seconds: u64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            issuer: "norma".into(),
            audience: "norma".into(),
            tenant_claim: "tenant".into(),
            leeway_seconds: 30,
            hs256_secret: None,
            hs256_secret_file: None,
            public_keys: Vec::new(),
            jwks_file: None,
            jwks_min_reload_seconds: 5,
        }
    }
}

impl AuthSettings {
    /// True when no verification key is configured: development mode.
    pub fn is_development(&self) -> bool {
        self.hs256_secret.is_none()
            && self.hs256_secret_file.is_none()
            && self.public_keys.is_empty()
            && self.jwks_file.is_none()
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PublicKeySettings {
    pub kid: String,
    /// `RS256` or `ES256`.
    pub algorithm: String,
    pub pem_file: PathBuf,
}

/// What exported spans may carry (`[telemetry]`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySettings {
    /// Record prompts, model outputs, tool arguments and tool results on the GenAI spans
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.tool.call.arguments`,
    /// `gen_ai.tool.call.result`, each cut at [`crate::telemetry::genai::CONTENT_LIMIT`]
    /// bytes). Off by default: tenants' content then never reaches the trace backend.
    pub capture_content: bool,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `tracing` filter directives, e.g. `info,norma=debug`. `RUST_LOG` wins when set.
    pub filter: String,
    /// One JSON object per line instead of human-readable text.
    pub json: bool,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            filter: "info".into(),
            json: false,
        }
    }
}

/// Command-line values that override every other layer (only the ones given).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Overrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev: Option<bool>,
}

/// The most async worker threads `worker_threads` may ask for.
pub const MAX_WORKER_THREADS: usize = 512;

/// The environment prefix of every setting.
const ENV_PREFIX: &str = "NORMA_";

/// Whether `suffix` (the part of a `NORMA_*` variable after `NORMA_`, any case) names a
/// variable that other programs set and the server ignores rather than refusing:
/// - `URL`, `TOKEN`: the terminal client's; `CONFIG`: the `--config` flag's;
/// - `TEST_*`, `BENCH_*`: the test and benchmark harnesses';
/// - what Kubernetes injects for a Service named `norma` or `norma-<x>` (`<x>` becomes
///   `<X>_`): `[<X>_]SERVICE_HOST`, `[<X>_]SERVICE_PORT[_<port name>]`, `[<X>_]PORT`,
///   `[<X>_]PORT_<number>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR]`.
pub fn ignored_env_suffix(suffix: &str) -> bool {
    let key = suffix.to_ascii_uppercase();
    if matches!(key.as_str(), "URL" | "TOKEN" | "CONFIG")
        || key.starts_with("TEST_")
        || key.starts_with("BENCH_")
    {
        return true;
    }
    // Kubernetes Service variables: `<name>` is this suffix up to the Service part.
    let parts: Vec<&str> = key.split('_').collect();
    (0..parts.len()).any(|start| kubernetes_service_tail(&parts[start..]))
        && parts.iter().all(|part| !part.is_empty())
}

/// `SERVICE_HOST`, `SERVICE_PORT…`, `PORT`, `PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]`.
fn kubernetes_service_tail(parts: &[&str]) -> bool {
    match parts {
        ["SERVICE", "HOST"] | ["SERVICE", "PORT", ..] | ["PORT"] => true,
        ["PORT", number, proto, rest @ ..] => {
            !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit())
                && matches!(*proto, "TCP" | "UDP" | "SCTP")
                && matches!(rest, [] | ["PROTO"] | ["PORT"] | ["ADDR"])
        }
        _ => false,
    }
}

/// A figment error as people need it: an unknown key that came from the environment names
/// the variable (`NORMA_DATABSE_URL`), not only the key it became (`databse_url`).
fn describe(error: figment::Error) -> String {
    error
        .into_iter()
        .map(|error| {
            let from_env = error
                .metadata
                .as_ref()
                .is_some_and(|m| m.name.contains("environment"));
            match &error.kind {
                figment::error::Kind::UnknownField(field, _) if from_env => {
                    let path = if error.path.is_empty() {
                        field.clone()
                    } else {
                        error.path.join("__")
                    };
                    format!(
                        "environment variable {ENV_PREFIX}{} is not a setting (a typo?); \
                         every {ENV_PREFIX}* variable must be one, except the ignored ones \
                         listed in README \"Configuration\" ({error})",
                        path.to_ascii_uppercase()
                    )
                }
                _ => error.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The `NORMA_*` variables of this process that are ignored (see [`ignored_env_suffix`]),
/// by name, for the start-up log.
pub fn ignored_environment() -> Vec<String> {
    let mut names: Vec<String> = std::env::vars_os()
        .filter_map(|(key, _)| key.into_string().ok())
        .filter(|key| {
            key.get(..ENV_PREFIX.len())
                .is_some_and(|prefix| prefix.eq_ignore_ascii_case(ENV_PREFIX))
                && ignored_env_suffix(&key[ENV_PREFIX.len()..])
        })
        .collect();
    names.sort();
    names
}

impl Settings {
    /// Loads the layers: defaults, the TOML file (when given, it must exist), `NORMA_*`
    /// environment variables, then command-line overrides.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(file) = file {
            if !file.exists() {
                return Err(ConfigError::Io {
                    path: file.to_owned(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
                });
            }
            figment = figment.merge(Toml::file(file));
        }
        figment = figment
            .merge(
                Env::prefixed(ENV_PREFIX)
                    .filter(|key| !ignored_env_suffix(key.as_str()))
                    .split("__"),
            )
            .merge(Serialized::defaults(overrides));
        let mut settings: Settings = figment
            .extract()
            .map_err(|error| ConfigError::Invalid(describe(error)))?;
        settings.config_file = file.map(Path::to_path_buf);
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.workspace.files_root(&self.data_dir)?;
        if self.database_max_connections == 0 {
            return Err(ConfigError::Invalid(
                "database_max_connections must be at least 1".into(),
            ));
        }
        if self
            .worker_threads
            .is_some_and(|n| n == 0 || n > MAX_WORKER_THREADS)
        {
            return Err(ConfigError::Invalid(format!(
                "worker_threads must be 1 to {MAX_WORKER_THREADS}"
            )));
        }
        if self.max_body_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "max_body_bytes must be at least 1024".into(),
            ));
        }
        if self.output_head_chars < 1_000 {
            return Err(ConfigError::Invalid(
                "output_head_chars must be at least 1000".into(),
            ));
        }
        self.sandbox.validate().map_err(ConfigError::Invalid)?;
        self.browser.validate().map_err(ConfigError::Invalid)?;
        crate::usage::prices::validate(&self.prices).map_err(ConfigError::Invalid)?;
        self.webhooks.validate().map_err(ConfigError::Invalid)?;
        self.operator.validate().map_err(ConfigError::Invalid)?;
        self.limits
            .budget
            .validate()
            .map_err(|error| ConfigError::Invalid(format!("limits.budget.{error}")))?;
        crate::search::SearchBackends::from_settings(&self.search).map_err(ConfigError::Invalid)?;
        if self.auth.issuer.is_empty() || self.auth.audience.is_empty() {
            return Err(ConfigError::Invalid(
                "auth.issuer and auth.audience must not be empty".into(),
            ));
        }
        Ok(())
    }

    /// The store URL: the configured one, or the embedded SQLite file in the data dir.
    pub fn database_url(&self) -> String {
        use secrecy::ExposeSecret;
        match &self.database_url {
            Some(url) => url.expose_secret().to_owned(),
            None => format!("sqlite://{}", self.data_dir.join("norma.db").display()),
        }
    }

    pub fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.database_acquire_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_mode_binds_loopback_unless_dev_is_set() {
        let mut settings = Settings::default();
        assert!(settings.auth.is_development());
        settings.check_serving().unwrap();
        settings.bind = "0.0.0.0:8080".parse().unwrap();
        let error = settings.check_serving().unwrap_err().to_string();
        assert!(
            error.contains("--dev") && error.contains("0.0.0.0:8080"),
            "{error}"
        );
        settings.dev = true;
        settings.check_serving().unwrap();
        settings.dev = false;
        settings.auth.hs256_secret = Some(SecretString::from("k".repeat(32)));
        settings.check_serving().unwrap();
    }

    #[test]
    fn worker_threads_are_1_to_512() {
        let mut settings = Settings::default();
        for allowed in [None, Some(1), Some(MAX_WORKER_THREADS)] {
            settings.worker_threads = allowed;
            settings.validate().unwrap();
        }
        for refused in [0, MAX_WORKER_THREADS + 1] {
            settings.worker_threads = Some(refused);
            let error = settings.validate().unwrap_err().to_string();
            assert!(error.contains("worker_threads must be 1 to 512"), "{error}");
        }
    }

    #[test]
    fn database_url_defaults_to_sqlite_in_data_dir_and_is_not_printed() {
        let mut settings = Settings::default();
        assert_eq!(settings.database_url(), "sqlite://data/norma.db");
        settings.database_url = Some(SecretString::from("postgres://u:hunter2@db/x"));
        assert!(!format!("{settings:?}").contains("hunter2"));
    }
}
