//! The store-backed [`LoopHost`] of one run: it emits and commits through the run's
//! [`SessionWriter`], and runs each tool call through the permission pipeline, its hooks and
//! the journal.

use super::session_writer::SessionWriter;
use crate::harness::engine::{HistoryAppend, HostError, LoopHost};
use crate::harness::scheduler::PendingCall;
use crate::ids::{OutputId, RunId, SessionId, TenantId};
use crate::llm::ToolSpec;
use crate::message::{Message, ToolResultBlock};
use crate::run_event::{self, BudgetKind, RunEvent};
use crate::store::{NewMessage, NewOutput, Store};
use crate::tools::pipeline::Pipeline;
use crate::tools::{ToolContext, ToolProgress};
use async_trait::async_trait;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The host of one run.
pub struct StoreHost {
    pub writer: Arc<SessionWriter>,
    pub pipeline: Pipeline,
    pub tenant: TenantId,
    pub session: SessionId,
    pub run_id: RunId,
    pub workspace: Option<PathBuf>,
    /// Where the workspace's small file work runs (from `workspace.storage`).
    pub file_io: crate::tools::FileIo,
    /// Deferred tools this session may run (N12).
    pub unlocked: crate::tools::deferred::UnlockSet,
    /// Background-task notifications of the session, read when the loop asks.
    pub notifications: Arc<super::task_inbox::TaskInbox>,
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

    fn has_stop_hooks(&self) -> bool {
        self.pipeline
            .hooks()
            .has_hooks(crate::hooks::HookEventName::Stop, None)
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
        let writer = self.writer.clone();
        let progress = crate::tools::ProgressSink::new(move |report: ToolProgress| {
            writer.push_event(RunEvent::ToolProgress(run_event::ToolProgress {
                tool_use_id: report.tool_use_id,
                data: report.data,
            }));
        });
        let ctx = ToolContext {
            tenant: self.tenant.clone(),
            session_id: self.session.clone(),
            tool_use_id: call.tool_use_id.clone(),
            workspace: self.workspace.clone(),
            file_io: self.file_io,
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
        self.notifications.pending()
    }

    fn take_task_notifications_inner(&self) -> Vec<String> {
        self.notifications.take()
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
pub fn history_of(records: &[crate::store::MessageRecord]) -> (Vec<Arc<Message>>, usize) {
    let boundary = records
        .iter()
        .rposition(|r| r.compaction_boundary)
        .unwrap_or(0);
    (
        records.iter().map(|r| Arc::new(r.to_message())).collect(),
        boundary,
    )
}
