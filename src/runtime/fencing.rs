//! Self-fencing for shared workspaces (`workspace.storage = "shared"`).
//!
//! With a workspace root every replica mounts, ownership of a session's files follows the
//! run lease: only the replica holding the lease may write the workspace. The store already
//! refuses a late write of a replica whose lease was taken (the fence), but a command keeps
//! writing files without asking the store. So a replica that cannot renew its leases stops
//! its own work before another replica can take the runs over:
//!
//! - the fencing deadline is the start of the last successful renewal plus the lease period
//!   minus a margin ([`fence_margin`], a quarter of the lease): no lease renewed by that
//!   renewal can have expired yet, so no other replica has claimed one;
//! - at the deadline every run task of this replica is stopped (a running command's process
//!   group is killed as the task unwinds), and every background task and PTY shell is
//!   killed. The runs stay `running` in the store under this replica's name: when the store
//!   answers again before the leases expire, this replica resumes them itself (the call that
//!   was running gets `INTERRUPTED`, as after a crash); otherwise another replica takes them
//!   over after the lease.
//!
//! With `local` storage a takeover cannot reach the files anyway, so nothing is fenced. With
//! `snapshot` storage each replica writes its own copy and the files another replica sees are
//! the head snapshot, which moves only with a `tool_result` written under the run's lease: a
//! replica that lost its lease can neither record a result nor move the head, so nothing is
//! fenced either.

use super::SessionRuntime;
use std::time::Duration;
use tokio::time::Instant;

/// How long before the earliest possible lease expiry a replica stops its work.
pub fn fence_margin(lease: Duration) -> Duration {
    lease / 4
}

/// When this replica must have stopped its work if no renewal succeeds after one that
/// started at `renewal_started`.
pub fn fence_deadline(renewal_started: Instant, lease: Duration) -> Instant {
    renewal_started + lease.saturating_sub(fence_margin(lease))
}

/// What one fencing stopped.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fenced {
    /// Run tasks stopped.
    pub runs: usize,
    /// Sessions whose background tasks and shells were killed.
    pub sessions: usize,
}

impl SessionRuntime {
    /// Fences this replica whenever no renewal succeeded in time; `renewals` carries the
    /// start of the last successful renewal. Runs until `stop` is cancelled.
    pub(super) async fn fence_watchdog(
        self: std::sync::Arc<Self>,
        mut renewals: tokio::sync::watch::Receiver<Instant>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let lease = self.settings.run_lease;
        loop {
            let deadline = fence_deadline(*renewals.borrow_and_update(), lease);
            tokio::select! {
                () = stop.cancelled() => return,
                changed = renewals.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    let stopped = self.fence();
                    if stopped != Fenced::default() {
                        tracing::error!(
                            runs = stopped.runs,
                            sessions = stopped.sessions,
                            "run leases could not be renewed in time: stopped this replica's \
                             commands, tasks and shells (self-fencing)"
                        );
                    }
                    // Nothing more to stop until a renewal succeeds again.
                    tokio::select! {
                        () = stop.cancelled() => return,
                        changed = renewals.changed() => if changed.is_err() { return },
                    }
                }
            }
        }
    }

    /// Stops every run task, background task and shell of this replica (see the module doc).
    pub fn fence(&self) -> Fenced {
        let stopped: Vec<_> = self
            .run_aborts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        for (run, task) in &stopped {
            tracing::warn!(run_id = %run, "run lease not renewed in time; stopping the run (self-fencing)");
            task.abort();
        }
        // The sessions forget their stopped runs, so the takeover sweep may resume them here
        // once the store answers again (if no other replica took them meanwhile).
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, active| !stopped.iter().any(|(run, _)| *run == active.current));
        let envs: Vec<_> = self
            .envs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, env)| env)
            .collect();
        for env in &envs {
            env.shells.tasks.shutdown();
            env.shells.shells.shutdown();
        }
        Fenced {
            runs: stopped.len(),
            sessions: envs.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_comes_a_quarter_lease_before_the_earliest_expiry() {
        let start = Instant::now();
        let lease = Duration::from_secs(30);
        assert_eq!(
            fence_deadline(start, lease),
            start + Duration::from_millis(22_500)
        );
        assert!(fence_deadline(start, lease) < start + lease);
    }
}
