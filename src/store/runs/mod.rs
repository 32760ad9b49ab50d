//! Runs: submission, claims under a fenced lease, cancellation, and the sweep of unfinished
//! runs.

use crate::store::RunStatus;
use crate::store::dialect::lease_span;
use std::time::Duration;

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
pub(in crate::store) const RUN_COLUMNS: &str = "id, session_id, tenant_id, prompt, status, owner, lease_expires_at, \
     fence, terminal, created_at, started_at, ended_at";

pub(in crate::store) const UNFINISHED_COLUMNS: &str =
    "id, session_id, tenant_id, status, owner, lease_expires_at";

/// The first state of a new run: queued, or — when claimed — running under a fresh lease of
/// its claimer with fence 1.
pub(in crate::store) struct RunStart<'a> {
    pub(in crate::store) status: RunStatus,
    pub(in crate::store) owner: Option<&'a str>,
    pub(in crate::store) lease_expires_at: Option<chrono::DateTime<chrono::Utc>>,
    pub(in crate::store) fence: i64,
    pub(in crate::store) started_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl<'a> RunStart<'a> {
    pub(in crate::store) fn new(
        claim: Option<(&'a str, Duration)>,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        match claim {
            Some((owner, lease)) => Self {
                status: RunStatus::Running,
                owner: Some(owner),
                lease_expires_at: Some(at + lease_span(lease)),
                fence: 1,
                started_at: Some(at),
            },
            None => Self {
                status: RunStatus::Queued,
                owner: None,
                lease_expires_at: None,
                fence: 0,
                started_at: None,
            },
        }
    }
}
