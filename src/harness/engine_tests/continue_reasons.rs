//! Continue reasons: a tool turn, the reactive compact retry, max-output recovery, a Stop
//! hook that blocks, the token budget nudge, task notifications.

use super::*;
use pretty_assertions::assert_eq;

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
