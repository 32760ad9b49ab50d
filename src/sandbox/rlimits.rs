//! Resource limits applied by the launcher to itself before it `exec`s the command.

use nix::sys::resource::{Resource, setrlimit};
use serde::{Deserialize, Serialize};

/// Per-command resource limits; `None` leaves the inherited limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rlimits {
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: Option<u64>,
    /// Address space in bytes (RLIMIT_AS).
    pub address_space_bytes: Option<u64>,
    /// Processes of the user (RLIMIT_NPROC).
    pub max_processes: Option<u64>,
    /// Largest file the command may write, in bytes (RLIMIT_FSIZE).
    pub file_size_bytes: Option<u64>,
}

impl Default for Rlimits {
    fn default() -> Self {
        Self {
            cpu_seconds: Some(600),
            address_space_bytes: Some(4 << 30),
            max_processes: Some(1024),
            file_size_bytes: Some(1 << 30),
        }
    }
}

impl Rlimits {
    /// No limits at all.
    pub fn none() -> Self {
        Self {
            cpu_seconds: None,
            address_space_bytes: None,
            max_processes: None,
            file_size_bytes: None,
        }
    }

    /// True when at least one limit is set.
    pub fn any(&self) -> bool {
        self.cpu_seconds.is_some()
            || self.address_space_bytes.is_some()
            || self.max_processes.is_some()
            || self.file_size_bytes.is_some()
    }

    /// Sets every configured limit (soft = hard) on the calling process.
    pub fn apply(&self) -> Result<(), String> {
        let pairs = [
            (Resource::RLIMIT_CPU, self.cpu_seconds, "RLIMIT_CPU"),
            (Resource::RLIMIT_AS, self.address_space_bytes, "RLIMIT_AS"),
            (Resource::RLIMIT_NPROC, self.max_processes, "RLIMIT_NPROC"),
            (Resource::RLIMIT_FSIZE, self.file_size_bytes, "RLIMIT_FSIZE"),
        ];
        for (resource, value, name) in pairs {
            if let Some(value) = value {
                setrlimit(resource, value, value).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        Ok(())
    }
}
