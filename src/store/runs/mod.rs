//! Runs: submission, claims under a fenced lease, cancellation, and the sweep of unfinished
//! runs. The row types decode a run from either database; the claims differ (Postgres
//! `FOR UPDATE`/`FOR SHARE` row locks and RLS, SQLite the one writer).

use crate::ids::TenantId;
use crate::store::dialect::lease_span;
use crate::store::{RunRecord, RunStatus, StoreError, StoreResult, UnfinishedRun};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{FromRow, Row};
use std::time::Duration;

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

/// The columns of a [`RunRow`].
macro_rules! run_columns {
    () => {
        "id, session_id, tenant_id, prompt, status, owner, lease_expires_at, fence, terminal, \
         created_at, started_at, ended_at"
    };
}

pub(in crate::store) const RUN_COLUMNS: &str = run_columns!();

/// `$1` run, `$2` session, `$3` tenant, `$4` time.
pub(in crate::store) const REQUEST_CANCEL: &str = "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, $4) \
     WHERE id = $1 AND session_id = $2 AND tenant_id = $3 AND status = 'running'";

/// System-level: the running runs of owner `$1` asked to cancel.
pub(in crate::store) const REQUESTED_CANCELS: &str = "SELECT session_id, id FROM runs \
     WHERE owner = $1 AND status = 'running' AND cancel_requested_at IS NOT NULL";

/// System-level: `$1` owner, `$2` new lease expiry.
pub(in crate::store) const RENEW_LEASES: &str =
    "UPDATE runs SET lease_expires_at = $2 WHERE owner = $1 AND status = 'running'";

/// System-level: the leases of owner `$1`, released.
pub(in crate::store) const RELEASE_LEASES: &str = concat!(
    "UPDATE runs SET owner = NULL, lease_expires_at = NULL \
     WHERE owner = $1 AND status = 'running' RETURNING ",
    run_columns!()
);

/// System-level: queued and running runs in submission order, at most `$1`.
pub(in crate::store) const UNFINISHED_RUNS: &str = "SELECT id, session_id, tenant_id, status, \
     owner, lease_expires_at FROM runs WHERE status IN ('queued', 'running') \
     ORDER BY position LIMIT $1";

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

impl RunStart<'_> {
    /// The record of `run` as its insert with this start at `created_at` stored it (a new
    /// run's every column is known to the writer: nothing to read back).
    pub(in crate::store) fn record(
        &self,
        run: &crate::store::NewRun,
        tenant: &TenantId,
        created_at: DateTime<Utc>,
    ) -> RunRecord {
        RunRecord {
            id: run.id.to_string(),
            session_id: run.session.to_string(),
            tenant: tenant.clone(),
            prompt: run.prompt.clone(),
            status: self.status,
            owner: self.owner.map(str::to_owned),
            lease_expires_at: self.lease_expires_at,
            fence: self.fence,
            terminal: None,
            created_at,
            started_at: self.started_at,
            ended_at: None,
        }
    }
}

fn parse_status(status: &str) -> StoreResult<RunStatus> {
    RunStatus::parse(status)
        .ok_or_else(|| StoreError::Internal(format!("unknown run status {status}")))
}

/// A run as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct RunRow {
    id: String,
    session_id: String,
    tenant_id: String,
    prompt: String,
    status: String,
    owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    fence: i64,
    terminal: Option<Json<Value>>,
    created_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
}

impl TryFrom<RunRow> for RunRecord {
    type Error = StoreError;

    fn try_from(row: RunRow) -> StoreResult<Self> {
        Ok(Self {
            status: parse_status(&row.status)?,
            id: row.id,
            session_id: row.session_id,
            tenant: TenantId::new(row.tenant_id),
            prompt: row.prompt,
            owner: row.owner,
            lease_expires_at: row.lease_expires_at,
            fence: row.fence,
            terminal: row.terminal.map(|json| json.0),
            created_at: row.created_at,
            started_at: row.started_at,
            ended_at: row.ended_at,
        })
    }
}

pub(in crate::store) fn run_from_row<'r, R: Row>(row: &'r R) -> StoreResult<RunRecord>
where
    RunRow: FromRow<'r, R>,
{
    RunRow::from_row(row)?.try_into()
}

/// An unfinished run (without its prompt) as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct UnfinishedRow {
    id: String,
    session_id: String,
    tenant_id: String,
    status: String,
    owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
}

impl TryFrom<UnfinishedRow> for UnfinishedRun {
    type Error = StoreError;

    fn try_from(row: UnfinishedRow) -> StoreResult<Self> {
        Ok(Self {
            status: parse_status(&row.status)?,
            id: row.id,
            session_id: row.session_id,
            tenant: TenantId::new(row.tenant_id),
            owner: row.owner,
            lease_expires_at: row.lease_expires_at,
        })
    }
}

pub(in crate::store) fn unfinished_from_row<'r, R: Row>(row: &'r R) -> StoreResult<UnfinishedRun>
where
    UnfinishedRow: FromRow<'r, R>,
{
    UnfinishedRow::from_row(row)?.try_into()
}
