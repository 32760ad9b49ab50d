//! The action ledger (SPEC.md N18): one entry per model call and per tool call of a run, and
//! the usage computed from those entries.
//!
//! Usage and cost/action budgets come from here, never from the loop's turn counters: a main
//! turn is not a model call (recoveries, retries and hook continuations are extra calls) and not
//! an action count. Session and tenant usage are sums over their runs' ledgers.

use crate::ids::{RunId, SessionId, TenantId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::iter::Sum;
use std::ops::{Add, AddAssign};

/// What one ledger entry records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    /// One request to a model provider, with the tokens it reported.
    ModelCall {
        /// Input tokens the provider reported for the request.
        input_tokens: u64,
        /// Output tokens the provider reported for the response.
        output_tokens: u64,
    },
    /// One tool call that produced a result.
    ToolCall {
        /// The tool's registered name.
        name: String,
        /// False when the result was an error result.
        ok: bool,
    },
}

/// One recorded action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What happened; flattened, so the JSON carries a `kind` tag.
    #[serde(flatten)]
    pub kind: EntryKind,
    /// When the action finished.
    pub at: DateTime<Utc>,
}

impl Entry {
    /// A model call that finished at `at`.
    pub fn model_call(input_tokens: u64, output_tokens: u64, at: DateTime<Utc>) -> Self {
        Self {
            kind: EntryKind::ModelCall {
                input_tokens,
                output_tokens,
            },
            at,
        }
    }

    /// A tool call that finished at `at`.
    pub fn tool_call(name: impl Into<String>, ok: bool, at: DateTime<Utc>) -> Self {
        Self {
            kind: EntryKind::ToolCall {
                name: name.into(),
                ok,
            },
            at,
        }
    }
}

pub use crate::run_event::Usage;

impl Usage {
    /// Usage of the given entries. Counts saturate instead of overflowing.
    pub fn from_entries(entries: &[Entry]) -> Self {
        entries.iter().fold(Self::default(), |mut usage, entry| {
            match &entry.kind {
                EntryKind::ModelCall {
                    input_tokens,
                    output_tokens,
                } => {
                    usage.input_tokens = usage.input_tokens.saturating_add(*input_tokens);
                    usage.output_tokens = usage.output_tokens.saturating_add(*output_tokens);
                    usage.model_calls = usage.model_calls.saturating_add(1);
                }
                EntryKind::ToolCall { ok, .. } => {
                    usage.tool_calls = usage.tool_calls.saturating_add(1);
                    if !ok {
                        usage.failed_tool_calls = usage.failed_tool_calls.saturating_add(1);
                    }
                }
            }
            usage
        })
    }

    /// Input plus output tokens: what a token budget counts.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl Add for Usage {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            model_calls: self.model_calls.saturating_add(other.model_calls),
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
            failed_tool_calls: self
                .failed_tool_calls
                .saturating_add(other.failed_tool_calls),
            subagents: match (self.subagents, other.subagents) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            },
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

impl Sum for Usage {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

/// The ledger of one run: who it belongs to and what it did, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLedger {
    /// The tenant the run acted for.
    pub tenant: TenantId,
    /// The session the run belongs to.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// Every recorded action, in the order recorded.
    pub entries: Vec<Entry>,
    /// Usage recorded before this ledger started (a resumed run: its model calls before the
    /// resume, read back from the store's usage ledger).
    #[serde(default)]
    pub prior: Usage,
}

impl RunLedger {
    /// An empty ledger for a run.
    pub fn new(tenant: TenantId, session_id: SessionId, run_id: RunId) -> Self {
        Self {
            tenant,
            session_id,
            run_id,
            entries: Vec::new(),
            prior: Usage::default(),
        }
    }

    /// Appends an entry.
    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    /// Records a model call that finished now.
    pub fn record_model_call(&mut self, input_tokens: u64, output_tokens: u64) {
        self.push(Entry::model_call(input_tokens, output_tokens, Utc::now()));
    }

    /// Records a tool call that finished now.
    pub fn record_tool_call(&mut self, name: impl Into<String>, ok: bool) {
        self.push(Entry::tool_call(name, ok, Utc::now()));
    }

    /// This run's usage: what came before ([`RunLedger::prior`]) plus the entries.
    pub fn usage(&self) -> Usage {
        self.prior + Usage::from_entries(&self.entries)
    }
}

/// Usage of one session: the sum of its runs among `runs`.
pub fn session_usage<'a>(
    runs: impl IntoIterator<Item = &'a RunLedger>,
    tenant: &TenantId,
    session_id: &SessionId,
) -> Usage {
    runs.into_iter()
        .filter(|run| &run.tenant == tenant && &run.session_id == session_id)
        .map(RunLedger::usage)
        .sum()
}

/// Usage of one tenant: the sum of its runs among `runs`.
pub fn tenant_usage<'a>(runs: impl IntoIterator<Item = &'a RunLedger>, tenant: &TenantId) -> Usage {
    runs.into_iter()
        .filter(|run| &run.tenant == tenant)
        .map(RunLedger::usage)
        .sum()
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
