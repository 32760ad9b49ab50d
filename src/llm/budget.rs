//! Per-turn output budget of every provider stream.
//!
//! A model endpoint is not trusted: a hostile or broken one (or a scripted turn) could stream
//! without end. [`collect`](super::collect) counts what one response accumulates and fails the
//! request with `MODEL_OUTPUT_TOO_LARGE` ([`ProviderError::OutputTooLarge`]) the moment a limit
//! is passed, before the item is appended. The run then ends with that error code. Limits, per
//! response:
//!
//! | What | Limit |
//! |---|---|
//! | visible text | [`MAX_TEXT_BYTES`] |
//! | thinking | [`MAX_THINKING_BYTES`] |
//! | tool-input JSON (all calls together) | [`MAX_TOOL_INPUT_BYTES`] |
//! | tool calls | [`MAX_TOOL_CALLS`] |
//! | stream items (deltas and the rest) | [`MAX_STREAM_ITEMS`] |
//! | HTTP response body bytes (SSE framing included) | [`MAX_RESPONSE_BYTES`] |
//!
//! The body limit is enforced where the body is read ([`super::sse`]); it also bounds what the
//! SSE parser buffers for an event line that never ends.

use super::{ProviderError, StreamItem};

/// Bytes of visible text one response may carry.
pub const MAX_TEXT_BYTES: usize = 1024 * 1024;
/// Bytes of thinking (and signatures) one response may carry.
pub const MAX_THINKING_BYTES: usize = 1024 * 1024;
/// Bytes of tool-input JSON one response may carry, over all its tool calls.
pub const MAX_TOOL_INPUT_BYTES: usize = 12 * 1024 * 1024;
/// Tool calls one response may make.
pub const MAX_TOOL_CALLS: usize = 64;
/// Stream items (deltas, starts, usage, …) one response may produce.
pub const MAX_STREAM_ITEMS: usize = 100_000;

/// Bytes of one streamed HTTP response body, framing included.
pub const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// What one response has accumulated so far.
#[derive(Debug, Default)]
pub struct TurnBudget {
    text: usize,
    thinking: usize,
    tool_input: usize,
    tool_calls: usize,
    items: usize,
}

fn over(what: &str, limit: usize) -> ProviderError {
    ProviderError::OutputTooLarge(format!(
        "one model response exceeded the limit of {limit} {what}"
    ))
}

impl TurnBudget {
    /// Counts `item`; an error when it would pass a limit (the item must then be dropped).
    pub fn admit(&mut self, item: &StreamItem) -> Result<(), ProviderError> {
        self.items += 1;
        if self.items > MAX_STREAM_ITEMS {
            return Err(over("stream items", MAX_STREAM_ITEMS));
        }
        match item {
            StreamItem::TextDelta(delta) => {
                self.text += delta.len();
                if self.text > MAX_TEXT_BYTES {
                    return Err(over("bytes of text", MAX_TEXT_BYTES));
                }
            }
            StreamItem::ThinkingDelta(delta)
            | StreamItem::ThinkingSignature(delta)
            | StreamItem::RedactedThinking(delta) => {
                self.thinking += delta.len();
                if self.thinking > MAX_THINKING_BYTES {
                    return Err(over("bytes of thinking", MAX_THINKING_BYTES));
                }
            }
            StreamItem::ToolUseStart { .. } => {
                self.tool_calls += 1;
                if self.tool_calls > MAX_TOOL_CALLS {
                    return Err(over("tool calls", MAX_TOOL_CALLS));
                }
            }
            StreamItem::ToolUseInputDelta { partial_json, .. } => {
                self.tool_input += partial_json.len();
                if self.tool_input > MAX_TOOL_INPUT_BYTES {
                    return Err(over("bytes of tool input", MAX_TOOL_INPUT_BYTES));
                }
            }
            StreamItem::ToolUseDone { .. } | StreamItem::Usage(_) | StreamItem::Stop(_) => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_fails_with_output_too_large() {
        let mut budget = TurnBudget::default();
        let chunk = "x".repeat(64 * 1024);
        let mut failed = None;
        for _ in 0..=(MAX_TEXT_BYTES / chunk.len()) {
            if let Err(e) = budget.admit(&StreamItem::TextDelta(chunk.clone())) {
                failed = Some(e);
                break;
            }
        }
        assert_eq!(failed.expect("text over").code(), "MODEL_OUTPUT_TOO_LARGE");

        let mut budget = TurnBudget::default();
        for index in 0..MAX_TOOL_CALLS {
            let start = StreamItem::ToolUseStart {
                index,
                id: format!("t{index}"),
                name: "Read".into(),
            };
            budget.admit(&start).expect("within the call limit");
        }
        let one_more = StreamItem::ToolUseStart {
            index: MAX_TOOL_CALLS,
            id: "t".into(),
            name: "Read".into(),
        };
        assert!(budget.admit(&one_more).is_err());

        let mut budget = TurnBudget::default();
        let mut result = Ok(());
        for _ in 0..=MAX_STREAM_ITEMS {
            result = budget.admit(&StreamItem::TextDelta(String::new()));
        }
        assert!(matches!(result, Err(ProviderError::OutputTooLarge(_))));
    }
}
