//! The command sandbox shared by Bash, background tasks and the PTY shells (D5): scrubbed
//! environment, a minimal filesystem in a mount namespace, Landlock-confined writes, network
//! denial, a PID namespace tied to the server's lifetime, rlimits.
//!
//! The server never applies restrictions to itself. Each command is started through the
//! launcher (`<norma exe> __sandbox-exec …`, see [`launcher`]), which restricts itself and then
//! `exec`s the command. What the machine can enforce is probed once at start-up and reported
//! per part in a [`SandboxReport`]; a part reported `enforced` is mandatory for every command
//! (the launcher refuses to run if it cannot apply it), a part reported `unavailable` carries
//! the reason and is not requested.
//!
//! The sandbox fails closed: the parts listed in `sandbox.require` (all of them by default)
//! must be enforced, otherwise command tools are unavailable ([`Sandbox::launch_spec`] answers
//! [`SandboxUnavailable`], which the tools report as `SANDBOX_UNAVAILABLE`) and the report's
//! `commands` field says why. An operator opts out by requiring fewer parts.

pub mod egress_forwarder;
pub mod env;
pub mod landlock;
pub mod launcher;
pub mod lifetime;
pub mod namespaces;
pub mod pdf_text;
pub mod policy;
pub mod report;
pub mod rlimits;
pub mod rootfs;
pub mod settings;

use launcher::{LaunchOptions, ProbeResult};
pub use report::{CommandsStatus, Part, PartStatus, SandboxReport, SessionNetworkStatus};
use rlimits::Rlimits;
use serde::{Deserialize, Serialize};
pub use settings::{SandboxPart, SandboxSettings};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Whether sandboxed commands may use the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPolicy {
    #[default]
    Deny,
    Allow,
}

/// The network a session's commands get (session configuration `network`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandNetwork {
    /// No network at all (the default).
    #[default]
    None,
    /// Only the session's egress proxy (HTTP and HTTPS through `HTTP_PROXY`/`HTTPS_PROXY`),
    /// which asks the egress gate for every destination.
    Egress,
}

/// How commands of an egress session reach the network (shown in the session's report).
const EGRESS_HOW: &str = "only through the session's egress proxy: HTTP_PROXY/HTTPS_PROXY/ALL_PROXY      = http://127.0.0.1:3128 inside the command's own network namespace, forwarded to the server;      nothing else leaves";

/// Sandbox configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// The executable that understands `__sandbox-exec` (normally the `norma` binary).
    pub launcher: PathBuf,
    /// Confine writes to the workspace with Landlock.
    pub filesystem: bool,
    pub network: NetworkPolicy,
    /// Run commands as PID 1 of their own PID namespace, killed with the server.
    pub pid: bool,
    /// Run commands in the minimal root of a mount namespace of their own.
    pub mount: bool,
    pub rlimits: Rlimits,
    /// Extra read-only trees besides the system directories.
    pub extra_read: Vec<PathBuf>,
    /// Parts that must be enforced for command tools to be available.
    pub require: Vec<SandboxPart>,
}

impl SandboxConfig {
    /// Full confinement with default limits, every part required, launched through
    /// `launcher`.
    pub fn new(launcher: impl Into<PathBuf>) -> Self {
        Self {
            launcher: launcher.into(),
            filesystem: true,
            network: NetworkPolicy::Deny,
            pid: true,
            mount: true,
            rlimits: Rlimits::default(),
            extra_read: Vec::new(),
            require: SandboxPart::ALL.to_vec(),
        }
    }

    /// The configuration `settings` describe (parts turned off by `sandbox.disable`, the
    /// `sandbox.require` list), launched through `launcher`.
    pub fn from_settings(launcher: impl Into<PathBuf>, settings: &SandboxSettings) -> Self {
        let mut config = Self::new(launcher);
        for part in &settings.disable {
            match part {
                SandboxPart::Env => {} // refused by settings validation: never off
                SandboxPart::Filesystem => config.filesystem = false,
                SandboxPart::Mount => config.mount = false,
                SandboxPart::Network => config.network = NetworkPolicy::Allow,
                SandboxPart::Pid => config.pid = false,
                SandboxPart::Rlimits => config.rlimits = Rlimits::none(),
            }
        }
        config.require = settings.require.clone();
        config.extra_read = settings.extra_read.clone();
        config
    }

    /// Directories whose content sandboxed commands can read: the system directories and
    /// the extra read-only trees (start-up refuses data dirs and secret files there).
    pub fn readable_dirs(&self) -> Vec<PathBuf> {
        rootfs::READ_ONLY_DIRS
            .iter()
            .map(PathBuf::from)
            .chain(self.extra_read.iter().cloned())
            .collect()
    }
}

/// Command tools are off: a required sandbox part is not enforced on this server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SandboxUnavailable(pub String);

/// The program and arguments a sandboxed command is started with.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The complete environment (the child must start from an empty one).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
}

/// A probed sandbox: configuration plus what this machine enforces.
#[derive(Clone, Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    report: SandboxReport,
    /// What the probe found for the namespaces and Landlock (decides the launch flags).
    probe: Option<ProbeResult>,
    /// Counts every launch asked for (`sandbox_spawns`).
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

impl Sandbox {
    /// Probes the machine once by running the launcher in probe mode in a scratch directory.
    pub fn probe(config: SandboxConfig) -> Self {
        let result = run_probe(&config);
        let report = report::build(&config, &result);
        Self {
            config,
            report,
            probe: result.ok(),
            metrics: None,
        }
    }

    /// Counts every launch asked for in `metrics`.
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn count_spawn<T, E>(
        &self,
        kind: crate::metrics::SpawnKind,
        spec: Result<T, E>,
    ) -> Result<T, E> {
        if let Some(metrics) = &self.metrics {
            let outcome = match &spec {
                Ok(_) => crate::metrics::SpawnOutcome::launched,
                Err(_) => crate::metrics::SpawnOutcome::refused,
            };
            metrics.sandbox_spawn(kind, outcome);
        }
        spec
    }

    /// The probed report.
    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Whether command tools may run: `Err` with the reason when a required part is not
    /// enforced.
    pub fn commands_available(&self) -> Result<(), SandboxUnavailable> {
        match &self.report.commands {
            CommandsStatus {
                available: true, ..
            } => Ok(()),
            CommandsStatus { reason, .. } => {
                Err(SandboxUnavailable(reason.clone().unwrap_or_else(|| {
                    "the command sandbox is unavailable".into()
                })))
            }
        }
    }

    /// Whether commands can get the egress proxy as their only network: the network part
    /// must be enforced with a network namespace whose loopback the launcher can bring up,
    /// and the PID part (the forwarder lives outside the command's PID namespace).
    pub fn egress_available(&self) -> Result<(), SandboxUnavailable> {
        let refuse = |why: String| {
            Err(SandboxUnavailable(format!(
                "network \"egress\" is unavailable on this server: {why}; commands never run \
                 with the host's network instead"
            )))
        };
        if !self.report.network.is_enforced() {
            return refuse("the sandbox part `network` is not enforced".into());
        }
        if !self.report.pid.is_enforced() {
            return refuse("the sandbox part `pid` is not enforced".into());
        }
        match &self.probe {
            None => refuse("the launcher probe failed".into()),
            Some(ProbeResult { netns: Err(e), .. }) => refuse(format!("network namespace: {e}")),
            Some(ProbeResult { egress: Err(e), .. }) => refuse(format!("loopback: {e}")),
            Some(_) => Ok(()),
        }
    }

    /// The report of a session whose commands get `network`.
    pub fn session_report(&self, network: CommandNetwork) -> SandboxReport {
        let status = match network {
            CommandNetwork::None => SessionNetworkStatus {
                mode: network,
                available: true,
                reason: Some("no network".into()),
            },
            CommandNetwork::Egress => {
                match self
                    .commands_available()
                    .and_then(|()| self.egress_available())
                {
                    Ok(()) => SessionNetworkStatus {
                        mode: network,
                        available: true,
                        reason: Some(EGRESS_HOW.into()),
                    },
                    Err(SandboxUnavailable(why)) => SessionNetworkStatus {
                        mode: network,
                        available: false,
                        reason: Some(why),
                    },
                }
            }
        };
        SandboxReport {
            session_network: Some(status),
            ..self.report.clone()
        }
    }

    /// How to start `program` (e.g. `["/bin/bash", "-c", cmd]`) sandboxed in `workspace`,
    /// requesting exactly the parts the probe found enforceable; refused when a required part
    /// is not enforced. With `egress_proxy` (the session's proxy socket) the command's only
    /// network is that proxy — refused when the machine cannot arrange it.
    pub fn launch_spec(
        &self,
        workspace: &Path,
        program: &[&str],
        term: &str,
        egress_proxy: Option<&Path>,
    ) -> Result<LaunchSpec, SandboxUnavailable> {
        let spec = self.commands_available().and_then(|()| {
            if egress_proxy.is_some() {
                self.egress_available()?;
            }
            let opts = self.options(workspace, program, egress_proxy);
            Ok(LaunchSpec {
                program: self.config.launcher.clone(),
                args: opts.to_args(),
                env: env::scrubbed_env(workspace, term),
                cwd: workspace.to_path_buf(),
            })
        });
        self.count_spawn(crate::metrics::SpawnKind::command, spec)
    }

    /// How to run one of the launcher's built-in jobs (e.g. [`pdf_text::PROGRAM`]) on
    /// untrusted data in `scratch`, confined like a command but under `limits` instead of the
    /// commands' rlimits. Fails closed: refused unless the command sandbox is available and
    /// its `rlimits` and `network` parts are enforced (a job without its memory and CPU
    /// bounds or with the host's network never runs).
    pub fn job_spec(
        &self,
        scratch: &Path,
        job: &str,
        limits: Rlimits,
    ) -> Result<LaunchSpec, SandboxUnavailable> {
        let spec = self.job_spec_unchecked(scratch, job, limits);
        self.count_spawn(crate::metrics::SpawnKind::job, spec)
    }

    fn job_spec_unchecked(
        &self,
        scratch: &Path,
        job: &str,
        limits: Rlimits,
    ) -> Result<LaunchSpec, SandboxUnavailable> {
        self.commands_available()?;
        for (part, status) in [
            ("rlimits", &self.report.rlimits),
            ("network", &self.report.network),
        ] {
            if !status.is_enforced() {
                return Err(SandboxUnavailable(format!(
                    "the sandbox part `{part}` is not enforced on this server"
                )));
            }
        }
        let mut opts = self.options(scratch, &[job], None);
        opts.rlimits = Some(limits);
        Ok(LaunchSpec {
            program: self.config.launcher.clone(),
            args: opts.to_args(),
            env: env::scrubbed_env(scratch, "dumb"),
            cwd: scratch.to_path_buf(),
        })
    }

    /// The launcher options of a program confined with every part the probe found
    /// enforceable.
    fn options(
        &self,
        workspace: &Path,
        program: &[&str],
        egress_proxy: Option<&Path>,
    ) -> LaunchOptions {
        let probed = |f: fn(&ProbeResult) -> bool| self.probe.as_ref().is_some_and(f);
        let network = self.report.network.is_enforced();
        LaunchOptions {
            workspace: workspace.to_path_buf(),
            filesystem: self.report.filesystem.is_enforced(),
            deny_network: network && probed(|p| p.landlock.is_ok()),
            netns: network && probed(|p| p.netns.is_ok()),
            pidns: self.report.pid.is_enforced(),
            mountns: self.report.mount.is_enforced(),
            rlimits: self
                .report
                .rlimits
                .is_enforced()
                .then(|| self.config.rlimits.clone()),
            extra_read: self.config.extra_read.clone(),
            egress_proxy: egress_proxy.map(Path::to_path_buf),
            pass_env: Vec::new(),
            probe: false,
            program: program.iter().map(OsString::from).collect(),
        }
    }
}

impl LaunchSpec {
    /// Adds `vars` to the program's environment (the launcher passes them on by name,
    /// besides the allowlist). A name already set is replaced.
    pub fn with_env(mut self, vars: &[(String, String)]) -> Self {
        let Some(split) = self.args.iter().position(|arg| arg == "--") else {
            return self;
        };
        let mut flags = Vec::new();
        for (name, value) in vars {
            self.env.retain(|(known, _)| known != name);
            self.env.push((name.clone(), value.clone()));
            flags.push(OsString::from("--pass"));
            flags.push(OsString::from(name));
        }
        self.args.splice(split..split, flags);
        self
    }
}

fn run_probe(config: &SandboxConfig) -> Result<ProbeResult, String> {
    let scratch = std::env::temp_dir().join(format!(
        "norma-sandbox-probe-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("probe directory: {e}"))?;
    let deny = config.network == NetworkPolicy::Deny;
    let opts = LaunchOptions {
        workspace: scratch.clone(),
        filesystem: config.filesystem,
        deny_network: deny,
        netns: deny,
        pidns: config.pid,
        mountns: config.mount,
        rlimits: config.rlimits.any().then(|| config.rlimits.clone()),
        extra_read: config.extra_read.clone(),
        egress_proxy: None,
        pass_env: Vec::new(),
        probe: true,
        program: Vec::new(),
    };
    let output = std::process::Command::new(&config.launcher)
        .args(opts.to_args())
        .env_clear()
        .output();
    // Best effort: the scratch directory is empty and only used as a rule target.
    let _ = std::fs::remove_dir_all(&scratch);
    let output = output.map_err(|e| format!("cannot run launcher {:?}: {e}", config.launcher))?;
    if !output.status.success() {
        return Err(format!(
            "launcher probe failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("launcher probe output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_launcher_reports_unavailable_never_enforced_and_refuses_commands() {
        let sandbox = Sandbox::probe(SandboxConfig::new("/nonexistent/norma"));
        let report = sandbox.report();
        assert_eq!(report.env.status, PartStatus::Enforced);
        for part in [
            &report.filesystem,
            &report.network,
            &report.pid,
            &report.mount,
            &report.rlimits,
        ] {
            assert_eq!(part.status, PartStatus::Unavailable, "{part:?}");
            assert!(
                part.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("launcher"))
            );
        }
        assert!(!report.commands.available);
        let err = sandbox
            .launch_spec(Path::new("/ws"), &["/bin/true"], "dumb", None)
            .unwrap_err();
        assert!(err.0.contains("filesystem"), "{err}");
    }

    #[test]
    fn opting_out_of_every_part_runs_commands_with_what_is_left() {
        let mut config = SandboxConfig::new("/nonexistent/norma");
        config.require = vec![SandboxPart::Env];
        let sandbox = Sandbox::probe(config);
        assert!(sandbox.report().commands.available);
        let spec = sandbox
            .launch_spec(Path::new("/ws"), &["/bin/true"], "dumb", None)
            .expect("opted out");
        for flag in ["--fs", "--deny-net", "--netns", "--pidns", "--mountns"] {
            assert!(!spec.args.iter().any(|a| a == flag), "{flag}");
        }
    }

    #[test]
    fn disabled_parts_are_reported_disabled() {
        let settings = SandboxSettings {
            require: vec![SandboxPart::Env],
            disable: vec![
                SandboxPart::Filesystem,
                SandboxPart::Network,
                SandboxPart::Pid,
                SandboxPart::Mount,
                SandboxPart::Rlimits,
            ],
            ..SandboxSettings::default()
        };
        let config = SandboxConfig::from_settings("/nonexistent/norma", &settings);
        let sandbox = Sandbox::probe(config);
        // Commands may run (nothing is required), but never with the host's network when
        // the session asked for the egress proxy only.
        let err = sandbox
            .launch_spec(
                Path::new("/ws"),
                &["/bin/true"],
                "dumb",
                Some(Path::new("/run/p.sock")),
            )
            .unwrap_err();
        assert!(err.0.contains("egress"), "{err}");
        let session = sandbox.session_report(CommandNetwork::Egress);
        let network = session.session_network.expect("session network");
        assert!(!network.available, "{network:?}");
        let report = sandbox.report().clone();
        assert_eq!(report.filesystem.status, PartStatus::Disabled);
        assert_eq!(report.network.status, PartStatus::Disabled);
        assert_eq!(report.pid.status, PartStatus::Disabled);
        assert_eq!(report.mount.status, PartStatus::Disabled);
        assert_eq!(report.rlimits.status, PartStatus::Disabled);
    }
}
