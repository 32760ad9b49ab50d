//! Ties a sandboxed command's lifetime to the server's (the `pid` part): nothing it starts may
//! outlive the server, even when the server is killed with `kill -9` (its run is then resumed
//! elsewhere and reports the call `INTERRUPTED`; the call must not keep acting behind that
//! report).
//!
//! The launcher asks the kernel to kill it when its parent (the server) dies and, after it
//! unshared a PID namespace ([`super::namespaces`]), forks: the child becomes PID 1 of that
//! namespace and goes on to exec the command; it is killed when the launcher dies, and when
//! PID 1 of a namespace dies the kernel kills every process in it, background jobs and
//! daemonised (`setsid`, `nohup`) ones included. The launcher waits for the child and exits
//! with its status. The command also cannot see or signal any process outside its namespace
//! (with the `mount` part it gets a `/proc` of its own namespace only).

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};

/// Asks the kernel to kill this process when its parent dies.
pub fn die_with_parent() -> Result<(), String> {
    prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))
}

/// Forks after a PID namespace was unshared: returns in the child, which is PID 1 of the
/// namespace; the calling process waits for it and exits with its status (it never returns).
/// Must run in a single-threaded process.
pub fn fork_as_pid1() -> Result<(), String> {
    fork_as_pid1_with(|_| Ok(()))
}

/// [`fork_as_pid1`], running `in_parent` in the waiting parent right after the fork, with the
/// child's pid (the child only drops it); the parent reaps the child once `in_parent`
/// returns. When `in_parent` fails the child is killed and the launcher exits with
/// [`super::launcher::EXIT_SANDBOX_FAILED`]. The parent cannot start threads (a process that
/// unshared a PID namespace may not), so `in_parent` does its work on the calling thread.
pub fn fork_as_pid1_with(
    in_parent: impl FnOnce(nix::unistd::Pid) -> Result<(), String>,
) -> Result<(), String> {
    // SAFETY: the launcher is single-threaded (it runs before any runtime or thread starts),
    // so the child may run arbitrary code before exec.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(in_parent);
            // PID 1 of the namespace dies with the launcher, and the namespace with it.
            die_with_parent()
        }
        ForkResult::Parent { child } => {
            if let Err(message) = in_parent(child) {
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                eprintln!("norma-sandbox: {message}");
                std::process::exit(super::launcher::EXIT_SANDBOX_FAILED);
            }
            wait_and_exit(child)
        }
    }
}

/// Waits for `child` and exits with its status.
fn wait_and_exit(child: nix::unistd::Pid) -> ! {
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => std::process::exit(128 + signal as i32),
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => std::process::exit(super::launcher::EXIT_SANDBOX_FAILED),
        }
    }
}
