//! The `context` section of a session configuration: which context policy its runs use, and
//! Noa's thresholds. Parsed strictly: an unknown key, a Noa setting without `"policy": "noa"`
//! or an inconsistent threshold is a `422 INVALID_REQUEST` whose `details.reason` is one of the
//! stable codes of [`reasons`].

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Stable reasons of a refused `context` section (`details.reason` of the 422).
pub mod reasons {
    /// A Noa setting was given while `policy` is not `noa`.
    pub const NOT_NOA: &str = "NOA_SETTING_WITHOUT_NOA";
    /// `soft_limit_tokens` must be below `hard_limit_tokens`.
    pub const LIMITS_ORDER: &str = "NOA_LIMITS_ORDER";
    /// A limit is outside 1,000..=10,000,000 tokens.
    pub const LIMIT_RANGE: &str = "NOA_LIMIT_RANGE";
    /// `protected_tail` is outside 2..=1,000 messages.
    pub const TAIL_RANGE: &str = "NOA_TAIL_RANGE";
    /// `min_range_tokens` is above `soft_limit_tokens`.
    pub const FLOOR_RANGE: &str = "NOA_FLOOR_RANGE";
    /// `max_summary_chars` is outside 100..=50,000.
    pub const SUMMARY_RANGE: &str = "NOA_SUMMARY_RANGE";
    /// `prune_min_tokens` is outside 50..=`hard_limit_tokens`.
    pub const PRUNE_RANGE: &str = "NOA_PRUNE_RANGE";
    /// `nudge` is empty or longer than 2,000 characters.
    pub const NUDGE_LENGTH: &str = "NOA_NUDGE_LENGTH";
}

/// Which context policy a session's runs use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextPolicyKind {
    /// The built-in compaction: summarise older runs behind a boundary near the threshold.
    #[default]
    Compaction,
    /// Noa: refs, blocks and tiers; the model compresses ranges itself (`Compress`).
    Noa,
}

/// A session's `context` section. Every field but `policy` is a Noa setting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextSettings {
    #[serde(default)]
    pub policy: ContextPolicyKind,
    /// Projected request size (tokens) above which the model is nudged to compress
    /// (default 60,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft_limit_tokens: Option<u64>,
    /// Projected size above which the oldest unprotected blocks are dropped from the view
    /// (emergency truncation; default 100,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_limit_tokens: Option<u64>,
    /// The most recent messages that are soft-protected (default 8, 2..=1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_tail: Option<u32>,
    /// The fewest tokens one compression range must absorb (default 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_range_tokens: Option<u64>,
    /// The longest summary of one range, in characters (default 4,000, 100..=50,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_summary_chars: Option<u32>,
    /// A consumed result of a read-only call bigger than this (tokens) is pruned from the view
    /// once it leaves the protected tail (default 2,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune_min_tokens: Option<u64>,
    /// The nudge text shown to the model above the soft limit (at most 2,000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nudge: Option<String>,
}

/// Noa's settings, defaults applied and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct NoaSettings {
    pub soft_limit_tokens: u64,
    pub hard_limit_tokens: u64,
    pub protected_tail: u32,
    pub min_range_tokens: u64,
    pub max_summary_chars: u32,
    pub prune_min_tokens: u64,
    pub nudge: String,
}

/// The nudge shown when no `nudge` is configured.
pub const DEFAULT_NUDGE: &str = "The context is getting large. Call the Compress tool with \
    ranges of older messages (from_ref and to_ref are the [ref m…] markers; a range starts and \
    ends on whole tool call/result pairs) and a summary of each that keeps what you still \
    need. The originals are archived and can be read back with Expand.";

impl Default for NoaSettings {
    fn default() -> Self {
        Self {
            soft_limit_tokens: 60_000,
            hard_limit_tokens: 100_000,
            protected_tail: 8,
            min_range_tokens: 500,
            max_summary_chars: 4_000,
            prune_min_tokens: 2_000,
            nudge: DEFAULT_NUDGE.to_owned(),
        }
    }
}

/// Why a `context` section was refused: the field, a stable reason and a message.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingsViolation {
    pub field: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl ContextSettings {
    /// Noa's settings when the policy is Noa, `Ok(None)` for the built-in compaction.
    pub fn noa(&self) -> Result<Option<NoaSettings>, SettingsViolation> {
        let violation = |field: &'static str, reason: &'static str, message: String| {
            Err(SettingsViolation {
                field,
                reason,
                message,
            })
        };
        if self.policy != ContextPolicyKind::Noa {
            let given = [
                (
                    "context.soft_limit_tokens",
                    self.soft_limit_tokens.is_some(),
                ),
                (
                    "context.hard_limit_tokens",
                    self.hard_limit_tokens.is_some(),
                ),
                ("context.protected_tail", self.protected_tail.is_some()),
                ("context.min_range_tokens", self.min_range_tokens.is_some()),
                (
                    "context.max_summary_chars",
                    self.max_summary_chars.is_some(),
                ),
                ("context.prune_min_tokens", self.prune_min_tokens.is_some()),
                ("context.nudge", self.nudge.is_some()),
            ];
            if let Some((field, _)) = given.iter().find(|(_, set)| *set) {
                return violation(
                    field,
                    reasons::NOT_NOA,
                    "a Noa setting needs \"policy\": \"noa\"".into(),
                );
            }
            return Ok(None);
        }
        let defaults = NoaSettings::default();
        let settings = NoaSettings {
            soft_limit_tokens: self.soft_limit_tokens.unwrap_or(defaults.soft_limit_tokens),
            hard_limit_tokens: self.hard_limit_tokens.unwrap_or(defaults.hard_limit_tokens),
            protected_tail: self.protected_tail.unwrap_or(defaults.protected_tail),
            min_range_tokens: self.min_range_tokens.unwrap_or(defaults.min_range_tokens),
            max_summary_chars: self.max_summary_chars.unwrap_or(defaults.max_summary_chars),
            prune_min_tokens: self.prune_min_tokens.unwrap_or(defaults.prune_min_tokens),
            nudge: self.nudge.clone().unwrap_or(defaults.nudge),
        };
        const LIMITS: std::ops::RangeInclusive<u64> = 1_000..=10_000_000;
        for (field, value) in [
            ("context.soft_limit_tokens", settings.soft_limit_tokens),
            ("context.hard_limit_tokens", settings.hard_limit_tokens),
        ] {
            if !LIMITS.contains(&value) {
                return violation(
                    field,
                    reasons::LIMIT_RANGE,
                    "must be between 1000 and 10000000".into(),
                );
            }
        }
        if settings.soft_limit_tokens >= settings.hard_limit_tokens {
            return violation(
                "context.soft_limit_tokens",
                reasons::LIMITS_ORDER,
                "must be below hard_limit_tokens".into(),
            );
        }
        if !(2..=1_000).contains(&settings.protected_tail) {
            return violation(
                "context.protected_tail",
                reasons::TAIL_RANGE,
                "must be between 2 and 1000".into(),
            );
        }
        if settings.min_range_tokens > settings.soft_limit_tokens {
            return violation(
                "context.min_range_tokens",
                reasons::FLOOR_RANGE,
                "must not exceed soft_limit_tokens".into(),
            );
        }
        if !(100..=50_000).contains(&settings.max_summary_chars) {
            return violation(
                "context.max_summary_chars",
                reasons::SUMMARY_RANGE,
                "must be between 100 and 50000".into(),
            );
        }
        if !(50..=settings.hard_limit_tokens).contains(&settings.prune_min_tokens) {
            return violation(
                "context.prune_min_tokens",
                reasons::PRUNE_RANGE,
                "must be between 50 and hard_limit_tokens".into(),
            );
        }
        let nudge_chars = settings.nudge.chars().count();
        if settings.nudge.trim().is_empty() || nudge_chars > 2_000 {
            return violation(
                "context.nudge",
                reasons::NUDGE_LENGTH,
                "must be 1 to 2000 characters".into(),
            );
        }
        Ok(Some(settings))
    }

    /// Whether this is the default (built-in compaction, nothing set).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: serde_json::Value) -> ContextSettings {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(parse(json!({})).noa(), Ok(None));
        let noa = parse(json!({"policy": "noa"})).noa().unwrap().unwrap();
        assert_eq!(noa, NoaSettings::default());
        let noa = parse(json!({"policy": "noa", "soft_limit_tokens": 2000,
            "hard_limit_tokens": 3000, "protected_tail": 4, "nudge": "compress!"}))
        .noa()
        .unwrap()
        .unwrap();
        assert_eq!((noa.soft_limit_tokens, noa.protected_tail), (2000, 4));
        assert_eq!(noa.nudge, "compress!");
    }

    #[test]
    fn every_inconsistency_has_its_reason() {
        for (body, field, reason) in [
            (
                json!({"soft_limit_tokens": 2000}),
                "context.soft_limit_tokens",
                reasons::NOT_NOA,
            ),
            (
                json!({"policy": "noa", "soft_limit_tokens": 5000, "hard_limit_tokens": 5000}),
                "context.soft_limit_tokens",
                reasons::LIMITS_ORDER,
            ),
            (
                json!({"policy": "noa", "soft_limit_tokens": 10}),
                "context.soft_limit_tokens",
                reasons::LIMIT_RANGE,
            ),
            (
                json!({"policy": "noa", "hard_limit_tokens": 20_000_000}),
                "context.hard_limit_tokens",
                reasons::LIMIT_RANGE,
            ),
            (
                json!({"policy": "noa", "protected_tail": 1}),
                "context.protected_tail",
                reasons::TAIL_RANGE,
            ),
            (
                json!({"policy": "noa", "min_range_tokens": 70_000}),
                "context.min_range_tokens",
                reasons::FLOOR_RANGE,
            ),
            (
                json!({"policy": "noa", "max_summary_chars": 10}),
                "context.max_summary_chars",
                reasons::SUMMARY_RANGE,
            ),
            (
                json!({"policy": "noa", "prune_min_tokens": 1}),
                "context.prune_min_tokens",
                reasons::PRUNE_RANGE,
            ),
            (
                json!({"policy": "noa", "nudge": "  "}),
                "context.nudge",
                reasons::NUDGE_LENGTH,
            ),
            (
                json!({"policy": "noa", "nudge": "x".repeat(2001)}),
                "context.nudge",
                reasons::NUDGE_LENGTH,
            ),
        ] {
            let violation = parse(body.clone()).noa().unwrap_err();
            assert_eq!(
                (violation.field, violation.reason),
                (field, reason),
                "{body}"
            );
        }
        assert!(serde_json::from_value::<ContextSettings>(json!({"policy": "other"})).is_err());
        assert!(serde_json::from_value::<ContextSettings>(json!({"softlimit": 1})).is_err());
    }
}
