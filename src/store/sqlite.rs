//! The embedded SQLite store (the zero-setup default): the pools, migrations, and the `Store`
//! facade, each method one line delegating to its aggregate (`sessions`, `runs`, `events` …). SQLite has no row-level security, so
//! every tenant-owned query filters on `tenant_id` explicitly. WAL mode with `synchronous =
//! NORMAL` gives group-commit-like throughput; every write transaction starts with a write so
//! it takes the write lock up front.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use chrono::{DateTime, Utc};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;

// What `sqlite_writer` and the aggregates import from here.
pub(super) use super::dialect::sqlite::{parse_ts, ts};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

pub struct SqliteStore {
    /// Reads (WAL: they never wait for the writer).
    pub(super) pool: SqlitePool,
    /// Writes, one connection: SQLite takes one writer at a time.
    pub(super) writer: SqlitePool,
    /// Runs' appends, committed together (see `sqlite_writer`).
    pub(super) appends: super::sqlite_writer::GroupWriter,
    /// Which tenants have webhook subscriptions, and the outbox worker's wake-up.
    pub(super) outbox: Arc<webhooks::sqlite::Outbox>,
}

impl SqliteStore {
    /// The one writer connection.
    pub(super) fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// The read pool.
    pub(super) fn reader(&self) -> &SqlitePool {
        &self.pool
    }

    /// The outbox's in-memory state.
    pub(super) fn outbox(&self) -> &webhooks::sqlite::Outbox {
        &self.outbox
    }

    pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Self> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|error| StoreError::Internal(format!("invalid database url: {error}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        if let Some(parent) = connect.get_filename().parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Internal(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        // No ping before every acquire: it is one more hop to the connection's worker thread
        // per statement; a broken connection fails its statement instead (and is dropped).
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        // SQLite has one writer at a time: writes queue here, in process, instead of
        // sleeping in SQLite's busy handler while another connection holds the lock.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            // A queue of writers, not an outage: as patient as SQLite's own busy timeout.
            .acquire_timeout(options.acquire_timeout.max(Duration::from_secs(10)))
            .connect_with(connect)
            .await?;
        let outbox = Arc::new(webhooks::sqlite::Outbox::load(&pool).await?);
        let appends = super::sqlite_writer::GroupWriter::start(writer.clone(), outbox.clone());
        Ok(Self {
            pool,
            writer,
            appends,
            outbox,
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_session_keyed(
        &self,
        session: NewSession,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<SessionRecord> {
        sessions::sqlite::create_session_keyed(self, session, key).await
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        sessions::sqlite::get_session(self, tenant, id).await
    }

    async fn list_sessions(
        &self,
        tenant: &TenantId,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<SessionRecord>> {
        sessions::sqlite::list_sessions(self, tenant, cursor, limit).await
    }

    async fn close_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        sessions::sqlite::close_session(self, tenant, id).await
    }

    async fn append(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        batch: AppendBatch,
    ) -> StoreResult<AppendResult> {
        events::sqlite::append(self, tenant, session, batch).await
    }

    async fn list_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        events::sqlite::list_events(self, tenant, session, after, limit).await
    }

    async fn list_run_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
        kinds: &[&str],
    ) -> StoreResult<Vec<EventRecord>> {
        events::sqlite::list_run_events(self, tenant, session, run, kinds).await
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        events::sqlite::list_messages(self, tenant, session, after, limit).await
    }

    async fn get_output(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &OutputId,
    ) -> StoreResult<Option<OutputRecord>> {
        events::sqlite::get_output(self, tenant, session, id).await
    }

    async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64> {
        events::sqlite::purge_outputs(self, older_than).await
    }

    async fn list_idle_sessions(
        &self,
        idle_before: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<IdleSession>> {
        sessions::sqlite::list_idle_sessions(self, idle_before, limit).await
    }

    async fn count_open_sessions(&self, tenant: &TenantId) -> StoreResult<i64> {
        sessions::sqlite::count_open_sessions(self, tenant).await
    }

    async fn create_approval(
        &self,
        tenant: &TenantId,
        mut approval: NewApproval,
        max_pending: u32,
    ) -> StoreResult<ApprovalRecord> {
        approvals::sqlite::create_approval(self, tenant, approval, max_pending).await
    }

    async fn decide_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
        decision: ApprovalDecision,
    ) -> StoreResult<Option<ApprovalRecord>> {
        approvals::sqlite::decide_approval(self, tenant, session, id, decision).await
    }

    async fn get_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        approvals::sqlite::get_approval(self, tenant, session, id).await
    }

    async fn list_approvals(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        status: Option<ApprovalStatus>,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        approvals::sqlite::list_approvals(self, tenant, session, status).await
    }

    async fn list_grants(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<GrantRecord>> {
        approvals::sqlite::list_grants(self, tenant, session).await
    }

    async fn revoke_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        approvals::sqlite::revoke_grant(self, tenant, id).await
    }

    async fn consume_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        approvals::sqlite::consume_grant(self, tenant, id).await
    }

    async fn create_run_keyed(
        &self,
        tenant: &TenantId,
        run: NewRun,
        claim: Option<(&str, Duration)>,
        caps: RunCaps,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<RunRecord> {
        runs::sqlite::create_run_keyed(self, tenant, run, claim, caps, key).await
    }

    async fn request_cancel(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
    ) -> StoreResult<bool> {
        runs::sqlite::request_cancel(self, tenant, session, run).await
    }

    async fn requested_cancels(&self, owner: &str) -> StoreResult<Vec<(SessionId, RunId)>> {
        runs::sqlite::requested_cancels(self, owner).await
    }

    async fn last_event_seqs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, i64)>> {
        sessions::sqlite::last_event_seqs(self, sessions).await
    }

    async fn idempotency_key(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        idempotency::sqlite::idempotency_key(self, tenant, scope, key).await
    }

    async fn record_idempotent_response(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
        status: u16,
        body: &serde_json::Value,
    ) -> StoreResult<()> {
        idempotency::sqlite::record_idempotent_response(self, tenant, scope, key, status, body)
            .await
    }

    async fn purge_idempotency_keys(&self) -> StoreResult<u64> {
        idempotency::sqlite::purge_idempotency_keys(self).await
    }

    async fn claim_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        owner: &str,
        lease: Duration,
        caps: RunCaps,
    ) -> StoreResult<Option<RunRecord>> {
        runs::sqlite::claim_run(self, tenant, id, owner, lease, caps).await
    }

    async fn cancel_queued_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<bool> {
        runs::sqlite::cancel_queued_run(self, tenant, session, id).await
    }

    async fn get_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<Option<RunRecord>> {
        runs::sqlite::get_run(self, tenant, session, id).await
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: Option<&RunId>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>> {
        runs::sqlite::list_runs(self, tenant, session, after, limit).await
    }

    async fn renew_leases(&self, owner: &str, lease: Duration) -> StoreResult<u64> {
        runs::sqlite::renew_leases(self, owner, lease).await
    }

    async fn release_leases(&self, owner: &str) -> StoreResult<Vec<RunRecord>> {
        runs::sqlite::release_leases(self, owner).await
    }

    async fn register_replica(&self, name: &str, workspace_storage: &str) -> StoreResult<()> {
        replicas::sqlite::register_replica(self, name, workspace_storage).await
    }

    async fn live_replicas(&self, within: Duration) -> StoreResult<Vec<ReplicaRecord>> {
        replicas::sqlite::live_replicas(self, within).await
    }

    async fn list_unfinished_runs(&self, limit: u32) -> StoreResult<Vec<UnfinishedRun>> {
        runs::sqlite::list_unfinished_runs(self, limit).await
    }

    async fn acquire_hold(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<()> {
        self.acquire_hold_tx(tenant, hold, caps).await
    }

    async fn record_workspace_bytes(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        bytes: u64,
    ) -> StoreResult<()> {
        self.record_workspace_bytes_tx(tenant, session, bytes).await
    }

    async fn workspace_snapshot(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<String>> {
        sessions::sqlite::workspace_snapshot(self, tenant, session).await
    }

    async fn workspace_bytes(&self, tenant: &TenantId) -> StoreResult<u64> {
        self.workspace_bytes_tx(tenant).await
    }

    async fn release_hold(&self, tenant: &TenantId, id: &str) -> StoreResult<()> {
        self.release_hold_tx(tenant, id).await
    }

    async fn count_holds(
        &self,
        tenant: &TenantId,
        kind: HoldKind,
        session: Option<&SessionId>,
    ) -> StoreResult<u64> {
        self.count_holds_tx(tenant, kind, session).await
    }

    // --- Noa context state ---
    async fn noa_state(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<NoaStateRecord>> {
        noa::sqlite::state(self, tenant, session).await
    }

    async fn commit_noa(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        archives: &[NewNoaArchive],
        state: &serde_json::Value,
        expected: i64,
    ) -> StoreResult<i64> {
        noa::sqlite::commit(self, tenant, session, archives, state, expected).await
    }

    async fn list_noa_archives(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<NoaArchiveRecord>> {
        noa::sqlite::list(self, tenant, session, after, limit).await
    }

    async fn get_noa_archive(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        ordinal: u32,
    ) -> StoreResult<Option<NoaArchiveRecord>> {
        noa::sqlite::get(self, tenant, session, ordinal).await
    }

    async fn unlock_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        names: &[String],
    ) -> StoreResult<()> {
        tool_state::sqlite::unlock_tools(self, tenant, session, names).await
    }

    async fn unlocked_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<String>> {
        tool_state::sqlite::unlocked_tools(self, tenant, session).await
    }

    async fn get_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<TodoItem>> {
        tool_state::sqlite::get_todos(self, tenant, session).await
    }

    async fn put_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        items: &[TodoItem],
    ) -> StoreResult<()> {
        tool_state::sqlite::put_todos(self, tenant, session, items).await
    }

    async fn get_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<ModeOverride>> {
        tool_state::sqlite::get_mode_override(self, tenant, session).await
    }

    async fn set_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        state: ModeOverride,
    ) -> StoreResult<()> {
        tool_state::sqlite::set_mode_override(self, tenant, session, state).await
    }

    async fn memory_get(&self, tenant: &TenantId, path: &str) -> StoreResult<Option<MemoryNote>> {
        tool_state::sqlite::memory_get(self, tenant, path).await
    }

    async fn memory_list(&self, tenant: &TenantId, prefix: &str) -> StoreResult<Vec<MemoryEntry>> {
        tool_state::sqlite::memory_list(self, tenant, prefix).await
    }

    async fn memory_put(
        &self,
        tenant: &TenantId,
        path: &str,
        content: &str,
        expect: MemoryExpect,
    ) -> StoreResult<MemoryNote> {
        tool_state::sqlite::memory_put(self, tenant, path, content, expect).await
    }

    async fn memory_delete(&self, tenant: &TenantId, path: &str) -> StoreResult<bool> {
        tool_state::sqlite::memory_delete(self, tenant, path).await
    }

    async fn memory_usage(&self, tenant: &TenantId) -> StoreResult<MemoryUsage> {
        tool_state::sqlite::memory_usage(self, tenant).await
    }

    async fn create_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
        max: u32,
    ) -> StoreResult<McpServerRecord> {
        registry::sqlite::create_mcp_server(self, tenant, name, config, max).await
    }

    async fn replace_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
    ) -> StoreResult<Option<McpServerRecord>> {
        registry::sqlite::replace_mcp_server(self, tenant, name, config).await
    }

    async fn get_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> StoreResult<Option<McpServerRecord>> {
        registry::sqlite::get(self, &registry::MCP_SERVERS, tenant, name).await
    }

    async fn list_mcp_servers(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> StoreResult<Vec<McpServerRecord>> {
        registry::sqlite::list(self, &registry::MCP_SERVERS, tenant, limit).await
    }

    async fn delete_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        registry::sqlite::delete(self, &registry::MCP_SERVERS, tenant, name).await
    }

    async fn create_skill(
        &self,
        tenant: &TenantId,
        skill: &NewSkill,
        max: u32,
    ) -> StoreResult<SkillRecord> {
        registry::sqlite::create_skill(self, tenant, skill, max).await
    }

    async fn get_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SkillRecord>> {
        registry::sqlite::get(self, &registry::SKILLS, tenant, name).await
    }

    async fn list_skills(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<SkillSummary>> {
        registry::sqlite::list(self, &registry::SKILLS, tenant, limit).await
    }

    async fn delete_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        registry::sqlite::delete(self, &registry::SKILLS, tenant, name).await
    }

    async fn usage_totals(
        &self,
        tenant: &TenantId,
        scope: crate::usage::UsageScope<'_>,
    ) -> StoreResult<crate::usage::UsageTotals> {
        usage::sqlite::totals(&self.pool, tenant, scope).await
    }

    async fn usage_report(
        &self,
        tenant: &TenantId,
        query: &crate::usage::UsageQuery,
    ) -> StoreResult<Vec<crate::usage::UsageGroup>> {
        usage::sqlite::report(&self.pool, tenant, query).await
    }

    async fn create_webhook(
        &self,
        tenant: &TenantId,
        webhook: NewWebhook,
        caps: WebhookCaps,
    ) -> StoreResult<Result<WebhookRecord, WebhookCapReached>> {
        self.create_webhook_tx(tenant, webhook, caps).await
    }

    async fn list_webhooks(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> StoreResult<Vec<WebhookRecord>> {
        self.list_webhooks_tx(tenant, session).await
    }

    async fn get_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<Option<WebhookRecord>> {
        self.get_webhook_tx(tenant, id).await
    }

    async fn delete_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<bool> {
        self.delete_webhook_tx(tenant, id).await
    }

    async fn list_webhook_deliveries(
        &self,
        tenant: &TenantId,
        webhook: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        self.list_deliveries_tx(tenant, webhook, before, limit)
            .await
    }

    async fn claim_webhook_deliveries(
        &self,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<DueDelivery>> {
        self.claim_deliveries(lease, limit).await
    }

    async fn finish_webhook_attempt(&self, result: &AttemptResult) -> StoreResult<()> {
        self.finish_attempt(result).await
    }

    async fn next_webhook_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        self.next_due().await
    }

    async fn purge_webhook_deliveries(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        self.purge_deliveries(before).await
    }

    fn webhook_wakeup(&self) -> Arc<tokio::sync::Notify> {
        self.outbox.wakeup.clone()
    }

    async fn tenant_budget(
        &self,
        tenant: &TenantId,
    ) -> StoreResult<Option<crate::budgets::Budget>> {
        budgets::sqlite::budget(self, tenant).await
    }

    async fn set_tenant_budget(
        &self,
        tenant: &TenantId,
        budget: Option<&crate::budgets::Budget>,
    ) -> StoreResult<()> {
        budgets::sqlite::set_budget(self, tenant, budget).await
    }

    async fn tenant_spend(
        &self,
        tenant: &TenantId,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<crate::budgets::TenantSpend> {
        budgets::sqlite::spend(self, tenant, at).await
    }
}
