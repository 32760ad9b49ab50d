//! One test per continue and terminal reason, then the order of the phases.

use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

fn limits() -> TurnLimits {
    TurnLimits {
        max_turns: 5,
        max_output_recoveries: 1,
        max_stop_hook_blocks: 2,
        token_budget: Some(1_000),
    }
}

/// A plain final answer on the first turn, well under every limit.
fn answered() -> AfterResponse {
    AfterResponse {
        main_turns: 1,
        tokens_used: 10,
        ..AfterResponse::default()
    }
}

fn block(reason: &str) -> StopHookOutcome {
    StopHookOutcome::Block {
        reason: reason.into(),
    }
}

fn prevent(reason: &str) -> StopHookOutcome {
    StopHookOutcome::Prevent {
        reason: reason.into(),
    }
}

fn step(state: &AfterResponse) -> Step {
    next_step(state, &limits())
}

// --- continue reasons -------------------------------------------------------------------------

#[test]
fn tool_use_continues_with_a_tool_turn() {
    let state = AfterResponse {
        had_tool_use: true,
        ..answered()
    };
    assert_eq!(step(&state), Step::Continue(ContinueReason::ToolTurn));
    assert!(ContinueReason::ToolTurn.is_main_turn());
}

#[test]
fn context_overflow_retries_once_with_the_reactive_view() {
    let state = AfterResponse {
        context_overflow: true,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::ReactiveCompactRetry)
    );
}

#[test]
fn max_tokens_stop_continues_with_output_recovery() {
    let state = AfterResponse {
        stop_reason_was_max_tokens: true,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::MaxOutputRecovery)
    );
}

#[test]
fn a_blocking_stop_hook_continues_with_its_reason() {
    let state = AfterResponse {
        stop_hook: block("tests are failing"),
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::StopHookBlocking {
            reason: "tests are failing".into()
        })
    );
}

#[test]
fn reaching_the_token_budget_continues_once_after_a_nudge() {
    let state = AfterResponse {
        tokens_used: 1_000,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::TokenBudgetContinuation)
    );
    let nudge = token_budget_nudge(1_000, 1_000);
    assert!(nudge.contains("1000 of 1000"), "{nudge}");
}

#[test]
fn pending_task_notifications_continue_with_task_notification() {
    let state = AfterResponse {
        pending_task_notifications: 2,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::TaskNotification)
    );
}

// --- terminal reasons -------------------------------------------------------------------------

#[test]
fn a_plain_answer_ends_the_turn() {
    assert_eq!(step(&answered()), Step::Terminal(TerminalReason::EndTurn));
}

#[test]
fn tool_use_on_the_last_allowed_main_turn_ends_with_max_turns() {
    let below = AfterResponse {
        had_tool_use: true,
        main_turns: 4,
        ..answered()
    };
    let at = AfterResponse {
        main_turns: 5,
        ..below.clone()
    };
    assert_eq!(step(&below), Step::Continue(ContinueReason::ToolTurn));
    assert_eq!(step(&at), Step::Terminal(TerminalReason::MaxTurns));
}

#[test]
fn reaching_the_budget_after_the_nudge_ends_with_budget_exhausted() {
    let state = AfterResponse {
        tokens_used: 1_500,
        budget_nudged: true,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Terminal(TerminalReason::BudgetExhausted {
            budget: BudgetKind::Tokens
        })
    );
}

#[test]
fn a_preventing_stop_hook_ends_the_run() {
    let state = AfterResponse {
        stop_hook: prevent("policy says stop"),
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Terminal(TerminalReason::StopHookPrevented {
            reason: "policy says stop".into()
        })
    );
}

#[test]
fn cancellation_ends_the_run() {
    let state = AfterResponse {
        cancelled: true,
        ..answered()
    };
    assert_eq!(step(&state), Step::Terminal(TerminalReason::Cancelled));
}

#[test]
fn a_failed_request_ends_with_its_error() {
    let state = AfterResponse {
        failure: Some(RequestFailure {
            code: "PROVIDER_ERROR".into(),
            message: "400 bad request".into(),
        }),
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Terminal(TerminalReason::Error {
            code: "PROVIDER_ERROR".into(),
            message: "400 bad request".into()
        })
    );
}

#[test]
fn a_second_context_overflow_ends_with_an_error() {
    let state = AfterResponse {
        context_overflow: true,
        reactive_retry_used: true,
        ..answered()
    };
    let Step::Terminal(TerminalReason::Error { code, .. }) = step(&state) else {
        panic!("expected an error terminal");
    };
    assert_eq!(code, CONTEXT_OVERFLOW);
}

#[test]
fn a_stop_hook_that_keeps_blocking_is_bounded() {
    let state = AfterResponse {
        stop_hook: block("again"),
        stop_hook_blocks_used: 2,
        ..answered()
    };
    let Step::Terminal(TerminalReason::Error { code, message }) = step(&state) else {
        panic!("expected an error terminal");
    };
    assert_eq!(code, STOP_HOOK_BLOCK_LIMIT);
    assert!(message.contains("again"), "{message}");
}

// --- ordering ---------------------------------------------------------------------------------

#[test]
fn cancellation_beats_everything() {
    let state = AfterResponse {
        cancelled: true,
        had_tool_use: true,
        failure: Some(RequestFailure {
            code: "X".into(),
            message: "x".into(),
        }),
        ..answered()
    };
    assert_eq!(step(&state), Step::Terminal(TerminalReason::Cancelled));
}

#[test]
fn tool_use_beats_every_no_tool_phase() {
    let state = AfterResponse {
        had_tool_use: true,
        stop_reason_was_max_tokens: true,
        stop_hook: prevent("stop"),
        tokens_used: 5_000,
        budget_nudged: true,
        pending_task_notifications: 1,
        ..answered()
    };
    assert_eq!(step(&state), Step::Continue(ContinueReason::ToolTurn));
    assert!(!stop_hooks_needed(&state, &limits()));
}

#[test]
fn recovery_comes_before_a_blocking_stop_hook() {
    let state = AfterResponse {
        stop_reason_was_max_tokens: true,
        stop_hook: block("not done"),
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::MaxOutputRecovery)
    );
    // The hooks are not even run while recovery applies.
    assert!(!stop_hooks_needed(&state, &limits()));
}

#[test]
fn exhausted_recoveries_fall_through_to_the_stop_hooks() {
    let state = AfterResponse {
        stop_reason_was_max_tokens: true,
        recoveries_used: 1,
        stop_hook: block("not done"),
        ..answered()
    };
    assert!(stop_hooks_needed(&state, &limits()));
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::StopHookBlocking {
            reason: "not done".into()
        })
    );
}

#[test]
fn exhausted_recoveries_without_hooks_end_the_turn() {
    let state = AfterResponse {
        stop_reason_was_max_tokens: true,
        recoveries_used: 1,
        ..answered()
    };
    assert_eq!(step(&state), Step::Terminal(TerminalReason::EndTurn));
}

#[test]
fn context_overflow_recovery_comes_before_max_tokens_recovery() {
    let state = AfterResponse {
        context_overflow: true,
        stop_reason_was_max_tokens: true,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::ReactiveCompactRetry)
    );
}

#[test]
fn a_stop_hook_prevent_beats_the_budget_and_tasks() {
    let state = AfterResponse {
        stop_hook: prevent("enough"),
        tokens_used: 5_000,
        pending_task_notifications: 3,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Terminal(TerminalReason::StopHookPrevented {
            reason: "enough".into()
        })
    );
}

#[test]
fn a_blocking_stop_hook_comes_before_the_budget() {
    let state = AfterResponse {
        stop_hook: block("fix the build"),
        tokens_used: 5_000,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::StopHookBlocking {
            reason: "fix the build".into()
        })
    );
}

#[test]
fn the_budget_nudge_comes_before_task_notifications() {
    let state = AfterResponse {
        tokens_used: 1_000,
        pending_task_notifications: 1,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Continue(ContinueReason::TokenBudgetContinuation)
    );
}

#[test]
fn budget_settlement_keeps_the_budget_reason_when_a_later_phase_also_fires() {
    let state = AfterResponse {
        tokens_used: 2_000,
        budget_nudged: true,
        pending_task_notifications: 4,
        ..answered()
    };
    assert_eq!(
        step(&state),
        Step::Terminal(TerminalReason::BudgetExhausted {
            budget: BudgetKind::Tokens
        })
    );
}

#[test]
fn under_budget_or_without_a_budget_the_budget_phase_is_skipped() {
    let under = AfterResponse {
        tokens_used: 999,
        budget_nudged: true,
        ..answered()
    };
    assert_eq!(step(&under), Step::Terminal(TerminalReason::EndTurn));
    let unlimited = TurnLimits {
        token_budget: None,
        ..limits()
    };
    let huge = AfterResponse {
        tokens_used: u64::MAX,
        ..answered()
    };
    assert_eq!(
        next_step(&huge, &unlimited),
        Step::Terminal(TerminalReason::EndTurn)
    );
}

#[test]
fn a_failure_beats_recovery() {
    let state = AfterResponse {
        failure: Some(RequestFailure {
            code: "PROVIDER_ERROR".into(),
            message: "boom".into(),
        }),
        context_overflow: true,
        ..answered()
    };
    assert!(matches!(
        step(&state),
        Step::Terminal(TerminalReason::Error { code, .. }) if code == "PROVIDER_ERROR"
    ));
}

#[test]
fn stop_hooks_are_needed_exactly_when_no_earlier_phase_decides() {
    assert!(stop_hooks_needed(&answered(), &limits()));
    for state in [
        AfterResponse {
            cancelled: true,
            ..answered()
        },
        AfterResponse {
            had_tool_use: true,
            ..answered()
        },
        AfterResponse {
            context_overflow: true,
            ..answered()
        },
        AfterResponse {
            stop_reason_was_max_tokens: true,
            ..answered()
        },
    ] {
        assert!(!stop_hooks_needed(&state, &limits()), "{state:?}");
    }
}

// --- the recorded vocabulary ------------------------------------------------------------------

#[test]
fn reasons_serialize_with_a_stable_reason_tag_equal_to_their_code() {
    let continues = [
        ContinueReason::ToolTurn,
        ContinueReason::ReactiveCompactRetry,
        ContinueReason::MaxOutputRecovery,
        ContinueReason::StopHookBlocking { reason: "r".into() },
        ContinueReason::TokenBudgetContinuation,
        ContinueReason::TaskNotification,
    ];
    for reason in &continues {
        let value = serde_json::to_value(reason).unwrap();
        assert_eq!(value["reason"], reason.code());
        assert_eq!(
            &serde_json::from_value::<ContinueReason>(value).unwrap(),
            reason
        );
    }
    let terminals = [
        TerminalReason::EndTurn,
        TerminalReason::MaxTurns,
        TerminalReason::BudgetExhausted {
            budget: BudgetKind::Tokens,
        },
        TerminalReason::StopHookPrevented { reason: "r".into() },
        TerminalReason::Cancelled,
        TerminalReason::Error {
            code: "C".into(),
            message: "m".into(),
        },
    ];
    for reason in &terminals {
        let value = serde_json::to_value(reason).unwrap();
        assert_eq!(value["reason"], reason.code());
        assert_eq!(
            &serde_json::from_value::<TerminalReason>(value).unwrap(),
            reason
        );
    }
    assert_eq!(
        serde_json::to_value(&terminals[2]).unwrap(),
        json!({"reason": "budget_exhausted", "budget": "tokens"})
    );
    assert_eq!(
        serde_json::to_value(&continues[3]).unwrap(),
        json!({"reason": "stop_hook_blocking", "hook_reason": "r"})
    );
    assert_eq!(
        serde_json::to_value(&terminals[3]).unwrap(),
        json!({"reason": "stop_hook_prevented", "hook_reason": "r"})
    );
}

#[test]
fn only_tool_turns_count_as_main_turns() {
    assert!(ContinueReason::ToolTurn.is_main_turn());
    for reason in [
        ContinueReason::ReactiveCompactRetry,
        ContinueReason::MaxOutputRecovery,
        ContinueReason::StopHookBlocking { reason: "r".into() },
        ContinueReason::TokenBudgetContinuation,
        ContinueReason::TaskNotification,
    ] {
        assert!(!reason.is_main_turn(), "{reason:?}");
    }
}
