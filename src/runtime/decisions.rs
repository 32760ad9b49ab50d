//! [`Approvals::decide`]: the one place an approval decision is written.
//!
//! Every answer goes through it: a REST answer (`POST …/approvals/{id}`), a policy webhook's
//! synchronous answer, the expiry timeout and a cancelled run (both as `system`), and the
//! `deny` policy for pending approvals when a new prompt arrives (see the runtime's `//!` doc).
//! It writes the decision with one conditional update in the store (`pending` → decided, in
//! the transaction that also stores a grant added with an allow; on Postgres the cross-replica
//! `ApprovalDecided` signal follows its commit), so however many answers race exactly one wins; the
//! others get [`DecideError::AlreadyDecided`] (or [`DecideError::Expired`]) with the decision
//! that stands. The winner's grant goes live in the running session at once, and the run
//! waiting on the approval in this process is woken (or resumed, when it parked).

use super::approvals::{ApprovalHub, LiveGrants};
use crate::ids::{ApprovalId, SessionId, TenantId};
use crate::store::{ApprovalDecision, ApprovalRecord, ApprovalStatus, Store, StoreError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a decision was not written.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error("no such approval")]
    NotFound,
    /// Another answer won; the record carries the decision that stands.
    #[error("the approval was already decided")]
    AlreadyDecided(Box<ApprovalRecord>),
    /// The request expired before this answer (decided as expired, or still pending past its
    /// expiry).
    #[error("the approval request expired")]
    Expired(Box<ApprovalRecord>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DecideError {
    /// The decision that stands, when another one won.
    pub fn standing(self) -> Option<ApprovalRecord> {
        match self {
            Self::AlreadyDecided(record) | Self::Expired(record) => Some(*record),
            Self::NotFound | Self::Store(_) => None,
        }
    }
}

/// The approvals of this replica: the single writer of decisions, the hub that wakes the runs
/// waiting on them, and the grants in force for each running session.
pub struct Approvals {
    store: Arc<dyn Store>,
    hub: Arc<ApprovalHub>,
    /// Session → the live grants of its running run.
    live: Mutex<HashMap<SessionId, Arc<LiveGrants>>>,
    /// Grants revoked here lately (see [`Approvals::track_session`]).
    revoked: Mutex<VecDeque<(Instant, String)>>,
    /// Counts each decision's answer latency.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Approvals {
    pub fn new(store: Arc<dyn Store>, hub: Arc<ApprovalHub>) -> Self {
        Self {
            store,
            hub,
            live: Mutex::new(HashMap::new()),
            revoked: Mutex::new(VecDeque::new()),
            metrics: None,
        }
    }

    /// Counts the answer latency of every decision in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The hub that wakes runs waiting on approvals.
    pub fn hub(&self) -> &Arc<ApprovalHub> {
        &self.hub
    }

    /// Decides a pending approval, exactly once (see the module doc).
    pub async fn decide(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
        decision: ApprovalDecision,
    ) -> Result<ApprovalRecord, DecideError> {
        let grant = decision.grant.clone();
        // A transient store error is retried (under the caller's lease for run-side answers);
        // the conditional update keeps the decision exactly-once across retries.
        let decided = crate::store::retry_transient(crate::store::TRANSIENT_RETRY_WINDOW, || {
            self.store
                .decide_approval(tenant, session, id, decision.clone())
        })
        .await?;
        match decided {
            Some(record) => {
                if let Some(grant) = grant
                    && let Some(live) = self.live_grants(session)
                {
                    live.add(grant.id.as_str(), &grant.rule, grant.scope);
                }
                self.hub.wake(&record.id);
                if let Some(metrics) = &self.metrics {
                    let decided = record.decided_at.unwrap_or_else(chrono::Utc::now);
                    metrics.approval_answered(
                        (decided - record.created_at).to_std().unwrap_or_default(),
                    );
                }
                tracing::info!(approval_id = %record.id, status = ?record.status,
                    decided_by = ?record.decided_by, "approval decided");
                Ok(record)
            }
            None => {
                let current = self
                    .store
                    .get_approval(tenant, session, id)
                    .await?
                    .ok_or(DecideError::NotFound)?;
                let expired = current.status == ApprovalStatus::Expired
                    || (current.status == ApprovalStatus::Pending
                        && current.expires_at <= chrono::Utc::now());
                Err(if expired {
                    DecideError::Expired(Box::new(current))
                } else {
                    DecideError::AlreadyDecided(Box::new(current))
                })
            }
        }
    }

    /// Registers the live grants of a session whose run starts here. They were read a moment
    /// before (with the run's admission): a grant revoked here since then is withdrawn from
    /// them now. (A revocation marks itself before it withdraws the grant from the tracked
    /// sessions, and a run is tracked before it looks at the marks: one of the two sees the
    /// other.)
    pub fn track_session(&self, session: &SessionId, grants: Arc<LiveGrants>) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.clone(), grants.clone());
        let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        forget_old_revocations(&mut revoked);
        for (_, id) in revoked.iter() {
            grants.remove(id);
        }
    }

    /// Forgets them when the run ends.
    pub fn untrack_session(&self, session: &SessionId) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    /// Withdraws a revoked grant from every running session, and from the sessions whose
    /// runs read their grants before the revocation and start after it (see
    /// [`Approvals::track_session`]).
    pub fn grant_revoked(&self, id: &str) {
        {
            let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
            forget_old_revocations(&mut revoked);
            if revoked.len() == REVOCATIONS_KEPT {
                revoked.pop_front();
            }
            revoked.push_back((Instant::now(), id.to_owned()));
        }
        for grants in self.live.lock().unwrap_or_else(|e| e.into_inner()).values() {
            grants.remove(id);
        }
    }

    fn live_grants(&self, session: &SessionId) -> Option<Arc<LiveGrants>> {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session)
            .cloned()
    }
}

/// Revocations kept at most (the oldest give way), and for how long: far longer than a run
/// takes from its admission to its start.
const REVOCATIONS_KEPT: usize = 1024;
const REVOCATION_MEMORY: Duration = Duration::from_secs(60);

fn forget_old_revocations(revoked: &mut VecDeque<(Instant, String)>) {
    while revoked
        .front()
        .is_some_and(|(at, _)| at.elapsed() > REVOCATION_MEMORY)
    {
        revoked.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::GrantId;
    use crate::store::{ConnectOptions, GrantScope, NewApproval, NewGrant, NewSession};
    use serde_json::json;

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Arc<dyn Store>,
        approvals: Arc<Approvals>,
        tenant: TenantId,
        session: SessionId,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("norma.db").display());
        let store = crate::store::connect(&url, &ConnectOptions::default())
            .await
            .unwrap();
        let tenant = TenantId::new("acme");
        let session = SessionId::generate();
        store
            .create_session(NewSession {
                id: session.clone(),
                tenant: tenant.clone(),
                config: json!({}),
            })
            .await
            .unwrap();
        let (hub, _resumes) = ApprovalHub::new();
        let approvals = Arc::new(Approvals::new(store.clone(), Arc::new(hub)));
        Fixture {
            _dir: dir,
            store,
            approvals,
            tenant,
            session,
        }
    }

    async fn request(f: &Fixture, expires_in: chrono::Duration) -> ApprovalId {
        let id = ApprovalId::generate();
        f.store
            .create_approval(
                &f.tenant,
                NewApproval {
                    id: id.clone(),
                    session: f.session.clone(),
                    run_id: None,
                    tool_use_id: "tu_1".into(),
                    tool_name: "Bash".into(),
                    input: json!({ "command": "git push" }),
                    input_sha256: "digest".into(),
                    reason: "ask".into(),
                    expires_at: chrono::Utc::now() + expires_in,
                },
                10,
            )
            .await
            .unwrap();
        id
    }

    fn decision(status: ApprovalStatus, by: &str) -> ApprovalDecision {
        ApprovalDecision {
            status,
            decided_by: by.into(),
            reason: None,
            updated_input: None,
            grant: None,
        }
    }

    #[tokio::test]
    async fn racing_rest_webhook_and_expiry_write_one_decision_and_wake_the_waiter() {
        let f = fixture().await;
        for _ in 0..5 {
            let id = request(&f, chrono::Duration::minutes(5)).await;
            let woken = f.approvals.hub().register(&id);
            let answers = [
                decision(ApprovalStatus::Allowed, "alice"),
                decision(ApprovalStatus::Denied, "webhook"),
                decision(ApprovalStatus::Expired, "system"),
            ];
            let racing = answers.into_iter().map(|answer| {
                let (approvals, id) = (f.approvals.clone(), id.clone());
                let (tenant, session) = (f.tenant.clone(), f.session.clone());
                tokio::spawn(async move { approvals.decide(&tenant, &session, &id, answer).await })
            });
            let outcomes: Vec<_> = futures::future::join_all(racing)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
            let won: Vec<&ApprovalRecord> = outcomes.iter().flatten().collect();
            assert_eq!(won.len(), 1, "{outcomes:?}");
            let stored = f
                .store
                .get_approval(&f.tenant, &f.session, &id)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&stored, won[0]);
            for lost in outcomes.into_iter().filter_map(Result::err) {
                assert!(
                    matches!(
                        lost,
                        DecideError::AlreadyDecided(_) | DecideError::Expired(_)
                    ),
                    "{lost:?}"
                );
                assert_eq!(lost.standing().as_ref(), Some(&stored));
            }
            woken
                .await
                .expect("the waiter is woken by the winning decision");
        }
    }

    #[tokio::test]
    async fn a_grant_revoked_before_its_run_is_tracked_is_withdrawn_when_it_is() {
        let f = fixture().await;
        // A run read g_old and g_kept with its admission; g_old is revoked before it starts.
        f.approvals.grant_revoked("g_old");
        let grants = Arc::new(LiveGrants::default());
        grants.add("g_old", "Bash(git push)", GrantScope::Session);
        grants.add("g_kept", "Bash(git status)", GrantScope::Tenant);
        f.approvals.track_session(&f.session, grants.clone());
        assert_eq!(grants.scope_of("g_old"), None);
        assert_eq!(grants.scope_of("g_kept"), Some(GrantScope::Tenant));
        // A revocation while the run is tracked reaches it too.
        f.approvals.grant_revoked("g_kept");
        assert_eq!(grants.scope_of("g_kept"), None);
        // The memory is bounded: the oldest revocations give way.
        for n in 0..REVOCATIONS_KEPT {
            f.approvals.grant_revoked(&format!("g_{n}"));
        }
        let revoked = f.approvals.revoked.lock().unwrap();
        assert_eq!(revoked.len(), REVOCATIONS_KEPT);
        assert!(!revoked.iter().any(|(_, id)| id == "g_old"));
    }

    #[tokio::test]
    async fn a_second_answer_is_refused_and_a_late_one_expired() {
        let f = fixture().await;
        let id = request(&f, chrono::Duration::minutes(5)).await;
        f.approvals
            .decide(
                &f.tenant,
                &f.session,
                &id,
                decision(ApprovalStatus::Denied, "bob"),
            )
            .await
            .unwrap();
        let again = f
            .approvals
            .decide(
                &f.tenant,
                &f.session,
                &id,
                decision(ApprovalStatus::Allowed, "eve"),
            )
            .await;
        assert!(
            matches!(again, Err(DecideError::AlreadyDecided(_))),
            "{again:?}"
        );

        let late = request(&f, chrono::Duration::milliseconds(-1)).await;
        let answer = f
            .approvals
            .decide(
                &f.tenant,
                &f.session,
                &late,
                decision(ApprovalStatus::Allowed, "bob"),
            )
            .await;
        assert!(matches!(answer, Err(DecideError::Expired(_))), "{answer:?}");

        let missing = f
            .approvals
            .decide(
                &f.tenant,
                &f.session,
                &ApprovalId::generate(),
                decision(ApprovalStatus::Allowed, "bob"),
            )
            .await;
        assert!(matches!(missing, Err(DecideError::NotFound)), "{missing:?}");
    }

    #[tokio::test]
    async fn an_allow_with_a_grant_makes_it_live_in_the_running_session() {
        let f = fixture().await;
        let live = Arc::new(LiveGrants::default());
        f.approvals.track_session(&f.session, live.clone());
        let id = request(&f, chrono::Duration::minutes(5)).await;
        let grant = GrantId::generate();
        let mut allow = decision(ApprovalStatus::Allowed, "alice");
        allow.grant = Some(NewGrant {
            id: grant.clone(),
            session: f.session.clone(),
            scope: GrantScope::Session,
            rule: "Bash(git push:*)".into(),
            created_by: "alice".into(),
            approval_id: Some(id.to_string()),
            expires_at: None,
        });
        let record = f
            .approvals
            .decide(&f.tenant, &f.session, &id, allow)
            .await
            .unwrap();
        assert_eq!(record.grant_id.as_deref(), Some(grant.as_str()));
        assert_eq!(live.scope_of(grant.as_str()), Some(GrantScope::Session));
        f.approvals.grant_revoked(grant.as_str());
        assert_eq!(live.scope_of(grant.as_str()), None);
    }
}
