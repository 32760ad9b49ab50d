//! Payloads the run events carry that other layers also use: why a run ended, why the loop
//! made another request, and a run's usage. They live here (not in the harness) so every layer
//! can name them without depending on the loop.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Why the loop makes another request. Each is a distinct, recorded event (N17).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ContinueReason {
    /// The response used tools; their results go back in the next request (a main turn).
    ToolTurn,
    /// The request overflowed the context; retry once with the reactive (compacted) view.
    ReactiveCompactRetry,
    /// The response stopped at `max_tokens`; escalate/resume the output.
    MaxOutputRecovery,
    /// A Stop hook blocked the end of the turn; its reason is injected and one more request
    /// is made. Serialized as `hook_reason`, since `reason` is the tag.
    StopHookBlocking {
        /// The hook's reason, injected for the model.
        #[serde(rename = "hook_reason")]
        reason: String,
    },
    /// The token budget was reached; the model is nudged to wrap up in one more request.
    TokenBudgetContinuation,
    /// Background tasks finished; their notifications are delivered in one more request.
    TaskNotification,
}

impl ContinueReason {
    /// The stable code (equal to the serialized `reason` tag).
    pub fn code(&self) -> &'static str {
        match self {
            Self::ToolTurn => "tool_turn",
            Self::ReactiveCompactRetry => "reactive_compact_retry",
            Self::MaxOutputRecovery => "max_output_recovery",
            Self::StopHookBlocking { .. } => "stop_hook_blocking",
            Self::TokenBudgetContinuation => "token_budget_continuation",
            Self::TaskNotification => "task_notification",
        }
    }

    /// Whether executing this continuation counts as a main turn. Only tool turns do; the
    /// other requests are extra requests, not main turns (N18).
    pub fn is_main_turn(&self) -> bool {
        match self {
            Self::ToolTurn => true,
            Self::ReactiveCompactRetry
            | Self::MaxOutputRecovery
            | Self::StopHookBlocking { .. }
            | Self::TokenBudgetContinuation
            | Self::TaskNotification => false,
        }
    }
}

/// Which budget ended a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// Input + output tokens of the run, from the action ledger.
    Tokens,
    /// The tenant's token budget per day or month (`[limits.budget]` or the operator's),
    /// reached by the turn that just ended.
    TenantTokens,
    /// The tenant's cost budget per day or month, reached by the turn that just ended.
    TenantCost,
}

/// Why a run ended. Each is a distinct, recorded event (N17).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum TerminalReason {
    /// The model ended its turn and nothing asked for more.
    EndTurn,
    /// The main-turn limit was reached.
    MaxTurns,
    /// A budget was exhausted; keeps the budget that ended the run.
    BudgetExhausted {
        /// The budget that ended the run.
        budget: BudgetKind,
    },
    /// A Stop hook prevented any continuation. Serialized as `hook_reason`, since `reason` is
    /// the tag.
    StopHookPrevented {
        /// The hook's reason.
        #[serde(rename = "hook_reason")]
        reason: String,
    },
    /// The run was cancelled.
    Cancelled,
    /// Not an end: the run parked while calls wait on approvals. Nothing of the unfinished
    /// turn is committed and no `terminal` event is written; the run is resumed from the
    /// store when an answer comes.
    Parked,
    /// The run failed.
    Error {
        /// Stable UPPER_SNAKE code.
        code: String,
        /// Human text.
        message: String,
    },
}

impl TerminalReason {
    /// The stable code (equal to the serialized `reason` tag).
    pub fn code(&self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::MaxTurns => "max_turns",
            Self::BudgetExhausted { .. } => "budget_exhausted",
            Self::StopHookPrevented { .. } => "stop_hook_prevented",
            Self::Cancelled => "cancelled",
            Self::Parked => "parked",
            Self::Error { .. } => "error",
        }
    }
}

/// Usage computed from ledger entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    /// Input tokens over all model calls.
    pub input_tokens: u64,
    /// Output tokens over all model calls.
    pub output_tokens: u64,
    /// Requests made to a model provider (every request, not main turns).
    pub model_calls: u64,
    /// Tool calls that produced a result, successful or not.
    pub tool_calls: u64,
    /// The subset of `tool_calls` whose result was an error.
    pub failed_tool_calls: u64,
    /// In a run's `usage` event: the part of the token and model-call totals that came from
    /// its subagents (nested ones included); absent when the run started none. Tool calls
    /// count the run's own only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<SubagentTokens>,
}

/// The subagents' part of a run's `usage` event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubagentTokens {
    /// Subagent runs counted, nested ones included.
    pub runs: u64,
    /// Input tokens (cached prompt tokens included), like the event's own.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls: u64,
}

impl From<crate::usage::SubagentUsage> for SubagentTokens {
    fn from(part: crate::usage::SubagentUsage) -> Self {
        let totals = part.totals;
        Self {
            runs: part.runs,
            input_tokens: totals
                .input_tokens
                .saturating_add(totals.cache_read_tokens)
                .saturating_add(totals.cache_write_tokens),
            output_tokens: totals.output_tokens,
            model_calls: totals.model_calls,
        }
    }
}

impl std::ops::Add for SubagentTokens {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            runs: self.runs.saturating_add(other.runs),
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            model_calls: self.model_calls.saturating_add(other.model_calls),
        }
    }
}

impl Usage {
    /// This usage with the subagents' `part` added to its totals and reported apart.
    pub fn with_subagents(self, part: SubagentTokens) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(part.input_tokens),
            output_tokens: self.output_tokens.saturating_add(part.output_tokens),
            model_calls: self.model_calls.saturating_add(part.model_calls),
            subagents: Some(part),
            ..self
        }
    }
}
