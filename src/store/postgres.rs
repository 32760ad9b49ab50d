//! The Postgres store: the pool, migrations, and the `Store` facade, each method one line
//! delegating to its aggregate (`sessions`, `runs`, `events` …). Tenant-scoped work runs in
//! transactions that switch to the `norma_app` role and set `norma.tenant_id` (see
//! `dialect::postgres`), so row-level security hides every other tenant's rows even from a
//! query that forgets its tenant filter.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;

// What `sqlite_writer` imports from here.
pub(super) use super::events::{build_append_result, role_str};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

pub use super::dialect::postgres::TENANT_ROLE;

#[derive(Clone)]
pub struct PgStore {
    pub(super) pool: PgPool,
    /// Notified after a commit that wrote outbox rows.
    pub(super) webhook_wakeup: std::sync::Arc<tokio::sync::Notify>,
}

impl PgStore {
    /// Connects lazily (the server starts even while Postgres is down) and migrates when the
    /// database answers.
    pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Self> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Internal(format!("invalid database url: {error}")))?
            .application_name("norma");
        // No ping before every acquire: it is one more round trip to Postgres per
        // transaction; a broken connection fails its statement instead (and is dropped).
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Self {
            pool,
            webhook_wakeup: Default::default(),
        })
    }

    /// The pool, for tests that need to look under the hood.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
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
        sessions::postgres::create_session_keyed(self, session, key).await
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        sessions::postgres::get_session(self, tenant, id).await
    }

    async fn list_sessions(
        &self,
        tenant: &TenantId,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<SessionRecord>> {
        sessions::postgres::list_sessions(self, tenant, cursor, limit).await
    }

    async fn close_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        sessions::postgres::close_session(self, tenant, id).await
    }

    async fn append(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        batch: AppendBatch,
    ) -> StoreResult<AppendResult> {
        events::postgres::append(self, tenant, session, batch).await
    }

    async fn list_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        events::postgres::list_events(self, tenant, session, after, limit).await
    }

    async fn list_run_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
        kinds: &[&str],
    ) -> StoreResult<Vec<EventRecord>> {
        events::postgres::list_run_events(self, tenant, session, run, kinds).await
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        events::postgres::list_messages(self, tenant, session, after, limit).await
    }

    async fn get_output(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &OutputId,
    ) -> StoreResult<Option<OutputRecord>> {
        events::postgres::get_output(self, tenant, session, id).await
    }

    async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64> {
        events::postgres::purge_outputs(self, older_than).await
    }

    async fn list_idle_sessions(
        &self,
        idle_before: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<IdleSession>> {
        sessions::postgres::list_idle_sessions(self, idle_before, limit).await
    }

    async fn count_open_sessions(&self, tenant: &TenantId) -> StoreResult<i64> {
        sessions::postgres::count_open_sessions(self, tenant).await
    }

    async fn create_approval(
        &self,
        tenant: &TenantId,
        mut approval: NewApproval,
        max_pending: u32,
    ) -> StoreResult<ApprovalRecord> {
        approvals::postgres::create_approval(self, tenant, approval, max_pending).await
    }

    async fn decide_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
        decision: ApprovalDecision,
    ) -> StoreResult<Option<ApprovalRecord>> {
        approvals::postgres::decide_approval(self, tenant, session, id, decision).await
    }

    async fn get_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        approvals::postgres::get_approval(self, tenant, session, id).await
    }

    async fn list_approvals(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        status: Option<ApprovalStatus>,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        approvals::postgres::list_approvals(self, tenant, session, status).await
    }

    async fn list_grants(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<GrantRecord>> {
        approvals::postgres::list_grants(self, tenant, session).await
    }

    async fn revoke_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        approvals::postgres::revoke_grant(self, tenant, id).await
    }

    async fn consume_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        approvals::postgres::consume_grant(self, tenant, id).await
    }

    async fn signals(&self) -> StoreResult<Option<tokio::sync::mpsc::UnboundedReceiver<Signal>>> {
        replicas::postgres::signals(self).await
    }

    async fn settled_approvals(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        approvals::postgres::settled_approvals(self, ids).await
    }

    async fn signal(&self, signal: Signal) -> StoreResult<()> {
        replicas::postgres::signal(self, signal).await
    }

    async fn create_run_keyed(
        &self,
        tenant: &TenantId,
        run: NewRun,
        claim: Option<(&str, Duration)>,
        caps: RunCaps,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<RunRecord> {
        runs::postgres::create_run_keyed(self, tenant, run, claim, caps, key).await
    }

    async fn request_cancel(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
    ) -> StoreResult<bool> {
        runs::postgres::request_cancel(self, tenant, session, run).await
    }

    async fn requested_cancels(&self, owner: &str) -> StoreResult<Vec<(SessionId, RunId)>> {
        runs::postgres::requested_cancels(self, owner).await
    }

    async fn last_event_seqs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, i64)>> {
        sessions::postgres::last_event_seqs(self, sessions).await
    }

    async fn idempotency_key(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        idempotency::postgres::idempotency_key(self, tenant, scope, key).await
    }

    async fn record_idempotent_response(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
        status: u16,
        body: &serde_json::Value,
    ) -> StoreResult<()> {
        idempotency::postgres::record_idempotent_response(self, tenant, scope, key, status, body)
            .await
    }

    async fn purge_idempotency_keys(&self) -> StoreResult<u64> {
        idempotency::postgres::purge_idempotency_keys(self).await
    }

    async fn claim_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        owner: &str,
        lease: Duration,
        caps: RunCaps,
    ) -> StoreResult<Option<RunRecord>> {
        runs::postgres::claim_run(self, tenant, id, owner, lease, caps).await
    }

    async fn cancel_queued_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<bool> {
        runs::postgres::cancel_queued_run(self, tenant, session, id).await
    }

    async fn get_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<Option<RunRecord>> {
        runs::postgres::get_run(self, tenant, session, id).await
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: Option<&RunId>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>> {
        runs::postgres::list_runs(self, tenant, session, after, limit).await
    }

    async fn renew_leases(&self, owner: &str, lease: Duration) -> StoreResult<u64> {
        runs::postgres::renew_leases(self, owner, lease).await
    }

    async fn release_leases(&self, owner: &str) -> StoreResult<Vec<RunRecord>> {
        runs::postgres::release_leases(self, owner).await
    }

    async fn register_replica(&self, name: &str, workspace_storage: &str) -> StoreResult<()> {
        replicas::postgres::register_replica(self, name, workspace_storage).await
    }

    async fn live_replicas(&self, within: Duration) -> StoreResult<Vec<ReplicaRecord>> {
        replicas::postgres::live_replicas(self, within).await
    }

    async fn list_unfinished_runs(&self, limit: u32) -> StoreResult<Vec<UnfinishedRun>> {
        runs::postgres::list_unfinished_runs(self, limit).await
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
        sessions::postgres::workspace_snapshot(self, tenant, session).await
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
        noa::postgres::state(self, tenant, session).await
    }

    async fn commit_noa(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        archives: &[NewNoaArchive],
        state: &serde_json::Value,
        expected: i64,
    ) -> StoreResult<i64> {
        noa::postgres::commit(self, tenant, session, archives, state, expected).await
    }

    async fn list_noa_archives(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<NoaArchiveRecord>> {
        noa::postgres::list(self, tenant, session, after, limit).await
    }

    async fn get_noa_archive(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        ordinal: u32,
    ) -> StoreResult<Option<NoaArchiveRecord>> {
        noa::postgres::get(self, tenant, session, ordinal).await
    }

    async fn unlock_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        names: &[String],
    ) -> StoreResult<()> {
        tool_state::postgres::unlock_tools(self, tenant, session, names).await
    }

    async fn unlocked_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<String>> {
        tool_state::postgres::unlocked_tools(self, tenant, session).await
    }

    async fn get_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<TodoItem>> {
        tool_state::postgres::get_todos(self, tenant, session).await
    }

    async fn put_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        items: &[TodoItem],
    ) -> StoreResult<()> {
        tool_state::postgres::put_todos(self, tenant, session, items).await
    }

    async fn get_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<ModeOverride>> {
        tool_state::postgres::get_mode_override(self, tenant, session).await
    }

    async fn set_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        state: ModeOverride,
    ) -> StoreResult<()> {
        tool_state::postgres::set_mode_override(self, tenant, session, state).await
    }

    async fn memory_get(&self, tenant: &TenantId, path: &str) -> StoreResult<Option<MemoryNote>> {
        tool_state::postgres::memory_get(self, tenant, path).await
    }

    async fn memory_list(&self, tenant: &TenantId, prefix: &str) -> StoreResult<Vec<MemoryEntry>> {
        tool_state::postgres::memory_list(self, tenant, prefix).await
    }

    async fn memory_put(
        &self,
        tenant: &TenantId,
        path: &str,
        content: &str,
        expect: MemoryExpect,
    ) -> StoreResult<MemoryNote> {
        tool_state::postgres::memory_put(self, tenant, path, content, expect).await
    }

    async fn memory_delete(&self, tenant: &TenantId, path: &str) -> StoreResult<bool> {
        tool_state::postgres::memory_delete(self, tenant, path).await
    }

    async fn memory_usage(&self, tenant: &TenantId) -> StoreResult<MemoryUsage> {
        tool_state::postgres::memory_usage(self, tenant).await
    }

    async fn create_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
        max: u32,
    ) -> StoreResult<McpServerRecord> {
        registry::postgres::create_mcp_server(self, tenant, name, config, max).await
    }

    async fn replace_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
    ) -> StoreResult<Option<McpServerRecord>> {
        registry::postgres::replace_mcp_server(self, tenant, name, config).await
    }

    async fn get_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> StoreResult<Option<McpServerRecord>> {
        registry::postgres::get(self, &registry::MCP_SERVERS, tenant, name).await
    }

    async fn list_mcp_servers(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> StoreResult<Vec<McpServerRecord>> {
        registry::postgres::list(self, &registry::MCP_SERVERS, tenant, limit).await
    }

    async fn delete_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        registry::postgres::delete(self, &registry::MCP_SERVERS, tenant, name).await
    }

    async fn create_skill(
        &self,
        tenant: &TenantId,
        skill: &NewSkill,
        max: u32,
    ) -> StoreResult<SkillRecord> {
        registry::postgres::create_skill(self, tenant, skill, max).await
    }

    async fn get_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SkillRecord>> {
        registry::postgres::get(self, &registry::SKILLS, tenant, name).await
    }

    async fn list_skills(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<SkillSummary>> {
        registry::postgres::list(self, &registry::SKILLS, tenant, limit).await
    }

    async fn delete_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        registry::postgres::delete(self, &registry::SKILLS, tenant, name).await
    }

    async fn usage_totals(
        &self,
        tenant: &TenantId,
        scope: crate::usage::UsageScope<'_>,
    ) -> StoreResult<crate::usage::UsageTotals> {
        usage::postgres::totals(self, tenant, scope).await
    }

    async fn usage_report(
        &self,
        tenant: &TenantId,
        query: &crate::usage::UsageQuery,
    ) -> StoreResult<Vec<crate::usage::UsageGroup>> {
        usage::postgres::report(self, tenant, query).await
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

    fn webhook_wakeup(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.webhook_wakeup.clone()
    }

    async fn tenant_budget(
        &self,
        tenant: &TenantId,
    ) -> StoreResult<Option<crate::budgets::Budget>> {
        budgets::postgres::budget(self, tenant).await
    }

    async fn set_tenant_budget(
        &self,
        tenant: &TenantId,
        budget: Option<&crate::budgets::Budget>,
    ) -> StoreResult<()> {
        budgets::postgres::set_budget(self, tenant, budget).await
    }

    async fn tenant_spend(
        &self,
        tenant: &TenantId,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<crate::budgets::TenantSpend> {
        budgets::postgres::spend(self, tenant, at).await
    }
}
