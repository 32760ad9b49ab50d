//! The store-backed [`LoopHost`]: persist-then-publish with group commit.
//!
//! Transient events (text deltas, tool progress) are buffered and written by a flusher task;
//! while one write is in flight the next ones accumulate, so a burst of deltas costs one
//! transaction, not one per delta. `commit` drains the buffer first, so order is kept.
//! Spilled outputs are written in the transaction that carries the first event pointing at them.

use super::bus::EventBus;
use crate::harness::engine::{HistoryAppend, HostError, LoopHost};
use crate::harness::scheduler::PendingCall;
use crate::ids::{OutputId, RunId, SessionId, TenantId};
use crate::llm::ToolSpec;
use crate::message::{Message, ToolResultBlock};
use crate::run_event::{self, BudgetKind, RunEvent, TerminalReason};
use crate::store::{
    AppendBatch, NewEvent, NewMessage, NewOutput, RunEnd, RunLease, RunStatus, StorableBatch,
    Store, TRANSIENT_RETRY_WINDOW,
};
use crate::tools::pipeline::Pipeline;
use crate::tools::{ToolContext, ToolProgress};
use async_trait::async_trait;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long buffered events (text deltas, tool progress) wait for more before the flusher
/// writes them: they reach SSE clients at most this much later, and a run's burst of events
/// costs one transaction (or none of its own, when a durable write of the run comes first).
pub const FLUSH_LINGER: std::time::Duration = std::time::Duration::from_millis(10);

#[derive(Default)]
struct Pending {
    events: Vec<RunEvent>,
    outputs: Vec<NewOutput>,
}

/// Writes one session's events and history in order.
pub struct SessionWriter {
    store: Arc<dyn Store>,
    bus: Arc<EventBus>,
    tenant: TenantId,
    session: SessionId,
    /// Set for a run's writer: every write checks the run's lease.
    lease: Option<RunLease>,
    /// Set once the run's end is committed (before it is published).
    ended: Arc<std::sync::atomic::AtomicBool>,
    pending: Mutex<Pending>,
    /// Serialises writes so sequence order equals emit order.
    write_lock: tokio::sync::Mutex<()>,
    wake: Notify,
    /// Set when the last write failed on a transient store error (after its retries).
    store_unavailable: std::sync::atomic::AtomicBool,
    /// Set for a run's writer once its model is known: every `assistant_message` (and
    /// compaction summary) it writes gets a usage ledger row in the same transaction.
    meter: std::sync::OnceLock<crate::usage::UsageMeter>,
    /// Set for a run's writer: counts the run's end (status, reason, time since it started
    /// here) and times its store transactions.
    metrics: std::sync::OnceLock<(Arc<crate::metrics::Metrics>, std::time::Instant)>,
}

impl SessionWriter {
    pub fn new(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        tenant: TenantId,
        session: SessionId,
    ) -> Arc<Self> {
        Self::build(store, bus, tenant, session, None)
    }

    /// The writer of one run: writes only while the run's lease is held.
    pub fn for_run(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        tenant: TenantId,
        session: SessionId,
        lease: RunLease,
    ) -> Arc<Self> {
        Self::build(store, bus, tenant, session, Some(lease))
    }

    fn build(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        tenant: TenantId,
        session: SessionId,
        lease: Option<RunLease>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            bus,
            tenant,
            session,
            lease,
            ended: Arc::default(),
            pending: Mutex::new(Pending::default()),
            write_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            store_unavailable: std::sync::atomic::AtomicBool::new(false),
            meter: std::sync::OnceLock::new(),
            metrics: std::sync::OnceLock::new(),
        })
    }

    /// Counts the run's end in `metrics` when this writer commits it (its duration from
    /// `started`), and times its store transactions (the first call stays).
    pub fn count_run_end(
        &self,
        metrics: Arc<crate::metrics::Metrics>,
        started: std::time::Instant,
    ) {
        let _ = self.metrics.set((metrics, started));
    }

    /// Records the usage of the model calls this (run) writer commits with `meter` (the first
    /// meter set stays).
    pub fn meter_usage(&self, meter: crate::usage::UsageMeter) {
        let _ = self.meter.set(meter);
    }

    /// What the model calls among `events` add to the tenant's spend (as their ledger rows
    /// will), before they are committed.
    pub fn pending_spend(&self, events: &[RunEvent]) -> crate::budgets::Spend {
        crate::budgets::spend_of_records(&self.usage_rows(events))
    }

    /// The usage ledger rows of the model calls among `events`.
    fn usage_rows(&self, events: &[RunEvent]) -> Vec<crate::usage::NewUsageRecord> {
        let (Some(meter), Some(lease)) = (self.meter.get(), &self.lease) else {
            return Vec::new();
        };
        events
            .iter()
            .filter_map(|event| match event {
                RunEvent::AssistantMessage(message) => Some(message.usage),
                RunEvent::Compaction(compaction) => compaction.usage,
                RunEvent::McpSampling(sampling) => Some(sampling.usage),
                _ => None,
            })
            .map(|usage| meter.record(lease.run_id.as_str(), usage.into()))
            .collect()
    }

    fn push_event(&self, event: RunEvent) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .events
            .push(event);
        self.wake.notify_one();
    }

    fn push_output(&self, output: NewOutput) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outputs
            .push(output);
    }

    /// Whether the last write failed because the store was unavailable (transient), after
    /// retrying for [`TRANSIENT_RETRY_WINDOW`].
    pub fn store_unavailable(&self) -> bool {
        self.store_unavailable
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Set once this writer committed its run's end.
    pub fn ended(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.ended.clone()
    }

    /// Writes everything pending plus `messages` and `events` in one transaction, then publishes.
    /// For a run's writer, a [`RunEvent::Terminal`] among `events` also ends the run (its
    /// status follows the terminal reason) in the same transaction. Events are stored with the
    /// run's id (none for a session writer).
    pub async fn write(
        &self,
        messages: Vec<NewMessage>,
        events: Vec<RunEvent>,
    ) -> Result<(), HostError> {
        let _guard = self.write_lock.lock().await;
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        let terminal = self.lease.as_ref().and_then(|_| {
            events.iter().find_map(|e| match e {
                RunEvent::Terminal(reason) => Some(reason.clone()),
                _ => None,
            })
        });
        let run_end = terminal.as_ref().map(run_end_of);
        let run_id = self.lease.as_ref().map(|lease| lease.run_id.to_string());
        let events: Vec<RunEvent> = pending.events.into_iter().chain(events).collect();
        // The newest snapshot a result of this batch carries becomes the head, atomically.
        let workspace_snapshot = events.iter().rev().find_map(|event| match event {
            RunEvent::ToolResult(result) => result.workspace_snapshot.clone(),
            _ => None,
        });
        let usage = self.usage_rows(&events);
        let events: Vec<NewEvent> = events
            .into_iter()
            .map(|event| event.into_row(run_id.clone()))
            .collect();
        let batch = AppendBatch {
            messages,
            events,
            outputs: pending.outputs,
            lease: self.lease.clone(),
            run_end,
            id: Some(uuid::Uuid::new_v4().to_string()),
            retry: false,
            workspace_snapshot,
            usage,
        };
        if batch.events.is_empty() && batch.messages.is_empty() && batch.outputs.is_empty() {
            return Ok(());
        }
        let ends_run = batch.run_end.is_some();
        let began = std::time::Instant::now();
        let batch = StorableBatch::new(batch);
        let written = self.append_retrying(&batch).await;
        if let Some((metrics, started)) = self.metrics.get() {
            metrics.store_transaction(crate::metrics::StoreOp::append, began.elapsed());
            if let (Ok(_), Some(terminal)) = (&written, &terminal) {
                metrics.run_ended(terminal, started.elapsed());
            }
        }
        let written = written.map_err(|error| {
            self.store_unavailable
                .store(error.is_transient(), std::sync::atomic::Ordering::SeqCst);
            HostError(error.to_string())
        })?;
        self.store_unavailable
            .store(false, std::sync::atomic::Ordering::SeqCst);
        if ends_run {
            // A client that sees `terminal` may prompt at once: the session is free by then.
            self.ended.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.bus
            .publish(&self.session, written.records(batch.into_inner()).events);
        Ok(())
    }

    /// Appends `batch`, retrying a transient store error with backoff for up to
    /// [`TRANSIENT_RETRY_WINDOW`]; a permanent error (or a lost lease) returns at once. A retry
    /// is marked as one: when the first attempt committed but its answer was lost, the store
    /// answers with what it committed instead of storing the batch twice.
    async fn append_retrying(
        &self,
        batch: &StorableBatch,
    ) -> Result<crate::store::Appended, crate::store::StoreError> {
        let mut attempts = 0u32;
        crate::store::retry_transient(TRANSIENT_RETRY_WINDOW, || {
            attempts += 1;
            let attempt = if attempts > 1 {
                batch.retried()
            } else {
                batch.clone()
            };
            self.store
                .append_storable(&self.tenant, &self.session, attempt)
        })
        .await
    }

    /// Flushes buffered events until `stop` is cancelled (then flushes once more).
    pub async fn run_flusher(self: Arc<Self>, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                () = stop.cancelled() => {
                    let _ = self.write(vec![], vec![]).await;
                    return;
                }
            }
            // Let the emitting task run on for a moment: the events it pushes meanwhile (the
            // rest of a model stream's deltas, a tool's progress) join this transaction, and a
            // durable write of the run (a tool's journal, the turn's commit) takes them with it
            // first, so most lingering flushes find nothing left to write.
            tokio::select! {
                () = tokio::time::sleep(FLUSH_LINGER) => {}
                () = stop.cancelled() => {
                    let _ = self.write(vec![], vec![]).await;
                    return;
                }
            }
            if let Err(error) = self.write(vec![], vec![]).await {
                tracing::warn!(%error, "event flush failed");
            }
        }
    }
}

/// How a run ends, from its terminal reason.
fn run_end_of(terminal: &TerminalReason) -> RunEnd {
    let status = match terminal {
        TerminalReason::Cancelled => RunStatus::Cancelled,
        TerminalReason::Error { .. } => RunStatus::Failed,
        _ => RunStatus::Completed,
    };
    RunEnd {
        status,
        terminal: serde_json::to_value(terminal).unwrap_or(Value::Null),
    }
}

/// Journals each tool call of a run durably before it runs (`tool_executing`), in order with
/// every event before it.
pub struct RunJournal {
    pub writer: Arc<SessionWriter>,
    pub run_id: RunId,
}

#[async_trait]
impl crate::tools::pipeline::ExecutionJournal for RunJournal {
    async fn executing(
        &self,
        tool_use_id: &str,
        tool_name: &str,
        repeatable: bool,
    ) -> Result<(), String> {
        let event = RunEvent::ToolExecuting(run_event::ToolExecuting {
            tool_use_id: tool_use_id.to_owned(),
            name: tool_name.to_owned(),
        });
        if repeatable {
            // Written with the turn (or by the flusher if the call takes longer): one commit
            // fewer per read-only call.
            self.writer.push_event(event);
            return Ok(());
        }
        self.writer
            .write(vec![], vec![event])
            .await
            .map_err(|error| error.0)
    }
}

#[async_trait]
impl crate::egress::EgressRecorder for RunJournal {
    async fn record(&self, egress: crate::egress::EgressEvent) {
        if let Err(error) = self
            .writer
            .write(vec![], vec![RunEvent::Egress(egress.into())])
            .await
        {
            tracing::warn!(error = %error.0, "could not record an egress event");
        }
    }
}

/// Where a session's command connections (the egress proxy) are recorded: the journal of
/// the session's current run, set when each run starts. A connection reported while no run
/// of this replica writes for the session (a background task outliving its run) is logged
/// only: its journal's writer refuses the write.
///
/// It also holds the permission ladder of the session's latest run on this replica, which
/// judges destinations no egress rule lists (see [`crate::egress::proxy::gate`]); before the
/// first run, such destinations are refused.
#[derive(Clone, Default)]
pub struct EgressSlot {
    journal: Arc<Mutex<Option<Arc<dyn crate::egress::EgressRecorder>>>>,
    ladder: Arc<Mutex<Option<Arc<dyn crate::egress::fetch::HopGate>>>>,
}

impl EgressSlot {
    /// Records into `journal` from now on.
    pub fn set(&self, journal: Arc<dyn crate::egress::EgressRecorder>) {
        *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal);
    }

    /// Judges unlisted destinations with `ladder` (the current run's) from now on.
    pub fn set_ladder(&self, ladder: Arc<dyn crate::egress::fetch::HopGate>) {
        *self.ladder.lock().unwrap_or_else(|e| e.into_inner()) = Some(ladder);
    }

    /// Records one proxied connection as an `egress` event (on a task of its own: the proxy
    /// must not wait for the store).
    pub fn record_proxy(&self, record: crate::egress::proxy::ProxyRecord) {
        let Some(journal) = self
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return;
        };
        let event = crate::egress::proxy::egress_event(&record);
        tokio::spawn(async move { journal.record(event).await });
    }
}

impl crate::egress::fetch::HopGate for EgressSlot {
    fn allows(&self, url: &url::Url) -> Result<String, String> {
        let ladder = self
            .ladder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match ladder {
            Some(ladder) => ladder.allows(url),
            None => Err("no run of the session has judged it yet".into()),
        }
    }
}

/// The host of one run.
pub struct StoreHost {
    pub writer: Arc<SessionWriter>,
    pub pipeline: Pipeline,
    pub tenant: TenantId,
    pub session: SessionId,
    pub run_id: RunId,
    pub workspace: Option<PathBuf>,
    /// Deferred tools this session may run (N12).
    pub unlocked: crate::tools::deferred::UnlockSet,
    /// Background-task notifications of the session, filled as tasks end.
    pub notifications: Arc<Mutex<Vec<String>>>,
    pub store: Arc<dyn Store>,
    pub grants: Arc<super::approvals::LiveGrants>,
    /// The run's effective permission mode, shared with its gate.
    pub mode: Arc<std::sync::RwLock<crate::permission::PermissionMode>>,
    pub configured_mode: crate::permission::PermissionMode,
    /// Set when a call parked the run on an approval.
    pub park: Arc<super::approvals::ParkState>,
    /// Cancelled when the replica shuts down: the run hands off like a parked one (calls
    /// not started stay unstarted, a model call in flight is abandoned).
    pub handoff: CancellationToken,
    /// `snapshot` storage: the session's snapshots, and the most bytes one may hold.
    pub snapshots: Option<(Arc<crate::workspace_snapshot::SessionSnapshots>, u64)>,
    /// The tenant's spend budgets, checked at the run's start and between turns.
    pub budgets: super::budget_gate::RunBudget,
    /// Tool calls count here (tool, outcome, duration, deciding permission stage).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The ids of the run's `execute_tool` spans.
    pub ids: crate::telemetry::genai::RunIds,
    /// Record tool arguments and results on the spans (`telemetry.capture_content`).
    pub capture_content: bool,
    /// Tokens of the run's subagents (its `Agent` calls), counted into its token budget.
    pub delegated: super::subagent::DelegatedUsage,
    /// The session's MCP servers, when it has any: a changed tool list is read again
    /// before the next model request.
    pub mcp_refresh: Option<crate::mcp::refresh::McpRefresh>,
}

/// How a tool call's result counts: denied by the ladder or the approver, failed, or ok.
fn tool_outcome(result: &ToolResultBlock) -> crate::metrics::ToolOutcome {
    use crate::metrics::ToolOutcome;
    use crate::tools::codes;
    match result.code.as_deref() {
        _ if !result.is_error => ToolOutcome::ok,
        Some(codes::PERMISSION_DENIED | codes::APPROVAL_EXPIRED) => ToolOutcome::denied,
        _ => ToolOutcome::error,
    }
}

impl StoreHost {
    /// Gives a `tool_result` event the snapshot taken after its call, if any.
    fn stamp(&self, event: RunEvent) -> RunEvent {
        match (event, &self.snapshots) {
            (RunEvent::ToolResult(mut result), Some((snapshots, _))) => {
                result.workspace_snapshot = snapshots.taken_for(&result.tool_use_id);
                RunEvent::ToolResult(result)
            }
            (event, _) => event,
        }
    }

    /// Whether `call` may change the workspace (the inner tool of a deferred-tool wrapper).
    fn mutates(&self, call: &PendingCall) -> bool {
        let (name, input) = if call.name == crate::tools::deferred::EXECUTE_EXTRA_TOOL {
            (
                call.input["name"].as_str().unwrap_or_default(),
                &call.input["input"],
            )
        } else {
            (call.name.as_str(), &call.input)
        };
        self.pipeline
            .registry()
            .lookup(name)
            .is_some_and(|entry| !entry.tool.is_read_only(input))
    }
}

/// The result of a call whose workspace changes could not be snapshotted: the call ran, but
/// what it changed is not saved (a takeover would not find it), so the model is told.
fn unsaved(
    result: ToolResultBlock,
    error: &crate::workspace_snapshot::SnapshotError,
) -> ToolResultBlock {
    let code = if error.is_quota() {
        crate::tools::codes::WORKSPACE_QUOTA_EXCEEDED
    } else {
        crate::workspace_snapshot::codes::WORKSPACE_SNAPSHOT_FAILED
    };
    let mut shown: String = result.content.chars().take(2_000).collect();
    if shown.len() < result.content.len() {
        shown.push_str(" …");
    }
    let mut failed = ToolResultBlock::error(
        &result.tool_use_id,
        code,
        format!(
            "The call ran, but the workspace could not be saved afterwards ({error}); its \
             changes may be lost if the session moves to another replica. The call's own \
             result was: {shown}"
        ),
    );
    failed.output_id = result.output_id;
    failed
}

#[async_trait]
impl LoopHost for StoreHost {
    fn emit(&self, event: RunEvent) {
        self.writer.push_event(self.stamp(event));
    }

    async fn commit(
        &self,
        messages: Vec<HistoryAppend>,
        events: Vec<RunEvent>,
    ) -> Result<(), HostError> {
        let run = Some(self.run_id.to_string());
        let messages = messages
            .into_iter()
            .map(|append| NewMessage {
                message: append.message,
                run_id: run.clone(),
                compaction_boundary: append.compaction_boundary,
            })
            .collect();
        let events = events.into_iter().map(|event| self.stamp(event)).collect();
        self.writer.write(messages, events).await
    }

    fn tool_specs(&self) -> Arc<[ToolSpec]> {
        self.pipeline.registry().provider_tools()
    }

    fn is_concurrency_safe(&self, name: &str, input: &Value) -> bool {
        self.pipeline
            .registry()
            .lookup(name)
            .is_some_and(|tool| tool.tool.is_concurrency_safe(input))
    }

    fn parked(&self) -> bool {
        self.park.is_parked() || self.handoff.is_cancelled()
    }

    fn handoff(&self) -> Option<CancellationToken> {
        Some(self.handoff.clone())
    }

    async fn execute_tool(&self, call: PendingCall, cancel: CancellationToken) -> ToolResultBlock {
        use tracing::Instrument;
        let span = crate::telemetry::genai::execute_tool(&self.ids, &call.name, &call.tool_use_id);
        if self.capture_content && !span.is_disabled() {
            span.record(
                "gen_ai.tool.call.arguments",
                crate::telemetry::genai::content(&call.input).as_str(),
            );
        }
        let began = std::time::Instant::now();
        let name = call.name.clone();
        let (result, stage) = self.run_tool(call, cancel).instrument(span.clone()).await;
        if result.code.as_deref() == Some(crate::tools::codes::PARKED) {
            // Not a call yet: it runs (and counts) when the run resumes.
            return result;
        }
        if result.is_error {
            crate::telemetry::genai::record_error(
                &span,
                result
                    .code
                    .as_deref()
                    .unwrap_or(crate::tools::codes::TOOL_FAILED),
            );
        }
        if self.capture_content && !span.is_disabled() {
            span.record(
                "gen_ai.tool.call.result",
                crate::telemetry::genai::content(&result.content).as_str(),
            );
        }
        self.metrics
            .tool_call(&name, tool_outcome(&result), stage, began.elapsed());
        result
    }

    async fn stop_hooks(&self, _last: &Message) -> crate::harness::turn::StopHookOutcome {
        self.stop_hooks_inner().await
    }

    fn pending_task_notifications(&self) -> u32 {
        self.pending_task_notifications_inner()
    }

    fn take_task_notifications(&self) -> Vec<String> {
        self.take_task_notifications_inner()
    }

    fn delegated_tokens(&self) -> u64 {
        self.delegated.tokens()
    }

    async fn subagent_usage(&self) -> Option<crate::run_event::SubagentTokens> {
        if !self.delegated.is_offered() {
            return None;
        }
        // From the store: subagents finished before a resume count, and one cancelled with
        // this run (no `subagent_finished`) counts from its own ledger.
        let part = super::subagent_usage::subagents_of_run(
            self.store.as_ref(),
            &self.tenant,
            &self.session,
            &self.run_id,
        )
        .await
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot read the subagents' usage; counting the finished ones");
            self.delegated.part()
        });
        part.map(Into::into)
    }

    async fn tenant_budget_spent(&self, pending: &[RunEvent]) -> Option<BudgetKind> {
        self.tenant_budget_spent_inner(pending).await
    }

    async fn refresh_tools(&self) {
        if let Some(refresh) = &self.mcp_refresh {
            refresh.apply(&self.pipeline).await;
        }
    }
}

impl StoreHost {
    /// One call through the pipeline; returns its result and the permission stage that
    /// decided it (if it got that far).
    async fn run_tool(
        &self,
        call: PendingCall,
        cancel: CancellationToken,
    ) -> (ToolResultBlock, Option<crate::permission::Stage>) {
        if self.parked() {
            // The run parked: later calls run when it resumes, in their order.
            let parked = ToolResultBlock::error(
                &call.tool_use_id,
                crate::tools::codes::PARKED,
                "the run parked before this call",
            );
            return (parked, None);
        }
        // Progress (e.g. TodoWrite's list) becomes `tool_progress` events as it happens.
        let (progress, mut reports) = tokio::sync::mpsc::unbounded_channel::<ToolProgress>();
        let writer = self.writer.clone();
        let forward = tokio::spawn(async move {
            while let Some(report) = reports.recv().await {
                writer.push_event(RunEvent::ToolProgress(run_event::ToolProgress {
                    tool_use_id: report.tool_use_id,
                    data: report.data,
                }));
            }
        });
        let ctx = ToolContext {
            tenant: self.tenant.clone(),
            session_id: self.session.clone(),
            tool_use_id: call.tool_use_id.clone(),
            workspace: self.workspace.clone(),
            cancel,
            progress: Some(progress),
        };
        let inner = (call.name == crate::tools::deferred::EXECUTE_EXTRA_TOOL).then(|| {
            (
                call.input["name"].as_str().unwrap_or_default().to_owned(),
                call.input["input"].clone(),
            )
        });
        let snapshots = self
            .snapshots
            .as_ref()
            .filter(|_| self.mutates(&call))
            .map(|(snapshots, max_bytes)| (snapshots.clone(), *max_bytes));
        let before = match &snapshots {
            Some((snapshots, _)) => Some(snapshots.begin_mutation().await),
            None => None,
        };
        let mut outcome = self
            .pipeline
            .call(
                &call.name,
                call.input.clone(),
                &ctx,
                &self.unlocked.snapshot(),
            )
            .await;
        if let (Some((name, input)), false) = (inner, outcome.result.is_error) {
            // The wrapper passed its own checks; the inner tool runs under its own name
            // (schema, permission, hooks), and only if it is visible or unlocked (D6).
            self.writer.push_event(RunEvent::PermissionDecision(
                run_event::PermissionDecision {
                    tool_use_id: call.tool_use_id.clone(),
                    tool: call.name.clone(),
                    decision: outcome.decision.clone(),
                },
            ));
            outcome = self
                .pipeline
                .call(&name, input, &ctx, &self.unlocked.snapshot())
                .await;
        }
        drop(ctx);
        let _ = forward.await;
        if outcome.result.code.as_deref() == Some(crate::tools::codes::PARKED) {
            // The call did not run: the local copy is what it was.
            if let (Some((snapshots, _)), Some(before)) = (&snapshots, before) {
                snapshots.undo_mutation(before).await;
            }
            return (outcome.result, outcome.decision.stage);
        }
        if let Some((snapshots, max_bytes)) = &snapshots
            && let Err(error) = snapshots.take(&call.tool_use_id, *max_bytes).await
        {
            tracing::warn!(%error, tool_use_id = %call.tool_use_id, "workspace snapshot failed");
            outcome.result = unsaved(outcome.result, &error);
        }
        if call.name == crate::tools::deferred::SEARCH_EXTRA_TOOLS && !outcome.result.is_error {
            // Unlocks outlive the run: they are stored before the result is.
            let names: Vec<String> = self.unlocked.snapshot().into_iter().collect();
            if let Err(error) = self
                .store
                .unlock_tools(&self.tenant, &self.session, &names)
                .await
            {
                tracing::warn!(%error, "cannot store unlocked tools");
            }
        }
        if let Some(grant) = &outcome.decision.grant_id {
            super::approvals::consume_if_once(&self.store, &self.tenant, &self.grants, grant).await;
        }
        if !outcome.result.is_error
            && matches!(call.name.as_str(), "EnterPlanMode" | "ExitPlanMode")
        {
            // The mode changed durably; later calls of this run see it at once.
            match crate::tools::builtin::plan::effective_mode(
                self.store.as_ref(),
                &self.tenant,
                &self.session,
                self.configured_mode,
            )
            .await
            {
                Ok(mode) => *self.mode.write().unwrap_or_else(|e| e.into_inner()) = mode,
                Err(error) => tracing::warn!(%error, "cannot refresh the permission mode"),
            }
        }
        let decided_tool = if call.name == crate::tools::deferred::EXECUTE_EXTRA_TOOL {
            call.input["name"].as_str().unwrap_or_default().to_owned()
        } else {
            call.name.clone()
        };
        if let Some(spill) = outcome.spill {
            self.writer.push_output(NewOutput {
                id: OutputId::from_string(spill.id.to_string()),
                tool_use_id: spill.tool_use_id,
                tool_name: spill.tool_name,
                sha256: spill.sha256_hex,
                content: spill.content,
            });
        }
        let stage = outcome.decision.stage;
        self.writer.push_event(RunEvent::PermissionDecision(
            run_event::PermissionDecision {
                tool_use_id: call.tool_use_id.clone(),
                tool: decided_tool,
                decision: outcome.decision,
            },
        ));
        (outcome.result, stage)
    }

    async fn stop_hooks_inner(&self) -> crate::harness::turn::StopHookOutcome {
        use crate::harness::turn::StopHookOutcome;
        use crate::hooks::runner::StopOutcome;
        let hooks = self.pipeline.hooks();
        if !hooks.has_hooks(crate::hooks::HookEventName::Stop, None) {
            return StopHookOutcome::None;
        }
        let outcome = hooks
            .run(crate::hooks::HookEvent {
                session_id: self.session.clone(),
                tenant: self.tenant.clone(),
                payload: crate::hooks::HookPayload::Stop {
                    stop_hook_active: false,
                },
            })
            .await;
        match outcome.stop_outcome() {
            StopOutcome::Stop => StopHookOutcome::None,
            StopOutcome::Continue { reason, .. } => StopHookOutcome::Block { reason },
            StopOutcome::Prevent { reason, .. } => StopHookOutcome::Prevent { reason },
        }
    }

    fn pending_task_notifications_inner(&self) -> u32 {
        self.notifications.lock().map_or(0, |n| n.len() as u32)
    }

    fn take_task_notifications_inner(&self) -> Vec<String> {
        self.notifications
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default()
    }

    async fn tenant_budget_spent_inner(&self, pending: &[RunEvent]) -> Option<BudgetKind> {
        let spend = self.writer.pending_spend(pending);
        match self.budgets.check(&self.tenant, spend).await {
            Ok(()) => None,
            Err(super::budget_gate::BudgetRefusal::Exceeded(exceeded)) => {
                tracing::info!(%exceeded, "tenant budget spent; the run ends after this turn");
                Some(exceeded.resource.kind())
            }
            Err(super::budget_gate::BudgetRefusal::NotPriced { .. }) => None,
            Err(super::budget_gate::BudgetRefusal::Store(error)) => {
                // The turn's own commit meets the outage next (and the run is resumed once
                // the store is back, when the check runs again).
                tracing::warn!(%error, "cannot check the tenant's budget; the run goes on");
                None
            }
        }
    }
}

/// Builds the history message list and the index of the last compaction boundary.
pub fn history_of(records: &[crate::store::MessageRecord]) -> (Vec<Message>, usize) {
    let boundary = records
        .iter()
        .rposition(|r| r.compaction_boundary)
        .unwrap_or(0);
    (records.iter().map(|r| r.to_message()).collect(), boundary)
}
