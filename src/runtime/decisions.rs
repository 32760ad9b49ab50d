//! [`Approvals::decide`]: the one place an approval decision is written.
//!
//! Every answer goes through it: a REST answer (`POST …/approvals/{id}`), a policy webhook's
//! synchronous answer, the expiry timeout and a cancelled run (both as `system`), and the
//! `deny` policy for pending approvals when a new prompt arrives (see the runtime's `//!` doc).
//! It writes the decision with one conditional update in the store (`pending` → decided, in
//! the transaction that also stores a grant added with an allow and, on Postgres, sends the
//! cross-replica `ApprovalDecided` signal), so however many answers race exactly one wins; the
//! others get [`DecideError::AlreadyDecided`] (or [`DecideError::Expired`]) with the decision
//! that stands. The winner's grant goes live in the running session at once, and the run
//! waiting on the approval in this process is woken (or resumed, when it parked).

use super::approvals::{ApprovalHub, LiveGrants};
use crate::ids::{ApprovalId, SessionId, TenantId};
use crate::store::{ApprovalDecision, ApprovalRecord, ApprovalStatus, Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
}

impl Approvals {
    pub fn new(store: Arc<dyn Store>, hub: Arc<ApprovalHub>) -> Self {
        Self {
            store,
            hub,
            live: Mutex::new(HashMap::new()),
        }
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
        match self
            .store
            .decide_approval(tenant, session, id, decision)
            .await?
        {
            Some(record) => {
                if let Some(grant) = grant {
                    if let Some(live) = self.live_grants(session) {
                        live.add(grant.id.as_str(), &grant.rule, grant.scope);
                    }
                }
                self.hub.wake(&record.id);
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

    /// Registers the live grants of a session whose run starts here.
    pub fn track_session(&self, session: &SessionId, grants: Arc<LiveGrants>) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.clone(), grants);
    }

    /// Forgets them when the run ends.
    pub fn untrack_session(&self, session: &SessionId) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    /// Withdraws a revoked grant from every running session.
    pub fn grant_revoked(&self, id: &str) {
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
