//! Per-tenant spend budgets: tokens and/or cost per UTC day and per UTC month.
//!
//! A budget is part of the tenant limits model: `[limits.budget]` is every tenant's default,
//! and an operator may replace it for one tenant through the operator API (stored in the
//! store, so every replica sees a change at its next check; nothing is cached).
//!
//! What a tenant spent is the store's truth, never a per-replica counter: the usage ledger's
//! transaction (the one that commits a model call's events) also adds the call's tokens and
//! cost to the tenant's running total of the call's UTC day and UTC month (`tenant_spend`),
//! so a check is two primary-key reads, whichever replica made the calls.
//!
//! - Periods are UTC calendar periods: a day runs from 00:00 UTC, a month from 00:00 UTC on
//!   its first day; a period's spend starts from zero when it begins.
//! - Tokens are every kind a call reported (uncached input, output, cache reads, cache
//!   writes); cost is the price table's cost of the call (exact, in pico-units).
//! - A budget is *spent* once the period's spend reaches it. Then a new prompt is refused
//!   (`429 BUDGET_EXCEEDED` with the reset time), and a run going on ends after the turn that
//!   reached it (terminal `budget_exhausted` with `budget: tenant_tokens | tenant_cost`): the
//!   check runs between turns, never in the middle of a model call or a tool call, so the
//!   turn that crosses the line is finished and may overshoot it.
//! - A tenant with a cost budget cannot use a model the price table does not list: its calls
//!   would cost nothing (`MODEL_NOT_PRICED`).

use crate::run_event::BudgetKind;
use crate::usage::{NewUsageRecord, TokenCounts};
use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The largest token budget accepted (10^15 tokens): beyond it a typo, not a budget.
pub const MAX_TOKENS: u64 = 1_000_000_000_000_000;
/// The largest cost budget accepted, in micro-units (10^15, a billion units of currency).
pub const MAX_COST_MICROS: u64 = 1_000_000_000_000_000;

/// A tenant's spend limits; an absent value is no limit for that period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// Tokens of every kind per UTC day (0..=10^15).
    #[schema(maximum = 1_000_000_000_000_000_u64)]
    pub tokens_per_day: Option<u64>,
    /// Tokens of every kind per UTC month (0..=10^15).
    #[schema(maximum = 1_000_000_000_000_000_u64)]
    pub tokens_per_month: Option<u64>,
    /// Cost per UTC day in micro-units of the price table's currency (0..=10^15).
    #[schema(maximum = 1_000_000_000_000_000_u64)]
    pub cost_micros_per_day: Option<u64>,
    /// Cost per UTC month in micro-units of the price table's currency (0..=10^15).
    #[schema(maximum = 1_000_000_000_000_000_u64)]
    pub cost_micros_per_month: Option<u64>,
}

impl Budget {
    /// Checks every value is in bounds; the error names the field.
    pub fn validate(&self) -> Result<(), BudgetInvalid> {
        for (field, value, max) in [
            ("tokens_per_day", self.tokens_per_day, MAX_TOKENS),
            ("tokens_per_month", self.tokens_per_month, MAX_TOKENS),
            (
                "cost_micros_per_day",
                self.cost_micros_per_day,
                MAX_COST_MICROS,
            ),
            (
                "cost_micros_per_month",
                self.cost_micros_per_month,
                MAX_COST_MICROS,
            ),
        ] {
            if value.is_some_and(|value| value > max) {
                return Err(BudgetInvalid { field, max });
            }
        }
        Ok(())
    }

    /// Whether any cost limit is set (the tenant's models must then be priced).
    pub fn has_cost(&self) -> bool {
        self.cost_micros_per_day.is_some() || self.cost_micros_per_month.is_some()
    }

    /// Whether no limit at all is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// The first limit `spend` reached, preferring the one that resets last (the reset a
    /// client must wait for).
    pub fn check(&self, spend: &TenantSpend, now: DateTime<Utc>) -> Result<(), BudgetExceeded> {
        let limits = [
            (Period::Month, Resource::Tokens, self.tokens_per_month),
            (Period::Month, Resource::Cost, self.cost_micros_per_month),
            (Period::Day, Resource::Tokens, self.tokens_per_day),
            (Period::Day, Resource::Cost, self.cost_micros_per_day),
        ];
        for (period, resource, limit) in limits {
            let Some(limit) = limit else { continue };
            let used = spend.of(period);
            let (spent, reached) = match resource {
                Resource::Tokens => (used.tokens, used.tokens >= limit),
                Resource::Cost => (
                    used.cost_micros(),
                    u128::from(used.cost_pico) >= u128::from(limit) * 1_000_000,
                ),
            };
            if reached {
                return Err(BudgetExceeded {
                    resource,
                    period,
                    limit,
                    spent,
                    resets_at: period.end(now),
                });
            }
        }
        Ok(())
    }
}

/// A budget value out of bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be at most {max}")]
pub struct BudgetInvalid {
    pub field: &'static str,
    pub max: u64,
}

/// What a budget limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Tokens,
    Cost,
}

impl Resource {
    /// The budget's name in `details.budget` and in the run's terminal reason.
    pub fn kind(self) -> BudgetKind {
        match self {
            Self::Tokens => BudgetKind::TenantTokens,
            Self::Cost => BudgetKind::TenantCost,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tenant_tokens",
            Self::Cost => "tenant_cost",
        }
    }
}

/// A UTC calendar period.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "day",
            Self::Month => "month",
        }
    }

    /// The period's key in the store: `YYYY-MM-DD` for a day, `YYYY-MM` for a month.
    pub fn key(self, at: DateTime<Utc>) -> String {
        match self {
            Self::Day => at.format("%Y-%m-%d").to_string(),
            Self::Month => at.format("%Y-%m").to_string(),
        }
    }

    /// When the period holding `at` began.
    pub fn start(self, at: DateTime<Utc>) -> DateTime<Utc> {
        let date = at.date_naive();
        let first = match self {
            Self::Day => date,
            Self::Month => date.with_day(1).unwrap_or(date),
        };
        midnight(first)
    }

    /// When the period holding `at` ends (the next one begins): the reset time.
    pub fn end(self, at: DateTime<Utc>) -> DateTime<Utc> {
        let date = at.date_naive();
        let next = match self {
            Self::Day => date.succ_opt(),
            Self::Month => {
                let (year, month) = if date.month() == 12 {
                    (date.year() + 1, 1)
                } else {
                    (date.year(), date.month() + 1)
                };
                NaiveDate::from_ymd_opt(year, month, 1)
            }
        };
        next.map_or(DateTime::<Utc>::MAX_UTC, midnight)
    }
}

fn midnight(date: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&date.and_hms_opt(0, 0, 0).unwrap_or_default())
}

/// What a tenant spent in one period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spend {
    pub tokens: u64,
    /// Exact cost in pico-units (millionths of a micro-unit).
    pub cost_pico: u64,
}

impl Spend {
    /// The cost in micro-units, rounded half up.
    pub fn cost_micros(&self) -> u64 {
        self.cost_pico.saturating_add(500_000) / 1_000_000
    }

    fn add(&mut self, other: Spend) {
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.cost_pico = self.cost_pico.saturating_add(other.cost_pico);
    }
}

/// What a tenant spent in the current day and month.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TenantSpend {
    pub day: Spend,
    pub month: Spend,
}

impl TenantSpend {
    pub fn of(&self, period: Period) -> Spend {
        match period {
            Period::Day => self.day,
            Period::Month => self.month,
        }
    }

    /// Adds what is not committed yet (the turn that just ended) to both periods.
    pub fn plus(mut self, pending: Spend) -> Self {
        self.day.add(pending);
        self.month.add(pending);
        self
    }
}

/// What one model call adds to its tenant's spend.
pub fn spend_of(tokens: &TokenCounts, cost_pico: Option<i64>) -> Spend {
    Spend {
        tokens: tokens
            .input_tokens
            .saturating_add(tokens.output_tokens)
            .saturating_add(tokens.cache_read_tokens)
            .saturating_add(tokens.cache_write_tokens),
        cost_pico: cost_pico.map_or(0, |cost| u64::try_from(cost).unwrap_or(0)),
    }
}

/// What a batch of ledger rows adds to its tenant's spend.
pub fn spend_of_records(records: &[NewUsageRecord]) -> Spend {
    let mut total = Spend::default();
    for record in records {
        total.add(spend_of(&record.tokens, record.cost_pico));
    }
    total
}

/// One running total to add to in the store: the period, its key and the amounts (as SQL
/// `BIGINT`s, saturating).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendDelta {
    pub period: Period,
    pub key: String,
    pub tokens: i64,
    pub cost_pico: i64,
}

/// The day and month totals a batch of ledger rows written at `at` adds to (none when the
/// batch has no rows).
pub fn spend_deltas(records: &[NewUsageRecord], at: DateTime<Utc>) -> Vec<SpendDelta> {
    spend_periods(records, at).map_or_else(Vec::new, Vec::from)
}

/// [`spend_deltas`] as the pair it always is: the day's total, then the month's.
pub fn spend_periods(records: &[NewUsageRecord], at: DateTime<Utc>) -> Option<[SpendDelta; 2]> {
    if records.is_empty() {
        return None;
    }
    let spend = spend_of_records(records);
    let sql = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    Some([Period::Day, Period::Month].map(|period| SpendDelta {
        period,
        key: period.key(at),
        tokens: sql(spend.tokens),
        cost_pico: sql(spend.cost_pico),
    }))
}

/// A spent budget: nothing new may start until `resets_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the tenant's {} budget per {} is spent ({spent} of {limit} {}); it resets at {resets_at}",
    resource.as_str(), period.as_str(), unit(*resource)
)]
pub struct BudgetExceeded {
    pub resource: Resource,
    pub period: Period,
    /// The limit (tokens, or micro-units of cost).
    pub limit: u64,
    /// What was spent in the period (tokens, or micro-units of cost).
    pub spent: u64,
    pub resets_at: DateTime<Utc>,
}

fn unit(resource: Resource) -> &'static str {
    match resource {
        Resource::Tokens => "tokens",
        Resource::Cost => "micro-units",
    }
}

impl BudgetExceeded {
    /// `details` of the API error.
    pub fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "budget": self.resource.as_str(),
            "period": self.period.as_str(),
            "limit": self.limit,
            "spent": self.spent,
            "resets_at": self.resets_at,
        })
    }

    /// Whole seconds from `now` until the reset (at least 1): the `Retry-After`.
    pub fn retry_after_seconds(&self, now: DateTime<Utc>) -> u64 {
        let seconds = (self.resets_at - now).num_seconds().max(0);
        u64::try_from(seconds).unwrap_or(0).max(1)
    }
}

/// Where a tenant's effective budget comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetSource {
    /// `[limits.budget]` of the configuration.
    Default,
    /// Set for this tenant through the operator API.
    Operator,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn periods_are_utc_calendar_periods() {
        let now = at("2026-12-31T23:59:30Z");
        assert_eq!(Period::Day.key(now), "2026-12-31");
        assert_eq!(Period::Month.key(now), "2026-12");
        assert_eq!(Period::Day.end(now), at("2027-01-01T00:00:00Z"));
        assert_eq!(Period::Month.end(now), at("2027-01-01T00:00:00Z"));
        assert_eq!(Period::Month.start(now), at("2026-12-01T00:00:00Z"));
        let leap = at("2028-02-29T12:00:00Z");
        assert_eq!(Period::Month.end(leap), at("2028-03-01T00:00:00Z"));
        assert_eq!(Period::Day.end(leap), at("2028-03-01T00:00:00Z"));
    }

    #[test]
    fn a_budget_is_spent_once_reached_and_names_the_latest_reset() {
        let now = at("2026-12-01T10:00:00Z");
        let budget = Budget {
            tokens_per_day: Some(100),
            tokens_per_month: Some(1000),
            ..Budget::default()
        };
        let spend = |day, month| TenantSpend {
            day: Spend {
                tokens: day,
                cost_pico: 0,
            },
            month: Spend {
                tokens: month,
                cost_pico: 0,
            },
        };
        assert!(budget.check(&spend(99, 99), now).is_ok());
        let day = budget.check(&spend(100, 100), now).unwrap_err();
        assert_eq!((day.period, day.resource), (Period::Day, Resource::Tokens));
        assert_eq!(day.resets_at, at("2026-12-02T00:00:00Z"));
        assert_eq!(day.retry_after_seconds(now), 14 * 3600);
        let month = budget.check(&spend(100, 1000), now).unwrap_err();
        assert_eq!(month.period, Period::Month);
        assert_eq!(month.details()["budget"], "tenant_tokens");
        assert_eq!(month.resets_at, at("2027-01-01T00:00:00Z"));
    }

    #[test]
    fn cost_is_compared_exactly_in_pico_units() {
        let now = at("2026-12-01T10:00:00Z");
        let budget = Budget {
            cost_micros_per_day: Some(2),
            ..Budget::default()
        };
        let spend = |pico| {
            TenantSpend::default().plus(Spend {
                tokens: 0,
                cost_pico: pico,
            })
        };
        assert!(budget.check(&spend(1_999_999), now).is_ok());
        let error = budget.check(&spend(2_000_000), now).unwrap_err();
        assert_eq!(error.resource.kind(), BudgetKind::TenantCost);
        assert!(budget.has_cost());
        assert!(!Budget::default().has_cost());
    }

    #[test]
    fn absurd_values_are_refused_and_zero_refuses_everything() {
        let budget = Budget {
            tokens_per_month: Some(MAX_TOKENS + 1),
            ..Budget::default()
        };
        assert_eq!(budget.validate().unwrap_err().field, "tokens_per_month");
        let zero = Budget {
            tokens_per_day: Some(0),
            ..Budget::default()
        };
        assert!(zero.validate().is_ok());
        assert!(
            zero.check(&TenantSpend::default(), Utc::now()).is_err(),
            "a zero budget is spent from the start"
        );
    }

    #[test]
    fn deltas_sum_a_batch_into_its_day_and_month() {
        let record = |input, cost| NewUsageRecord {
            run_id: "run".into(),
            provider: "p".into(),
            model: "m".into(),
            tokens: TokenCounts {
                input_tokens: input,
                output_tokens: 1,
                cache_read_tokens: 2,
                cache_write_tokens: 3,
            },
            cost_pico: cost,
        };
        let deltas = spend_deltas(
            &[record(10, Some(5)), record(u64::MAX, None)],
            at("2026-12-01T10:00:00Z"),
        );
        assert_eq!(deltas.len(), 2);
        assert_eq!(deltas[0].key, "2026-12-01");
        assert_eq!(deltas[1].key, "2026-12");
        assert_eq!(deltas[0].tokens, i64::MAX, "saturates");
        assert_eq!(deltas[0].cost_pico, 5);
        assert!(spend_deltas(&[], Utc::now()).is_empty());
    }
}
