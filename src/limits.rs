//! Tenant limits: one model for every quota a tenant can reach.
//!
//! Every tenant is hostile, so everything a tenant can make the server hold on its behalf has
//! a ceiling with a documented default (`[limits]` in the settings, `NORMA_LIMITS__*` in the
//! environment). Reaching one answers `429 TENANT_LIMIT` on the API, with
//! `details: {"limit": "<name>", "max": N}`, or a tool result with code `TENANT_LIMIT` when a
//! tool call reached it (hooks per session are part of the session config: `422`).
//!
//! Counts are taken where they are true for every replica sharing the store, not in one
//! process's memory:
//! - runs in flight are the tenant's `running` runs whose lease is live, counted inside the
//!   transaction that claims a run (serialized per tenant, so two replicas cannot both take
//!   the last slot);
//! - queued prompts are `queued` runs, counted inside the transaction that queues one;
//! - things a replica holds open for a tenant (SSE streams, background tasks, PTY shells) are
//!   *holds*: a row per holder with the replica's name and an expiry that the replica's
//!   heartbeat renews, deleted on close. A replica killed without a word stops renewing, its
//!   holds expire after one lease period and stop counting: nothing leaks;
//! - pending approvals are counted in the transaction that records one (over the limit the
//!   call is denied at once instead of waiting);
//! - workspace bytes (task logs included) are measured after every mutating tool call and
//!   summed over the tenant's open sessions (`runtime::workspace_quota`);
//! - spend budgets (tokens and cost per UTC day and month) are checked against running totals
//!   the usage ledger's transaction keeps in the store (`crate::budgets`); a spent one answers
//!   `429 BUDGET_EXCEEDED` instead.

use crate::ids::{SessionId, TenantId};
use crate::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// The tenant limits (`[limits]`). Every value is a maximum per tenant unless its name says
/// per session.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TenantLimits {
    /// Open (not closed) sessions; a fork is a new session and counts.
    pub sessions: u32,
    /// Runs in flight (running, parked on approvals included), across replicas.
    pub concurrent_runs: u32,
    /// Prompts waiting behind a session's current run (`busy: "enqueue"`).
    pub queued_prompts_per_session: u32,
    /// Prompts waiting in all of the tenant's sessions.
    pub queued_prompts: u32,
    /// Background tasks (TaskStart) alive at once in one session.
    pub tasks_per_session: u32,
    /// Background tasks alive at once in all of the tenant's sessions.
    pub tasks: u32,
    /// PTY shells open at once in one session.
    pub shells_per_session: u32,
    /// PTY shells open at once in all of the tenant's sessions.
    pub shells: u32,
    /// Open event streams (`GET /v1/sessions/{id}/stream`).
    pub sse_streams: u32,
    /// Hooks in one session's configuration.
    pub hooks_per_session: u32,
    /// Approval requests waiting for an answer in all of the tenant's sessions.
    pub pending_approvals: u32,
    /// Bytes in the workspaces of the tenant's open sessions, measured after every mutating
    /// tool call; at or over it, mutating calls answer `WORKSPACE_QUOTA_EXCEEDED`.
    pub workspace_bytes: u64,
    /// `Idempotency-Key`s remembered at once (each lives 24 hours after its request).
    pub idempotency_keys: u32,
    /// MCP servers registered for the tenant (`/v1/mcp-servers`).
    pub mcp_servers: u32,
    /// Processes of sessions' stdio MCP servers running at once in all of the tenant's
    /// sessions (each is a sandboxed process on the host until it stops: idle, closed, ended).
    pub mcp_processes: u32,
    /// Skills registered for the tenant (`/v1/skills`).
    pub skills: u32,
    /// Spend limits per UTC day and month (`[limits.budget]`), every tenant's default until
    /// the operator API sets one for it; none by default. See [`crate::budgets`].
    pub budget: crate::budgets::Budget,
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            sessions: 10_000,
            concurrent_runs: 64,
            queued_prompts_per_session: 16,
            queued_prompts: 256,
            tasks_per_session: 8,
            tasks: 64,
            shells_per_session: 8,
            shells: 64,
            sse_streams: 256,
            hooks_per_session: 32,
            pending_approvals: 256,
            workspace_bytes: 10 * 1024 * 1024 * 1024,
            idempotency_keys: 10_000,
            mcp_servers: 32,
            mcp_processes: 128,
            skills: 64,
            budget: crate::budgets::Budget::default(),
        }
    }
}

/// Which limit was reached (its name in `details.limit` and in the settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    Sessions,
    ConcurrentRuns,
    QueuedPromptsPerSession,
    QueuedPrompts,
    TasksPerSession,
    Tasks,
    ShellsPerSession,
    Shells,
    SseStreams,
    HooksPerSession,
    PendingApprovals,
    WorkspaceBytes,
    IdempotencyKeys,
    McpServers,
    McpProcesses,
    Skills,
}

impl Limit {
    /// The setting's name under `[limits]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sessions => "sessions",
            Self::ConcurrentRuns => "concurrent_runs",
            Self::QueuedPromptsPerSession => "queued_prompts_per_session",
            Self::QueuedPrompts => "queued_prompts",
            Self::TasksPerSession => "tasks_per_session",
            Self::Tasks => "tasks",
            Self::ShellsPerSession => "shells_per_session",
            Self::Shells => "shells",
            Self::SseStreams => "sse_streams",
            Self::HooksPerSession => "hooks_per_session",
            Self::PendingApprovals => "pending_approvals",
            Self::WorkspaceBytes => "workspace_bytes",
            Self::IdempotencyKeys => "idempotency_keys",
            Self::McpServers => "mcp_servers",
            Self::McpProcesses => "mcp_processes",
            Self::Skills => "skills",
        }
    }

    /// What the limit counts, for messages.
    fn counts(self) -> &'static str {
        match self {
            Self::Sessions => "open sessions",
            Self::ConcurrentRuns => "runs in flight",
            Self::QueuedPromptsPerSession => "queued prompts in this session",
            Self::QueuedPrompts => "queued prompts",
            Self::TasksPerSession => "background tasks in this session",
            Self::Tasks => "background tasks",
            Self::ShellsPerSession => "shells in this session",
            Self::Shells => "shells",
            Self::SseStreams => "open event streams",
            Self::HooksPerSession => "hooks in this session",
            Self::PendingApprovals => "pending approval requests",
            Self::WorkspaceBytes => "workspace bytes",
            Self::IdempotencyKeys => "idempotency keys remembered",
            Self::McpServers => "registered MCP servers",
            Self::McpProcesses => "running MCP server processes",
            Self::Skills => "registered skills",
        }
    }
}

/// A limit was reached: nothing was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tenant limit reached: at most {max} {}", limit.counts())]
pub struct LimitExceeded {
    pub limit: Limit,
    pub max: u64,
}

impl LimitExceeded {
    /// `details` of the API error and of the tool result.
    pub fn details(&self) -> serde_json::Value {
        serde_json::json!({ "limit": self.limit.as_str(), "max": self.max })
    }
}

impl TenantLimits {
    /// `Err` when `count` (what exists now) leaves no room for one more under `limit`.
    pub fn check(&self, limit: Limit, count: u64) -> Result<(), LimitExceeded> {
        let max = self.max(limit);
        if count >= max {
            return Err(LimitExceeded { limit, max });
        }
        Ok(())
    }

    pub fn max(&self, limit: Limit) -> u64 {
        match limit {
            Limit::WorkspaceBytes => self.workspace_bytes,
            count => u64::from(self.count_max(count)),
        }
    }

    /// The maximum of a limit that counts things (every limit but `workspace_bytes`).
    fn count_max(&self, limit: Limit) -> u32 {
        match limit {
            Limit::Sessions => self.sessions,
            Limit::ConcurrentRuns => self.concurrent_runs,
            Limit::QueuedPromptsPerSession => self.queued_prompts_per_session,
            Limit::QueuedPrompts => self.queued_prompts,
            Limit::TasksPerSession => self.tasks_per_session,
            Limit::Tasks => self.tasks,
            Limit::ShellsPerSession => self.shells_per_session,
            Limit::Shells => self.shells,
            Limit::SseStreams => self.sse_streams,
            Limit::HooksPerSession => self.hooks_per_session,
            Limit::PendingApprovals => self.pending_approvals,
            Limit::WorkspaceBytes => u32::try_from(self.workspace_bytes).unwrap_or(u32::MAX),
            Limit::IdempotencyKeys => self.idempotency_keys,
            Limit::McpServers => self.mcp_servers,
            Limit::McpProcesses => self.mcp_processes,
            Limit::Skills => self.skills,
        }
    }

    /// The caps the store applies when it admits a run.
    pub fn run_caps(&self) -> RunCaps {
        RunCaps {
            concurrent_runs: self.concurrent_runs,
            queued_per_session: self.queued_prompts_per_session,
            queued_per_tenant: self.queued_prompts,
        }
    }

    /// The caps of one kind of hold.
    pub fn hold_caps(&self, kind: HoldKind) -> HoldCaps {
        let (per_session, per_tenant) = match kind {
            HoldKind::SseStream => (None, Limit::SseStreams),
            HoldKind::Task => (Some(Limit::TasksPerSession), Limit::Tasks),
            HoldKind::Shell => (Some(Limit::ShellsPerSession), Limit::Shells),
            HoldKind::McpProcess => (None, Limit::McpProcesses),
        };
        HoldCaps {
            per_session: per_session.map(|limit| (limit, self.count_max(limit))),
            per_tenant: (per_tenant, self.count_max(per_tenant)),
        }
    }
}

/// The caps checked, atomically with the write, when a run is created or claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunCaps {
    pub concurrent_runs: u32,
    pub queued_per_session: u32,
    pub queued_per_tenant: u32,
}

impl RunCaps {
    /// No cap at all (store tests and system paths).
    pub const UNLIMITED: Self = Self {
        concurrent_runs: u32::MAX,
        queued_per_session: u32::MAX,
        queued_per_tenant: u32::MAX,
    };

    /// Whether a running run's admission has a cap to check.
    pub fn caps_running(&self) -> bool {
        self.concurrent_runs != u32::MAX
    }

    /// Whether a queued run's admission has a cap to check.
    pub fn caps_queued(&self) -> bool {
        self.queued_per_session != u32::MAX || self.queued_per_tenant != u32::MAX
    }
}

/// What a replica holds open for a tenant, counted across replicas through leased rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HoldKind {
    SseStream,
    Task,
    Shell,
    /// A session's stdio MCP server process.
    McpProcess,
}

impl HoldKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SseStream => "sse_stream",
            Self::Task => "task",
            Self::Shell => "shell",
            Self::McpProcess => "mcp_process",
        }
    }
}

/// The caps of one hold kind: `(limit, max)` per session (when the kind has one) and per tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldCaps {
    pub per_session: Option<(Limit, u32)>,
    pub per_tenant: (Limit, u32),
}

/// A hold to record: its id, kind, the session it belongs to and the replica holding it.
#[derive(Clone, Debug)]
pub struct NewHold {
    pub id: String,
    pub kind: HoldKind,
    pub session: SessionId,
    pub replica: String,
    pub lease: Duration,
}

/// Takes and gives back holds for this replica.
#[derive(Clone)]
pub struct Holds {
    store: Arc<dyn Store>,
    limits: TenantLimits,
    replica: String,
    lease: Duration,
    /// When this process began taking holds: what its replica id holds from before is an
    /// earlier process's.
    since: chrono::DateTime<chrono::Utc>,
}

/// Why a hold was not taken.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for HoldError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::TenantLimit(exceeded) => Self::Limit(exceeded),
            other => Self::Store(other),
        }
    }
}

impl Holds {
    pub fn new(
        store: Arc<dyn Store>,
        limits: TenantLimits,
        replica: String,
        lease: Duration,
    ) -> Self {
        Self {
            store,
            limits,
            replica,
            lease,
            since: chrono::Utc::now(),
        }
    }

    /// Deletes the holds an earlier process under this replica's id left (one that crashed,
    /// or stopped before its releases ran): this process's heartbeat would renew them and
    /// they would count against their tenants for good. Called at start-up; holds this
    /// process took meanwhile are kept.
    pub async fn release_earlier(&self) {
        self.release_before(self.since).await;
    }

    /// Deletes every hold of this replica (it is stopping: its streams were told to
    /// reconnect, its tasks and shells stopped), so other replicas count them no longer.
    pub async fn release_all(&self) {
        self.release_before(chrono::Utc::now() + chrono::Duration::seconds(1))
            .await;
    }

    async fn release_before(&self, before: chrono::DateTime<chrono::Utc>) {
        match self
            .store
            .release_replica_holds(&self.replica, before)
            .await
        {
            Ok(0) => {}
            Ok(released) => tracing::info!(released, "holds of this replica released"),
            Err(error) => {
                tracing::warn!(%error, "cannot release this replica's holds; they expire with their lease")
            }
        }
    }

    /// Takes one hold of `kind` for the tenant's `session`, or answers which limit stops it.
    /// The hold lasts until the returned guard is dropped (or, if this replica dies, until
    /// its lease expires).
    pub async fn acquire(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        kind: HoldKind,
    ) -> Result<HoldGuard, HoldError> {
        let hold = self.new_hold(session, kind);
        let id = hold.id.clone();
        self.store
            .acquire_hold(tenant, hold, self.limits.hold_caps(kind))
            .await?;
        Ok(self.guard(tenant, id))
    }

    /// Reads the tenant's `session` and takes one hold of `kind` on it (one round trip on
    /// Postgres): the session as read and the hold's guard, or `None` (and no hold) when the
    /// session is not the tenant's.
    pub async fn acquire_on_session(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        kind: HoldKind,
    ) -> Result<Option<(crate::store::SessionRecord, HoldGuard)>, HoldError> {
        let hold = self.new_hold(session, kind);
        let id = hold.id.clone();
        let Some(record) = self
            .store
            .read_session_and_hold(tenant, hold, self.limits.hold_caps(kind))
            .await?
        else {
            return Ok(None);
        };
        Ok(Some((record, self.guard(tenant, id))))
    }

    fn new_hold(&self, session: &SessionId, kind: HoldKind) -> NewHold {
        NewHold {
            id: format!("hold_{}", uuid::Uuid::new_v4().simple()),
            kind,
            session: session.clone(),
            replica: self.replica.clone(),
            lease: self.lease,
        }
    }

    fn guard(&self, tenant: &TenantId, id: String) -> HoldGuard {
        HoldGuard {
            store: Some(self.store.clone()),
            tenant: tenant.clone(),
            id,
        }
    }
}

/// The holds of one session, for the tools that open things (TaskStart, ShellStart).
#[derive(Clone)]
pub struct SessionHolds {
    pub holds: Holds,
    pub tenant: TenantId,
    pub session: SessionId,
}

impl SessionHolds {
    /// Takes a hold of `kind` for the session; a reached limit is a tool failure with code
    /// `TENANT_LIMIT`.
    pub async fn take(&self, kind: HoldKind) -> Result<HoldGuard, crate::tools::ToolError> {
        use crate::tools::{ToolError, codes};
        self.holds
            .acquire(&self.tenant, &self.session, kind)
            .await
            .map_err(|error| match error {
                HoldError::Limit(exceeded) => ToolError::new(
                    codes::TENANT_LIMIT,
                    format!(
                        "{exceeded} (limit {}); close one first",
                        exceeded.limit.as_str()
                    ),
                ),
                HoldError::Store(error) => {
                    tracing::warn!(%error, "cannot record a hold");
                    ToolError::new(codes::TOOL_FAILED, "the store is unavailable; try again")
                }
            })
    }
}

/// One taken hold; dropping it deletes the row (in a task: drop cannot wait).
pub struct HoldGuard {
    store: Option<Arc<dyn Store>>,
    tenant: TenantId,
    id: String,
}

impl std::fmt::Debug for HoldGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldGuard").field("id", &self.id).finish()
    }
}

impl Drop for HoldGuard {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        let (tenant, id) = (self.tenant.clone(), std::mem::take(&mut self.id));
        let release = async move {
            if let Err(error) = store.release_hold(&tenant, &id).await {
                // The row expires with its lease.
                tracing::warn!(%error, hold = %id, "cannot release a hold");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(release);
            }
            Err(_) => tracing::warn!("hold dropped outside the runtime; it expires with its lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_allows_below_the_max_and_names_the_limit_at_it() {
        let limits = TenantLimits {
            queued_prompts_per_session: 2,
            ..TenantLimits::default()
        };
        assert!(limits.check(Limit::QueuedPromptsPerSession, 1).is_ok());
        let error = limits.check(Limit::QueuedPromptsPerSession, 2).unwrap_err();
        assert_eq!(error.max, 2);
        assert_eq!(
            error.details(),
            serde_json::json!({"limit": "queued_prompts_per_session", "max": 2})
        );
        assert!(error.to_string().contains("at most 2 queued prompts"));
    }

    #[test]
    fn zero_refuses_everything() {
        let limits = TenantLimits {
            sse_streams: 0,
            ..TenantLimits::default()
        };
        assert!(limits.check(Limit::SseStreams, 0).is_err());
    }

    #[test]
    fn hold_caps_pair_session_and_tenant_limits() {
        let limits = TenantLimits::default();
        let caps = limits.hold_caps(HoldKind::Shell);
        assert_eq!(caps.per_session, Some((Limit::ShellsPerSession, 8)));
        assert_eq!(caps.per_tenant, (Limit::Shells, 64));
        assert_eq!(limits.hold_caps(HoldKind::SseStream).per_session, None);
    }
}
