//! Signals, reconcile and reclaim: how this replica learns what other replicas and the store
//! decided, and how it takes runs (back).
//!
//! Signals (Postgres LISTEN/NOTIFY) are advisory; the store is the truth.
//! [`SessionRuntime::follow_signals`] acts on signals as they come. After the listening
//! connection comes back, and every [`RECONCILE_INTERVAL`] whatever happened, the replica
//! reconciles from the store what a lost signal would have said ([`SessionRuntime::reconcile`]),
//! with at most three cheap queries, none per subscriber and none when there is nothing here
//! to reconcile: approvals someone here waits on that are settled (by primary key), cancels
//! recorded for runs this replica holds (by owner, a partial index), and the last event `seq`
//! of every session with SSE subscribers here (by primary key) — only a session behind that
//! reads its missing events. A run that met a transient store error is claimed again once the
//! store answers ([`SessionRuntime::reclaim_when_store_answers`]); runs of crashed or departed
//! replicas are taken over by the sweep ([`SessionRuntime::resume_unfinished`]).

use super::{Active, SessionRuntime};
use crate::ids::{RunId, SessionId, TenantId};
use crate::store::{RunStatus, StoreError};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// How often a replica sharing its store with others reconciles even without a reconnect:
/// the bound on what a lost signal costs (an approval answered, a cancel, an SSE event).
pub const RECONCILE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest pause between two claims of a run waiting for the store to answer.
const RECLAIM_MAX_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

impl SessionRuntime {
    /// Acts on what other replicas sharing the store signal: publishes their sessions' new
    /// events to this replica's SSE subscribers, wakes runs whose approval was answered
    /// elsewhere, and cancels runs cancelled elsewhere. Returns at once for a store only this
    /// process uses.
    pub async fn follow_signals(self: Arc<Self>, stop: CancellationToken) {
        let mut signals = match self.store.signals().await {
            Ok(Some(signals)) => signals,
            Ok(None) => return,
            Err(error) => {
                tracing::error!(%error, "cannot listen for signals of other replicas");
                return;
            }
        };
        let mut reconcile = tokio::time::interval(RECONCILE_INTERVAL);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reconcile.tick().await;
        loop {
            let signal = tokio::select! {
                () = stop.cancelled() => return,
                _ = reconcile.tick() => {
                    self.reconcile().await;
                    continue;
                }
                signal = signals.recv() => match signal {
                    Some(signal) => signal,
                    None => return,
                },
            };
            match signal {
                crate::store::Signal::Events {
                    tenant,
                    session,
                    first,
                    last,
                } => {
                    let Some(mut after) = self.bus.missing(&session, first, last) else {
                        continue;
                    };
                    while after < last {
                        match self.store.list_events(&tenant, &session, after, 1000).await {
                            Ok(events) if !events.is_empty() => {
                                after = events.last().map_or(last, |e| e.seq);
                                self.bus.publish(&session, events);
                            }
                            Ok(_) => break,
                            Err(error) => {
                                tracing::warn!(%error, "cannot read events signalled by another replica");
                                break;
                            }
                        }
                    }
                }
                crate::store::Signal::ApprovalDecided { id } => self.hub.wake(&id),
                crate::store::Signal::GrantRevoked { id } => self.approvals.grant_revoked(&id),
                crate::store::Signal::ReplicaStarted { replica } => {
                    if replica != self.settings.replica_id {
                        self.replica_started();
                    }
                }
                crate::store::Signal::Reconnected => self.reconcile().await,
                // The store keeps (and forgets) budget rows itself.
                crate::store::Signal::BudgetChanged { .. } => {}
                crate::store::Signal::RunsReleased { replica } => {
                    if replica == self.settings.replica_id {
                        continue;
                    }
                    tracing::info!(%replica, "another replica handed its runs off; taking them over");
                    if let Err(error) = self.resume_unfinished().await {
                        tracing::warn!(%error, "cannot take over handed-off runs");
                    }
                }
                crate::store::Signal::CancelRun { session, run } => {
                    if let Some(entry) = self
                        .active
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&session)
                    {
                        self.cancel_if_current(entry, &run);
                    }
                }
            }
        }
    }

    /// Catches up with what lost signals would have said (after the listening connection
    /// came back, and every [`RECONCILE_INTERVAL`]): approvals answered elsewhere wake their
    /// runs, cancels recorded for runs held here cancel them, and every session followed here
    /// publishes the events committed since the last one it published.
    pub(super) async fn reconcile(&self) {
        self.reconcile_approvals().await;
        self.reconcile_cancels().await;
        self.reconcile_followed().await;
    }

    /// Cancels the runs held here whose cancel was recorded in the store (one query by owner;
    /// nothing when no run is active here). Cancelling is idempotent: a run already
    /// cancelling is not disturbed.
    async fn reconcile_cancels(&self) {
        if self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return;
        }
        let requested = match self
            .store
            .requested_cancels(&self.settings.replica_id)
            .await
        {
            Ok(requested) => requested,
            Err(error) => {
                tracing::warn!(%error, "cannot reconcile requested cancels");
                return;
            }
        };
        let active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        for (session, run) in requested {
            if let Some(entry) = active.get(&session)
                && entry.current == run
                && !entry.cancel.is_cancelled()
            {
                tracing::info!(session_id = %session, run_id = %run, "a cancel was recorded while its signal was lost");
                self.cancel_if_current(entry, &run);
            }
        }
    }

    /// Publishes to the SSE subscribers here the events their sessions committed past the last
    /// one published: one query for the last `seq` of every followed session, then reads
    /// only for sessions behind.
    async fn reconcile_followed(&self) {
        let followed = self.bus.followed();
        if followed.is_empty() {
            return;
        }
        let sessions: Vec<SessionId> = followed.iter().map(|(_, s, _)| s.clone()).collect();
        let stored: HashMap<SessionId, i64> = match self.store.last_event_seqs(&sessions).await {
            Ok(stored) => stored.into_iter().collect(),
            Err(error) => {
                tracing::warn!(%error, "cannot reconcile followed sessions");
                return;
            }
        };
        for (tenant, session, published) in followed {
            let Some(&last) = stored.get(&session) else {
                continue;
            };
            let mut after = published;
            while after < last {
                match self.store.list_events(&tenant, &session, after, 1000).await {
                    Ok(events) if !events.is_empty() => {
                        after = events.last().map_or(after, |e| e.seq);
                        tracing::debug!(session_id = %session, after, "caught up a followed session from the store");
                        self.bus.publish(&session, events);
                    }
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, session_id = %session, "cannot catch up a followed session");
                        break;
                    }
                }
            }
        }
    }

    /// Wakes whoever here waits on an approval that is not pending any more in the store
    /// (one query by primary key; nothing when nobody waits).
    async fn reconcile_approvals(&self) {
        let awaited = self.hub.awaited();
        if awaited.is_empty() {
            return;
        }
        match self.store.settled_approvals(&awaited).await {
            Ok(settled) => {
                for id in settled {
                    tracing::info!(approval_id = %id, "an approval was settled while its signal was lost");
                    self.hub.wake(&id);
                }
            }
            Err(error) => tracing::warn!(%error, "cannot reconcile awaited approvals"),
        }
    }

    /// Claims `run` (the session's current run here) again once the store answers, then drives
    /// it (resumed from its trail in the store). Retries with backoff (at most
    /// [`RECLAIM_MAX_PAUSE`]) until the claim succeeds, another replica took the run (its lease
    /// expired meanwhile: the session is left to that replica), a permanent error, or
    /// shutdown (the lease is released with the others).
    pub(super) fn reclaim_when_store_answers(
        self: &Arc<Self>,
        tenant: TenantId,
        session: SessionId,
        run: RunId,
    ) {
        let runtime = self.clone();
        self.run_tasks.spawn(async move {
            let mut pause = std::time::Duration::from_millis(100);
            loop {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RECLAIM_MAX_PAUSE);
                if runtime.is_shutting_down() {
                    return;
                }
                let claimed = runtime
                    .store
                    .claim_run(
                        &tenant,
                        &run,
                        &runtime.settings.replica_id,
                        runtime.settings.run_lease,
                        runtime.settings.limits.run_caps(),
                    )
                    .await;
                match claimed {
                    Ok(Some(record)) => {
                        tracing::info!(run_id = %run, "the store answers again; resuming the run");
                        let resume = record.fence > 1;
                        runtime.spawn_run(record, resume, None);
                        return;
                    }
                    Err(error) if error.is_transient() => {}
                    // No run slot free yet: the claim is tried again.
                    Err(StoreError::TenantLimit(_)) => {}
                    outcome => {
                        if let Err(error) = outcome {
                            tracing::warn!(%error, run_id = %run, "cannot claim the run again; the takeover sweep decides");
                        } else {
                            tracing::info!(run_id = %run, "another replica took the run over");
                        }
                        let mut active = runtime.active.lock().unwrap_or_else(|e| e.into_inner());
                        if active.get(&session).is_some_and(|entry| entry.current == run) {
                            active.remove(&session);
                            drop(active);
                            runtime.release_env(&session);
                        }
                        return;
                    }
                }
            }
        });
    }

    /// Resumes the unfinished runs this replica may take: its own (after a restart) and those
    /// whose lease expired (a crashed replica), session by session in submission order. A
    /// session whose run another live replica holds is left alone.
    pub async fn resume_unfinished(self: &Arc<Self>) -> Result<usize, StoreError> {
        if self.is_shutting_down() {
            return Ok(0);
        }
        let runs = self.store.list_unfinished_runs(10_000).await?;
        let now = chrono::Utc::now();
        let mut order: Vec<SessionId> = Vec::new();
        let mut by_session: HashMap<SessionId, Vec<crate::store::UnfinishedRun>> = HashMap::new();
        for run in runs {
            let session = SessionId::from_string(run.session_id.clone());
            if !by_session.contains_key(&session) {
                order.push(session.clone());
            }
            by_session.entry(session).or_default().push(run);
        }
        let mut resumed = 0;
        for session in order {
            let runs = by_session.remove(&session).unwrap_or_default();
            let held_elsewhere = runs.iter().any(|run| {
                run.status == RunStatus::Running
                    && run.owner.as_deref() != Some(self.settings.replica_id.as_str())
                    && run.lease_expires_at.is_some_and(|expiry| expiry > now)
            });
            let Some(first) = runs.first() else { continue };
            if held_elsewhere {
                continue;
            }
            let tenant = first.tenant.clone();
            {
                let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
                if active.contains_key(&session) {
                    continue; // running here already
                }
                active.insert(
                    session.clone(),
                    Active::new(
                        RunId::from_string(first.id.clone()),
                        runs.iter()
                            .map(|run| RunId::from_string(run.id.clone()))
                            .collect(),
                    ),
                );
            }
            tracing::info!(session_id = %session, tenant = %tenant, runs = runs.len(), "resuming unfinished runs");
            resumed += runs.len();
            self.advance(tenant, session).await;
        }
        Ok(resumed)
    }

    /// Keeps this replica's run leases alive and takes over runs whose lease expired: renews
    /// every third of the lease, sweeps for expired leases once per lease period. Runs until
    /// `stop` is cancelled; resumes this replica's own unfinished runs first.
    pub async fn maintain_runs(self: Arc<Self>, stop: CancellationToken) {
        self.check_replicas().await;
        if let Err(error) = self.resume_unfinished().await {
            tracing::warn!(%error, "cannot resume unfinished runs");
        }
        let mut resumes = self
            .resumes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let lease = self.settings.run_lease;
        let mut heartbeat =
            tokio::time::interval((lease / 3).max(std::time::Duration::from_millis(100)));
        let mut sweep = tokio::time::interval(lease.max(std::time::Duration::from_millis(300)));
        heartbeat.tick().await;
        sweep.tick().await;
        // Shared workspaces: stop this replica's work before its leases can expire (a
        // watchdog of its own, so a renewal or sweep hanging on the store cannot delay it).
        let (renewed, renewals) = tokio::sync::watch::channel(tokio::time::Instant::now());
        if self.settings.workspace_storage == crate::config::WorkspaceStorage::Shared {
            tokio::spawn(self.clone().fence_watchdog(renewals, stop.clone()));
        }
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = heartbeat.tick() => {
                    let started = tokio::time::Instant::now();
                    match self.store.renew_leases(&self.settings.replica_id, lease).await {
                        Ok(_) => {
                            renewed.send_replace(started);
                        }
                        Err(error) => tracing::warn!(%error, "cannot renew run leases"),
                    }
                    self.heartbeat_replica().await;
                    // Live channels of sessions whose last SSE client left.
                    self.bus.prune();
                }
                _ = sweep.tick() => {
                    if let Err(error) = self.resume_unfinished().await {
                        tracing::warn!(%error, "takeover sweep failed");
                    }
                    // Signals are advisory: an answer whose signal was lost is found here.
                    self.reconcile_approvals().await;
                }
                Some(run) = async {
                    match resumes.as_mut() {
                        Some(resumes) => resumes.recv().await,
                        None => std::future::pending().await,
                    }
                } => self.unpark(&run),
            }
        }
    }
}
