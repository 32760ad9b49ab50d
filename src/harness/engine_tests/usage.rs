//! Usage from the ledger, concurrent tool calls, and the tenant budget's end of a run.

use super::*;
use pretty_assertions::assert_eq;

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
