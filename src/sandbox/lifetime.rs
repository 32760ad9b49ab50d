//! Ties a sandboxed command's lifetime to the server's: nothing it starts may outlive the
//! server, even when the server is killed with `kill -9` (its run is then resumed elsewhere
//! and reports the call `INTERRUPTED`; the call must not keep acting behind that report).
//!
//! The launcher asks the kernel to kill it when its parent (the server) dies, unshares a PID
//! namespace and forks: the child becomes PID 1 of that namespace and execs the command; it is
//! killed when the launcher dies, and when PID 1 of a namespace dies the kernel kills every
//! process in it, background jobs and daemonised (`setsid`, `nohup`) ones included. The
//! launcher waits for the child and exits with its status. The command also cannot see or
//! signal any process outside its namespace.

use nix::sched::{CloneFlags, unshare};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, getgid, getuid};

/// Enters a fresh PID namespace as its PID 1. Returns in the child (which then execs); the
/// launcher process never returns from here. `in_user_namespace`: the caller already
/// unshared a user namespace (network isolation does), which grants the right to do this.
/// Must run in a single-threaded process.
pub fn contain(in_user_namespace: bool) -> Result<(), String> {
    prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    if in_user_namespace {
        unshare(CloneFlags::CLONE_NEWPID).map_err(|e| format!("unshare(CLONE_NEWPID): {e}"))?;
    } else {
        let (uid, gid) = (getuid(), getgid());
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID)
            .map_err(|e| format!("unshare(CLONE_NEWUSER|CLONE_NEWPID): {e}"))?;
        super::netns::map_self(uid, gid)?;
    }
    // SAFETY: the launcher is single-threaded (it runs before any runtime or thread starts),
    // so the child may run arbitrary code before exec.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            // PID 1 of the namespace dies with the launcher, and the namespace with it.
            prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
            Ok(())
        }
        ForkResult::Parent { child } => loop {
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => std::process::exit(128 + signal as i32),
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => std::process::exit(super::launcher::EXIT_SANDBOX_FAILED),
            }
        },
    }
}
