//! The price table (`[[prices]]` in the configuration): what one million tokens of each kind
//! cost for a provider's model, in integer micro-units of the operator's currency (1 unit =
//! 1,000,000 micro-units), so sums never drift the way floats do.

use super::TokenCounts;
use serde::{Deserialize, Serialize};

/// The largest price accepted for a million tokens (1,000,000 units): beyond it a typo, not a
/// price. Keeps every product of tokens and price far inside `u128`.
pub const MAX_PRICE_MICROS: u64 = 1_000_000_000_000;

/// One row of the price table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Provider kind as configured: `anthropic`, `openai` or `scripted`.
    pub provider: String,
    /// Model name as sent to the provider.
    pub model: String,
    /// Micro-units per million uncached input tokens.
    #[serde(default)]
    pub input: u64,
    /// Micro-units per million output tokens.
    #[serde(default)]
    pub output: u64,
    /// Micro-units per million input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read: u64,
    /// Micro-units per million input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_write: u64,
}

impl Price {
    /// The exact cost of `tokens` in pico-units (millionths of a micro-unit), saturating at
    /// `i64::MAX` (what the store keeps).
    pub fn cost_pico(&self, tokens: &TokenCounts) -> i64 {
        let total = u128::from(tokens.input_tokens) * u128::from(self.input)
            + u128::from(tokens.output_tokens) * u128::from(self.output)
            + u128::from(tokens.cache_read_tokens) * u128::from(self.cache_read)
            + u128::from(tokens.cache_write_tokens) * u128::from(self.cache_write);
        i64::try_from(total).unwrap_or(i64::MAX)
    }
}

/// Checks the table: every price bounded, no provider/model listed twice, names non-empty.
pub fn validate(prices: &[Price]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for price in prices {
        if price.provider.is_empty() || price.model.is_empty() {
            return Err("prices: every entry needs a provider and a model".into());
        }
        for (name, value) in [
            ("input", price.input),
            ("output", price.output),
            ("cache_read", price.cache_read),
            ("cache_write", price.cache_write),
        ] {
            if value > MAX_PRICE_MICROS {
                return Err(format!(
                    "prices: {name} of {}/{} is above {MAX_PRICE_MICROS} micro-units per \
                     million tokens",
                    price.provider, price.model
                ));
            }
        }
        if !seen.insert((price.provider.as_str(), price.model.as_str())) {
            return Err(format!(
                "prices: {}/{} is listed twice",
                price.provider, price.model
            ));
        }
    }
    Ok(())
}

/// The price of a provider's model, if the table lists it.
pub fn lookup<'a>(prices: &'a [Price], provider: &str, model: &str) -> Option<&'a Price> {
    prices
        .iter()
        .find(|price| price.provider == provider && price.model == model)
}

/// Pico-units to micro-units, rounded half up.
pub fn pico_to_micros(pico: i64) -> i64 {
    pico.saturating_add(500_000) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price() -> Price {
        Price {
            provider: "anthropic".into(),
            model: "m".into(),
            input: 3_000_000,
            output: 15_000_000,
            cache_read: 300_000,
            cache_write: 3_750_000,
        }
    }

    #[test]
    fn cost_is_exact_in_pico_units() {
        let tokens = TokenCounts {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
            cache_write_tokens: 4,
        };
        // 1×3e6 + 2×15e6 + 3×3e5 + 4×3.75e6
        assert_eq!(price().cost_pico(&tokens), 48_900_000);
        assert_eq!(pico_to_micros(48_900_000), 49);
        assert_eq!(pico_to_micros(48_400_000), 48);
    }

    #[test]
    fn cost_saturates_instead_of_overflowing() {
        let tokens = TokenCounts {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cache_read_tokens: u64::MAX,
            cache_write_tokens: u64::MAX,
        };
        let mut price = price();
        price.input = MAX_PRICE_MICROS;
        assert_eq!(price.cost_pico(&tokens), i64::MAX);
    }

    #[test]
    fn validation_refuses_duplicates_empty_names_and_huge_prices() {
        assert!(validate(&[price()]).is_ok());
        assert!(validate(&[price(), price()]).unwrap_err().contains("twice"));
        let mut empty = price();
        empty.model.clear();
        assert!(validate(&[empty]).is_err());
        let mut huge = price();
        huge.output = MAX_PRICE_MICROS + 1;
        assert!(validate(&[huge]).unwrap_err().contains("output"));
        assert!(lookup(&[price()], "anthropic", "m").is_some());
        assert!(lookup(&[price()], "openai", "m").is_none());
    }
}
