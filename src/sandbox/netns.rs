//! Network denial through an unshared user + network namespace (what `unshare -rn` does): the
//! command sees only a loopback interface that is down, so no connection can leave.

use nix::sched::{CloneFlags, unshare};
use nix::unistd::{Gid, Uid, getgid, getuid};

/// Unshares a user and a network namespace and maps the caller's uid/gid onto themselves.
/// Must run in a single-threaded process.
pub fn enter_isolated_netns() -> Result<(), String> {
    let uid = getuid();
    let gid = getgid();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
        .map_err(|e| format!("unshare(CLONE_NEWUSER|CLONE_NEWNET): {e}"))?;
    map_self(uid, gid)
}

/// Maps `uid`/`gid` (the caller's ids before it unshared a user namespace) onto themselves
/// inside the new user namespace.
pub fn map_self(uid: Uid, gid: Gid) -> Result<(), String> {
    std::fs::write("/proc/self/setgroups", "deny")
        .map_err(|e| format!("writing /proc/self/setgroups: {e}"))?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(|e| format!("writing uid_map: {e}"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
        .map_err(|e| format!("writing gid_map: {e}"))?;
    Ok(())
}
