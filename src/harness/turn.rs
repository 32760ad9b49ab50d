//! The loop's vocabulary and its decision after each model response (SPEC.md N16–N17).
//!
//! [`next_step`] is pure: the loop gathers what happened into an [`AfterResponse`] and executes
//! the returned [`Step`]. The order of evaluation is fixed and every branch has its own reason:
//!
//! 1. cancelled → [`TerminalReason::Cancelled`]
//! 2. the request failed → [`TerminalReason::Error`]
//! 3. tool use → [`ContinueReason::ToolTurn`] (main turn +1), or [`TerminalReason::MaxTurns`]
//!    when this was the last allowed main turn
//! 4. recovery: context overflow → [`ContinueReason::ReactiveCompactRetry`] once, then an error;
//!    a `max_tokens` stop → [`ContinueReason::MaxOutputRecovery`] while recoveries remain
//! 5. Stop hooks: prevent → [`TerminalReason::StopHookPrevented`]; block →
//!    [`ContinueReason::StopHookBlocking`] (bounded by [`TurnLimits::max_stop_hook_blocks`])
//! 6. token budget: reached and not yet nudged → [`ContinueReason::TokenBudgetContinuation`]
//!    after a nudge; reached after the nudge → [`TerminalReason::BudgetExhausted`]
//! 7. pending background-task notifications → [`ContinueReason::TaskNotification`]
//! 8. otherwise → [`TerminalReason::EndTurn`]
//!
//! Budget settlement is its own phase (6) and ends the run with the budget reason even when a
//! later phase (7) would also fire. Stop hooks have side effects, so they run only when the
//! decision reaches phase 5: the loop asks [`stop_hooks_needed`] first.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Error code of the terminal when a context overflow survives the one reactive retry.
pub const CONTEXT_OVERFLOW: &str = "CONTEXT_OVERFLOW";
/// Error code of the terminal when Stop hooks keep blocking past the limit.
pub const STOP_HOOK_BLOCK_LIMIT: &str = "STOP_HOOK_BLOCK_LIMIT";

pub use crate::run_event::{BudgetKind, ContinueReason, TerminalReason};

/// What the loop does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make another request, for this reason.
    Continue(ContinueReason),
    /// End the run, for this reason.
    Terminal(TerminalReason),
}

/// Limits of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TurnLimits {
    /// Main turns allowed per run. The first response is main turn 1 and each tool turn adds
    /// one; a response that uses tools on main turn `max_turns` ends the run with
    /// [`TerminalReason::MaxTurns`] (its tool calls are still answered) instead of making
    /// another request.
    pub max_turns: u32,
    /// `max_tokens` recoveries allowed per run.
    pub max_output_recoveries: u32,
    /// Stop-hook blocking continuations allowed per run; past this the run ends with
    /// [`STOP_HOOK_BLOCK_LIMIT`] instead of looping forever on a hook that always blocks.
    pub max_stop_hook_blocks: u32,
    /// Input + output tokens the run may use before it is nudged to finish, if any.
    pub token_budget: Option<u64>,
}

impl Default for TurnLimits {
    fn default() -> Self {
        Self {
            max_turns: 100,
            max_output_recoveries: 1,
            max_stop_hook_blocks: 3,
            token_budget: None,
        }
    }
}

/// What the Stop hooks said about ending the turn (N10).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StopHookOutcome {
    /// No hook objected (or the hooks were not run).
    #[default]
    None,
    /// Continue: inject `reason` and make one more request.
    Block {
        /// Injected for the model with the continuation.
        reason: String,
    },
    /// End now, with no continuation.
    Prevent {
        /// Recorded with the terminal reason.
        reason: String,
    },
}

/// Why a request failed without a usable response (other than a context overflow).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFailure {
    /// Stable UPPER_SNAKE code.
    pub code: String,
    /// Human text.
    pub message: String,
}

/// Everything [`next_step`] reads about the response just handled and the run so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AfterResponse {
    /// The run was cancelled.
    pub cancelled: bool,
    /// The request failed for good (after provider retries), other than by context overflow.
    pub failure: Option<RequestFailure>,
    /// The request was rejected because the context is too long.
    pub context_overflow: bool,
    /// The one reactive retry (N21) was already used in this run.
    pub reactive_retry_used: bool,
    /// The response contained at least one tool_use.
    pub had_tool_use: bool,
    /// The response stopped because it hit `max_tokens`.
    pub stop_reason_was_max_tokens: bool,
    /// `max_tokens` recoveries already made in this run.
    pub recoveries_used: u32,
    /// Stop-hook blocking continuations already made in this run.
    pub stop_hook_blocks_used: u32,
    /// The Stop hooks' answer; only read when [`stop_hooks_needed`] said they should run.
    pub stop_hook: StopHookOutcome,
    /// Input + output tokens of the run so far, from the action ledger.
    pub tokens_used: u64,
    /// The token-budget nudge was already sent in this run.
    pub budget_nudged: bool,
    /// Background-task notifications waiting to be delivered.
    pub pending_task_notifications: u32,
    /// Main turns of this run including the one just answered (the first response is 1).
    pub main_turns: u32,
}

/// Decides what happens after a model response. Pure; see the module doc for the order.
pub fn next_step(state: &AfterResponse, limits: &TurnLimits) -> Step {
    before_stop_hooks(state, limits).unwrap_or_else(|| from_stop_hooks_on(state, limits))
}

/// Whether the decision reaches the Stop-hook phase, i.e. the loop must run the Stop hooks and
/// fill [`AfterResponse::stop_hook`] before calling [`next_step`].
pub fn stop_hooks_needed(state: &AfterResponse, limits: &TurnLimits) -> bool {
    before_stop_hooks(state, limits).is_none()
}

/// The text of the nudge sent with [`ContinueReason::TokenBudgetContinuation`].
pub fn token_budget_nudge(tokens_used: u64, budget: u64) -> String {
    format!(
        "The token budget for this run is exhausted ({tokens_used} of {budget} tokens used). \
         Finish now: give your final answer in this reply without calling any more tools."
    )
}

/// Phases 1–4: cancellation, failure, tool use, recovery.
fn before_stop_hooks(state: &AfterResponse, limits: &TurnLimits) -> Option<Step> {
    if state.cancelled {
        return Some(Step::Terminal(TerminalReason::Cancelled));
    }
    if let Some(failure) = &state.failure {
        return Some(Step::Terminal(TerminalReason::Error {
            code: failure.code.clone(),
            message: failure.message.clone(),
        }));
    }
    if state.had_tool_use {
        return Some(if state.main_turns >= limits.max_turns {
            Step::Terminal(TerminalReason::MaxTurns)
        } else {
            Step::Continue(ContinueReason::ToolTurn)
        });
    }
    if state.context_overflow {
        return Some(if state.reactive_retry_used {
            Step::Terminal(TerminalReason::Error {
                code: CONTEXT_OVERFLOW.to_owned(),
                message: "The conversation is too long for the model's context, even after \
                          compaction."
                    .to_owned(),
            })
        } else {
            Step::Continue(ContinueReason::ReactiveCompactRetry)
        });
    }
    if state.stop_reason_was_max_tokens && state.recoveries_used < limits.max_output_recoveries {
        return Some(Step::Continue(ContinueReason::MaxOutputRecovery));
    }
    None
}

/// Phases 5–8: Stop hooks, budget settlement, task notifications, end.
fn from_stop_hooks_on(state: &AfterResponse, limits: &TurnLimits) -> Step {
    match &state.stop_hook {
        StopHookOutcome::Prevent { reason } => {
            return Step::Terminal(TerminalReason::StopHookPrevented {
                reason: reason.clone(),
            });
        }
        StopHookOutcome::Block { reason } => {
            return if state.stop_hook_blocks_used < limits.max_stop_hook_blocks {
                Step::Continue(ContinueReason::StopHookBlocking {
                    reason: reason.clone(),
                })
            } else {
                Step::Terminal(TerminalReason::Error {
                    code: STOP_HOOK_BLOCK_LIMIT.to_owned(),
                    message: format!(
                        "Stop hooks blocked the end of the run more than {} times; last \
                         reason: {reason}",
                        limits.max_stop_hook_blocks
                    ),
                })
            };
        }
        StopHookOutcome::None => {}
    }
    if limits
        .token_budget
        .is_some_and(|budget| state.tokens_used >= budget)
    {
        return if state.budget_nudged {
            Step::Terminal(TerminalReason::BudgetExhausted {
                budget: BudgetKind::Tokens,
            })
        } else {
            Step::Continue(ContinueReason::TokenBudgetContinuation)
        };
    }
    if state.pending_task_notifications > 0 {
        return Step::Continue(ContinueReason::TaskNotification);
    }
    Step::Terminal(TerminalReason::EndTurn)
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
