//! Graceful shutdown: a stopping replica hands its runs off to the others.
//!
//! On SIGTERM/SIGINT the replica takes no new prompts (`503 SHUTTING_DOWN`), ends open event
//! streams with `reconnect`, and every run in flight stops at a point the resume path already
//! knows, exactly as if it had parked on an approval:
//! - a call that has not started does not start (it runs on the next replica, never twice);
//! - a call already executing may finish within `shutdown_grace_seconds`, and its result is
//!   recorded (the next replica keeps it, it does not run again);
//! - a model call in flight is abandoned: model calls are at least once, the next replica
//!   issues the request again;
//! - a call waiting in process for its approval parks at once (as after
//!   `approval_park_after_ms`): the request stays pending and answerable.
//!
//! Past the grace period the runs still going are stopped (a command's process group is
//! killed, as cancellation does); their started call reports `INTERRUPTED` on the next
//! replica, as after a crash. Then every lease this replica holds is released in the store:
//! owner cleared and no expiry, fence unchanged. Any replica may claim such a run at once
//! (the claim bumps the fence, so a late write of this replica is refused), and on Postgres a
//! `RunsReleased` signal makes live replicas take them over now rather than at their next
//! sweep. A replica started later on the same store (SQLite) resumes them at start-up.

use super::SessionRuntime;
use crate::ids::{RunId, SessionId, TenantId};
use crate::run_event::{self, RunEvent};
use crate::store::{RunLease, Signal};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long aborted run tasks get to unwind (kill their commands) after the grace period.
const ABORT_UNWIND: Duration = Duration::from_secs(3);

/// What a hand-off did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HandOff {
    /// Runs still going at the end of the grace period, stopped.
    pub stopped: usize,
    /// Runs whose lease was released to the other replicas.
    pub released: usize,
}

impl SessionRuntime {
    /// Whether this replica is shutting down.
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Starts the shutdown: no new prompt is taken, event streams end with `reconnect`, runs
    /// in flight start handing off. [`Self::hand_off`] then waits for them.
    pub fn begin_shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Cancelled when this replica starts shutting down (event streams end with `reconnect`).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The run's task is about to end on its own.
    pub(super) fn run_task_done(&self, run: &RunId) {
        self.run_aborts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run);
    }

    /// Records that a run stopped here to be handed off (its lease is released later, with
    /// the others). Refused, like every write, if another replica claimed it meanwhile.
    pub(super) async fn handed_off(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        lease: &RunLease,
    ) {
        let writer = self.run_writer(tenant, session, lease);
        let event = RunEvent::RunHandedOff(run_event::RunHandedOff {
            run_id: lease.run_id.to_string(),
            replica: self.settings.replica_id.clone(),
        });
        if let Err(error) = writer.write(vec![], vec![event]).await {
            tracing::warn!(error = %error.0, "cannot record the hand-off");
        }
        tracing::info!("run handed off");
    }

    /// Stops this replica's runs and releases their leases (see the module doc). Returns once
    /// every lease is released; takes at most `grace` plus a few seconds.
    pub async fn hand_off(self: &Arc<Self>, grace: Duration) -> HandOff {
        self.begin_shutdown();
        self.run_tasks.close();
        let mut report = HandOff::default();
        if tokio::time::timeout(grace, self.run_tasks.wait())
            .await
            .is_err()
        {
            let stuck: Vec<_> = self
                .run_aborts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain()
                .collect();
            report.stopped = stuck.len();
            for (run, task) in stuck {
                tracing::warn!(run_id = %run, "run still busy after the shutdown grace period; stopping it");
                task.abort();
            }
            if tokio::time::timeout(ABORT_UNWIND, self.run_tasks.wait())
                .await
                .is_err()
            {
                tracing::warn!("run tasks did not unwind after being stopped");
            }
        }
        // Background tasks and shells end with the process; stop them cleanly now.
        let envs: Vec<_> = self
            .envs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, env)| env)
            .collect();
        for env in envs {
            env.shells.tasks.shutdown();
            env.shells.shells.shutdown();
        }
        self.holds.release_all().await;
        let replica = self.settings.replica_id.clone();
        match self.store.release_leases(&replica).await {
            Ok(released) => {
                report.released = released.len();
                for run in &released {
                    tracing::info!(run_id = %run.id, session_id = %run.session_id, "run lease released");
                }
            }
            // The leases then expire on their own and are taken over after `run_lease_seconds`.
            Err(error) => tracing::error!(%error, "cannot release run leases"),
        }
        // Sent even when no lease was released: prompts queued behind a run that finished
        // during the grace period are left queued here, and are taken now too.
        if let Err(error) = self.store.signal(Signal::RunsReleased { replica }).await {
            tracing::warn!(%error, "cannot signal the hand-off to other replicas");
        }
        report
    }
}
