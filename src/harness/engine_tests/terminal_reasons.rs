//! Terminal reasons: each way a run ends, with the calls of its last turn paired (also on
//! cancel and on a failed stream).

use super::*;
use pretty_assertions::assert_eq;

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
