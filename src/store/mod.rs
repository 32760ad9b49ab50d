//! The store: the source of truth for sessions, history, transcripts and evidence.
//!
//! One interface, two implementations on sqlx: Postgres (production, row-level security keyed
//! on a per-transaction tenant setting) and SQLite (the embedded zero-setup default). Every
//! tenant-owned row carries `tenant_id`, and every tenant-scoped method takes the tenant
//! explicitly.

// One directory per aggregate: `mod.rs` holds what both backends share (row types, SQL
// written once, mappings), `postgres.rs` and `sqlite.rs` only what differs. The backends'
// `Store` impls (`postgres.rs`, `sqlite.rs`) are facades that delegate to them.
mod approvals;
mod budgets;
mod dialect;
mod error;
mod event_payload;
mod events;
mod facade;
mod idempotency;
mod limits;
mod models;
mod noa;
mod pg_conns;
mod pg_notifier;
pub mod postgres;
#[cfg(test)]
mod postgres_plans_tests;
mod registry;
mod replicas;
mod runs;
mod sessions;
pub mod sqlite;
mod sqlite_checkpoint;
#[cfg(test)]
mod sqlite_migration_tests;
#[cfg(test)]
mod sqlite_plans_tests;
mod sqlite_reads;
mod sqlite_vfs;
mod sqlite_writer;
pub mod storable;
mod tool_state;
mod usage;
mod webhooks;

// The paths `sqlite_writer` imports from (kept so it needs no change).
use events::event_views;
use webhooks::sqlite as sqlite_webhooks;

pub use crate::webhooks::{
    AttemptResult, DeliveryRecord, DeliveryShares, DueDelivery, NewWebhook, WebhookCapReached,
    WebhookCaps, WebhookRecord,
};
pub use error::{
    StoreError, StoreResult, TRANSIENT_RETRY_WINDOW, retry_transient, transient_sqlite_code,
    transient_sqlstate,
};
pub use event_payload::EventPayload;
pub use events::PAGE_BYTES;
pub use idempotency::{IDEMPOTENCY_KEY_TTL, IdempotencyRecord, NewIdempotencyKey};
pub use models::*;
pub use noa::*;
pub use registry::McpServerRecord;
pub use registry::{NewSkill, SkillRecord, SkillSummary};
pub use replicas::{ReplicaRecord, Signal};
pub use tool_state::*;

use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::limits::{HoldCaps, HoldKind, NewHold, RunCaps};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// Everything the server keeps durably.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which backend this is (`postgres` or `sqlite`).
    fn backend(&self) -> &'static str;

    /// A cheap round trip proving the database answers.
    async fn ping(&self) -> StoreResult<()>;

    /// Creates a session without a cap on the tenant's open sessions (system paths, tests).
    async fn create_session(&self, session: NewSession) -> StoreResult<SessionRecord> {
        self.create_session_keyed(session, u32::MAX, None).await
    }

    /// Creates a session if the tenant has fewer than `max_open` open sessions (`u32::MAX`:
    /// no cap) — counted in the same transaction as the insert, so concurrent creations on any
    /// replica never pass the cap (`TenantLimit` otherwise) — and records `key` naming it
    /// (`IdempotencyKeyTaken` when a concurrent request recorded the key first, `TenantLimit`
    /// when the tenant has `key.max_live` live keys). Nothing is written on an error.
    async fn create_session_keyed(
        &self,
        session: NewSession,
        max_open: u32,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<SessionRecord>;

    /// Creates a forked session with everything it starts with in one transaction (see
    /// [`NewFork`]; its `max_open` is checked like [`Store::create_session_keyed`]'s); on any
    /// error nothing of it is written.
    async fn fork_session(&self, fork: NewFork) -> StoreResult<()>;

    /// The live (unexpired) record of an `Idempotency-Key`.
    async fn idempotency_key(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>>;

    /// Keeps the first answer of a keyed request (written right after the request's commit).
    async fn record_idempotent_response(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
        status: u16,
        body: &serde_json::Value,
    ) -> StoreResult<()>;

    /// Deletes expired idempotency keys (system-level sweep); how many went.
    async fn purge_idempotency_keys(&self) -> StoreResult<u64>;

    /// The session if it exists AND belongs to `tenant`.
    async fn get_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>>;

    /// The tenant's sessions, newest first, strictly after `cursor` when given.
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<SessionRecord>>;

    /// Marks the session closed (idempotent); `None` when it does not exist for `tenant`.
    async fn close_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>>;

    /// Writes messages, events and spilled outputs of one session in ONE transaction. Events
    /// and messages get the session's next sequence numbers, in the order given.
    async fn append(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        batch: AppendBatch,
    ) -> StoreResult<AppendResult> {
        let batch = StorableBatch::new(batch);
        let appended = self.append_storable(tenant, session, batch.clone()).await?;
        Ok(appended.records(batch.into_inner()))
    }

    /// [`Store::append`] of a batch already made storable; where its rows landed.
    async fn append_storable(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        batch: StorableBatch,
    ) -> StoreResult<Appended>;

    /// Events with `seq > after`, in order: a page of at most `limit`, ending after the event
    /// that brings it to [`PAGE_BYTES`] of payload (a reader pages on until a page is empty).
    async fn list_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>>;

    /// The events of one run with one of `kinds`, in order (used to resume the run).
    async fn list_run_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
        kinds: &[&str],
    ) -> StoreResult<Vec<EventRecord>>;

    /// The session's events (of every run) with one of `kinds` and `seq > after`, in order,
    /// at most `limit` (used to find a session's subagents).
    async fn list_session_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        kinds: &[&str],
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>>;

    /// History messages with `seq > after`, in order, at most `limit` (all of them, whatever
    /// their size: a run's history).
    async fn list_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>>;

    /// A page of history messages with `seq > after`, in order: at most `limit`, ending after
    /// the message that brings it to [`PAGE_BYTES`] of content (a reader pages on until a page
    /// is empty).
    async fn list_messages_page(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>>;

    /// A spilled output of one of the tenant's sessions.
    async fn get_output(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &OutputId,
    ) -> StoreResult<Option<OutputRecord>>;

    /// Deletes spilled outputs older than `older_than`; returns how many were deleted.
    async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64>;

    /// Open sessions of every tenant with no activity since `idle_before`, oldest first, as
    /// ids only (system-level: used by the idle-expiry sweep only).
    async fn list_idle_sessions(
        &self,
        idle_before: chrono::DateTime<chrono::Utc>,
        limit: u32,
    ) -> StoreResult<Vec<IdleSession>>;

    /// How many of the tenant's sessions are not closed.
    async fn count_open_sessions(&self, tenant: &TenantId) -> StoreResult<i64>;

    // --- approvals and grants ---

    /// Records a pending approval request when the tenant has fewer than `max_pending`
    /// pending, unexpired ones (checked in the same transaction, serialized per tenant);
    /// `TenantLimit` otherwise.
    async fn create_approval(
        &self,
        tenant: &TenantId,
        approval: NewApproval,
        max_pending: u32,
    ) -> StoreResult<ApprovalRecord>;

    /// Decides a pending approval exactly once: a single conditional update (`status =
    /// 'pending'`, and for allow/deny not yet expired). `None` when it was not pending any
    /// more (decided or expired) — the caller then reads it to tell which. A grant in the
    /// decision is stored in the same transaction.
    async fn decide_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
        decision: ApprovalDecision,
    ) -> StoreResult<Option<ApprovalRecord>>;

    async fn get_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>>;

    /// The request `run` made for the call `tool_use_id` with the input of digest
    /// `input_sha256` (the oldest, if several): what a resumed run asks for again.
    async fn run_approval_request(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
        tool_use_id: &str,
        input_sha256: &str,
    ) -> StoreResult<Option<ApprovalRecord>>;

    /// A page of the session's approvals, oldest first, optionally of one status, created
    /// after the approval `after` (its id; `None`: from the first): at most `limit`, ending
    /// after the approval that brings the page to [`PAGE_BYTES`] (inputs, reasons).
    async fn list_approvals_page(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        status: Option<ApprovalStatus>,
        after: Option<&ApprovalId>,
        limit: u32,
    ) -> StoreResult<Vec<ApprovalRecord>>;

    /// The session's approvals, oldest first, optionally of one status.
    async fn list_approvals(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        status: Option<ApprovalStatus>,
    ) -> StoreResult<Vec<ApprovalRecord>>;

    /// Grants in force for the session: its own (once, session) and the tenant's, not
    /// revoked, consumed or expired.
    async fn list_grants(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<GrantRecord>>;

    /// The session's live grants and permission-mode override in one read (a run's start).
    async fn permission_state(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<PermissionState>;

    /// Revokes a grant; false when there was no such active grant.
    async fn revoke_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool>;

    /// Marks a `once` grant used; false when it was already used or revoked.
    async fn consume_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool>;

    // --- signals between replicas ---

    /// Signals from every replica sharing this store (Postgres LISTEN/NOTIFY), this one
    /// included; `None` for a store only this process uses (SQLite). Committed events and
    /// approval decisions are signalled by the store itself.
    async fn signals(&self) -> StoreResult<Option<tokio::sync::mpsc::UnboundedReceiver<Signal>>> {
        Ok(None)
    }

    /// System-level reconciliation: which of these approvals are not pending any more
    /// (decided, expired or cancelled) — one query by primary key. A store only this process
    /// uses loses no signals, so it answers none.
    async fn settled_approvals(&self, _ids: &[String]) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }

    /// Sends a signal to every replica (nothing to do for a single-process store).
    async fn signal(&self, _signal: Signal) -> StoreResult<()> {
        Ok(())
    }

    /// Tells the store whether other replicas share it (from the replica registry, or a
    /// [`Signal::ReplicaStarted`]): without them, the `events` signal of every append is not
    /// sent (nobody would hear it). Until told, a store assumes they may.
    fn set_other_replicas(&self, _present: bool) {}

    // --- runs ---

    /// Persists a run: queued when `claim` is `None`, otherwise running under a fresh lease of
    /// `claim.0` for `claim.1` (fence 1). The tenant's caps are checked in the same
    /// transaction, serialized per tenant across replicas: a claimed run needs fewer than
    /// `caps.concurrent_runs` running runs with a live lease, a queued one fewer than
    /// `caps.queued_per_session` queued runs in its session and `caps.queued_per_tenant` in
    /// the tenant; `TenantLimit` otherwise (nothing written).
    async fn create_run(
        &self,
        tenant: &TenantId,
        run: NewRun,
        claim: Option<(&str, Duration)>,
        caps: RunCaps,
    ) -> StoreResult<RunRecord> {
        self.create_run_keyed(tenant, run, claim, caps, None).await
    }

    /// [`Store::create_run`] that also records `key` naming the run in the same transaction
    /// (see [`Store::create_session_keyed`]).
    async fn create_run_keyed(
        &self,
        tenant: &TenantId,
        run: NewRun,
        claim: Option<(&str, Duration)>,
        caps: RunCaps,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<RunRecord>;

    /// [`Store::create_run_keyed`] for a run that starts at once, running under a fresh lease
    /// of `claim.0` for `claim.1`, answered with the session's permission state (as
    /// [`Store::permission_state`]) the run starts from: on Postgres one statement where the
    /// two were two round trips.
    async fn start_run(
        &self,
        tenant: &TenantId,
        run: NewRun,
        claim: (&str, Duration),
        caps: RunCaps,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<StartedRun>;

    /// Records a cancel of a running run for the replica that holds it (its signal may be
    /// lost); false when the run is not running.
    async fn request_cancel(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
    ) -> StoreResult<bool>;

    /// The running runs `owner` holds whose cancel was requested (system-level, one query).
    async fn requested_cancels(&self, owner: &str) -> StoreResult<Vec<(SessionId, RunId)>>;

    /// The highest event `seq` of each of `sessions` that exists (system-level, one query).
    async fn last_event_seqs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, i64)>>;

    /// Claims a run for `owner`: a queued one, a running one whose lease `owner` itself held
    /// (a restarted replica), or a running one whose lease expired. Bumps the fence, so
    /// writes of any earlier claim are refused from now on. `None` when it cannot be claimed;
    /// `TenantLimit` when the tenant already has `caps.concurrent_runs` other running runs
    /// with a live lease (checked in the same transaction, serialized per tenant).
    async fn claim_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        owner: &str,
        lease: Duration,
        caps: RunCaps,
    ) -> StoreResult<Option<RunRecord>>;

    /// Cancels a run that is still queued; false when it is not queued (any more).
    async fn cancel_queued_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<bool>;

    async fn get_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<Option<RunRecord>>;

    /// The session's runs in submission order, at most `limit`, strictly after the run
    /// `after` when given.
    async fn list_runs(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: Option<&RunId>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>>;

    /// System-level heartbeat: extends the lease of every running run and every hold
    /// `owner` holds (one tick renews both); returns how many runs it renewed.
    async fn renew_leases(&self, owner: &str, lease: Duration) -> StoreResult<u64>;

    /// System-level hand-off: releases the lease of every running run `owner` still holds
    /// (owner cleared, no expiry, fence kept), so any replica's claim takes it at once and the
    /// releasing replica's late writes are refused. Returns the released runs.
    async fn release_leases(&self, owner: &str) -> StoreResult<Vec<RunRecord>>;

    /// System-level: queued and running runs of every tenant, in submission order, without
    /// their prompts.
    async fn list_unfinished_runs(&self, limit: u32) -> StoreResult<Vec<UnfinishedRun>>;

    /// System-level: records replica `name` as alive now, storing workspaces as
    /// `workspace_storage` (the replica registry).
    async fn register_replica(&self, name: &str, workspace_storage: &str) -> StoreResult<()>;

    /// System-level: the replicas whose last heartbeat is at most `within` old.
    async fn live_replicas(&self, within: Duration) -> StoreResult<Vec<ReplicaRecord>>;

    /// The head snapshot of the session's workspace (`snapshot` storage; set by
    /// [`Store::append`] with [`AppendBatch::workspace_snapshot`]); `None` before the first.
    async fn workspace_snapshot(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<String>>;

    // --- holds (tenant limits on what a replica keeps open) ---

    /// Records a hold for the tenant when its live holds of that kind stay under `caps`
    /// (per session and per tenant, serialized per tenant across replicas); `TenantLimit`
    /// otherwise. Expired holds are deleted on the way.
    async fn acquire_hold(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<()>;

    /// Reads the tenant's session and, when there is one, takes `hold` on it as
    /// [`Store::acquire_hold`] does: the session as read, or `None` (and no hold) when the
    /// session is not the tenant's. A stream's opening: one round trip on Postgres.
    async fn read_session_and_hold(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<Option<SessionRecord>>;

    /// Deletes a hold (idempotent).
    async fn release_hold(&self, tenant: &TenantId, id: &str) -> StoreResult<()>;

    /// System-level: deletes the holds `replica` took before `before`, and answers how many.
    /// A replica starting under an id deletes what an earlier process of that id left (a
    /// crashed one's holds would otherwise be renewed by the new one's heartbeat and count
    /// against their tenants for good); a replica stopping deletes its own.
    async fn release_replica_holds(
        &self,
        replica: &str,
        before: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<u64>;

    /// Records the bytes measured in the session's workspace (replacing the last
    /// measurement); `NotFound` when the session is not `tenant`'s.
    async fn record_workspace_bytes(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        bytes: u64,
    ) -> StoreResult<()>;

    /// The bytes last measured in the workspaces of the tenant's open sessions, summed.
    async fn workspace_bytes(&self, tenant: &TenantId) -> StoreResult<u64>;

    /// How many live holds of `kind` the tenant has (`session`: in that session only).
    async fn count_holds(
        &self,
        tenant: &TenantId,
        kind: HoldKind,
        session: Option<&SessionId>,
    ) -> StoreResult<u64>;

    // --- Noa context state (sessions with `context.policy = "noa"` only) ---

    /// The session's Noa state (`None` when never written or the session is not `tenant`'s).
    async fn noa_state(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<NoaStateRecord>>;

    /// Writes `archives` and the new Noa `state` in ONE transaction, when the stored version is
    /// still `expected` (0: no state yet); returns the new version. `Conflict` when the version
    /// moved, `NotFound` when the session is not `tenant`'s; on any error nothing is written.
    async fn commit_noa(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        archives: &[NewNoaArchive],
        state: &serde_json::Value,
        expected: i64,
    ) -> StoreResult<i64>;

    /// The session's archives with `ordinal > after`, oldest first, without their messages.
    async fn list_noa_archives(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<NoaArchiveRecord>>;

    /// One archive of the session, with its messages.
    async fn get_noa_archive(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        ordinal: u32,
    ) -> StoreResult<Option<NoaArchiveRecord>>;

    // --- tool state (todos, memory, permission mode) ---

    /// Records deferred tools as unlocked for the session (idempotent); `NotFound` when the
    /// session is not `tenant`'s.
    async fn unlock_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        names: &[String],
    ) -> StoreResult<()>;

    /// The deferred tools the session has unlocked.
    async fn unlocked_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<String>>;

    /// The session's todo list (empty when never written or the session is not `tenant`'s).
    async fn get_todos(&self, tenant: &TenantId, session: &SessionId)
    -> StoreResult<Vec<TodoItem>>;

    /// Replaces the session's todo list; `NotFound` when the session is not `tenant`'s.
    async fn put_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        items: &[TodoItem],
    ) -> StoreResult<()>;

    /// The session's permission-mode override, if one was set.
    async fn get_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<ModeOverride>>;

    /// Sets the session's permission-mode override; `NotFound` when the session is not
    /// `tenant`'s.
    async fn set_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        state: ModeOverride,
    ) -> StoreResult<()>;

    /// One of the tenant's memory notes.
    async fn memory_get(&self, tenant: &TenantId, path: &str) -> StoreResult<Option<MemoryNote>>;

    /// The tenant's notes whose path starts with `prefix` (empty: all), ordered by path.
    async fn memory_list(&self, tenant: &TenantId, prefix: &str) -> StoreResult<Vec<MemoryEntry>>;

    /// Writes a note if it is in the `expect`ed state; `Conflict` otherwise. Returns the note
    /// as written (version 1 when created, previous version + 1 when updated).
    async fn memory_put(
        &self,
        tenant: &TenantId,
        path: &str,
        content: &str,
        expect: MemoryExpect,
    ) -> StoreResult<MemoryNote>;

    /// Deletes a note; false when it did not exist.
    async fn memory_delete(&self, tenant: &TenantId, path: &str) -> StoreResult<bool>;

    /// How many notes and bytes the tenant keeps.
    async fn memory_usage(&self, tenant: &TenantId) -> StoreResult<MemoryUsage>;

    // --- the tenant's MCP server registry ---

    /// Registers an MCP server when the tenant has fewer than `max` (checked in the same
    /// transaction, serialized per tenant); `Conflict` when the name is taken, `TenantLimit`
    /// at the limit (nothing written either way).
    async fn create_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
        max: u32,
    ) -> StoreResult<McpServerRecord>;

    /// Replaces a registered server's entry; `None` when the tenant has no server `name`.
    async fn replace_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
    ) -> StoreResult<Option<McpServerRecord>>;

    async fn get_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> StoreResult<Option<McpServerRecord>>;

    /// The tenant's registered servers by name, at most `limit`.
    async fn list_mcp_servers(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> StoreResult<Vec<McpServerRecord>>;

    /// Deletes a registered server; false when there was none.
    async fn delete_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<bool>;

    // --- the tenant's skill registry ---

    /// Registers a skill when the tenant has fewer than `max` (checked in the same
    /// transaction, serialized per tenant); `Conflict` when the name is taken, `TenantLimit`
    /// at the limit (nothing written either way).
    async fn create_skill(
        &self,
        tenant: &TenantId,
        skill: &NewSkill,
        max: u32,
    ) -> StoreResult<SkillRecord>;

    async fn get_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SkillRecord>>;

    /// The tenant's registered skills by name, without content, at most `limit`.
    async fn list_skills(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<SkillSummary>>;

    /// Deletes a registered skill; false when there was none.
    async fn delete_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<bool>;

    /// Sums of the usage ledger rows of one run or one session of `tenant`.
    async fn usage_totals(
        &self,
        tenant: &TenantId,
        scope: crate::usage::UsageScope<'_>,
    ) -> StoreResult<crate::usage::UsageTotals>;

    /// The tenant's usage ledger rows with `from <= created_at < to`, grouped, ordered by key,
    /// at most `query.limit` groups.
    async fn usage_report(
        &self,
        tenant: &TenantId,
        query: &crate::usage::UsageQuery,
    ) -> StoreResult<Vec<crate::usage::UsageGroup>>;

    // --- outbound webhooks (subscriptions and the outbox) ---

    /// Records a subscription when the tenant has fewer than `caps.per_tenant` tenant-wide
    /// ones (or its session fewer than `caps.per_session`), checked in the same transaction
    /// and serialized per tenant; `Ok(Err(_))` otherwise (nothing written). `NotFound` when
    /// the session is not `tenant`'s.
    async fn create_webhook(
        &self,
        tenant: &TenantId,
        webhook: NewWebhook,
        caps: WebhookCaps,
    ) -> StoreResult<Result<WebhookRecord, WebhookCapReached>>;

    /// The tenant's tenant-wide subscriptions (`session`: that session's), oldest first.
    async fn list_webhooks(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> StoreResult<Vec<WebhookRecord>>;

    async fn get_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<Option<WebhookRecord>>;

    /// Deletes a subscription and its deliveries (pending ones are not sent); false when it
    /// did not exist.
    async fn delete_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<bool>;

    /// A subscription's deliveries, newest first, at most `limit`, with `position < before`
    /// when given.
    async fn list_webhook_deliveries(
        &self,
        tenant: &TenantId,
        webhook: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>>;

    /// System-level: claims at most `limit` due deliveries for one attempt each (attempt
    /// count bumped, reserved for `lease`), shared among tenants by `shares`: at most a
    /// tenant's room, each tenant's oldest due first, in turns (see [`DeliveryShares`]). A
    /// tenant's backlog is never scanned: the tenants with pending deliveries are found by a
    /// loose scan of an index by (tenant, due time) and each is read to its room only.
    /// Replicas sharing the store never claim the same one while its lease lives.
    async fn claim_webhook_deliveries(
        &self,
        lease: Duration,
        limit: u32,
        shares: &DeliveryShares,
    ) -> StoreResult<Vec<DueDelivery>>;

    /// System-level: fails unsent, with a [`crate::webhooks::WEBHOOK_BACKLOG`] note, the
    /// pending deliveries of every tenant past its first `max_pending` (those whose next
    /// attempt comes soonest are kept; deliveries in flight are neither counted nor touched).
    /// Answers how many were failed.
    async fn trim_webhook_backlogs(&self, max_pending: u32) -> StoreResult<u64>;

    /// System-level: records an attempt's outcome (the attempt is appended to the log); a
    /// result for an attempt that is not the delivery's latest any more is ignored.
    async fn finish_webhook_attempt(&self, result: &AttemptResult) -> StoreResult<()>;

    /// System-level: the earliest time after `after` at which a pending delivery comes due
    /// or a claimed one's lease ends; `None` when there is none. (Deliveries already due at
    /// `after` are the claim's to take; those it left were over their tenant's room.)
    async fn next_webhook_due(
        &self,
        after: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<Option<chrono::DateTime<chrono::Utc>>>;

    /// System-level: deletes delivered and failed deliveries created before `before`.
    async fn purge_webhook_deliveries(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<u64>;

    /// Notified after a commit that wrote outbox rows (this process's writes only; other
    /// replicas find them at their sweep or when their own writes wake them).
    fn webhook_wakeup(&self) -> Arc<tokio::sync::Notify>;

    /// The budget an operator set for `tenant` (replacing the configured default), if any.
    async fn tenant_budget(&self, tenant: &TenantId)
    -> StoreResult<Option<crate::budgets::Budget>>;

    /// Sets (`Some`) or removes (`None`: back to the configured default) the tenant's budget.
    async fn set_tenant_budget(
        &self,
        tenant: &TenantId,
        budget: Option<&crate::budgets::Budget>,
    ) -> StoreResult<()>;

    /// What the tenant spent in the UTC day and the UTC month holding `at` (the running
    /// totals written with the usage ledger).
    async fn tenant_spend(
        &self,
        tenant: &TenantId,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<crate::budgets::TenantSpend>;
}

/// Opens the store named by `url` (`postgres://…` or `sqlite://…`) and applies migrations.
pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::connect(url, options).await?))
    } else {
        Err(StoreError::Internal(
            "database_url must start with postgres:// or sqlite://".into(),
        ))
    }
}

/// Pool options shared by both backends.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(3),
        }
    }
}
