//! Loop tests: one per continue and terminal reason (asserting the recorded event sequence and
//! history), tool_use/tool_result pairing (also on cancel), compaction and context policies,
//! and usage from the ledger.
//!
//! [`TestHost`] is an in-memory [`LoopHost`]; [`Turns`] is a provider that plays a queue of
//! hand-written responses and records every request it was sent.
//!
//! This module holds the host, the provider and the helpers that run the engine; the tests
//! are grouped by what they check: [`continue_reasons`], [`terminal_reasons`], [`context`]
//! and [`usage`].

use super::*;
use crate::harness::turn::{BudgetKind, CONTEXT_OVERFLOW, STOP_HOOK_BLOCK_LIMIT};
use crate::ids::{RunId, SessionId, TenantId};
use crate::llm::scripted::ScriptedProvider;
use crate::llm::{ItemStream, Usage as TokenUsage};
use crate::run_event::RunEvent;
use crate::tools::codes;
use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The in-memory host
// ---------------------------------------------------------------------------------------------

/// One event as the host saw it, in its wire form: emitted (transient) or committed (durable).
#[derive(Clone, Debug)]
struct Seen {
    kind: &'static str,
    payload: Value,
    committed: bool,
}

impl Seen {
    fn of(event: &RunEvent, committed: bool) -> Self {
        let (kind, payload) = event.to_parts();
        Self {
            // A handful of distinct names per test: leaking them keeps the assertions terse.
            kind: Box::leak(kind.into_boxed_str()),
            payload,
            committed,
        }
    }
}

/// How a test tool behaves.
#[derive(Clone)]
struct ToolBehavior {
    latency: Duration,
    result: Result<String, (&'static str, String)>,
    safe: bool,
    /// Cancels this token when the call starts (to cancel a run mid-tools).
    cancels: Option<CancellationToken>,
}

impl ToolBehavior {
    fn ok(text: &str) -> Self {
        Self {
            latency: Duration::ZERO,
            result: Ok(text.to_owned()),
            safe: true,
            cancels: None,
        }
    }
}

#[derive(Default)]
struct TestHost {
    events: Mutex<Vec<Seen>>,
    history: Mutex<Vec<HistoryAppend>>,
    tools: HashMap<String, ToolBehavior>,
    executed: Mutex<Vec<String>>,
    stop_answers: Mutex<VecDeque<StopHookOutcome>>,
    stop_hook_calls: Mutex<u32>,
    /// The session has no Stop hooks (`has_stop_hooks` answers false).
    without_stop_hooks: bool,
    /// Each commit's event kinds, one entry per transaction.
    commits: Mutex<Vec<Vec<&'static str>>>,
    notifications: Mutex<Vec<String>>,
    /// Tenant budget checks answered "not spent" before the budget is spent (`None`: never).
    tenant_budget_after: Option<Mutex<u32>>,
    /// The pending events each tenant budget check saw (their kinds).
    tenant_budget_checks: Mutex<Vec<Vec<&'static str>>>,
}

impl TestHost {
    fn new() -> Self {
        Self::default()
    }

    fn tool(mut self, name: &str, behavior: ToolBehavior) -> Self {
        self.tools.insert(name.to_owned(), behavior);
        self
    }

    fn stop_answers(self, answers: Vec<StopHookOutcome>) -> Self {
        *self.stop_answers.lock().unwrap() = answers.into();
        self
    }

    fn notifications(self, notes: &[&str]) -> Self {
        *self.notifications.lock().unwrap() = notes.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// Committed event kinds, in order.
    fn committed(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.committed)
            .map(|e| e.kind)
            .collect()
    }

    /// Every event kind in order, runs of `assistant_delta` collapsed into one.
    fn all(&self) -> Vec<&'static str> {
        let mut kinds: Vec<&'static str> = Vec::new();
        for event in self.events.lock().unwrap().iter() {
            if event.kind == "assistant_delta" && kinds.last() == Some(&"assistant_delta") {
                continue;
            }
            kinds.push(event.kind);
        }
        kinds
    }

    /// Payloads of the committed events of `kind`.
    fn payloads(&self, kind: &str) -> Vec<Value> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.payload.clone())
            .collect()
    }

    /// The messages committed to history, in order.
    fn messages(&self) -> Vec<Message> {
        self.history
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.message.clone())
            .collect()
    }

    fn boundaries(&self) -> Vec<usize> {
        self.history
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, a)| a.compaction_boundary)
            .map(|(i, _)| i)
            .collect()
    }
}

#[async_trait]
impl LoopHost for TestHost {
    fn emit(&self, event: RunEvent) {
        self.events.lock().unwrap().push(Seen::of(&event, false));
    }

    async fn commit(
        &self,
        messages: Vec<HistoryAppend>,
        events: Vec<RunEvent>,
    ) -> Result<(), HostError> {
        self.history.lock().unwrap().extend(messages);
        let seen: Vec<Seen> = events.iter().map(|event| Seen::of(event, true)).collect();
        self.commits
            .lock()
            .unwrap()
            .push(seen.iter().map(|event| event.kind).collect());
        self.events.lock().unwrap().extend(seen);
        Ok(())
    }

    fn tool_specs(&self) -> std::sync::Arc<[ToolSpec]> {
        let mut names: Vec<&String> = self.tools.keys().collect();
        names.sort();
        names
            .into_iter()
            .map(|name| ToolSpec {
                name: name.clone(),
                description: format!("test tool {name}"),
                input_schema: json!({"type": "object"}).into(),
            })
            .collect::<Vec<_>>()
            .into()
    }

    fn is_concurrency_safe(&self, name: &str, _input: &Value) -> bool {
        self.tools.get(name).is_some_and(|tool| tool.safe)
    }

    async fn execute_tool(&self, call: PendingCall, _cancel: CancellationToken) -> ToolResultBlock {
        self.executed.lock().unwrap().push(call.tool_use_id.clone());
        let Some(tool) = self.tools.get(&call.name).cloned() else {
            return ToolResultBlock::error(call.tool_use_id, codes::TOOL_NOT_FOUND, "no such tool");
        };
        if let Some(token) = &tool.cancels {
            token.cancel();
        }
        tokio::time::sleep(tool.latency).await;
        match tool.result {
            Ok(text) => ToolResultBlock::ok(call.tool_use_id, text),
            Err((code, text)) => ToolResultBlock::error(call.tool_use_id, code, text),
        }
    }

    fn has_stop_hooks(&self) -> bool {
        !self.without_stop_hooks
    }

    async fn stop_hooks(&self, _last: &Message) -> StopHookOutcome {
        *self.stop_hook_calls.lock().unwrap() += 1;
        self.stop_answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_default()
    }

    fn pending_task_notifications(&self) -> u32 {
        self.notifications.lock().unwrap().len() as u32
    }

    fn take_task_notifications(&self) -> Vec<String> {
        std::mem::take(&mut *self.notifications.lock().unwrap())
    }

    async fn tenant_budget_spent(&self, pending: &[RunEvent]) -> Option<BudgetKind> {
        self.tenant_budget_checks
            .lock()
            .unwrap()
            .push(pending.iter().map(|e| Seen::of(e, false).kind).collect());
        let left = self.tenant_budget_after.as_ref()?;
        let mut left = left.lock().unwrap();
        if *left == 0 {
            return Some(BudgetKind::TenantTokens);
        }
        *left -= 1;
        None
    }
}

// ---------------------------------------------------------------------------------------------
// A hand-written provider
// ---------------------------------------------------------------------------------------------

/// One scripted provider response.
enum Response {
    /// The request fails before streaming.
    Fail(ProviderError),
    /// These items are streamed (an `Err` item breaks the stream there).
    Items(Vec<Result<StreamItem, ProviderError>>),
    /// These items, then the stream hangs until the request is cancelled.
    ItemsThenHang(Vec<StreamItem>),
}

/// Plays queued responses in order and records every request.
#[derive(Default)]
struct Turns {
    responses: Mutex<VecDeque<Response>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A request as the provider saw it, its messages unshared for comparisons.
#[derive(Clone, Debug)]
struct Recorded {
    messages: Vec<Message>,
    tools: Arc<[crate::llm::ToolSpec]>,
    max_tokens: u32,
}

impl std::fmt::Debug for Turns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Turns")
    }
}

impl Turns {
    fn new(responses: Vec<Response>) -> Arc<Self> {
        Arc::new(Self {
            responses: Mutex::new(responses.into()),
            requests: Mutex::default(),
        })
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait]
impl Provider for Turns {
    fn name(&self) -> &str {
        "turns"
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        self.requests.lock().unwrap().push(Recorded {
            messages: request
                .messages
                .iter()
                .map(|m| m.rendered().into_owned())
                .collect(),
            tools: request.tools.clone(),
            max_tokens: request.max_tokens,
        });
        let response = self
            .responses
            .lock()
            .unwrap()
            .pop_front()
            .expect("the test queued a response for every request");
        match response {
            Response::Fail(error) => Err(error),
            Response::Items(items) => Ok(futures::stream::iter(items).boxed()),
            Response::ItemsThenHang(items) => {
                let cancel = cancel.clone();
                let hang = futures::stream::once(async move {
                    cancel.cancelled().await;
                    Err(ProviderError::Cancelled)
                });
                Ok(futures::stream::iter(items.into_iter().map(Ok))
                    .chain(hang)
                    .boxed())
            }
        }
    }
}

fn usage(input: u64, output: u64) -> StreamItem {
    StreamItem::Usage(TokenUsage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
    })
}

/// A text answer with the given stop reason and usage 10 in / 5 out.
fn text(answer: &str, stop: StopReason) -> Response {
    Response::Items(vec![
        Ok(StreamItem::TextDelta(answer.to_owned())),
        Ok(usage(10, 5)),
        Ok(StreamItem::Stop(stop)),
    ])
}

fn tool_items(calls: &[(&str, &str)]) -> Vec<StreamItem> {
    let mut items = Vec::new();
    for (index, (id, name)) in calls.iter().enumerate() {
        items.push(StreamItem::ToolUseStart {
            index,
            id: (*id).to_owned(),
            name: (*name).to_owned(),
        });
        items.push(StreamItem::ToolUseDone {
            index,
            id: (*id).to_owned(),
            name: (*name).to_owned(),
            input: json!({ "n": index }),
        });
    }
    items
}

/// A response calling `(id, name)` tools, usage 20 in / 7 out.
fn tools(calls: &[(&str, &str)]) -> Response {
    let mut items: Vec<_> = tool_items(calls).into_iter().map(Ok).collect();
    items.push(Ok(usage(20, 7)));
    items.push(Ok(StreamItem::Stop(StopReason::ToolUse)));
    Response::Items(items)
}

// ---------------------------------------------------------------------------------------------
// Running the engine
// ---------------------------------------------------------------------------------------------

fn config() -> EngineConfig {
    EngineConfig {
        model: "test-model".into(),
        system: Some("system".into()),
        max_tokens: 1000,
        recovery_max_tokens: 8000,
        ..EngineConfig::default()
    }
}

fn ledger() -> RunLedger {
    RunLedger::new(
        TenantId::new("tenant-a"),
        SessionId::generate(),
        RunId::generate(),
    )
}

fn prompt(text: &str) -> RunHistory {
    RunHistory::new(vec![Message::user_text(text)], 0)
}

struct Run {
    outcome: RunOutcome,
    host: Arc<TestHost>,
    ledger: RunLedger,
}

async fn run_with(
    provider: Arc<dyn Provider>,
    host: TestHost,
    config: EngineConfig,
    policy: Option<Arc<dyn ContextPolicy>>,
    history: RunHistory,
    cancel: CancellationToken,
) -> Run {
    let host = Arc::new(host);
    let engine = Engine {
        provider,
        host: host.clone(),
        config,
        policy,
    };
    let mut ledger = ledger();
    let outcome = engine
        .run(history, &mut ledger, cancel)
        .await
        .expect("the in-memory host never fails");
    assert_paired(&host.messages());
    Run {
        outcome,
        host,
        ledger,
    }
}

async fn run(provider: Arc<dyn Provider>, host: TestHost, config: EngineConfig) -> Run {
    run_with(
        provider,
        host,
        config,
        None,
        prompt("go"),
        CancellationToken::new(),
    )
    .await
}

/// Every tool_use in history is answered by exactly one tool_result in the next message, in
/// the same order, and every tool_result answers a tool_use of the message before it.
fn assert_paired(history: &[Message]) {
    for (index, message) in history.iter().enumerate() {
        let results: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult(r) => Some(r.tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        if !results.is_empty() {
            let previous = index
                .checked_sub(1)
                .map(|i| &history[i])
                .expect("a tool_result message follows a message");
            let uses: Vec<&str> = previous.tool_uses().map(|(id, _, _)| id).collect();
            assert_eq!(results, uses, "results pair the previous message's calls");
        }
        let uses: Vec<&str> = message.tool_uses().map(|(id, _, _)| id).collect();
        if !uses.is_empty() {
            let next = history
                .get(index + 1)
                .unwrap_or_else(|| panic!("tool_use {uses:?} has no result message"));
            let answered: Vec<&str> = next
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolResult(r) => Some(r.tool_use_id.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(answered, uses, "every tool_use is answered in order");
        }
    }
}

fn results_of(message: &Message) -> Vec<ToolResultBlock> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn text_in(message: &Message) -> String {
    text_of(message)
}

fn continue_reasons(host: &TestHost) -> Vec<String> {
    host.payloads("continue")
        .iter()
        .map(|p| p["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

mod context;
mod continue_reasons;
mod terminal_reasons;
mod usage;
