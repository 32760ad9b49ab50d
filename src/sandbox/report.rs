//! The machine-readable sandbox report every session shows (`GET /v1/sessions/{id}` →
//! `sandbox`): per part `enforced` / `unavailable` / `disabled` with a reason, the required
//! parts, and whether command tools are available.

use super::launcher::ProbeResult;
use super::settings::SandboxPart;
use super::{NetworkPolicy, SandboxConfig};
use serde::{Deserialize, Serialize};

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

/// Whether command tools (Bash, background tasks, Shell*) run on this server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandsStatus {
    pub available: bool,
    /// Why not (the first required part that is not enforced, and how to fix it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What the sandbox enforces on this machine, per part (reported as session fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxReport {
    pub env: Part,
    pub filesystem: Part,
    pub mount: Part,
    pub network: Part,
    pub pid: Part,
    pub rlimits: Part,
    /// The parts `sandbox.require` lists.
    pub required: Vec<SandboxPart>,
    pub commands: CommandsStatus,
    /// The session's command network (`network` of its configuration) and whether this
    /// server can give it; only in a session's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_network: Option<SessionNetworkStatus>,
}

/// A session's command network as its report shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionNetworkStatus {
    /// `none` or `egress` (the session configuration's `network`).
    pub mode: super::CommandNetwork,
    /// False when command tools of this session answer `SANDBOX_UNAVAILABLE` because the
    /// network it asks for cannot be given (then `reason` says why).
    pub available: bool,
    /// With `egress`: how commands reach the network; otherwise why they cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl SandboxReport {
    /// The field of `part`.
    pub fn part(&self, part: SandboxPart) -> &Part {
        match part {
            SandboxPart::Env => &self.env,
            SandboxPart::Filesystem => &self.filesystem,
            SandboxPart::Mount => &self.mount,
            SandboxPart::Network => &self.network,
            SandboxPart::Pid => &self.pid,
            SandboxPart::Rlimits => &self.rlimits,
        }
    }
}

/// Reasons of the enforced parts.
const ENV_HOW: &str = "environment rebuilt from PATH, HOME, LANG, TERM only";
const FILESYSTEM_HOW: &str = "landlock: writes only beneath the workspace (and the private /tmp), reads of system directories";
const MOUNT_HOW: &str = "mount namespace: read-only /usr, /bin, /sbin, /lib*, /etc (secrets hidden), \
     minimal /dev, private /tmp, fresh /proc, the workspace read-write; nothing else of the host";
const PID_HOW: &str = "PID 1 of its own PID namespace, killed with the server";
const RLIMITS_HOW: &str = "RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE";

/// The report for `config` given the probe's outcome.
pub(super) fn build(config: &SandboxConfig, probe: &Result<ProbeResult, String>) -> SandboxReport {
    let disabled = |what: &str| Part::disabled(format!("{what} (sandbox.disable)"));
    let outcome =
        |wanted: bool, what: &str, result: &dyn Fn(&ProbeResult) -> Result<String, String>| {
            if !wanted {
                return disabled(&format!("{what} disabled by configuration"));
            }
            match probe {
                Err(why) => Part::unavailable(why.clone()),
                Ok(probe) => match result(probe) {
                    Ok(how) => Part::enforced(how),
                    Err(why) => Part::unavailable(why),
                },
            }
        };
    let filesystem = outcome(config.filesystem, "filesystem confinement", &|p| {
        p.landlock
            .clone()
            .map(|note| note.unwrap_or_else(|| FILESYSTEM_HOW.into()))
    });
    let network = outcome(
        config.network == NetworkPolicy::Deny,
        "network denial",
        &|p| match (&p.netns, &p.landlock) {
            (Ok(()), Ok(_)) => {
                Ok("unshared user+network namespace; landlock denies TCP bind/connect".into())
            }
            (Ok(()), Err(_)) => Ok("unshared user+network namespace".into()),
            (Err(ns), Ok(_)) => Ok(format!(
                "landlock denies TCP bind/connect (UDP not covered); namespace failed: {ns}"
            )),
            (Err(ns), Err(ll)) => Err(format!("namespace: {ns}; landlock: {ll}")),
        },
    );
    let pid = outcome(config.pid, "PID namespace", &|p| {
        p.pidns.clone().map(|()| PID_HOW.into())
    });
    let mount = if config.mount && !config.pid {
        Part::unavailable(
            "needs the pid part: the minimal root mounts a /proc of the command's own PID namespace",
        )
    } else {
        outcome(config.mount, "minimal filesystem", &|p| {
            p.mountns.clone().map(|()| MOUNT_HOW.into())
        })
    };
    let rlimits = outcome(config.rlimits.any(), "rlimits", &|p| {
        p.rlimits.clone().map(|()| RLIMITS_HOW.into())
    });
    let mut report = SandboxReport {
        env: Part::enforced(ENV_HOW),
        filesystem,
        mount,
        network,
        pid,
        rlimits,
        required: config.require.clone(),
        commands: CommandsStatus {
            available: true,
            reason: None,
        },
        session_network: None,
    };
    let missing = config.require.iter().copied().find_map(|part| {
        let field = report.part(part);
        (!field.is_enforced()).then(|| {
            format!(
                "required sandbox part `{}` is {}: {}; Bash, background tasks and shells are off \
                 until the machine provides it or sandbox.require no longer lists it",
                part.name(),
                match field.status {
                    PartStatus::Disabled => "disabled",
                    _ => "unavailable",
                },
                field.reason.as_deref().unwrap_or("no reason given")
            )
        })
    });
    if let Some(reason) = missing {
        report.commands = CommandsStatus {
            available: false,
            reason: Some(reason),
        };
    }
    report
}
