//! The agent loop (N16–N22): request → stream → tools → decide → … → terminal.
//!
//! The engine is independent of storage and HTTP. Its [`LoopHost`] persists what it produces
//! (messages and events, persist-then-publish), runs tool calls through the pipeline, runs Stop
//! hooks and reports background-task notifications. Every continue and terminal reason is a
//! recorded `continue` / `terminal` event. Usage comes from the run's action ledger.

use crate::harness::context::{
    self, ContextPolicy, SUMMARY_INSTRUCTION, last_safe_cut, summary_message,
};
use crate::harness::ledger::{RunLedger, Usage};
use crate::harness::scheduler::{PendingCall, Scheduler, SchedulerEvent};
use crate::harness::turn::{
    AfterResponse, ContinueReason, RequestFailure, Step, StopHookOutcome, TerminalReason,
    TurnLimits, next_step, stop_hooks_needed, token_budget_nudge,
};
use crate::llm::{
    self, AssistantTurn, ModelRequest, Provider, ProviderError, StopReason, StreamItem, ToolSpec,
};
use crate::message::{ContentBlock, Message, Role, ToolResultBlock, ViewMessage};
use crate::run_event::{self, RunEvent};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;

/// A failure of the host (the store), which ends the run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

/// A message to append to history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryAppend {
    pub message: Message,
    /// Starts a new request view (built-in compaction writes one).
    pub compaction_boundary: bool,
}

/// What the loop needs from its surroundings.
#[async_trait]
pub trait LoopHost: Send + Sync + 'static {
    /// A transient event (text deltas, tool progress). Ordered after everything emitted or
    /// committed before it; durable at the latest with the next `commit`.
    fn emit(&self, event: RunEvent);
    /// Durably appends history and events in one transaction, then publishes the events.
    async fn commit(
        &self,
        messages: Vec<HistoryAppend>,
        events: Vec<RunEvent>,
    ) -> Result<(), HostError>;
    /// The tools offered to the model (shared, not copied, by every request of the run).
    fn tool_specs(&self) -> std::sync::Arc<[ToolSpec]>;
    /// Scheduling metadata of one call (unknown tools are exclusive).
    fn is_concurrency_safe(&self, name: &str, input: &Value) -> bool;
    /// Runs one call through the tool pipeline; always returns the paired result.
    async fn execute_tool(&self, call: PendingCall, cancel: CancellationToken) -> ToolResultBlock;
    /// Runs the Stop hooks on the final assistant message.
    async fn stop_hooks(&self, _last: &Message) -> StopHookOutcome {
        StopHookOutcome::None
    }
    /// Whether the session has Stop hooks: only then is a final turn committed on its own
    /// (a hook sees it durable) before the run's end; without them it is committed with the
    /// run's `usage` and `terminal` in one transaction.
    fn has_stop_hooks(&self) -> bool {
        false
    }
    /// Whether the run parked (a call waits on an approval): the engine then stops without
    /// committing the turn in flight.
    fn parked(&self) -> bool {
        false
    }
    /// Cancelled when the run must hand off (its server stops): a model call in flight is
    /// abandoned (calls already executing go on), and the run then stops as a parked one.
    fn handoff(&self) -> Option<CancellationToken> {
        None
    }
    /// Background-task notifications waiting to be delivered.
    fn pending_task_notifications(&self) -> u32 {
        0
    }
    /// Takes the waiting notifications (their texts).
    fn take_task_notifications(&self) -> Vec<String> {
        Vec::new()
    }
    /// Tokens the run's subagents used (`Agent` calls): they count into the run's token
    /// budget.
    fn delegated_tokens(&self) -> u64 {
        0
    }
    /// The part of the run's usage that came from its subagents (read when the run ends:
    /// its `usage` event counts them into its totals); `None` when it started none.
    async fn subagent_usage(&self) -> Option<run_event::SubagentTokens> {
        None
    }

    /// Called before every model request: a host whose tools can change while a run goes
    /// on (an MCP server said its list changed) brings them up to date here, so the request
    /// offers, and the calls it asks for find, the current tools.
    async fn refresh_tools(&self) {}
    /// Asked between turns (and before a run's first request): `Some` when one of the
    /// tenant's spend budgets is spent, counting the model calls among `pending` (the turn
    /// that just ended, not committed yet). The run then ends with `budget_exhausted`.
    async fn tenant_budget_spent(&self, _pending: &[RunEvent]) -> Option<run_event::BudgetKind> {
        None
    }
}

/// Settings of one run.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub model: String,
    pub system: Option<String>,
    pub max_tokens: u32,
    /// The output limit used by a max-output recovery request.
    pub recovery_max_tokens: u32,
    pub limits: TurnLimits,
    pub max_concurrency: usize,
    /// Built-in compaction threshold (estimated tokens of the request view); `None` disables it.
    pub compaction_threshold: Option<u64>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            model: String::new(),
            system: None,
            max_tokens: 4096,
            recovery_max_tokens: 16_384,
            limits: TurnLimits::default(),
            max_concurrency: crate::harness::scheduler::DEFAULT_MAX_CONCURRENCY,
            compaction_threshold: Some(150_000),
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutcome {
    pub terminal: TerminalReason,
    pub usage: Usage,
    pub main_turns: u32,
}

/// One run of the loop over a session's history.
pub struct Engine {
    pub provider: Arc<dyn Provider>,
    pub host: Arc<dyn LoopHost>,
    pub config: EngineConfig,
    /// A custom context policy; disables built-in compaction.
    pub policy: Option<Arc<dyn ContextPolicy>>,
}

/// The loop's view of history: messages (shared with the request views built from them) and
/// the index of the last compaction boundary.
pub struct RunHistory {
    pub messages: Vec<Arc<Message>>,
    pub boundary: usize,
}

impl RunHistory {
    /// `messages` (each shared from now on) with the boundary at `boundary`.
    pub fn new(messages: Vec<Message>, boundary: usize) -> Self {
        Self {
            messages: messages.into_iter().map(Arc::new).collect(),
            boundary,
        }
    }
}

impl Engine {
    /// Runs until a terminal reason. `history` holds the session's messages (the new prompt
    /// already appended and committed by the caller).
    pub async fn run(
        &self,
        history: RunHistory,
        ledger: &mut RunLedger,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, HostError> {
        self.run_from(history, ledger, cancel, 1).await
    }

    /// Continues a run whose first `main_turn - 1` main turns are already in `history` (a run
    /// resumed after a restart): the next response is main turn `main_turn`, so the turn
    /// limit still counts the turns made before the restart.
    pub async fn run_from(
        &self,
        mut history: RunHistory,
        ledger: &mut RunLedger,
        cancel: CancellationToken,
        main_turn: u32,
    ) -> Result<RunOutcome, HostError> {
        let mut state = AfterResponse {
            main_turns: main_turn.max(1),
            ..AfterResponse::default()
        };
        let mut reason: Option<ContinueReason> = None;
        let mut reactive_view: Option<Vec<ViewMessage>> = None;
        let mut request_index: u32 = 0;
        loop {
            request_index += 1;
            state.cancelled = cancel.is_cancelled();
            if state.cancelled {
                return self.finish(TerminalReason::Cancelled, ledger, &state).await;
            }
            if self.host.parked() {
                // Handed off between turns: the next replica issues the next request.
                return Ok(RunOutcome {
                    terminal: TerminalReason::Parked,
                    usage: ledger.usage(),
                    main_turns: state.main_turns,
                });
            }
            if request_index == 1
                && let Some(budget) = self.host.tenant_budget_spent(&[]).await
            {
                // A queued or resumed run whose tenant spent its budget meanwhile.
                return self
                    .finish(TerminalReason::BudgetExhausted { budget }, ledger, &state)
                    .await;
            }
            if self.policy.is_none() && reactive_view.is_none() {
                self.maybe_compact(&mut history, ledger, false, &cancel)
                    .await?;
            }
            let messages = match reactive_view.take() {
                Some(view) => view,
                None => self.request_view(&mut history),
            };
            if let Some(policy) = &self.policy {
                for event in policy.after_view().await.map_err(HostError)? {
                    self.host.emit(event);
                }
            }
            self.host.refresh_tools().await;
            let max_tokens = if matches!(reason, Some(ContinueReason::MaxOutputRecovery)) {
                self.config.recovery_max_tokens
            } else {
                self.config.max_tokens
            };
            let request = ModelRequest {
                model: self.config.model.clone(),
                system: self.config.system.clone(),
                messages,
                tools: self.host.tool_specs(),
                max_tokens,
                temperature: None,
            };
            self.host
                .emit(RunEvent::ModelRequest(run_event::ModelRequest {
                    request: request_index,
                    main_turn: state.main_turns,
                    reason: reason.as_ref().map(|r| r.code().to_owned()),
                    messages: request.messages.len(),
                }));
            let (turn, results) = self.call_model(&request, &cancel).await;
            if self.host.parked() {
                // Everything needed to continue is in the store (the calls, their results so
                // far, the pending approvals); the turn is committed when the run resumes.
                return Ok(RunOutcome {
                    terminal: TerminalReason::Parked,
                    usage: ledger.usage(),
                    main_turns: state.main_turns,
                });
            }
            // Per-response facts start fresh; run-wide counters carry over.
            state.had_tool_use = false;
            state.stop_reason_was_max_tokens = false;
            state.context_overflow = false;
            state.failure = None;
            state.stop_hook = StopHookOutcome::None;
            state.cancelled = cancel.is_cancelled();
            let mut last_assistant = None;
            let mut turn_write: Option<(Vec<HistoryAppend>, Vec<RunEvent>)> = None;
            match turn {
                Ok(turn) => {
                    if let Some(policy) = &self.policy {
                        policy.observe_usage(
                            turn.usage.input_tokens
                                + turn.usage.cache_read_tokens
                                + turn.usage.cache_write_tokens,
                        );
                    }
                    ledger.record_model_call(
                        turn.usage.input_tokens
                            + turn.usage.cache_read_tokens
                            + turn.usage.cache_write_tokens,
                        turn.usage.output_tokens,
                    );
                    state.had_tool_use = turn.message.tool_uses().next().is_some();
                    state.stop_reason_was_max_tokens = turn.stop_reason == StopReason::MaxTokens;
                    let mut appends = vec![HistoryAppend {
                        message: turn.message.clone(),
                        compaction_boundary: false,
                    }];
                    let mut events =
                        vec![RunEvent::AssistantMessage(run_event::AssistantMessage {
                            message: turn.message.clone(),
                            stop_reason: turn.stop_reason.clone(),
                            usage: turn.usage,
                        })];
                    history.messages.push(Arc::new(turn.message.clone()));
                    if state.had_tool_use {
                        let paired = pair_results(&turn.message, results, state.cancelled);
                        for result in &paired {
                            ledger.record_tool_call(
                                tool_name(&turn.message, &result.tool_use_id),
                                !result.is_error,
                            );
                        }
                        let results_message = Message {
                            role: Role::User,
                            content: paired.into_iter().map(ContentBlock::ToolResult).collect(),
                        };
                        history.messages.push(Arc::new(results_message.clone()));
                        appends.push(HistoryAppend {
                            message: results_message,
                            compaction_boundary: false,
                        });
                        events.push(RunEvent::ToolResults(run_event::ToolResults {
                            count: appends[1].message.content.len(),
                        }));
                    }
                    // Committed with the decision that follows (at most one transaction
                    // per turn on the happy path).
                    turn_write = Some((appends, events));
                    last_assistant = Some(turn.message);
                }
                Err(ProviderError::ContextOverflow(message)) => {
                    state.context_overflow = true;
                    self.host
                        .emit(RunEvent::ProviderError(run_event::CodedMessage {
                            code: "CONTEXT_OVERFLOW".into(),
                            message,
                        }));
                }
                Err(ProviderError::Cancelled) => state.cancelled = true,
                Err(error) => {
                    state.failure = Some(RequestFailure {
                        code: error.code().to_owned(),
                        message: error.to_string(),
                    });
                }
            }
            state.tokens_used =
                (ledger.usage().total_tokens()).saturating_add(self.host.delegated_tokens());
            state.pending_task_notifications = self.host.pending_task_notifications();
            if stop_hooks_needed(&state, &self.config.limits)
                && self.host.has_stop_hooks()
                && let Some(last) = &last_assistant
            {
                // A hook sees the turn durable.
                if let Some((appends, events)) = turn_write.take() {
                    self.host.commit(appends, events).await?;
                }
                state.stop_hook = self.host.stop_hooks(last).await;
            }
            match next_step(&state, &self.config.limits) {
                Step::Terminal(terminal) => {
                    return self
                        .finish_with(turn_write.unwrap_or_default(), terminal, ledger, &state)
                        .await;
                }
                Step::Continue(next) => {
                    // The turn is finished (its tool calls answered): the tenant's budget
                    // decides whether another one starts.
                    let pending = turn_write
                        .as_ref()
                        .map_or(&[][..], |(_, events)| events.as_slice());
                    if let Some(budget) = self.host.tenant_budget_spent(pending).await {
                        return self
                            .finish_with(
                                turn_write.unwrap_or_default(),
                                TerminalReason::BudgetExhausted { budget },
                                ledger,
                                &state,
                            )
                            .await;
                    }
                    if !matches!(next, ContinueReason::ToolTurn) {
                        // The other continuations may write (compaction) or read history.
                        if let Some((appends, events)) = turn_write.take() {
                            self.host.commit(appends, events).await?;
                        }
                    }
                    let injected = self
                        .continuation(
                            &next,
                            &mut state,
                            &mut history,
                            &mut reactive_view,
                            ledger,
                            &cancel,
                        )
                        .await?;
                    let (mut appends, mut events) = turn_write.unwrap_or_default();
                    if let Some(text) = injected {
                        let message = Message::user_text(text);
                        history.messages.push(Arc::new(message.clone()));
                        appends.push(HistoryAppend {
                            message,
                            compaction_boundary: false,
                        });
                    }
                    events.push(RunEvent::Continue(next.clone()));
                    self.host.commit(appends, events).await?;
                    reason = Some(next);
                }
            }
        }
    }

    /// Applies a continue reason's bookkeeping; returns the text to inject, if any.
    async fn continuation(
        &self,
        next: &ContinueReason,
        state: &mut AfterResponse,
        history: &mut RunHistory,
        reactive_view: &mut Option<Vec<ViewMessage>>,
        ledger: &mut RunLedger,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, HostError> {
        Ok(match next {
            ContinueReason::ToolTurn => {
                state.main_turns += 1;
                None
            }
            ContinueReason::ReactiveCompactRetry => {
                state.reactive_retry_used = true;
                *reactive_view = Some(match &self.policy {
                    Some(policy) => policy
                        .reactive(&history.messages)
                        .unwrap_or_else(|| self.request_view(history)),
                    None => {
                        self.maybe_compact(history, ledger, true, cancel).await?;
                        self.request_view(history)
                    }
                });
                None
            }
            ContinueReason::MaxOutputRecovery => {
                state.recoveries_used += 1;
                Some("Your previous response was cut off at the output limit. Continue exactly where it stopped, without repeating anything.".into())
            }
            ContinueReason::StopHookBlocking { reason } => {
                state.stop_hook_blocks_used += 1;
                Some(format!("A stop hook asked you to continue: {reason}"))
            }
            ContinueReason::TokenBudgetContinuation => {
                state.budget_nudged = true;
                Some(token_budget_nudge(
                    state.tokens_used,
                    self.config.limits.token_budget.unwrap_or_default(),
                ))
            }
            ContinueReason::TaskNotification => {
                let notes = self.host.take_task_notifications();
                Some(format!("Background tasks reported:\n{}", notes.join("\n")))
            }
        })
    }

    async fn finish(
        &self,
        terminal: TerminalReason,
        ledger: &RunLedger,
        state: &AfterResponse,
    ) -> Result<RunOutcome, HostError> {
        self.finish_with(Default::default(), terminal, ledger, state)
            .await
    }

    /// Ends the run, committing the last turn's `appends` and `events` (if any) with its
    /// `usage` and `terminal` in one transaction.
    async fn finish_with(
        &self,
        (appends, mut events): (Vec<HistoryAppend>, Vec<RunEvent>),
        terminal: TerminalReason,
        ledger: &RunLedger,
        state: &AfterResponse,
    ) -> Result<RunOutcome, HostError> {
        let usage = match self.host.subagent_usage().await {
            Some(part) => ledger.usage().with_subagents(part),
            None => ledger.usage(),
        };
        events.extend([RunEvent::Usage(usage), RunEvent::Terminal(terminal.clone())]);
        self.host.commit(appends, events).await?;
        Ok(RunOutcome {
            terminal,
            usage,
            main_turns: state.main_turns,
        })
    }

    fn request_view(&self, history: &mut RunHistory) -> Vec<ViewMessage> {
        if let Some(policy) = &self.policy {
            policy.pre(&mut history.messages);
            if let Some(view) = policy.view(&history.messages) {
                return view;
            }
        }
        context::default_view(&history.messages, history.boundary)
    }

    /// Built-in compaction: when the view passes the threshold (or `force`), summarise the
    /// messages before the current run through the provider and start a new view with the
    /// summary followed by the current run's messages.
    async fn maybe_compact(
        &self,
        history: &mut RunHistory,
        ledger: &mut RunLedger,
        force: bool,
        cancel: &CancellationToken,
    ) -> Result<(), HostError> {
        let Some(threshold) = self.config.compaction_threshold else {
            return Ok(());
        };
        let tokens_before = context::default_view_tokens(&history.messages, history.boundary);
        if !force && tokens_before <= threshold {
            return Ok(());
        }
        let cut = last_safe_cut(&history.messages).max(history.boundary);
        // A non-zero boundary points at the previous summary: summarising it alone gains
        // nothing and would repeat (and re-append the run) on every request.
        let floor = if history.boundary > 0 {
            history.boundary + 1
        } else {
            0
        };
        if cut <= floor {
            return Ok(()); // nothing before the current run to summarise
        }
        let mut older = context::default_view(&history.messages[..cut], history.boundary);
        older.push(Message::user_text(SUMMARY_INSTRUCTION).into());
        let request = ModelRequest {
            model: self.config.model.clone(),
            system: None,
            messages: older,
            tools: Default::default(),
            max_tokens: self.config.max_tokens,
            temperature: None,
        };
        let summary = match self.provider.stream(&request, cancel).await {
            Ok(stream) => llm::collect(stream, |_| {}).await,
            Err(error) => Err(error),
        };
        let (summary, summary_usage) = match summary {
            Ok(turn) => {
                ledger.record_model_call(
                    turn.usage.input_tokens
                        + turn.usage.cache_read_tokens
                        + turn.usage.cache_write_tokens,
                    turn.usage.output_tokens,
                );
                (text_of(&turn.message), turn.usage)
            }
            Err(error) => {
                // Compaction is an optimisation: on failure the request goes out uncompacted.
                self.host
                    .emit(RunEvent::CompactionFailed(run_event::CodedMessage {
                        code: error.code().to_owned(),
                        message: error.to_string(),
                    }));
                return Ok(());
            }
        };
        let kept: Vec<Arc<Message>> = history.messages[cut..].to_vec();
        let mut appends = vec![HistoryAppend {
            message: summary_message(&summary),
            compaction_boundary: true,
        }];
        appends.extend(kept.iter().map(|message| HistoryAppend {
            message: Message::clone(message),
            compaction_boundary: false,
        }));
        let new_boundary = history.messages.len();
        history.messages.push(Arc::new(appends[0].message.clone()));
        // The kept messages are the ones history already shares: appended again, not copied.
        history.messages.extend(kept);
        history.boundary = new_boundary;
        let tokens_after = context::default_view_tokens(&history.messages, history.boundary);
        self.host
            .commit(
                appends,
                vec![RunEvent::Compaction(run_event::Compaction {
                    summarized_messages: cut,
                    tokens_before,
                    tokens_after,
                    forced: force,
                    usage: Some(summary_usage),
                })],
            )
            .await
    }

    /// Streams one response while the scheduler starts its tool calls as they complete.
    async fn call_model(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> (Result<AssistantTurn, ProviderError>, Vec<ToolResultBlock>) {
        let handoff = self.host.handoff().unwrap_or_default();
        let stream = tokio::select! {
            opened = self.provider.stream(request, cancel) => opened,
            () = cancel.cancelled() => Err(ProviderError::Cancelled),
            () = handoff.cancelled() => Err(ProviderError::Cancelled),
        };
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => return (Err(error), Vec::new()),
        };
        let (calls_tx, calls_rx) = tokio::sync::mpsc::unbounded_channel::<PendingCall>();
        let tools_cancel = cancel.child_token();
        let host = self.host.clone();
        let collecting = async {
            let calls_tx = calls_tx;
            let result = tokio::select! {
                turn = llm::collect(stream, |item| match item {
                    StreamItem::TextDelta(text) => host.emit(RunEvent::AssistantDelta(run_event::AssistantDelta { text: text.clone() })),
                    StreamItem::ToolUseDone { id, name, input, .. } => {
                        host.emit(RunEvent::ToolCall(run_event::ToolCall {
                            tool_use_id: id.clone(),
                            name: name.clone(),
                            input: input.clone(),
                        }));
                        let _ = calls_tx.send(PendingCall {
                            tool_use_id: id.clone(),
                            name: name.clone(),
                            input: input.clone(),
                            concurrency_safe: host.is_concurrency_safe(name, input),
                        });
                    }
                    _ => {}
                }) => turn,
                () = cancel.cancelled() => Err(ProviderError::Cancelled),
                // Abandoned (model calls are at least once: the next replica re-issues it);
                // calls already executing go on, the run hands off once they end.
                () = handoff.cancelled() => return Err(ProviderError::Cancelled),
            };
            if result.is_err() {
                // No assistant message will pair these calls: stop them.
                tools_cancel.cancel();
            }
            result
        };
        let exec_host = self.host.clone();
        let exec_cancel = tools_cancel.clone();
        let event_host = self.host.clone();
        let scheduler = Scheduler::new(self.config.max_concurrency);
        let running = scheduler.run(
            UnboundedReceiverStream::new(calls_rx),
            move |call| {
                let host = exec_host.clone();
                let cancel = exec_cancel.clone();
                async move { host.execute_tool(call, cancel).await }
            },
            move |event| match event {
                SchedulerEvent::Started { tool_use_id } => {
                    event_host.emit(RunEvent::ToolStarted(run_event::ToolStarted {
                        tool_use_id: tool_use_id.clone(),
                    }));
                }
                SchedulerEvent::Finished {
                    tool_use_id,
                    result,
                } if result.code.as_deref() != Some(crate::tools::codes::PARKED) => {
                    event_host.emit(RunEvent::ToolResult(run_event::ToolResult {
                        tool_use_id: tool_use_id.clone(),
                        result: result.clone(),
                        workspace_snapshot: None,
                    }));
                }
                // A parked call has no result yet: it runs again when the run resumes.
                SchedulerEvent::Finished { .. } => {}
            },
            tools_cancel.clone(),
        );
        tokio::join!(collecting, running)
    }
}

/// Results in the order of the assistant's tool_use blocks; a call the scheduler never saw
/// gets a synthetic CANCELLED result so every tool_use stays paired (N4, N14).
fn pair_results(
    message: &Message,
    mut results: Vec<ToolResultBlock>,
    cancelled: bool,
) -> Vec<ToolResultBlock> {
    message
        .tool_uses()
        .map(
            |(id, _, _)| match results.iter().position(|r| r.tool_use_id == id) {
                Some(index) => results.swap_remove(index),
                None => ToolResultBlock::error(
                    id,
                    crate::tools::codes::CANCELLED,
                    if cancelled {
                        "The run was cancelled before this call ran."
                    } else {
                        "This call was not executed."
                    },
                ),
            },
        )
        .collect()
}

fn tool_name(message: &Message, tool_use_id: &str) -> String {
    message
        .tool_uses()
        .find(|(id, _, _)| *id == tool_use_id)
        .map(|(_, name, _)| name.to_owned())
        .unwrap_or_default()
}

fn text_of(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

#[cfg(test)]
#[path = "engine_tests/mod.rs"]
mod tests;
