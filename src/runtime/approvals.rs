//! Durable approvals and live grants.
//!
//! When the permission ladder says "ask", the run's [`RunApprover`] persists an approval
//! request (bound to the SHA-256 of the exact input), publishes an `approval_requested`
//! event and waits — bounded by the request's expiry — for the answer that arrives over REST.
//! Every decision (REST, webhook, expiry, cancellation, the pending-prompt policy) is written
//! by [`super::Approvals::decide`], exactly once however many answers race. Grants added by an
//! answer are visible to the running session at once through [`LiveGrants`].

use super::session_writer::SessionWriter;
use crate::ids::{ApprovalId, GrantId, RunId, SessionId, TenantId};
use crate::permission::{DecisionInput, GrantRule, PermissionMode, Rule, RuleSet, Verdict, decide};
use crate::run_event::{self, RunEvent};
use crate::store::{
    ApprovalDecision, ApprovalRecord, ApprovalStatus, GrantScope, NewApproval, Store,
};
use crate::tools::Tool;
use crate::tools::pipeline::{
    ApprovalAnswer, ApprovalRequest, Approver, PermissionGate, tool_facts,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// Wakes runs waiting for an approval answer, and resumes parked runs when theirs comes.
pub struct ApprovalHub {
    waiters: Mutex<HashMap<String, oneshot::Sender<()>>>,
    /// Approval id → the parked run waiting on it.
    parked: Mutex<HashMap<String, RunId>>,
    resumes: tokio::sync::mpsc::UnboundedSender<RunId>,
}

impl ApprovalHub {
    /// A hub and the receiver of the runs it asks to resume.
    pub fn new() -> (Self, tokio::sync::mpsc::UnboundedReceiver<RunId>) {
        let (resumes, receiver) = tokio::sync::mpsc::unbounded_channel();
        (
            Self {
                waiters: Mutex::new(HashMap::new()),
                parked: Mutex::new(HashMap::new()),
                resumes,
            },
            receiver,
        )
    }

    pub(super) fn register(&self, id: &ApprovalId) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), tx);
        rx
    }

    fn forget(&self, id: &ApprovalId) {
        self.waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id.as_str());
    }

    /// Tells the run waiting for approval `id` (if it lives in this process) that it was
    /// decided: a waiting run reads the decision, a parked run is resumed.
    pub fn wake(&self, id: &str) {
        let waiter = self
            .waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(tx) = waiter {
            let _ = tx.send(());
            return;
        }
        let parked = self
            .parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(run) = parked {
            self.resume(run);
        }
    }

    /// Every approval someone here waits on (a waiting call or a parked run).
    pub fn awaited(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        ids.extend(
            self.parked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .cloned(),
        );
        ids
    }

    /// Records that `run` parked on these approvals.
    pub fn park(&self, run: &RunId, approvals: &[String]) {
        let mut parked = self.parked.lock().unwrap_or_else(|e| e.into_inner());
        for id in approvals {
            parked.insert(id.clone(), run.clone());
        }
    }

    /// Forgets the approvals of a run that is resuming.
    pub fn unpark(&self, run: &RunId) {
        self.parked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, parked| parked != run);
    }

    /// Asks for `run` to be resumed if it is parked (a no-op otherwise).
    pub fn resume(&self, run: RunId) {
        let _ = self.resumes.send(run);
    }
}

/// The approvals a run parked on (shared by its approver and its host): it parked as soon as
/// there is one.
#[derive(Default)]
pub struct ParkState {
    waiting: Mutex<Vec<(String, chrono::DateTime<chrono::Utc>)>>,
}

impl ParkState {
    pub fn is_parked(&self) -> bool {
        !self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    fn park(&self, id: &str, expires_at: chrono::DateTime<chrono::Utc>) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id.to_owned(), expires_at));
    }

    /// The approvals the run parked on, with their expiries.
    pub fn waiting(&self) -> Vec<(String, chrono::DateTime<chrono::Utc>)> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The grants in force for one running session, shared by its gate and the REST answers.
#[derive(Default)]
pub struct LiveGrants {
    grants: RwLock<Vec<(GrantRule, GrantScope)>>,
}

impl LiveGrants {
    pub fn add(&self, id: &str, rule: &str, scope: GrantScope) {
        if let Ok(rule) = Rule::parse(rule) {
            self.grants
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .push((
                    GrantRule {
                        grant_id: id.to_owned(),
                        rule,
                    },
                    scope,
                ));
        }
    }

    pub fn remove(&self, id: &str) {
        self.grants
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(g, _)| g.grant_id != id);
    }

    pub fn scope_of(&self, id: &str) -> Option<GrantScope> {
        self.grants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(g, _)| g.grant_id == id)
            .map(|(_, scope)| *scope)
    }

    fn snapshot(&self) -> Vec<GrantRule> {
        self.grants
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(g, _)| g.clone())
            .collect()
    }
}

/// The session's permission gate: mode, rules, live grants, workspace.
pub struct LiveGate {
    /// The effective mode; plan-mode tools change it during a run.
    pub mode: Arc<RwLock<PermissionMode>>,
    pub rules: RuleSet,
    pub grants: Arc<LiveGrants>,
    pub workspace: Option<PathBuf>,
}

impl PermissionGate for LiveGate {
    fn evaluate(&self, tool: &dyn Tool, input: &Value) -> Verdict {
        let facts = tool_facts(tool, input);
        let grants = self.grants.snapshot();
        let mode = *self.mode.read().unwrap_or_else(|e| e.into_inner());
        decide(&DecisionInput {
            mode,
            rules: &self.rules,
            grants: &grants,
            tool: &facts,
            input,
            workspace: self.workspace.as_deref(),
        })
    }
}

/// The SHA-256 of an input's JSON text (serde_json keeps object keys sorted).
pub fn input_digest(input: &Value) -> String {
    hex::encode(Sha256::digest(input.to_string().as_bytes()))
}

pub use crate::session_config::TimeoutDecision;

/// The approval callback of one run.
#[derive(Clone)]
pub struct RunApprover {
    pub store: Arc<dyn Store>,
    pub writer: Arc<SessionWriter>,
    pub hub: Arc<ApprovalHub>,
    /// The single writer of decisions (the expiry timeout, cancellation, the webhook's answer).
    pub approvals: Arc<super::Approvals>,
    pub tenant: TenantId,
    pub session: SessionId,
    pub run_id: RunId,
    pub timeout: Duration,
    pub on_timeout: TimeoutDecision,
    pub grants: Arc<LiveGrants>,
    pub cancel: CancellationToken,
    /// The session's policy-service webhook, if any.
    pub webhook: Option<super::webhook::WebhookConfig>,
    /// The outbound client webhooks are delivered through.
    pub egress: crate::egress::EgressClient,
    /// The run was resumed after a restart: a call asks again for the approval it had
    /// requested before (same run, call and input), which is reused rather than duplicated.
    pub resumed: bool,
    /// How long a call waits in process for its answer before the run parks (`None`: never).
    pub park_after: Option<Duration>,
    pub park: Arc<ParkState>,
    /// The tenant's cap on pending approval requests (`limits.pending_approvals`).
    pub max_pending: u32,
    /// Cancelled when the replica shuts down: a waiting call parks at once.
    pub handoff: CancellationToken,
    /// Counts waiting calls (`approvals_pending`) and webhook deliveries.
    pub metrics: Arc<crate::metrics::Metrics>,
}

impl RunApprover {
    async fn record_event(&self, event: RunEvent) {
        if let Err(error) = self.writer.write(vec![], vec![event]).await {
            tracing::warn!(%error, "cannot record approval event");
        }
    }

    async fn settle(
        &self,
        id: &ApprovalId,
        status: ApprovalStatus,
        reason: &str,
    ) -> Option<ApprovalRecord> {
        let decision = ApprovalDecision {
            status,
            decided_by: "system".into(),
            reason: Some(reason.into()),
            updated_input: None,
            grant: None,
        };
        match self
            .approvals
            .decide(&self.tenant, &self.session, id, decision)
            .await
        {
            Ok(record) => Some(record),
            // Someone answered first: their decision stands.
            Err(error) => match error.standing() {
                Some(record) => Some(record),
                None => self
                    .store
                    .get_approval(&self.tenant, &self.session, id)
                    .await
                    .ok()
                    .flatten(),
            },
        }
    }

    /// Delivers the request to the policy service in the background; a synchronous answer in
    /// its response decides the approval like a REST answer would (exactly once).
    fn spawn_webhook(&self, webhook: super::webhook::WebhookConfig, record: &ApprovalRecord) {
        let body = json!({
            "type": "approval.requested",
            "tenant": self.tenant,
            "session_id": self.session,
            "approval": record,
        });
        let (approvals, writer) = (self.approvals.clone(), self.writer.clone());
        let (tenant, session) = (self.tenant.clone(), self.session.clone());
        let id = ApprovalId::from_string(record.id.clone());
        let egress = self.egress.clone();
        let metrics = self.metrics.clone();
        tokio::spawn(async move {
            let outcome = super::webhook::deliver(&egress, &webhook, &body).await;
            metrics.webhook_delivery(
                crate::metrics::WebhookKind::approval,
                match &outcome {
                    Ok(_) => crate::metrics::DeliveryOutcome::delivered,
                    Err(super::webhook::WebhookError::Refused(_)) => {
                        crate::metrics::DeliveryOutcome::refused
                    }
                    Err(super::webhook::WebhookError::Failed { .. }) => {
                        crate::metrics::DeliveryOutcome::failed
                    }
                },
            );
            match outcome {
                Ok(Some(answer)) => {
                    let status = match answer.decision.as_str() {
                        "allow" => ApprovalStatus::Allowed,
                        "deny" => ApprovalStatus::Denied,
                        _ => return,
                    };
                    let decision = ApprovalDecision {
                        status,
                        decided_by: "webhook".into(),
                        reason: answer.reason,
                        updated_input: answer.updated_input.filter(Value::is_object),
                        grant: None,
                    };
                    // A later answer than another's is simply not the one that stands.
                    let _ = approvals.decide(&tenant, &session, &id, decision).await;
                }
                Ok(None) => {}
                Err(error) => {
                    // The detail (addresses, statuses) is for the log; the tenant sees a code.
                    tracing::warn!(%error, %tenant, %session, approval_id = %id,
                        "approval webhook failed");
                    let event = RunEvent::ApprovalWebhookFailed(run_event::ApprovalWebhookFailed {
                        approval_id: id.to_string(),
                        code: super::webhook::WEBHOOK_FAILED.to_owned(),
                    });
                    let _ = writer.write(vec![], vec![event]).await;
                }
            }
        });
    }

    fn answer_of(&self, record: &ApprovalRecord) -> ApprovalAnswer {
        match record.status {
            ApprovalStatus::Allowed => ApprovalAnswer::Allow {
                updated_input: record.updated_input.clone(),
            },
            ApprovalStatus::Denied => ApprovalAnswer::Deny {
                reason: record
                    .decision_reason
                    .clone()
                    .unwrap_or_else(|| "denied".into()),
            },
            ApprovalStatus::Expired => ApprovalAnswer::Expired {
                reason: "no answer before the approval request expired".into(),
            },
            ApprovalStatus::Pending => ApprovalAnswer::Deny {
                reason: "the approval is still pending".into(),
            },
        }
    }
}

impl RunApprover {
    /// The request this run made for the same call and input before a restart, if any.
    async fn earlier_request(&self, tool_use_id: &str, digest: &str) -> Option<ApprovalRecord> {
        self.store
            .run_approval_request(
                &self.tenant,
                &self.session,
                &self.run_id,
                tool_use_id,
                digest,
            )
            .await
            .ok()
            .flatten()
    }

    /// Persists a new request, announces it and delivers it to the policy service.
    async fn new_request(
        &self,
        request: &ApprovalRequest,
        digest: String,
    ) -> Result<(ApprovalRecord, oneshot::Receiver<()>), ApprovalAnswer> {
        let id = ApprovalId::generate();
        let expires_at = chrono::Utc::now()
            + chrono::Duration::from_std(self.timeout)
                .unwrap_or_else(|_| chrono::Duration::minutes(10));
        let woken = self.hub.register(&id);
        let created = self
            .store
            .create_approval(
                &self.tenant,
                NewApproval {
                    id: id.clone(),
                    session: self.session.clone(),
                    run_id: Some(self.run_id.to_string()),
                    tool_use_id: request.tool_use_id.clone(),
                    tool_name: request.tool_name.clone(),
                    input_sha256: digest,
                    input: request.input.clone(),
                    reason: request.reason.clone(),
                    expires_at,
                },
                self.max_pending,
            )
            .await;
        let record = match created {
            Ok(record) => record,
            Err(crate::store::StoreError::TenantLimit(exceeded)) => {
                // Denied at once rather than parked with no room for an answer.
                self.hub.forget(&id);
                return Err(ApprovalAnswer::Refused {
                    code: crate::tools::codes::TENANT_LIMIT,
                    reason: format!(
                        "{exceeded} (limit {}); the call was not run",
                        exceeded.limit.as_str()
                    ),
                });
            }
            Err(error) => {
                self.hub.forget(&id);
                tracing::error!(%error, "cannot persist approval request");
                return Err(ApprovalAnswer::Deny {
                    reason: "the approval request could not be recorded".into(),
                });
            }
        };
        self.record_event(RunEvent::ApprovalRequested(run_event::ApprovalEvent {
            approval: record.clone(),
        }))
        .await;
        if let Some(webhook) = self.webhook.clone() {
            self.spawn_webhook(webhook, &record);
        }
        Ok((record, woken))
    }

    /// Whether this run's transcript already tells the decision of approval `id` (a resumed
    /// run re-reads a decision it recorded before the crash; it is not told twice). On a read
    /// error it is told again: a repeated, identical decision beats a missing one.
    async fn decision_recorded(&self, id: &str) -> bool {
        self.store
            .list_run_events(
                &self.tenant,
                &self.session,
                &self.run_id,
                &[run_event::kinds::APPROVAL_DECIDED],
            )
            .await
            .is_ok_and(|events| {
                events
                    .iter()
                    .any(|event| event.payload.value()["approval"]["id"].as_str() == Some(id))
            })
    }

    /// Applies a decided request: its grant goes live, the decision is recorded as an event
    /// (unless `recorded`: the transcript tells it already).
    ///
    /// The event joins the run's next write (the call's `tool_executing` journal entry, or the
    /// turn's commit; the run's lingering write within [`super::session_writer::FLUSH_LINGER`] otherwise)
    /// instead of costing a transaction of its own: the decision itself is already durable in
    /// the approval's row, and a run resumed before the event was written finds it missing
    /// there and records it then (see `decision_recorded`).
    async fn conclude(&self, record: ApprovalRecord, recorded: bool) -> ApprovalAnswer {
        if let Some(grant) = &record.grant_id
            && let Ok(grants) = self.store.list_grants(&self.tenant, &self.session).await
            && let Some(found) = grants.iter().find(|g| &g.id == grant)
        {
            self.grants.add(&found.id, &found.rule, found.scope);
        }
        if !recorded {
            self.writer
                .push_event(RunEvent::ApprovalDecided(run_event::ApprovalEvent {
                    approval: record.clone(),
                }));
        }
        self.answer_of(&record)
    }
}

#[async_trait]
impl Approver for RunApprover {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalAnswer {
        let digest = input_digest(&request.input);
        let earlier = if self.resumed {
            self.earlier_request(&request.tool_use_id, &digest).await
        } else {
            None
        };
        let (record, woken) = match earlier {
            Some(earlier) => {
                let id = ApprovalId::from_string(earlier.id.clone());
                let woken = self.hub.register(&id);
                // Read again after registering, so an answer in between is not missed.
                let record = self
                    .store
                    .get_approval(&self.tenant, &self.session, &id)
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(earlier);
                if record.status != ApprovalStatus::Pending {
                    self.hub.forget(&id);
                    let recorded = self.decision_recorded(&record.id).await;
                    return self.conclude(record, recorded).await;
                }
                // The delivery may have died with the old process; deliveries are idempotent
                // for the policy service (same approval id).
                if let Some(webhook) = self.webhook.clone() {
                    self.spawn_webhook(webhook, &record);
                }
                (record, woken)
            }
            None => match self.new_request(&request, digest).await {
                Ok(created) => created,
                Err(answer) => return answer,
            },
        };
        let id = ApprovalId::from_string(record.id.clone());
        let remaining = (record.expires_at - chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        let park_after = self
            .park_after
            .filter(|after| *after < remaining)
            .map(|after| {
                if self.park.is_parked() {
                    Duration::ZERO
                } else {
                    after
                }
            });
        let _waiting = self.metrics.approval_waiting();
        let settled = tokio::select! {
            // Parking: no task waits for a human; the run resumes from the store on the answer.
            () = tokio::time::sleep(park_after.unwrap_or_default()), if park_after.is_some() => {
                self.hub.forget(&id);
                self.park.park(&record.id, record.expires_at);
                return ApprovalAnswer::Parked;
            }
            // Shutting down: park now, as after `park_after`; the next replica resumes it.
            () = self.handoff.cancelled() => {
                self.hub.forget(&id);
                self.park.park(&record.id, record.expires_at);
                return ApprovalAnswer::Parked;
            }
            _ = woken => self.store.get_approval(&self.tenant, &self.session, &id).await.ok().flatten(),
            () = tokio::time::sleep(remaining) => {
                let status = match self.on_timeout {
                    TimeoutDecision::Deny => ApprovalStatus::Expired,
                    TimeoutDecision::Allow => ApprovalStatus::Allowed,
                };
                self.settle(&id, status, "expired").await
            }
            () = self.cancel.cancelled() => self.settle(&id, ApprovalStatus::Denied, "the run was cancelled").await,
        };
        self.hub.forget(&id);
        match settled {
            Some(record) => self.conclude(record, false).await,
            None => ApprovalAnswer::Deny {
                reason: "the approval could not be read back".into(),
            },
        }
    }
}

/// Consumes a `once` grant after it allowed a call.
pub async fn consume_if_once(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    grants: &LiveGrants,
    grant_id: &str,
) {
    if grants.scope_of(grant_id) == Some(GrantScope::Once) {
        grants.remove(grant_id);
        if let Err(error) = store
            .consume_grant(tenant, &GrantId::from_string(grant_id))
            .await
        {
            tracing::warn!(%error, "cannot consume grant");
        }
    }
}
