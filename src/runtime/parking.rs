//! Parking: a run whose calls wait on approvals longer than `approval_park_after_ms` stops
//! running (no task, no history in memory) until an answer, a cancel or the expiry resumes
//! it; and the deny policy for pending approvals when a new prompt arrives.

use super::*;

impl SessionRuntime {
    /// Parks a run: records `run_parked`, registers its approvals with the hub (an answer
    /// on any replica resumes it) and arms one timer for the earliest expiry. The session
    /// stays busy; the run's lease stays with this replica.
    pub(super) async fn park(
        self: &Arc<Self>,
        tenant: TenantId,
        session: SessionId,
        lease: RunLease,
        prompt: String,
        waiting: Vec<(String, chrono::DateTime<chrono::Utc>)>,
    ) {
        let run_id = lease.run_id.clone();
        let ids: Vec<String> = waiting.iter().map(|(id, _)| id.clone()).collect();
        let writer = self.run_writer(&tenant, &session, &lease);
        let _ = writer
            .write(
                vec![],
                vec![RunEvent::RunParked(run_event::RunParked {
                    run_id: run_id.to_string(),
                    approval_ids: ids.clone(),
                })],
            )
            .await;
        let timer = CancellationToken::new();
        self.parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                run_id.clone(),
                ParkedRun {
                    tenant: tenant.clone(),
                    session: session.clone(),
                    lease,
                    prompt,
                    timer: timer.clone(),
                },
            );
        self.hub.park(&run_id, &ids);
        tracing::info!(approvals = ids.len(), "run parked");
        if self.cancel_token(&session).is_cancelled() {
            // Cancelled while parking: resume to record the cancellation.
            self.hub.resume(run_id);
            return;
        }
        // An answer that came while the run was parking found nobody to wake.
        for id in &ids {
            let decided = self
                .store
                .get_approval(
                    &tenant,
                    &session,
                    &crate::ids::ApprovalId::from_string(id.clone()),
                )
                .await
                .ok()
                .flatten()
                .is_none_or(|a| a.status != crate::store::ApprovalStatus::Pending);
            if decided {
                self.hub.resume(run_id.clone());
                return;
            }
        }
        // Expiry settles the request even with no answer.
        if let Some(expiry) = waiting.iter().map(|(_, at)| *at).min() {
            let hub = self.hub.clone();
            let wait = (expiry - chrono::Utc::now()).to_std().unwrap_or_default();
            tokio::spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(wait) => hub.resume(run_id),
                    () = timer.cancelled() => {}
                }
            });
        }
    }

    /// Resumes a parked run (a no-op when it is not parked here).
    pub(super) fn unpark(self: &Arc<Self>, run: &RunId) {
        if self.is_shutting_down() {
            // It stays parked; its lease is released with the others and another replica
            // resumes it.
            return;
        }
        let Some(parked) = self
            .parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(run)
        else {
            return;
        };
        parked.timer.cancel();
        self.hub.unpark(run);
        tracing::info!(run_id = %run, session_id = %parked.session, "resuming a parked run");
        let runtime = self.clone();
        let run = run.clone();
        tokio::spawn(async move {
            if runtime.cancel_token(&parked.session).is_cancelled() {
                // Cancelled while parked: its requests are settled, as a waiting run's are.
                match runtime
                    .store
                    .list_approvals(
                        &parked.tenant,
                        &parked.session,
                        Some(crate::store::ApprovalStatus::Pending),
                    )
                    .await
                {
                    Ok(pending) => {
                        let of_run = pending
                            .into_iter()
                            .filter(|a| a.run_id.as_deref() == Some(run.as_str()))
                            .collect();
                        runtime
                            .deny_approvals(
                                &parked.tenant,
                                &parked.session,
                                of_run,
                                "the run was cancelled",
                            )
                            .await;
                    }
                    Err(error) => tracing::warn!(%error, "cannot list pending approvals"),
                }
            }
            runtime.drive(
                parked.tenant,
                parked.session,
                parked.lease,
                parked.prompt,
                true,
                None,
            );
        });
    }

    /// Decides these pending approvals as denied by `system` and wakes whoever waits on them.
    pub(super) async fn deny_approvals(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        pending: Vec<crate::store::ApprovalRecord>,
        reason: &str,
    ) {
        for approval in pending {
            let id = crate::ids::ApprovalId::from_string(approval.id);
            let decision = crate::store::ApprovalDecision {
                status: crate::store::ApprovalStatus::Denied,
                decided_by: "system".into(),
                reason: Some(reason.into()),
                updated_input: None,
                grant: None,
            };
            match self.approvals.decide(tenant, session, &id, decision).await {
                // Decided now, or by an answer that came first: either way the waiter is woken.
                Ok(_) | Err(DecideError::AlreadyDecided(_) | DecideError::Expired(_)) => {}
                Err(error) => {
                    tracing::warn!(%error, approval_id = %id, "cannot settle a pending approval");
                    // Let the waiter read what the store holds rather than wait on.
                    self.hub.wake(id.as_str());
                }
            }
        }
    }
}
