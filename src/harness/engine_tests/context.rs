//! Context: built-in compaction, custom context policies (their view, reactive view and `pre`),
//! and the compaction's summary request.

use super::*;
use pretty_assertions::assert_eq;

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
