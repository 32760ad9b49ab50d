//! The namespaces a sandboxed command runs in, unshared together in one call by the
//! single-threaded launcher: a user namespace (which grants the rights for the others without
//! privileges on the host, the caller's uid/gid mapped onto themselves), and on request a
//! network namespace (only a loopback interface that is down: what `unshare -rn` does), a PID
//! namespace (entered by the next child, see [`super::lifetime`]) and a mount namespace (for
//! the minimal root, see [`super::rootfs`]).

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid, getgid, getuid};

/// Which namespaces to unshare besides the user namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Namespaces {
    pub network: bool,
    pub pid: bool,
    pub mount: bool,
}

impl Namespaces {
    fn flags(self) -> CloneFlags {
        let mut flags = CloneFlags::CLONE_NEWUSER;
        if self.network {
            flags |= CloneFlags::CLONE_NEWNET;
        }
        if self.pid {
            flags |= CloneFlags::CLONE_NEWPID;
        }
        if self.mount {
            flags |= CloneFlags::CLONE_NEWNS;
        }
        flags
    }

    fn describe(self) -> String {
        let mut names = vec!["user"];
        if self.network {
            names.push("network");
        }
        if self.pid {
            names.push("pid");
        }
        if self.mount {
            names.push("mount");
        }
        names.join("+")
    }
}

/// Unshares a user namespace plus the requested ones and maps the caller's uid/gid onto
/// themselves. Must run in a single-threaded process.
pub fn enter(namespaces: Namespaces) -> Result<(), String> {
    let uid = getuid();
    let gid = getgid();
    unshare(namespaces.flags())
        .map_err(|e| format!("unshare({} namespaces): {e}", namespaces.describe()))?;
    map_self(uid, gid)
}

/// Maps `uid`/`gid` (the caller's ids before it unshared a user namespace) onto themselves
/// inside the new user namespace.
fn map_self(uid: Uid, gid: Gid) -> Result<(), String> {
    std::fs::write("/proc/self/setgroups", "deny")
        .map_err(|e| format!("writing /proc/self/setgroups: {e}"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(|e| format!("writing uid_map: {e}"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(|e| format!("writing gid_map: {e}"))?;
    Ok(())
}
