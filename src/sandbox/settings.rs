//! The `[sandbox]` settings: which parts must be enforced for command tools to run
//! (`require`), and which parts the operator turns off (`disable`).

use serde::{Deserialize, Serialize};

/// One part of the command sandbox, as named in settings and in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxPart {
    /// The environment rebuilt from an allowlist (always enforced; cannot be disabled).
    Env,
    /// Landlock: writes only beneath the workspace, reads only of system directories.
    Filesystem,
    /// The minimal root in a mount namespace of its own.
    Mount,
    /// No network: a network namespace of its own, Landlock TCP rules.
    Network,
    /// PID 1 of a PID namespace of its own, killed with the server.
    Pid,
    /// CPU time, address space, process and file size limits.
    Rlimits,
}

impl SandboxPart {
    /// Every part, in report order.
    pub const ALL: [SandboxPart; 6] = [
        SandboxPart::Env,
        SandboxPart::Filesystem,
        SandboxPart::Mount,
        SandboxPart::Network,
        SandboxPart::Pid,
        SandboxPart::Rlimits,
    ];

    /// The part's name in settings and in the report.
    pub fn name(self) -> &'static str {
        match self {
            SandboxPart::Env => "env",
            SandboxPart::Filesystem => "filesystem",
            SandboxPart::Mount => "mount",
            SandboxPart::Network => "network",
            SandboxPart::Pid => "pid",
            SandboxPart::Rlimits => "rlimits",
        }
    }
}

/// `[sandbox]` in the configuration file, `NORMA_SANDBOX__*` in the environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSettings {
    /// Parts that must be enforced, or command tools (Bash, background tasks, Shell*) are
    /// unavailable. Default: every part. `[]` runs commands with whatever the machine
    /// enforces.
    pub require: Vec<SandboxPart>,
    /// Parts turned off (reported `disabled`); `env` cannot be turned off. A disabled part
    /// that is also required makes command tools unavailable.
    pub disable: Vec<SandboxPart>,
    /// Extra read-only trees commands (and stdio MCP servers) see besides the system
    /// directories, e.g. where the operator installed MCP server programs. Absolute paths;
    /// start-up refuses a tree holding the data directory or a secret file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_read: Vec<std::path::PathBuf>,
    /// The removed `sandbox.egress_allow_private` key: kept only to refuse it with an error
    /// naming its replacement, `egress.allow_private_cidrs` (one private allow-list for all
    /// outbound traffic, commands' included).
    #[serde(
        rename = "egress_allow_private",
        skip_serializing_if = "Option::is_none"
    )]
    pub removed_egress_allow_private: Option<serde_json::Value>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            require: SandboxPart::ALL.to_vec(),
            disable: Vec::new(),
            extra_read: Vec::new(),
            removed_egress_allow_private: None,
        }
    }
}

impl SandboxSettings {
    /// Refuses turning off the environment scrub.
    pub fn validate(&self) -> Result<(), String> {
        if self.removed_egress_allow_private.is_some() {
            return Err(
                "sandbox.egress_allow_private (NORMA_SANDBOX__EGRESS_ALLOW_PRIVATE) was \
                 replaced by egress.allow_private_cidrs (NORMA_EGRESS__ALLOW_PRIVATE_CIDRS), \
                 one private allow-list for every outbound request, commands' included: move \
                 the blocks there"
                    .into(),
            );
        }
        if let Some(path) = self
            .extra_read
            .iter()
            .find(|path| !path.is_absolute() || path.parent().is_none())
        {
            return Err(format!(
                "sandbox.extra_read: {} must be an absolute path below /",
                path.display()
            ));
        }
        if self.disable.contains(&SandboxPart::Env) {
            return Err(
                "sandbox.disable cannot contain \"env\": commands never inherit the server's environment"
                    .into(),
            );
        }
        Ok(())
    }
}
