//! Loop tests: one per continue and terminal reason (asserting the recorded event sequence and
//! history), tool_use/tool_result pairing (also on cancel), compaction and context policies,
//! and usage from the ledger.
//!
//! [`TestHost`] is an in-memory [`LoopHost`]; [`Turns`] is a provider that plays a queue of
//! hand-written responses and records every request it was sent.

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

// ---------------------------------------------------------------------------------------------
// Continue reasons
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn tool_turn_sends_results_back_and_counts_a_main_turn() {
    let script = json!({ "turns": [
        { "text": "Reading.", "tool_calls": [ { "name": "Read", "input": { "path": "a" } } ] },
        { "text": "It says {{last_tool_result}}" }
    ]});
    let provider = Arc::new(ScriptedProvider::new(Some(&script)).unwrap());
    let host = TestHost::new().tool("Read", ToolBehavior::ok("hello"));
    let run = run(provider, host, config()).await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(run.outcome.main_turns, 2);
    assert_eq!(
        run.host.all(),
        vec![
            "model_request",
            "assistant_delta",
            "tool_call",
            "tool_started",
            "tool_result",
            "assistant_message",
            "tool_results",
            "continue",
            "model_request",
            "assistant_delta",
            "assistant_message",
            "usage",
            "terminal",
        ]
    );
    assert_eq!(continue_reasons(&run.host), vec!["tool_turn"]);
    assert_eq!(
        run.host.payloads("model_request")[1]["reason"],
        json!("tool_turn")
    );
    let history = run.host.messages();
    assert_eq!(history.len(), 3, "assistant, results, final assistant");
    assert_eq!(history[0].tool_uses().count(), 1);
    assert_eq!(results_of(&history[1])[0].content, "hello");
    assert_eq!(text_in(&history[2]), "It says hello");
}

#[tokio::test]
async fn reactive_compact_retry_compacts_and_retries_once() {
    let provider = Turns::new(vec![
        Response::Fail(ProviderError::ContextOverflow("prompt is too long".into())),
        text("SUMMARY OF OLD", StopReason::EndTurn), // the summary request
        text("answered", StopReason::EndTurn),
    ]);
    let history = RunHistory::new(
        vec![
            Message::user_text("old question"),
            Message::assistant_text("old answer"),
            Message::user_text("new question"),
        ],
        0,
    );
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config(),
        None,
        history,
        CancellationToken::new(),
    )
    .await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(
        run.host.all(),
        vec![
            "model_request",
            "provider_error",
            "compaction",
            "continue",
            "model_request",
            "assistant_delta",
            "assistant_message",
            "usage",
            "terminal",
        ]
    );
    assert_eq!(continue_reasons(&run.host), vec!["reactive_compact_retry"]);
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    // The retry is the compacted view: the summary, then the current prompt.
    assert_eq!(
        requests[2].messages,
        vec![
            summary_message("SUMMARY OF OLD"),
            Message::user_text("new question")
        ]
    );
    assert_eq!(run.host.boundaries(), vec![0]);
    assert_eq!(
        run.host.payloads("compaction")[0]["forced"],
        json!(true),
        "the reactive path forces compaction"
    );
}

#[tokio::test]
async fn max_output_recovery_resumes_with_the_recovery_limit() {
    let provider = Turns::new(vec![
        text("first half", StopReason::MaxTokens),
        text(" second half", StopReason::EndTurn),
    ]);
    let run = run(provider.clone(), TestHost::new(), config()).await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(
        run.host.committed(),
        vec![
            "assistant_message",
            "continue",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    assert_eq!(continue_reasons(&run.host), vec!["max_output_recovery"]);
    let requests = provider.requests();
    assert_eq!(requests[0].max_tokens, 1000);
    assert_eq!(
        requests[1].max_tokens, 8000,
        "the recovery request escalates"
    );
    let history = run.host.messages();
    assert_eq!(history.len(), 3);
    assert!(text_in(&history[1]).contains("cut off at the output limit"));
    assert_eq!(requests[1].messages.last(), Some(&history[1]));
    // A recovery is an extra request, not a main turn.
    assert_eq!(run.outcome.main_turns, 1);
    assert_eq!(run.outcome.usage.model_calls, 2);
}

#[tokio::test]
async fn stop_hook_blocking_injects_the_reason_and_continues() {
    let provider = Turns::new(vec![
        text("done?", StopReason::EndTurn),
        text("now done", StopReason::EndTurn),
    ]);
    let host = TestHost::new().stop_answers(vec![
        StopHookOutcome::Block {
            reason: "run the tests".into(),
        },
        StopHookOutcome::None,
    ]);
    let run = run(provider.clone(), host, config()).await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(
        run.host.committed(),
        vec![
            "assistant_message",
            "continue",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    let continues = run.host.payloads("continue");
    assert_eq!(
        continues,
        vec![json!({"reason": "stop_hook_blocking", "hook_reason": "run the tests"})]
    );
    assert_eq!(*run.host.stop_hook_calls.lock().unwrap(), 2);
    let history = run.host.messages();
    assert!(text_in(&history[1]).contains("run the tests"));
    assert_eq!(provider.requests()[1].messages.last(), Some(&history[1]));
}

#[tokio::test]
async fn stop_hook_blocking_past_the_limit_is_an_error() {
    let provider = Turns::new((0..4).map(|_| text("again", StopReason::EndTurn)).collect());
    let block = StopHookOutcome::Block {
        reason: "never satisfied".into(),
    };
    let host = TestHost::new().stop_answers(vec![block; 4]);
    let mut config = config();
    config.limits.max_stop_hook_blocks = 2;
    let run = run(provider.clone(), host, config).await;

    assert!(matches!(
        &run.outcome.terminal,
        TerminalReason::Error { code, .. } if code == STOP_HOOK_BLOCK_LIMIT
    ));
    assert_eq!(
        continue_reasons(&run.host),
        vec!["stop_hook_blocking", "stop_hook_blocking"]
    );
    assert_eq!(provider.requests().len(), 3);
}

#[tokio::test]
async fn token_budget_continuation_nudges_once() {
    let provider = Turns::new(vec![
        text("long answer", StopReason::EndTurn),
        text("wrapped up", StopReason::EndTurn),
    ]);
    let mut config = config();
    config.limits.token_budget = Some(12); // the first answer uses 15
    let run = run(provider.clone(), TestHost::new(), config).await;

    assert_eq!(
        continue_reasons(&run.host),
        vec!["token_budget_continuation"]
    );
    assert_eq!(
        run.host.committed(),
        vec![
            "assistant_message",
            "continue",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    let history = run.host.messages();
    assert_eq!(
        text_in(&history[1]),
        token_budget_nudge(15, 12),
        "the nudge carries the ledger's token count"
    );
    assert_eq!(provider.requests()[1].messages.last(), Some(&history[1]));
    assert_eq!(provider.requests().len(), 2, "only one nudge");
}

#[tokio::test]
async fn task_notification_delivers_the_notes_in_one_more_request() {
    let provider = Turns::new(vec![
        text("started a task", StopReason::EndTurn),
        text("the task finished", StopReason::EndTurn),
    ]);
    let host = TestHost::new().notifications(&["task t1 finished: ok", "task t2 failed"]);
    let run = run(provider.clone(), host, config()).await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(continue_reasons(&run.host), vec!["task_notification"]);
    assert_eq!(
        run.host.committed(),
        vec![
            "assistant_message",
            "continue",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    let history = run.host.messages();
    let note = text_in(&history[1]);
    assert!(note.contains("task t1 finished: ok") && note.contains("task t2 failed"));
    assert_eq!(provider.requests()[1].messages.last(), Some(&history[1]));
    assert_eq!(run.host.pending_task_notifications(), 0, "delivered once");
}

// ---------------------------------------------------------------------------------------------
// Terminal reasons
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn end_turn_after_one_text_answer() {
    let provider = Turns::new(vec![text("hi", StopReason::EndTurn)]);
    let run = run(provider, TestHost::new(), config()).await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(
        run.host.all(),
        vec![
            "model_request",
            "assistant_delta",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    assert_eq!(
        run.host.payloads("terminal"),
        vec![json!({"reason": "end_turn"})]
    );
    assert_eq!(run.host.messages(), vec![Message::assistant_text("hi")]);
    assert_eq!(*run.host.stop_hook_calls.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_final_turn_commits_once_with_the_end_unless_stop_hooks_must_see_it_durable() {
    let turns = || {
        Turns::new(vec![
            tools(&[("t1", "Read")]),
            text("done", StopReason::EndTurn),
        ])
    };
    let host = || TestHost::new().tool("Read", ToolBehavior::ok("data"));
    let without = TestHost {
        without_stop_hooks: true,
        ..host()
    };
    let run_without = run(turns(), without, config()).await;
    assert_eq!(
        *run_without.host.commits.lock().unwrap(),
        vec![
            vec!["assistant_message", "tool_results", "continue"],
            vec!["assistant_message", "usage", "terminal"],
        ],
        "one transaction per turn"
    );
    assert_eq!(*run_without.host.stop_hook_calls.lock().unwrap(), 0);

    let run_with_hooks = run(turns(), host(), config()).await;
    assert_eq!(
        *run_with_hooks.host.commits.lock().unwrap(),
        vec![
            vec!["assistant_message", "tool_results", "continue"],
            vec!["assistant_message"],
            vec!["usage", "terminal"],
        ],
        "the final turn is durable before the Stop hooks see it"
    );
    assert_eq!(*run_with_hooks.host.stop_hook_calls.lock().unwrap(), 1);
}

#[tokio::test]
async fn max_turns_ends_the_run_but_answers_the_last_calls() {
    let provider = Turns::new(vec![tools(&[("t1", "Read")]), tools(&[("t2", "Read")])]);
    let host = TestHost::new().tool("Read", ToolBehavior::ok("data"));
    let mut config = config();
    config.limits.max_turns = 2;
    let run = run(provider.clone(), host, config).await;

    assert_eq!(run.outcome.terminal, TerminalReason::MaxTurns);
    assert_eq!(run.outcome.main_turns, 2);
    assert_eq!(
        run.host.committed(),
        vec![
            "assistant_message",
            "tool_results",
            "continue",
            "assistant_message",
            "tool_results",
            "usage",
            "terminal"
        ]
    );
    assert_eq!(provider.requests().len(), 2);
    let history = run.host.messages();
    assert_eq!(history.len(), 4);
    assert_eq!(results_of(&history[3])[0].tool_use_id, "t2");
    assert_eq!(*run.host.stop_hook_calls.lock().unwrap(), 0);
}

#[tokio::test]
async fn budget_exhausted_keeps_the_budget_reason_over_pending_notifications() {
    let provider = Turns::new(vec![
        text("one", StopReason::EndTurn),
        text("two", StopReason::EndTurn),
    ]);
    // Task notifications are pending throughout: budget settlement still ends the run.
    let host = TestHost::new().notifications(&["task done"]);
    let mut config = config();
    config.limits.token_budget = Some(5);
    let run = run(provider.clone(), host, config).await;

    assert_eq!(
        run.outcome.terminal,
        TerminalReason::BudgetExhausted {
            budget: BudgetKind::Tokens
        }
    );
    assert_eq!(
        run.host.payloads("terminal"),
        vec![json!({"reason": "budget_exhausted", "budget": "tokens"})]
    );
    assert_eq!(
        continue_reasons(&run.host),
        vec!["token_budget_continuation"]
    );
    assert_eq!(
        run.host.committed(),
        vec![
            "assistant_message",
            "continue",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    assert_eq!(run.host.pending_task_notifications(), 1, "never delivered");
    assert_eq!(run.outcome.usage.total_tokens(), 30);
}

#[tokio::test]
async fn stop_hook_prevented_ends_without_continuation() {
    let provider = Turns::new(vec![text("done", StopReason::EndTurn)]);
    let host = TestHost::new()
        .stop_answers(vec![StopHookOutcome::Prevent {
            reason: "policy says stop".into(),
        }])
        .notifications(&["would otherwise continue"]);
    let run = run(provider.clone(), host, config()).await;

    assert_eq!(
        run.outcome.terminal,
        TerminalReason::StopHookPrevented {
            reason: "policy says stop".into()
        }
    );
    assert_eq!(
        run.host.committed(),
        vec!["assistant_message", "usage", "terminal"]
    );
    assert_eq!(
        run.host.payloads("terminal"),
        vec![json!({"reason": "stop_hook_prevented", "hook_reason": "policy says stop"})]
    );
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test]
async fn cancelled_mid_tools_pairs_every_call() {
    let cancel = CancellationToken::new();
    let provider = Turns::new(vec![tools(&[
        ("fast", "Read"),
        ("trigger", "Bash"),
        ("queued", "Read"),
    ])]);
    let host = TestHost::new().tool("Read", ToolBehavior::ok("read")).tool(
        "Bash",
        ToolBehavior {
            latency: Duration::from_secs(3600),
            result: Ok("never".into()),
            safe: false,
            cancels: Some(cancel.clone()),
        },
    );
    let run = tokio::time::timeout(
        Duration::from_secs(10),
        run_with(provider.clone(), host, config(), None, prompt("go"), cancel),
    )
    .await
    .expect("cancel stops the hour-long tool");

    assert_eq!(run.outcome.terminal, TerminalReason::Cancelled);
    assert_eq!(
        run.host.committed(),
        vec!["assistant_message", "tool_results", "usage", "terminal"]
    );
    let history = run.host.messages();
    assert_eq!(history.len(), 2);
    let results = results_of(&history[1]);
    let ids: Vec<&str> = results.iter().map(|r| r.tool_use_id.as_str()).collect();
    assert_eq!(ids, vec!["fast", "trigger", "queued"]);
    assert_eq!(results[0].content, "read");
    assert!(!results[0].is_error);
    for result in &results[1..] {
        assert!(result.is_error);
        assert_eq!(result.code.as_deref(), Some(codes::CANCELLED));
    }
    assert_eq!(
        *run.host.executed.lock().unwrap(),
        vec!["fast", "trigger"],
        "the call behind the exclusive one never started"
    );
    assert_eq!(provider.requests().len(), 1);
    assert_eq!(run.outcome.usage.tool_calls, 3);
    assert_eq!(run.outcome.usage.failed_tool_calls, 2);
}

#[tokio::test]
async fn cancelled_mid_stream_commits_no_assistant_message() {
    let cancel = CancellationToken::new();
    let provider = Turns::new(vec![Response::ItemsThenHang(
        [StreamItem::TextDelta("partial".into())]
            .into_iter()
            .chain(tool_items(&[("c1", "Read")]))
            .collect(),
    )]);
    let host = TestHost::new().tool(
        "Read",
        ToolBehavior {
            latency: Duration::from_secs(3600),
            ..ToolBehavior::ok("x")
        },
    );
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        canceller.cancel();
    });
    let run = tokio::time::timeout(
        Duration::from_secs(10),
        run_with(provider, host, config(), None, prompt("go"), cancel),
    )
    .await
    .expect("the cancel ends the hanging stream");

    assert_eq!(run.outcome.terminal, TerminalReason::Cancelled);
    assert_eq!(run.host.committed(), vec!["usage", "terminal"]);
    assert!(
        run.host.messages().is_empty(),
        "no half-streamed tool_use enters history"
    );
    assert!(run.host.all().contains(&"tool_started"));
}

#[tokio::test]
async fn cancelled_before_the_first_request() {
    let cancel = CancellationToken::new();
    cancel.cancel();
    let provider = Turns::new(vec![]);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config(),
        None,
        prompt("go"),
        cancel,
    )
    .await;
    assert_eq!(run.outcome.terminal, TerminalReason::Cancelled);
    assert_eq!(run.host.all(), vec!["usage", "terminal"]);
    assert!(provider.requests().is_empty());
}

#[tokio::test]
async fn error_when_the_stream_fails_mid_body() {
    let provider = Turns::new(vec![Response::Items(
        [StreamItem::TextDelta("start".into())]
            .into_iter()
            .chain(tool_items(&[("c1", "Read")]))
            .map(Ok)
            .chain([Err(ProviderError::StreamDropped("connection reset".into()))])
            .collect(),
    )]);
    let host = TestHost::new().tool("Read", ToolBehavior::ok("x"));
    let run = run(provider.clone(), host, config()).await;

    match &run.outcome.terminal {
        TerminalReason::Error { code, message } => {
            assert_eq!(code, "STREAM_DROPPED");
            assert!(message.contains("connection reset"));
        }
        other => panic!("expected an error terminal, got {other:?}"),
    }
    assert_eq!(run.host.committed(), vec!["usage", "terminal"]);
    assert!(run.host.messages().is_empty());
    assert_eq!(
        provider.requests().len(),
        1,
        "a dropped stream is not retried"
    );
    assert_eq!(run.outcome.usage.model_calls, 0, "no completed model call");
    assert_eq!(*run.host.stop_hook_calls.lock().unwrap(), 0);
}

#[tokio::test]
async fn error_when_the_request_is_rejected() {
    let provider = Turns::new(vec![Response::Fail(ProviderError::Status {
        status: 400,
        body: "bad request".into(),
    })]);
    let run = run(provider, TestHost::new(), config()).await;
    assert!(matches!(
        &run.outcome.terminal,
        TerminalReason::Error { code, .. } if code == "PROVIDER_STATUS"
    ));
    assert_eq!(run.host.committed(), vec!["usage", "terminal"]);
}

// ---------------------------------------------------------------------------------------------
// Context: compaction and policies
// ---------------------------------------------------------------------------------------------

/// The messages of `history`, as a request recorded them.
fn owned(history: RunHistory) -> Vec<Message> {
    history.messages.iter().map(|m| Message::clone(m)).collect()
}

fn long_history() -> RunHistory {
    RunHistory::new(
        vec![
            Message::user_text("old question ".repeat(40)),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "old1".into(),
                    name: "Read".into(),
                    input: json!({}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(
                    "old1",
                    "old tool output ".repeat(40),
                ))],
            },
            Message::assistant_text("old answer"),
            Message::user_text("new question"),
        ],
        0,
    )
}

#[tokio::test]
async fn built_in_compaction_triggers_past_the_threshold() {
    let provider = Turns::new(vec![
        text("THE SUMMARY", StopReason::EndTurn),
        text("answer", StopReason::EndTurn),
    ]);
    let mut config = config();
    config.compaction_threshold = Some(100);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config,
        None,
        long_history(),
        CancellationToken::new(),
    )
    .await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(
        run.host.all(),
        vec![
            "compaction",
            "model_request",
            "assistant_delta",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    let requests = provider.requests();
    // The summary request sees the older history and the instruction, no tools.
    assert!(requests[0].tools.is_empty());
    assert_eq!(requests[0].messages.len(), 5);
    assert_eq!(
        requests[0].messages.last(),
        Some(&Message::user_text(SUMMARY_INSTRUCTION))
    );
    // The boundary message opens the new view; the current prompt is re-appended after it.
    let history = run.host.messages();
    assert_eq!(run.host.boundaries(), vec![0]);
    assert_eq!(history[0], summary_message("THE SUMMARY"));
    assert_eq!(history[1], Message::user_text("new question"));
    assert_eq!(
        requests[1].messages,
        vec![
            summary_message("THE SUMMARY"),
            Message::user_text("new question")
        ]
    );
    let compaction = &run.host.payloads("compaction")[0];
    assert_eq!(compaction["summarized_messages"], json!(4));
    assert!(compaction["tokens_after"].as_u64() < compaction["tokens_before"].as_u64());
    assert_eq!(
        run.outcome.usage.model_calls, 2,
        "the summary call is counted"
    );
}

#[tokio::test]
async fn below_the_threshold_nothing_is_compacted() {
    let provider = Turns::new(vec![text("answer", StopReason::EndTurn)]);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config(),
        None,
        long_history(),
        CancellationToken::new(),
    )
    .await;
    assert!(run.host.payloads("compaction").is_empty());
    assert_eq!(provider.requests()[0].messages, owned(long_history()));
}

/// A policy that sends only the last message, after a marker.
struct LastOnly;

impl ContextPolicy for LastOnly {
    fn view(&self, history: &[Arc<Message>]) -> Option<Vec<ViewMessage>> {
        let last = history.last()?.clone().into();
        Some(vec![Message::user_text("[custom view]").into(), last])
    }

    fn reactive(&self, history: &[Arc<Message>]) -> Option<Vec<ViewMessage>> {
        let last = history.last()?.clone().into();
        Some(vec![Message::user_text("[reactive view]").into(), last])
    }
}

#[tokio::test]
async fn a_custom_policy_disables_compaction_and_decides_the_view() {
    let provider = Turns::new(vec![text("answer", StopReason::EndTurn)]);
    let mut config = config();
    config.compaction_threshold = Some(1); // would compact without the policy
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config,
        Some(Arc::new(LastOnly)),
        long_history(),
        CancellationToken::new(),
    )
    .await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "no summary request");
    assert_eq!(
        requests[0].messages,
        vec![
            Message::user_text("[custom view]"),
            Message::user_text("new question")
        ]
    );
    assert!(run.host.payloads("compaction").is_empty());
    assert!(run.host.boundaries().is_empty());
}

#[tokio::test]
async fn a_custom_policy_gives_the_reactive_view() {
    let provider = Turns::new(vec![
        Response::Fail(ProviderError::ContextOverflow("too long".into())),
        text("answer", StopReason::EndTurn),
    ]);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config(),
        Some(Arc::new(LastOnly)),
        long_history(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(continue_reasons(&run.host), vec!["reactive_compact_retry"]);
    assert_eq!(
        provider.requests()[1].messages,
        vec![
            Message::user_text("[reactive view]"),
            Message::user_text("new question")
        ]
    );
}

#[tokio::test]
async fn a_second_overflow_is_a_context_overflow_error() {
    let provider = Turns::new(vec![
        Response::Fail(ProviderError::ContextOverflow("too long".into())),
        text("SUMMARY", StopReason::EndTurn),
        Response::Fail(ProviderError::ContextOverflow("still too long".into())),
    ]);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config(),
        None,
        long_history(),
        CancellationToken::new(),
    )
    .await;

    assert!(matches!(
        &run.outcome.terminal,
        TerminalReason::Error { code, .. } if code == CONTEXT_OVERFLOW
    ));
    assert_eq!(continue_reasons(&run.host), vec!["reactive_compact_retry"]);
    assert_eq!(
        run.host.all(),
        vec![
            "model_request",
            "provider_error",
            "compaction",
            "continue",
            "model_request",
            "provider_error",
            "usage",
            "terminal"
        ]
    );
    assert_eq!(provider.requests().len(), 3, "one retry only");
}

// ---------------------------------------------------------------------------------------------
// Usage from the ledger
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn usage_comes_from_the_ledger_not_turn_counters() {
    let provider = Turns::new(vec![
        tools(&[("a", "Read"), ("b", "Fail")]),
        text("cut", StopReason::MaxTokens),
        text("rest", StopReason::EndTurn),
    ]);
    let host = TestHost::new().tool("Read", ToolBehavior::ok("ok")).tool(
        "Fail",
        ToolBehavior {
            result: Err((codes::TOOL_FAILED, "boom".into())),
            ..ToolBehavior::ok("")
        },
    );
    let run = run(provider, host, config()).await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(run.outcome.main_turns, 2);
    let usage = run.outcome.usage;
    assert_eq!(usage.model_calls, 3, "the recovery request is a model call");
    assert_eq!(usage.tool_calls, 2);
    assert_eq!(usage.failed_tool_calls, 1);
    assert_eq!(usage.input_tokens, 20 + 10 + 10);
    assert_eq!(usage.output_tokens, 7 + 5 + 5);
    assert_eq!(usage, run.ledger.usage());
    assert_eq!(run.ledger.entries.len(), 5);
    assert_eq!(
        run.host.payloads("usage"),
        vec![serde_json::to_value(usage).unwrap()]
    );
}

#[tokio::test]
async fn cached_prompt_tokens_count_as_input() {
    let provider = Turns::new(vec![Response::Items(vec![
        Ok(StreamItem::TextDelta("hi".into())),
        Ok(StreamItem::Usage(TokenUsage {
            input_tokens: 3,
            output_tokens: 2,
            cache_read_tokens: 100,
            cache_write_tokens: 50,
        })),
        Ok(StreamItem::Stop(StopReason::EndTurn)),
    ])]);
    let run = run(provider, TestHost::new(), config()).await;
    assert_eq!(run.outcome.usage.input_tokens, 153);
    assert_eq!(run.outcome.usage.output_tokens, 2);
}

#[tokio::test(start_paused = true)]
async fn tool_events_and_safe_calls_run_concurrently() {
    let slow = ToolBehavior {
        latency: Duration::from_millis(200),
        ..ToolBehavior::ok("slow")
    };
    let provider = Turns::new(vec![
        tools(&[("x", "Slow"), ("y", "Slow"), ("z", "Slow")]),
        text("done", StopReason::EndTurn),
    ]);
    let host = TestHost::new().tool("Slow", slow);
    let started = tokio::time::Instant::now();
    let run = run(provider, host, config()).await;
    // Paused clock: overlapping calls take 200 ms of virtual time, sequential ones 600 ms.
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(200),
        "three safe 200 ms calls overlap"
    );
    let ids: Vec<Value> = run
        .host
        .payloads("tool_result")
        .iter()
        .map(|p| p["tool_use_id"].clone())
        .collect();
    assert_eq!(ids.len(), 3);
    let history = run.host.messages();
    let paired: Vec<String> = results_of(&history[1])
        .into_iter()
        .map(|r| r.tool_use_id)
        .collect();
    assert_eq!(paired, vec!["x", "y", "z"], "results in arrival order");
}

#[tokio::test]
async fn a_run_larger_than_the_threshold_is_not_recompacted_every_request() {
    // After one compaction, the current run alone (prompt, a big tool result) stays over the
    // threshold. Nothing older than the prompt is left but the summary itself, so no further
    // summary request may be made.
    let provider = Turns::new(vec![
        text("THE SUMMARY", StopReason::EndTurn),
        tools(&[("t1", "Big")]),
        tools(&[("t2", "Big")]),
        text("done", StopReason::EndTurn),
    ]);
    let host = TestHost::new().tool("Big", ToolBehavior::ok(&"big output ".repeat(100)));
    let mut config = config();
    config.compaction_threshold = Some(100);
    let run = run_with(
        provider.clone(),
        host,
        config,
        None,
        long_history(),
        CancellationToken::new(),
    )
    .await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(run.host.payloads("compaction").len(), 1);
    assert_eq!(provider.requests().len(), 4);
    assert_eq!(run.outcome.usage.model_calls, 4);
    // The view still starts at the summary.
    assert_eq!(
        provider.requests()[3].messages[0],
        summary_message("THE SUMMARY")
    );
}

#[tokio::test]
async fn the_summary_call_counts_cached_prompt_tokens_like_any_model_call() {
    let cached = |text: &str| {
        Response::Items(vec![
            Ok(StreamItem::TextDelta(text.to_owned())),
            Ok(StreamItem::Usage(TokenUsage {
                input_tokens: 1,
                output_tokens: 2,
                cache_read_tokens: 40,
                cache_write_tokens: 8,
            })),
            Ok(StreamItem::Stop(StopReason::EndTurn)),
        ])
    };
    let provider = Turns::new(vec![cached("SUMMARY"), cached("answer")]);
    let mut config = config();
    config.compaction_threshold = Some(100);
    let run = run_with(
        provider,
        TestHost::new(),
        config,
        None,
        long_history(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(run.host.payloads("compaction").len(), 1);
    assert_eq!(run.outcome.usage.model_calls, 2);
    assert_eq!(run.outcome.usage.input_tokens, 2 * 49);
}

#[tokio::test]
async fn a_failed_summary_request_sends_the_request_uncompacted() {
    let provider = Turns::new(vec![
        Response::Fail(ProviderError::Status {
            status: 400,
            body: "no".into(),
        }),
        text("answer", StopReason::EndTurn),
    ]);
    let mut config = config();
    config.compaction_threshold = Some(100);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config,
        None,
        long_history(),
        CancellationToken::new(),
    )
    .await;

    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(
        run.host.all(),
        vec![
            "compaction_failed",
            "model_request",
            "assistant_delta",
            "assistant_message",
            "usage",
            "terminal"
        ]
    );
    assert_eq!(provider.requests()[1].messages, owned(long_history()));
    assert!(run.host.boundaries().is_empty());
}

/// A policy whose `pre` drops every message but the last from the in-memory history.
struct KeepLast;

impl ContextPolicy for KeepLast {
    fn pre(&self, history: &mut Vec<Arc<Message>>) {
        let keep = history.len().saturating_sub(1);
        history.drain(..keep);
    }
}

#[tokio::test]
async fn a_policy_pre_rewrites_history_before_each_request() {
    let provider = Turns::new(vec![text("answer", StopReason::EndTurn)]);
    let run = run_with(
        provider.clone(),
        TestHost::new(),
        config(),
        Some(Arc::new(KeepLast)),
        long_history(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(run.outcome.terminal, TerminalReason::EndTurn);
    // Without a `view`, the default view of the rewritten history is sent.
    assert_eq!(
        provider.requests()[0].messages,
        vec![Message::user_text("new question")]
    );
}

#[tokio::test]
async fn a_spent_tenant_budget_ends_the_run_after_the_turn_with_its_tool_calls() {
    let script = json!({ "turns": [
        { "text": "Reading.", "tool_calls": [ { "name": "Read", "input": { "path": "a" } } ] },
        { "text": "never played" }
    ]});
    let provider = Arc::new(ScriptedProvider::new(Some(&script)).unwrap());
    let mut host = TestHost::new().tool("Read", ToolBehavior::ok("hello"));
    // The check before the first request passes; the one after the first turn finds it spent.
    host.tenant_budget_after = Some(Mutex::new(1));
    let run = run(provider.clone(), host, config()).await;

    assert_eq!(
        run.outcome.terminal,
        TerminalReason::BudgetExhausted {
            budget: BudgetKind::TenantTokens
        }
    );
    assert_eq!(
        run.host.payloads("terminal"),
        vec![json!({"reason": "budget_exhausted", "budget": "tenant_tokens"})]
    );
    assert_eq!(
        *run.host.executed.lock().unwrap(),
        vec!["toolu_scripted_0_0"]
    );
    assert_eq!(
        run.host.committed(),
        vec!["assistant_message", "tool_results", "usage", "terminal"],
        "the turn is committed with the terminal, no continue"
    );
    assert_eq!(
        *run.host.tenant_budget_checks.lock().unwrap(),
        vec![vec![], vec!["assistant_message", "tool_results"]],
        "checked before the first request, then with the turn's uncommitted events"
    );
    assert_paired(&run.host.messages());
}

#[tokio::test]
async fn a_tenant_budget_spent_before_the_first_request_makes_none() {
    let provider = Turns::new(vec![text("never", StopReason::EndTurn)]);
    let mut host = TestHost::new();
    host.tenant_budget_after = Some(Mutex::new(0));
    let run = run(provider.clone(), host, config()).await;
    assert_eq!(
        run.outcome.terminal,
        TerminalReason::BudgetExhausted {
            budget: BudgetKind::TenantTokens
        }
    );
    assert!(provider.requests().is_empty());
    assert_eq!(run.host.committed(), vec!["usage", "terminal"]);
}
