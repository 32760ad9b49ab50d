//! Driving runs: each claimed run goes in a task of its own (tracked, so a shutdown can wait
//! for it), writes through its lease-checked writer, and when it ends the session's next
//! queued run is claimed and started; a parked run leaves the session to its resume.

use super::*;

impl SessionRuntime {
    /// Drives a claimed run in a task; then starts the session's next queued run.
    /// `known` is what the caller has just read for the run (a new prompt: the session and
    /// its permission state); the run reads it from the store otherwise.
    pub(super) fn spawn_run(
        self: &Arc<Self>,
        record: crate::store::RunRecord,
        resume: bool,
        known: Option<run_factory::Known>,
    ) {
        let Some(lease) = record.lease() else {
            return;
        };
        let session = SessionId::from_string(record.session_id.clone());
        self.drive(record.tenant, session, lease, record.prompt, resume, known);
    }

    /// Runs (or resumes) a run this replica holds the lease of, in a task. When it ends the
    /// session's next queued run starts; when it parks, nothing runs until it is resumed.
    pub(super) fn drive(
        self: &Arc<Self>,
        tenant: TenantId,
        session: SessionId,
        lease: RunLease,
        prompt: String,
        resume: bool,
        known: Option<run_factory::Known>,
    ) {
        let runtime = self.clone();
        let span = crate::telemetry::genai::invoke_agent(&crate::telemetry::genai::RunIds {
            tenant: tenant.clone(),
            session: session.clone(),
            run: lease.run_id.clone(),
        });
        let run_id = lease.run_id.clone();
        let started = std::time::Instant::now();
        self.metrics().run_started();
        // Registered before the task can end, so the task's own removal comes after.
        let mut aborts = self.run_aborts.lock().unwrap_or_else(|e| e.into_inner());
        let task = self.run_tasks.spawn(tracing::Instrument::instrument(
            async move {
                // The run's future (the whole agent loop's state, kilobytes) lives in a box of
                // its own, made when the task first runs, and so does every later step's: the
                // task's own future stays small, so spawning it moves a few words into the
                // task, not the loop's state (a copy of kilobytes, several per run).
                let outcome = Box::pin(runtime.run_one(
                    &tenant,
                    &session,
                    &lease,
                    run_factory::RunStart {
                        prompt: prompt.clone(),
                        resume,
                        started,
                        known,
                    },
                ))
                .await;
                if let Ok(Ended::Parked(_)) = &outcome {
                    runtime
                        .metrics()
                        .run_ended(&TerminalReason::Parked, started.elapsed());
                }
                runtime.run_task_done(&lease.run_id);
                match outcome {
                    Ok(Ended::Finished) => {}
                    Ok(Ended::Parked(_)) if runtime.is_shutting_down() => {
                        Box::pin(runtime.handed_off(&tenant, &session, &lease)).await;
                        return;
                    }
                    Ok(Ended::Parked(waiting)) => {
                        Box::pin(runtime.park(tenant, session, lease, prompt, waiting)).await;
                        return;
                    }
                    Err(error) if error.is_transient() && !runtime.is_shutting_down() => {
                        // Accepted work never ends on a store outage: the run keeps its
                        // lease and its session, and is resumed once the store answers.
                        tracing::warn!(%error, "run met a transient store error; resuming it once the store answers");
                        runtime.reclaim_when_store_answers(tenant, session, lease.run_id);
                        return;
                    }
                    Err(error) if error.is_transient() => {
                        // Shutting down: the run's lease is released with the others.
                        tracing::warn!(%error, "run met a transient store error while shutting down");
                        return;
                    }
                    Err(error) => {
                        tracing::error!(%error, "run failed");
                        crate::telemetry::genai::record_error(
                            &tracing::Span::current(),
                            error.terminal_code(),
                        );
                        let writer = runtime.run_writer(&tenant, &session, &lease);
                        writer.count_run_end(runtime.metrics().clone(), started);
                        let _ = Box::pin(writer.write(
                            vec![],
                            vec![RunEvent::Terminal(TerminalReason::Error {
                                code: error.terminal_code().to_owned(),
                                message: error.to_string(),
                            })],
                        ))
                        .await;
                    }
                }
                Box::pin(runtime.advance(tenant, session)).await;
            },
            span,
        ));
        aborts.insert(run_id, task.abort_handle());
    }

    /// The writer of a run this replica holds the lease of.
    pub(super) fn run_writer(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        lease: &RunLease,
    ) -> Arc<SessionWriter> {
        let writer = SessionWriter::for_run(
            self.store.clone(),
            self.bus.clone(),
            tenant.clone(),
            session.clone(),
            lease.clone(),
        );
        if let Some(active) = self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(session)
            && active.current == lease.run_id
        {
            active.ended = writer.ended();
        }
        writer
    }

    /// Claims and starts the session's next queued run, or marks the session idle. A queued
    /// run that was cancelled (or taken by another replica) meanwhile is skipped.
    pub(super) async fn advance(self: &Arc<Self>, tenant: TenantId, session: SessionId) {
        if self.is_shutting_down() {
            // Queued runs stay queued in the store for the replica that takes over.
            return;
        }
        loop {
            let next = {
                let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
                let Some(entry) = active.get_mut(&session) else {
                    return;
                };
                match entry.queue.pop_front() {
                    Some(next) => {
                        entry.current = next.clone();
                        entry.cancel = CancellationToken::new();
                        entry.ended = Arc::default();
                        next
                    }
                    None => {
                        active.remove(&session);
                        drop(active);
                        self.release_env(&session);
                        return;
                    }
                }
            };
            let claimed = self
                .store
                .claim_run(
                    &tenant,
                    &next,
                    &self.settings.replica_id,
                    self.settings.run_lease,
                    self.settings.limits.run_caps(),
                )
                .await;
            match claimed {
                Ok(Some(record)) => {
                    // A fence above 1 means an earlier claim started it: it is resumed.
                    let resume = record.fence > 1;
                    self.spawn_run(record, resume, None);
                    return;
                }
                Ok(None) => {}
                Err(StoreError::TenantLimit(exceeded)) => {
                    // The tenant has no run slot free on any replica: the session's queued
                    // runs stay queued in the store, and the takeover sweep claims them
                    // (in order) once a slot frees.
                    tracing::info!(run_id = %next, %exceeded, "queued run waits for a run slot");
                    self.active
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&session);
                    self.release_env(&session);
                    return;
                }
                Err(error) if error.is_transient() => {
                    // The run stays first in line: it is claimed once the store answers.
                    tracing::warn!(%error, run_id = %next, "cannot claim a queued run yet");
                    self.reclaim_when_store_answers(tenant, session, next);
                    return;
                }
                Err(error) => {
                    // It stays queued in the store; the takeover sweep picks it up later.
                    tracing::warn!(%error, run_id = %next, "cannot claim a queued run");
                }
            }
        }
    }

    pub(super) fn cancel_token(&self, session: &SessionId) -> CancellationToken {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session)
            .map(|a| a.cancel.clone())
            .unwrap_or_default()
    }
}
