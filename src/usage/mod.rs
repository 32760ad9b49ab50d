//! Usage and cost accounting: the usage ledger's rows (one per completed model call, written
//! by the store in the transaction that commits the call's events), the price table that gives
//! every row a cost, and the totals the API shows per run, per session and per tenant.
//!
//! This module is a leaf: the store, the runtime and the API all name its types.

pub mod prices;

pub use prices::Price;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Tokens one model call reported. `input_tokens` excludes cached prompt tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl From<crate::llm::Usage> for TokenCounts {
    fn from(usage: crate::llm::Usage) -> Self {
        Self {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        }
    }
}

/// What a run's model calls are recorded as: the provider kind, the model name and its price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageMeter {
    pub provider: String,
    pub model: String,
    /// `None` when the price table does not list the model: its rows have no cost.
    pub price: Option<Price>,
}

impl UsageMeter {
    /// The meter of `provider`/`model`, priced from `prices`.
    pub fn new(provider: &str, model: &str, prices: &[Price]) -> Self {
        Self {
            provider: provider.to_owned(),
            model: model.to_owned(),
            price: prices::lookup(prices, provider, model).cloned(),
        }
    }

    /// The ledger row of one model call of `run_id`.
    pub fn record(&self, run_id: &str, tokens: TokenCounts) -> NewUsageRecord {
        NewUsageRecord {
            run_id: run_id.to_owned(),
            provider: self.provider.clone(),
            model: self.model.clone(),
            tokens,
            cost_pico: self.price.as_ref().map(|price| price.cost_pico(&tokens)),
        }
    }
}

/// One usage ledger row to write (the store adds tenant, session and time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewUsageRecord {
    pub run_id: String,
    pub provider: String,
    pub model: String,
    pub tokens: TokenCounts,
    /// Exact cost in pico-units; `None` for an unpriced model.
    pub cost_pico: Option<i64>,
}

/// Sums over usage ledger rows, as the API shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageTotals {
    /// Completed model calls.
    pub model_calls: u64,
    /// Uncached input tokens.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    /// Cost of the priced calls in micro-units of the operator's currency (from the
    /// `[[prices]]` table at the time of each call), rounded half up.
    pub cost_micros: u64,
    /// Calls of a model the price table did not list (not in `cost_micros`).
    pub unpriced_model_calls: u64,
}

impl UsageTotals {
    /// Every token of every kind: what a token budget counts.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }
}

impl UsageTotals {
    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &UsageTotals) {
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cost_micros = self.cost_micros.saturating_add(other.cost_micros);
        self.unpriced_model_calls = self
            .unpriced_model_calls
            .saturating_add(other.unpriced_model_calls);
    }
}

/// A run's (or a session's) usage with its subagents': the top-level totals are its own
/// model calls plus every subagent's (nested ones included), and `subagents` says what part
/// came from them. Each subagent's own calls are in the usage ledger under the subagent's
/// session, so `GET /v1/usage` (which sums the ledger) never counts them twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageWithSubagents {
    #[serde(flatten)]
    pub totals: UsageTotals,
    /// The part of the totals that came from subagents (`Agent` calls); absent when none
    /// was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<SubagentUsage>,
}

/// The subagents' part of a usage total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubagentUsage {
    /// Subagent runs counted, nested ones included.
    pub runs: u64,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

impl UsageWithSubagents {
    /// Own usage only (no subagent counted yet).
    pub fn own(totals: UsageTotals) -> Self {
        Self {
            totals,
            subagents: None,
        }
    }

    /// Counts one subagent run whose usage (its own subagents' included) is `child`.
    pub fn add_subagent(&mut self, child: &UsageWithSubagents) {
        self.totals.add(&child.totals);
        let part = self.subagents.get_or_insert_with(SubagentUsage::default);
        part.runs = part
            .runs
            .saturating_add(1)
            .saturating_add(child.subagents.map_or(0, |nested| nested.runs));
        part.totals.add(&child.totals);
    }

    /// Every token of every kind, subagents' included.
    pub fn total_tokens(&self) -> u64 {
        self.totals.total_tokens()
    }
}

impl From<UsageTotals> for crate::run_event::Usage {
    /// The run-event view of ledger totals: input counts cached prompt tokens too; tool calls
    /// are not in the usage ledger (zero).
    fn from(totals: UsageTotals) -> Self {
        Self {
            input_tokens: totals
                .input_tokens
                .saturating_add(totals.cache_read_tokens)
                .saturating_add(totals.cache_write_tokens),
            output_tokens: totals.output_tokens,
            model_calls: totals.model_calls,
            tool_calls: 0,
            failed_tool_calls: 0,
            subagents: None,
        }
    }
}

/// How `GET /v1/usage` groups the tenant's usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageGroupBy {
    /// Per UTC day (`key` is `YYYY-MM-DD`).
    Day,
    /// Per session (`key` is the session id).
    Session,
    /// Per provider and model (`key` is `provider/model`).
    Model,
}

impl UsageGroupBy {
    /// The SQL expression of the group key (the same on both stores).
    pub fn key_sql(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Session => "session_id",
            Self::Model => "provider || '/' || model",
        }
    }
}

/// One group of a usage report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageGroup {
    /// The day, session id or `provider/model`.
    pub key: String,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// What the store is asked for a report: the tenant's rows with `from <= created_at < to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageQuery {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: UsageGroupBy,
    /// Most groups returned (ordered by key).
    pub limit: u32,
}

/// Raw sums as read from the store (signed: what SQL returns); one row model for both
/// backends (the columns of [`SUMS_SQL`]).
#[derive(Clone, Copy, Debug, Default, sqlx::FromRow)]
pub struct RawSums {
    pub model_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_pico: i64,
    pub unpriced_model_calls: i64,
}

impl From<RawSums> for UsageTotals {
    fn from(raw: RawSums) -> Self {
        let n = |value: i64| u64::try_from(value).unwrap_or(0);
        Self {
            model_calls: n(raw.model_calls),
            input_tokens: n(raw.input_tokens),
            output_tokens: n(raw.output_tokens),
            cache_read_tokens: n(raw.cache_read_tokens),
            cache_write_tokens: n(raw.cache_write_tokens),
            cost_micros: n(prices::pico_to_micros(raw.cost_pico)),
            unpriced_model_calls: n(raw.unpriced_model_calls),
        }
    }
}

/// The SQL select list both backends use for sums over `usage_records` (columns named like
/// [`RawSums`]'s fields).
pub const SUMS_SQL: &str = "CAST(COUNT(*) AS BIGINT) AS model_calls, \
     CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT) AS input_tokens, \
     CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) AS output_tokens, \
     CAST(COALESCE(SUM(cache_read_tokens), 0) AS BIGINT) AS cache_read_tokens, \
     CAST(COALESCE(SUM(cache_write_tokens), 0) AS BIGINT) AS cache_write_tokens, \
     CAST(COALESCE(SUM(cost_pico), 0) AS BIGINT) AS cost_pico, \
     CAST(COALESCE(SUM(CASE WHEN cost_pico IS NULL THEN 1 ELSE 0 END), 0) AS BIGINT) \
     AS unpriced_model_calls";

/// Which rows a total covers.
#[derive(Clone, Copy, Debug)]
pub enum UsageScope<'a> {
    /// One run, of the session that ran it.
    Run {
        session: &'a str,
        run: &'a str,
    },
    Session(&'a str),
}

impl<'a> UsageScope<'a> {
    /// The rows' condition after the tenant's (`$2` the session, `$3` the run) and its
    /// values; both scopes read through the ledger's index on `(session_id, run_id)`.
    pub fn filter(self) -> (&'static str, &'a str, Option<&'a str>) {
        match self {
            Self::Run { session, run } => ("session_id = $2 AND run_id = $3", session, Some(run)),
            Self::Session(session) => ("session_id = $2", session, None),
        }
    }
}

/// A token count as an SQL `BIGINT` (saturating).
pub fn sql_count(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
