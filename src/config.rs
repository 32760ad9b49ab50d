//! Server settings: defaults < TOML file < environment (`NORMA_*`) < command-line flags.
//!
//! Nested keys use `__` in the environment: `NORMA_AUTH__ISSUER=…` sets `auth.issuer`.
//! Secrets are `SecretString`s: they never print in `Debug` output or logs.

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
    /// Where the embedded store, the development signing key and workspaces live.
    pub data_dir: PathBuf,
    /// `postgres://…` or `sqlite://…`; defaults to `sqlite://<data_dir>/norma.db`.
    #[serde(skip_serializing)]
    pub database_url: Option<SecretString>,
    /// Connections in the store's pool.
    pub database_max_connections: u32,
    /// How long a request waits for a store connection before answering `STORE_UNAVAILABLE`.
    pub database_acquire_timeout_ms: u64,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// Open sessions with no activity for this many seconds are closed (SessionEnd hooks run
    /// with reason `expired`); 0 disables expiry.
    pub session_idle_expiry_seconds: u64,
    /// Let approval webhooks reach loopback, private and link-local addresses (tests, labs).
    pub allow_private_webhooks: bool,
    /// Open (not closed) sessions a tenant may have (`429 TENANT_LIMIT` beyond).
    pub max_sessions_per_tenant: u32,
    /// Runs a tenant may have in flight at once in this process (`429 TENANT_LIMIT` beyond).
    pub max_concurrent_runs_per_tenant: u32,
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
    /// On SIGTERM/SIGINT: how long tool calls already executing may run on to record their
    /// results before the server stops them (their runs are handed off either way).
    pub shutdown_grace_seconds: u64,
}

impl Settings {
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
            data_dir: PathBuf::from("data"),
            database_url: None,
            database_max_connections: 16,
            database_acquire_timeout_ms: 3_000,
            max_body_bytes: 1024 * 1024,
            output_retention_hours: 24 * 30,
            output_head_chars: 30_000,
            tenant_providers: Default::default(),
            max_sessions_per_tenant: 10_000,
            allow_private_webhooks: false,
            session_idle_expiry_seconds: 7 * 24 * 3600,
            max_concurrent_runs_per_tenant: 64,
            auth: AuthSettings::default(),
            log: LogSettings::default(),
            provider: crate::llm::ProviderConfig::default(),
            sandbox_launcher: None,
            replica_id: None,
            run_lease_seconds: 30,
            approval_park_after_ms: 5_000,
            shutdown_grace_seconds: 10,
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
            .merge(Env::prefixed("NORMA_").split("__").ignore(&["config"]))
            .merge(Serialized::defaults(overrides));
        let settings: Settings = figment
            .extract()
            .map_err(|error| ConfigError::Invalid(error.to_string()))?;
        settings.validate()?;
        Ok(settings)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.database_max_connections == 0 {
            return Err(ConfigError::Invalid(
                "database_max_connections must be at least 1".into(),
            ));
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
#[allow(clippy::result_large_err)] // figment::Jail's closure error type
mod tests {
    use super::*;

    #[test]
    fn layers_apply_in_order_file_then_env_then_flags() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "norma.toml",
                "bind = \"127.0.0.1:9000\"\nmax_body_bytes = 4096\n[auth]\nissuer = \"from-file\"\n",
            )?;
            jail.set_env("NORMA_MAX_BODY_BYTES", "8192");
            jail.set_env("NORMA_AUTH__AUDIENCE", "from-env");
            let overrides = Overrides {
                bind: Some("127.0.0.1:9100".parse().unwrap()),
                ..Overrides::default()
            };
            let settings = Settings::load(Some(Path::new("norma.toml")), &overrides).unwrap();
            assert_eq!(settings.bind.port(), 9100, "flag beats file");
            assert_eq!(settings.max_body_bytes, 8192, "env beats file");
            assert_eq!(settings.auth.issuer, "from-file");
            assert_eq!(settings.auth.audience, "from-env");
            Ok(())
        });
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("bad.toml", "bnid = \"x\"\n")?;
            let error = Settings::load(Some(Path::new("bad.toml")), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(error.contains("bnid"), "{error}");
            jail.set_env("NORMA_DATABASE_MAX_CONNECTIONS", "0");
            assert!(Settings::load(None, &Overrides::default()).is_err());
            Ok(())
        });
    }

    #[test]
    fn database_url_defaults_to_sqlite_in_data_dir_and_is_not_printed() {
        let mut settings = Settings::default();
        assert_eq!(settings.database_url(), "sqlite://data/norma.db");
        settings.database_url = Some(SecretString::from("postgres://u:hunter2@db/x"));
        assert!(!format!("{settings:?}").contains("hunter2"));
    }
}
