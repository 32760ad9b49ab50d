//! The prompt workflow of a session: a prompt becomes a run (started, queued behind the
//! current one, or interrupting it, per the client's [`BusyPolicy`]); a run is cancelled; a
//! session is closed (its runs cancelled, its live resources and task files released).

use super::*;

/// Why a run was not admitted. The session was read for the prompt a moment before, so a
/// session the store no longer admits runs for was closed (or removed) meanwhile.
fn admission_error(error: crate::store::StoreError) -> RuntimeError {
    match error {
        crate::store::StoreError::NotFound => RuntimeError::Closed,
        other => other.into(),
    }
}

impl SessionRuntime {
    /// Accepts a prompt for `session` (already loaded for the caller's tenant). `key` (an
    /// `Idempotency-Key`) is recorded with the run, in the transaction that creates it.
    pub async fn submit(
        self: &Arc<Self>,
        session: &SessionRecord,
        text: String,
        policy: BusyPolicy,
        key: Option<&crate::store::NewIdempotencyKey>,
    ) -> Result<(RunId, PromptStatus), RuntimeError> {
        if session.status == crate::store::SessionStatus::Closed {
            return Err(RuntimeError::Closed);
        }
        if self.is_shutting_down() {
            return Err(RuntimeError::ShuttingDown);
        }
        // A spent budget refuses the prompt before any hook runs or anything is written.
        self.admit_budget(session).await?;
        // UserPromptSubmit hooks run before anything else happens.
        let outcome = self
            .session_hooks(
                session,
                crate::hooks::HookPayload::UserPromptSubmit {
                    prompt: text.clone(),
                },
            )
            .await;
        if let Some(block) = outcome.block {
            return Err(RuntimeError::PromptBlocked(block));
        }
        // The shutdown may have begun while the hooks ran.
        if self.is_shutting_down() {
            return Err(RuntimeError::ShuttingDown);
        }
        let placement = if self.is_busy(&session.id) {
            self.pending_approval_policy(session, policy).await?
        } else {
            Placement::from(policy)
        };
        let run_id = RunId::generate();
        let starts_now = {
            let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(current) = active.get(&session.id) {
                let ended = current.ended.load(std::sync::atomic::Ordering::SeqCst);
                if placement == Placement::Reject && !ended {
                    return Err(RuntimeError::Busy(current.current.to_string()));
                }
                false
            } else {
                // The tenant's runs in flight are counted by the store, across replicas,
                // when the run is created below.
                active.insert(
                    session.id.clone(),
                    Active::new(run_id.clone(), VecDeque::new()),
                );
                true
            }
        };
        let new_run = NewRun {
            id: run_id.clone(),
            session: session.id.clone(),
            prompt: text,
        };
        if starts_now {
            let claim = (self.settings.replica_id.as_str(), self.settings.run_lease);
            let caps = self.settings.limits.run_caps();
            match self
                .store
                .start_run(&session.tenant, new_run, claim, caps, key)
                .await
            {
                Ok(started) => {
                    // The session was loaded for this prompt a moment ago and its permission
                    // state read with the admission: the run starts from them (no second
                    // read of the session and its config, no read of its grants).
                    let known = run_factory::Known {
                        session: session.clone(),
                        permissions: started.permissions,
                    };
                    self.spawn_run(started.run, false, Some(known));
                    return Ok((run_id, PromptStatus::Started));
                }
                Err(error) => {
                    // Prompts queued behind this one meanwhile still run.
                    let runtime = self.clone();
                    let (tenant, id) = (session.tenant.clone(), session.id.clone());
                    tokio::spawn(async move { runtime.advance(tenant, id).await });
                    return Err(admission_error(error));
                }
            }
        }
        self.store
            .create_run_keyed(
                &session.tenant,
                new_run,
                None,
                self.settings.limits.run_caps(),
                key,
            )
            .await
            .map_err(admission_error)?;
        let mut started_after_end = false;
        let orphaned = {
            let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
            match active.get_mut(&session.id) {
                Some(entry) => {
                    let placement = if entry.ended.load(std::sync::atomic::Ordering::SeqCst) {
                        // The current run is over; this one starts as its task finishes.
                        started_after_end = true;
                        Placement::Front { interrupt: false }
                    } else {
                        placement
                    };
                    match placement {
                        Placement::Back | Placement::Reject => {
                            entry.queue.push_back(run_id.clone());
                        }
                        Placement::Front { interrupt } => {
                            if interrupt {
                                entry.cancel.cancel();
                            }
                            entry.queue.push_front(run_id.clone());
                        }
                    }
                    false
                }
                None => {
                    // The current run ended while this one was being stored: it starts now.
                    active.insert(
                        session.id.clone(),
                        Active::new(run_id.clone(), VecDeque::from([run_id.clone()])),
                    );
                    true
                }
            }
        };
        if orphaned {
            self.advance(session.tenant.clone(), session.id.clone())
                .await;
            return Ok((run_id, PromptStatus::Started));
        }
        if started_after_end {
            return Ok((run_id, PromptStatus::Started));
        }
        Ok((run_id, PromptStatus::Queued))
    }

    /// Applies the session's `approvals.on_new_prompt` when its run waits on approvals:
    /// `reject` refuses the prompt; `deny` decides the pending requests as denied (the run
    /// reads the denial and goes on to its end) and puts the prompt first in line.
    async fn pending_approval_policy(
        &self,
        session: &SessionRecord,
        policy: BusyPolicy,
    ) -> Result<Placement, RuntimeError> {
        let pending = self
            .store
            .list_approvals(
                &session.tenant,
                &session.id,
                Some(crate::store::ApprovalStatus::Pending),
            )
            .await?;
        if pending.is_empty() {
            return Ok(Placement::from(policy));
        }
        let config: SessionConfig = serde_json::from_value(session.config.clone())
            .map_err(|error| RuntimeError::Setup(error.to_string()))?;
        match config.approvals.on_new_prompt {
            crate::session_config::PendingPromptPolicy::Reject => Err(
                RuntimeError::ApprovalPending(pending.into_iter().map(|a| a.id).collect()),
            ),
            crate::session_config::PendingPromptPolicy::Deny => {
                self.deny_approvals(
                    &session.tenant,
                    &session.id,
                    pending,
                    "a new prompt arrived while this approval was pending",
                )
                .await;
                Ok(Placement::Front { interrupt: false })
            }
        }
    }

    /// Cancels a running or queued run of `session`.
    pub async fn cancel(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
    ) -> Result<(), RuntimeError> {
        {
            let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = active.get_mut(session) {
                if self.cancel_if_current(entry, run) {
                    return Ok(());
                }
                entry.queue.retain(|queued| queued != run);
            }
        }
        if self.store.cancel_queued_run(tenant, session, run).await? {
            return Ok(());
        }
        // Running on another replica: the cancel is recorded for its owner, which acts on the
        // signal, or on its next reconcile when the signal is lost.
        if !self.store.request_cancel(tenant, session, run).await? {
            return Err(RuntimeError::NoSuchRun);
        }
        if let Err(error) = self
            .store
            .signal(crate::store::Signal::CancelRun {
                session: session.clone(),
                run: run.clone(),
            })
            .await
        {
            tracing::warn!(%error, run_id = %run, "cannot signal a cancel; its owner reconciles it from the store");
        }
        Ok(())
    }

    /// Cancels `run` if it is the session's current run (`entry`); a parked run resumes to
    /// record its cancellation.
    pub(super) fn cancel_if_current(&self, entry: &Active, run: &RunId) -> bool {
        if &entry.current != run {
            return false;
        }
        entry.cancel.cancel();
        self.hub.resume(run.clone());
        true
    }

    /// Stops everything of a closed session: its run, queued runs, background tasks and shells.
    pub async fn close(&self, tenant: &TenantId, session: &SessionId) {
        let queued = match self
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(session)
        {
            Some(active) => {
                let current = active.current.clone();
                self.cancel_if_current(active, &current);
                std::mem::take(&mut active.queue)
            }
            None => VecDeque::new(),
        };
        for run in queued {
            if let Err(error) = self.store.cancel_queued_run(tenant, session, &run).await {
                tracing::warn!(%error, run_id = %run, "cannot cancel a queued run");
            }
        }
        let env = self
            .envs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
        if let Some(env) = env {
            env.shells.tasks.shutdown();
            env.shells.shells.shutdown();
            env.mcp.shutdown().await;
        }
        // Task output files live in a server-owned, id-derived directory; they go with the
        // session (the workspace stays: it holds what the agent produced).
        if session.is_well_formed() {
            let logs = self
                .settings
                .files_root
                .join("tasks")
                .join(session.as_str());
            if let Err(error) = std::fs::remove_dir_all(&logs)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(%error, "cannot remove task output files");
            }
        }
    }

    /// Whether the session has a run in flight.
    pub fn is_busy(&self, session: &SessionId) -> bool {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(session)
    }
}
