//! The `Store` facade both backends implement the same way: each method, one line, calls the
//! function of its aggregate (`sessions::postgres::get_session`, `sessions::sqlite::get_session`
//! …) or the backend's own method for it. Written once here and expanded in `postgres.rs` and
//! `sqlite.rs` with what differs (`backend`, `ping`, the outbox wake-up, and on Postgres the
//! cross-replica signals): this list is where to look up which module writes a method.

/// `impl Store for $store` delegating to the `$backend` module of each aggregate; `$own` are
/// the methods the backend writes itself.
macro_rules! store_facade {
    ($store:ty, $backend:ident, { $($own:tt)* }) => {
        #[async_trait]
        impl Store for $store {
            $($own)*

            // --- sessions ---
            async fn create_session_keyed(&self, session: NewSession, max_open: u32, key: Option<&NewIdempotencyKey>) -> StoreResult<SessionRecord> {
                sessions::$backend::create_session_keyed(self, session, max_open, key).await
            }
            async fn fork_session(&self, fork: NewFork) -> StoreResult<()> {
                sessions::$backend::fork_session(self, fork).await
            }
            async fn get_session(&self, tenant: &TenantId, id: &SessionId) -> StoreResult<Option<SessionRecord>> {
                sessions::$backend::get_session(self, tenant, id).await
            }
            async fn list_sessions(&self, tenant: &TenantId, cursor: Option<&SessionCursor>, limit: u32) -> StoreResult<Vec<SessionRecord>> {
                sessions::$backend::list_sessions(self, tenant, cursor, limit).await
            }
            async fn close_session(&self, tenant: &TenantId, id: &SessionId) -> StoreResult<Option<SessionRecord>> {
                sessions::$backend::close_session(self, tenant, id).await
            }
            async fn list_idle_sessions(&self, idle_before: DateTime<Utc>, limit: u32) -> StoreResult<Vec<IdleSession>> {
                sessions::$backend::list_idle_sessions(self, idle_before, limit).await
            }
            async fn count_open_sessions(&self, tenant: &TenantId) -> StoreResult<i64> {
                sessions::$backend::count_open_sessions(self, tenant).await
            }
            async fn last_event_seqs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, i64)>> {
                sessions::$backend::last_event_seqs(self, sessions).await
            }
            async fn workspace_snapshot(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<Option<String>> {
                sessions::$backend::workspace_snapshot(self, tenant, session).await
            }

            // --- events ---
            async fn append_storable(&self, tenant: &TenantId, session: &SessionId, batch: StorableBatch) -> StoreResult<Appended> {
                events::$backend::append(self, tenant, session, batch).await
            }
            async fn list_events(&self, tenant: &TenantId, session: &SessionId, after: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
                events::$backend::list_events(self, tenant, session, after, limit, events::PAGE_BYTES).await
            }
            async fn list_run_events(&self, tenant: &TenantId, session: &SessionId, run: &RunId, kinds: &[&str]) -> StoreResult<Vec<EventRecord>> {
                events::$backend::list_run_events(self, tenant, session, run, kinds).await
            }
            async fn list_session_events(&self, tenant: &TenantId, session: &SessionId, kinds: &[&str], after: i64, limit: u32) -> StoreResult<Vec<EventRecord>> {
                events::$backend::list_session_events(self, tenant, session, kinds, after, limit).await
            }
            async fn list_messages(&self, tenant: &TenantId, session: &SessionId, after: i64, limit: u32) -> StoreResult<Vec<MessageRecord>> {
                events::$backend::list_messages(self, tenant, session, after, limit, usize::MAX).await
            }
            async fn list_messages_page(&self, tenant: &TenantId, session: &SessionId, after: i64, limit: u32) -> StoreResult<Vec<MessageRecord>> {
                events::$backend::list_messages(self, tenant, session, after, limit, events::PAGE_BYTES).await
            }
            async fn get_output(&self, tenant: &TenantId, session: &SessionId, id: &OutputId) -> StoreResult<Option<OutputRecord>> {
                events::$backend::get_output(self, tenant, session, id).await
            }
            async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64> {
                events::$backend::purge_outputs(self, older_than).await
            }

            // --- approvals ---
            async fn create_approval(&self, tenant: &TenantId, approval: NewApproval, max_pending: u32) -> StoreResult<ApprovalRecord> {
                approvals::$backend::create_approval(self, tenant, approval, max_pending).await
            }
            async fn decide_approval(&self, tenant: &TenantId, session: &SessionId, id: &ApprovalId, decision: ApprovalDecision) -> StoreResult<Option<ApprovalRecord>> {
                approvals::$backend::decide_approval(self, tenant, session, id, decision).await
            }
            async fn get_approval(&self, tenant: &TenantId, session: &SessionId, id: &ApprovalId) -> StoreResult<Option<ApprovalRecord>> {
                approvals::$backend::get_approval(self, tenant, session, id).await
            }
            async fn run_approval_request(&self, tenant: &TenantId, session: &SessionId, run: &RunId, tool_use_id: &str, input_sha256: &str) -> StoreResult<Option<ApprovalRecord>> {
                approvals::$backend::run_request(self, tenant, session, run, tool_use_id, input_sha256).await
            }
            async fn list_approvals_page(&self, tenant: &TenantId, session: &SessionId, status: Option<ApprovalStatus>, after: Option<&ApprovalId>, limit: u32) -> StoreResult<Vec<ApprovalRecord>> {
                approvals::$backend::list_approvals_page(self, tenant, session, status, after, limit).await
            }
            async fn list_approvals(&self, tenant: &TenantId, session: &SessionId, status: Option<ApprovalStatus>) -> StoreResult<Vec<ApprovalRecord>> {
                approvals::$backend::list_approvals(self, tenant, session, status).await
            }
            async fn list_grants(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<Vec<GrantRecord>> {
                approvals::$backend::list_grants(self, tenant, session).await
            }
            async fn permission_state(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<PermissionState> {
                approvals::$backend::permission_state(self, tenant, session).await
            }
            async fn revoke_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
                approvals::$backend::revoke_grant(self, tenant, id).await
            }
            async fn consume_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
                approvals::$backend::consume_grant(self, tenant, id).await
            }

            // --- runs ---
            async fn start_run(&self, tenant: &TenantId, run: NewRun, claim: (&str, Duration), caps: RunCaps, key: Option<&NewIdempotencyKey>) -> StoreResult<StartedRun> {
                runs::$backend::start_run(self, tenant, run, claim, caps, key).await
            }
            async fn create_run_keyed(&self, tenant: &TenantId, run: NewRun, claim: Option<(&str, Duration)>, caps: RunCaps, key: Option<&NewIdempotencyKey>) -> StoreResult<RunRecord> {
                runs::$backend::create_run_keyed(self, tenant, run, claim, caps, key).await
            }
            async fn request_cancel(&self, tenant: &TenantId, session: &SessionId, run: &RunId) -> StoreResult<bool> {
                runs::$backend::request_cancel(self, tenant, session, run).await
            }
            async fn requested_cancels(&self, owner: &str) -> StoreResult<Vec<(SessionId, RunId)>> {
                runs::$backend::requested_cancels(self, owner).await
            }
            async fn claim_run(&self, tenant: &TenantId, id: &RunId, owner: &str, lease: Duration, caps: RunCaps) -> StoreResult<Option<RunRecord>> {
                runs::$backend::claim_run(self, tenant, id, owner, lease, caps).await
            }
            async fn cancel_queued_run(&self, tenant: &TenantId, session: &SessionId, id: &RunId) -> StoreResult<bool> {
                runs::$backend::cancel_queued_run(self, tenant, session, id).await
            }
            async fn get_run(&self, tenant: &TenantId, session: &SessionId, id: &RunId) -> StoreResult<Option<RunRecord>> {
                runs::$backend::get_run(self, tenant, session, id).await
            }
            async fn list_runs(&self, tenant: &TenantId, session: &SessionId, after: Option<&RunId>, limit: u32) -> StoreResult<Vec<RunRecord>> {
                runs::$backend::list_runs(self, tenant, session, after, limit).await
            }
            async fn renew_leases(&self, owner: &str, lease: Duration) -> StoreResult<u64> {
                runs::$backend::renew_leases(self, owner, lease).await
            }
            async fn release_leases(&self, owner: &str) -> StoreResult<Vec<RunRecord>> {
                runs::$backend::release_leases(self, owner).await
            }
            async fn list_unfinished_runs(&self, limit: u32) -> StoreResult<Vec<UnfinishedRun>> {
                runs::$backend::list_unfinished_runs(self, limit).await
            }

            // --- replicas ---
            async fn register_replica(&self, name: &str, workspace_storage: &str) -> StoreResult<()> {
                replicas::$backend::register_replica(self, name, workspace_storage).await
            }
            async fn live_replicas(&self, within: Duration) -> StoreResult<Vec<ReplicaRecord>> {
                replicas::$backend::live_replicas(self, within).await
            }

            // --- idempotency ---
            async fn idempotency_key(&self, tenant: &TenantId, scope: &str, key: &str) -> StoreResult<Option<IdempotencyRecord>> {
                idempotency::$backend::idempotency_key(self, tenant, scope, key).await
            }
            async fn record_idempotent_response(&self, tenant: &TenantId, scope: &str, key: &str, status: u16, body: &serde_json::Value) -> StoreResult<()> {
                idempotency::$backend::record_idempotent_response(self, tenant, scope, key, status, body).await
            }
            async fn purge_idempotency_keys(&self) -> StoreResult<u64> {
                idempotency::$backend::purge_idempotency_keys(self).await
            }

            // --- limits (holds and workspace bytes; the backends' own methods, in `limits/`) ---
            async fn acquire_hold(&self, tenant: &TenantId, hold: NewHold, caps: HoldCaps) -> StoreResult<()> {
                self.acquire_hold_tx(tenant, hold, caps).await
            }
            async fn record_workspace_bytes(&self, tenant: &TenantId, session: &SessionId, bytes: u64) -> StoreResult<()> {
                self.record_workspace_bytes_tx(tenant, session, bytes).await
            }
            async fn workspace_bytes(&self, tenant: &TenantId) -> StoreResult<u64> {
                self.workspace_bytes_tx(tenant).await
            }
            async fn read_session_and_hold(&self, tenant: &TenantId, hold: NewHold, caps: HoldCaps) -> StoreResult<Option<SessionRecord>> {
                self.read_session_and_hold_tx(tenant, hold, caps).await
            }
            async fn release_hold(&self, tenant: &TenantId, id: &str) -> StoreResult<()> {
                self.release_hold_tx(tenant, id).await
            }
            async fn release_replica_holds(&self, replica: &str, before: chrono::DateTime<chrono::Utc>) -> StoreResult<u64> {
                self.release_replica_holds_tx(replica, before).await
            }
            async fn count_holds(&self, tenant: &TenantId, kind: HoldKind, session: Option<&SessionId>) -> StoreResult<u64> {
                self.count_holds_tx(tenant, kind, session).await
            }

            // --- noa ---
            async fn noa_state(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<Option<NoaStateRecord>> {
                noa::$backend::state(self, tenant, session).await
            }
            async fn commit_noa(&self, tenant: &TenantId, session: &SessionId, archives: &[NewNoaArchive], state: &serde_json::Value, expected: i64) -> StoreResult<i64> {
                noa::$backend::commit(self, tenant, session, archives, state, expected).await
            }
            async fn list_noa_archives(&self, tenant: &TenantId, session: &SessionId, after: u32, limit: u32) -> StoreResult<Vec<NoaArchiveRecord>> {
                noa::$backend::list(self, tenant, session, after, limit).await
            }
            async fn get_noa_archive(&self, tenant: &TenantId, session: &SessionId, ordinal: u32) -> StoreResult<Option<NoaArchiveRecord>> {
                noa::$backend::get(self, tenant, session, ordinal).await
            }

            // --- tool_state ---
            async fn unlock_tools(&self, tenant: &TenantId, session: &SessionId, names: &[String]) -> StoreResult<()> {
                tool_state::$backend::unlock_tools(self, tenant, session, names).await
            }
            async fn unlocked_tools(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<Vec<String>> {
                tool_state::$backend::unlocked_tools(self, tenant, session).await
            }
            async fn get_todos(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<Vec<TodoItem>> {
                tool_state::$backend::get_todos(self, tenant, session).await
            }
            async fn put_todos(&self, tenant: &TenantId, session: &SessionId, items: &[TodoItem]) -> StoreResult<()> {
                tool_state::$backend::put_todos(self, tenant, session, items).await
            }
            async fn get_mode_override(&self, tenant: &TenantId, session: &SessionId) -> StoreResult<Option<ModeOverride>> {
                tool_state::$backend::get_mode_override(self, tenant, session).await
            }
            async fn set_mode_override(&self, tenant: &TenantId, session: &SessionId, state: ModeOverride) -> StoreResult<()> {
                tool_state::$backend::set_mode_override(self, tenant, session, state).await
            }
            async fn memory_get(&self, tenant: &TenantId, path: &str) -> StoreResult<Option<MemoryNote>> {
                tool_state::$backend::memory_get(self, tenant, path).await
            }
            async fn memory_list(&self, tenant: &TenantId, prefix: &str) -> StoreResult<Vec<MemoryEntry>> {
                tool_state::$backend::memory_list(self, tenant, prefix).await
            }
            async fn memory_put(&self, tenant: &TenantId, path: &str, content: &str, expect: MemoryExpect) -> StoreResult<MemoryNote> {
                tool_state::$backend::memory_put(self, tenant, path, content, expect).await
            }
            async fn memory_delete(&self, tenant: &TenantId, path: &str) -> StoreResult<bool> {
                tool_state::$backend::memory_delete(self, tenant, path).await
            }
            async fn memory_usage(&self, tenant: &TenantId) -> StoreResult<MemoryUsage> {
                tool_state::$backend::memory_usage(self, tenant).await
            }

            // --- registry ---
            async fn create_mcp_server(&self, tenant: &TenantId, name: &str, config: &serde_json::Value, max: u32) -> StoreResult<McpServerRecord> {
                registry::$backend::create_mcp_server(self, tenant, name, config, max).await
            }
            async fn replace_mcp_server(&self, tenant: &TenantId, name: &str, config: &serde_json::Value) -> StoreResult<Option<McpServerRecord>> {
                registry::$backend::replace_mcp_server(self, tenant, name, config).await
            }
            async fn get_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<McpServerRecord>> {
                registry::$backend::get(self, &registry::MCP_SERVERS, tenant, name).await
            }
            async fn list_mcp_servers(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<McpServerRecord>> {
                registry::$backend::list(self, &registry::MCP_SERVERS, tenant, limit).await
            }
            async fn delete_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
                registry::$backend::delete(self, &registry::MCP_SERVERS, tenant, name).await
            }
            async fn create_skill(&self, tenant: &TenantId, skill: &NewSkill, max: u32) -> StoreResult<SkillRecord> {
                registry::$backend::create_skill(self, tenant, skill, max).await
            }
            async fn get_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SkillRecord>> {
                registry::$backend::get(self, &registry::SKILLS, tenant, name).await
            }
            async fn list_skills(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<SkillSummary>> {
                registry::$backend::list(self, &registry::SKILLS, tenant, limit).await
            }
            async fn delete_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
                registry::$backend::delete(self, &registry::SKILLS, tenant, name).await
            }

            // --- usage ---
            async fn usage_totals(&self, tenant: &TenantId, scope: crate::usage::UsageScope<'_>) -> StoreResult<crate::usage::UsageTotals> {
                usage::$backend::totals(self, tenant, scope).await
            }
            async fn usage_report(&self, tenant: &TenantId, query: &crate::usage::UsageQuery) -> StoreResult<Vec<crate::usage::UsageGroup>> {
                usage::$backend::report(self, tenant, query).await
            }

            // --- webhooks (the backends' own methods, in `webhooks/`) ---
            async fn create_webhook(&self, tenant: &TenantId, webhook: NewWebhook, caps: WebhookCaps) -> StoreResult<Result<WebhookRecord, WebhookCapReached>> {
                self.create_webhook_tx(tenant, webhook, caps).await
            }
            async fn list_webhooks(&self, tenant: &TenantId, session: Option<&SessionId>) -> StoreResult<Vec<WebhookRecord>> {
                self.list_webhooks_tx(tenant, session).await
            }
            async fn get_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<Option<WebhookRecord>> {
                self.get_webhook_tx(tenant, id).await
            }
            async fn delete_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<bool> {
                self.delete_webhook_tx(tenant, id).await
            }
            async fn list_webhook_deliveries(&self, tenant: &TenantId, webhook: &str, before: Option<i64>, limit: u32) -> StoreResult<Vec<DeliveryRecord>> {
                self.list_deliveries_tx(tenant, webhook, before, limit).await
            }
            async fn claim_webhook_deliveries(&self, lease: Duration, limit: u32, shares: &DeliveryShares) -> StoreResult<Vec<DueDelivery>> {
                self.claim_deliveries(lease, limit, shares).await
            }
            async fn trim_webhook_backlogs(&self, max_pending: u32) -> StoreResult<u64> {
                self.trim_backlogs(max_pending).await
            }
            async fn finish_webhook_attempt(&self, result: &AttemptResult) -> StoreResult<()> {
                self.finish_attempt(result).await
            }
            async fn next_webhook_due(&self, after: DateTime<Utc>) -> StoreResult<Option<DateTime<Utc>>> {
                self.next_due(after).await
            }
            async fn purge_webhook_deliveries(&self, before: DateTime<Utc>) -> StoreResult<u64> {
                self.purge_deliveries(before).await
            }

            // --- budgets ---
            async fn tenant_budget(&self, tenant: &TenantId) -> StoreResult<Option<crate::budgets::Budget>> {
                budgets::$backend::budget(self, tenant).await
            }
            async fn set_tenant_budget(&self, tenant: &TenantId, budget: Option<&crate::budgets::Budget>) -> StoreResult<()> {
                budgets::$backend::set_budget(self, tenant, budget).await
            }
            async fn tenant_spend(&self, tenant: &TenantId, at: chrono::DateTime<chrono::Utc>) -> StoreResult<crate::budgets::TenantSpend> {
                budgets::$backend::spend(self, tenant, at).await
            }
        }
    };
}

pub(super) use store_facade;
