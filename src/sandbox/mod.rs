//! The command sandbox shared by Bash and the PTY shells (D5): scrubbed environment,
//! Landlock-confined writes, network denial, rlimits.
//!
//! The server never applies restrictions to itself. Each command is started through the
//! launcher (`<norma exe> __sandbox-exec …`, see [`launcher`]), which restricts itself and then
//! `exec`s the command. What the machine can enforce is probed once at start-up and reported
//! per part in a [`SandboxReport`]; a part reported `enforced` is mandatory for every command
//! (the launcher refuses to run if it cannot apply it), a part reported `unavailable` carries
//! the reason and is not requested.

pub mod env;
pub mod landlock;
pub mod launcher;
pub mod lifetime;
pub mod netns;
pub mod policy;
pub mod rlimits;

use launcher::{LaunchOptions, ProbeResult};
use rlimits::Rlimits;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// How one sandbox part stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartStatus {
    Enforced,
    Unavailable,
    Disabled,
}

/// One machine-readable sandbox field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub status: PartStatus,
    /// How it is enforced, why it is unavailable, or why it is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Part {
    fn enforced(how: impl Into<String>) -> Self {
        Self {
            status: PartStatus::Enforced,
            reason: Some(how.into()),
        }
    }
    fn unavailable(why: impl Into<String>) -> Self {
        Self {
            status: PartStatus::Unavailable,
            reason: Some(why.into()),
        }
    }
    fn disabled(why: impl Into<String>) -> Self {
        Self {
            status: PartStatus::Disabled,
            reason: Some(why.into()),
        }
    }
    /// True when the part is enforced.
    pub fn is_enforced(&self) -> bool {
        self.status == PartStatus::Enforced
    }
}

/// What the sandbox enforces on this machine, per part (reported as session fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    pub env: Part,
    pub filesystem: Part,
    pub network: Part,
    pub rlimits: Part,
}

/// Whether sandboxed commands may use the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkPolicy {
    #[default]
    Deny,
    Allow,
}

/// Sandbox configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// The executable that understands `__sandbox-exec` (normally the `norma` binary).
    pub launcher: PathBuf,
    /// Confine writes to the workspace with Landlock.
    pub filesystem: bool,
    pub network: NetworkPolicy,
    pub rlimits: Rlimits,
    /// Extra read-only trees besides the system directories.
    pub extra_read: Vec<PathBuf>,
}

impl SandboxConfig {
    /// Full confinement with default limits, launched through `launcher`.
    pub fn new(launcher: impl Into<PathBuf>) -> Self {
        Self {
            launcher: launcher.into(),
            filesystem: true,
            network: NetworkPolicy::Deny,
            rlimits: Rlimits::default(),
            extra_read: Vec::new(),
        }
    }
}

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
}

impl Sandbox {
    /// Probes the machine once by running the launcher in probe mode in a scratch directory.
    pub fn probe(config: SandboxConfig) -> Self {
        let result = run_probe(&config);
        let report = report_from(&config, result);
        Self { config, report }
    }

    /// The probed report.
    pub fn report(&self) -> &SandboxReport {
        &self.report
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// How to start `program` (e.g. `["/bin/bash", "-c", cmd]`) sandboxed in `workspace`,
    /// requesting exactly the parts the probe found enforceable.
    pub fn launch_spec(&self, workspace: &Path, program: &[&str], term: &str) -> LaunchSpec {
        let opts = LaunchOptions {
            workspace: workspace.to_path_buf(),
            filesystem: self.report.filesystem.is_enforced(),
            deny_network: self.report.network.is_enforced(),
            rlimits: self
                .report
                .rlimits
                .is_enforced()
                .then(|| self.config.rlimits.clone()),
            extra_read: self.config.extra_read.clone(),
            probe: false,
            program: program.iter().map(OsString::from).collect(),
        };
        LaunchSpec {
            program: self.config.launcher.clone(),
            args: opts.to_args(),
            env: env::scrubbed_env(workspace, term),
            cwd: workspace.to_path_buf(),
        }
    }
}

fn run_probe(config: &SandboxConfig) -> Result<ProbeResult, String> {
    let scratch = std::env::temp_dir().join(format!(
        "norma-sandbox-probe-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("probe directory: {e}"))?;
    let opts = LaunchOptions {
        workspace: scratch.clone(),
        filesystem: config.filesystem,
        deny_network: config.network == NetworkPolicy::Deny,
        rlimits: config.rlimits.any().then(|| config.rlimits.clone()),
        extra_read: config.extra_read.clone(),
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

fn report_from(config: &SandboxConfig, result: Result<ProbeResult, String>) -> SandboxReport {
    let env = Part::enforced("environment rebuilt from PATH, HOME, LANG, TERM only");
    let probe = match result {
        Ok(probe) => probe,
        Err(why) => {
            let part = |wanted: bool, what: &str| {
                if wanted {
                    Part::unavailable(why.clone())
                } else {
                    Part::disabled(format!("{what} disabled by configuration"))
                }
            };
            return SandboxReport {
                env,
                filesystem: part(config.filesystem, "filesystem confinement"),
                network: part(config.network == NetworkPolicy::Deny, "network denial"),
                rlimits: part(config.rlimits.any(), "rlimits"),
            };
        }
    };
    let filesystem = if !config.filesystem {
        Part::disabled("filesystem confinement disabled by configuration")
    } else {
        match probe.filesystem {
            Ok(None) => Part::enforced("landlock: writes only beneath the workspace"),
            Ok(Some(note)) => Part::enforced(note),
            Err(why) => Part::unavailable(why),
        }
    };
    let network = match config.network {
        NetworkPolicy::Allow => Part::disabled("network allowed by configuration"),
        NetworkPolicy::Deny => match probe.network {
            Ok(how) => Part::enforced(how),
            Err(why) => Part::unavailable(why),
        },
    };
    let rlimits = if !config.rlimits.any() {
        Part::disabled("no rlimits configured")
    } else {
        match probe.rlimits {
            Ok(()) => Part::enforced("RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE"),
            Err(why) => Part::unavailable(why),
        }
    };
    SandboxReport {
        env,
        filesystem,
        network,
        rlimits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_launcher_reports_unavailable_never_enforced() {
        let sandbox = Sandbox::probe(SandboxConfig::new("/nonexistent/norma"));
        let report = sandbox.report();
        assert_eq!(report.env.status, PartStatus::Enforced);
        for part in [&report.filesystem, &report.network, &report.rlimits] {
            assert_eq!(part.status, PartStatus::Unavailable, "{part:?}");
            assert!(
                part.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("launcher"))
            );
        }
        let spec = sandbox.launch_spec(Path::new("/ws"), &["/bin/true"], "dumb");
        assert!(!spec.args.iter().any(|a| a == "--fs" || a == "--deny-net"));
    }

    #[test]
    fn disabled_parts_are_reported_disabled() {
        let mut config = SandboxConfig::new("/nonexistent/norma");
        config.filesystem = false;
        config.network = NetworkPolicy::Allow;
        config.rlimits = Rlimits::none();
        let report = Sandbox::probe(config).report().clone();
        assert_eq!(report.filesystem.status, PartStatus::Disabled);
        assert_eq!(report.network.status, PartStatus::Disabled);
        assert_eq!(report.rlimits.status, PartStatus::Disabled);
    }
}
