//! The provider-neutral request and stream vocabulary: what the loop sends to a model
//! ([`ModelRequest`]) and what comes back ([`StreamItem`], folded into an [`AssistantTurn`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Message, ViewMessage};

/// A tool as the model sees it: name, description and JSON Schema of its input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool name the model calls.
    pub name: String,
    /// The description shown to the model.
    pub description: String,
    /// JSON Schema of the tool input (an object schema); a built-in tool's is shared by every
    /// run's list.
    pub input_schema: std::sync::Arc<Value>,
}

/// One logical model request: the provider-visible view of a session.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelRequest {
    /// Model identifier sent on the wire.
    pub model: String,
    /// System prompt, travelling beside the messages.
    pub system: Option<String>,
    /// History after the last compaction boundary, tool_use/tool_result pairs intact, each
    /// message shared with history (and marked by a context policy such as Noa), never copied
    /// per request.
    pub messages: Vec<ViewMessage>,
    /// Tools offered to the model: shared with the registry that built them (one list per
    /// registry, not a copy per request).
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// Output token limit of this turn.
    pub max_tokens: u32,
    /// Sampling temperature, provider default when `None`.
    pub temperature: Option<f32>,
}

impl ModelRequest {
    /// The model to send: the request's, or `default` (the provider's) when it leaves it unset.
    pub fn model_or<'a>(&'a self, default: &'a str) -> &'a str {
        if self.model.is_empty() {
            default
        } else {
            &self.model
        }
    }

    /// The output limit to send: the request's, or `default` (the provider's) when it is 0.
    pub fn max_tokens_or(&self, default: u32) -> u32 {
        if self.max_tokens == 0 {
            default
        } else {
            self.max_tokens
        }
    }
}

/// Token usage of one model turn. `input_tokens` excludes cached prompt tokens, which are
/// counted in `cache_read_tokens` / `cache_write_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens that were neither read from nor written to the cache.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
}

/// Why the model stopped generating.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model wants tool results before continuing.
    ToolUse,
    /// The output token limit was reached (the loop's recovery path).
    MaxTokens,
    /// A configured stop sequence was produced.
    StopSequence,
    /// The model refused (Anthropic `refusal`, OpenAI `content_filter`).
    Refusal,
    /// Any other provider-specific reason, verbatim.
    Other(String),
}

impl StopReason {
    /// Maps an Anthropic `stop_reason` string.
    pub fn from_anthropic(reason: &str) -> Self {
        match reason {
            "end_turn" => Self::EndTurn,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" => Self::Refusal,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Maps an OpenAI Chat Completions `finish_reason` string.
    pub fn from_openai(reason: &str) -> Self {
        match reason {
            "stop" => Self::EndTurn,
            "tool_calls" | "function_call" => Self::ToolUse,
            "length" => Self::MaxTokens,
            "content_filter" => Self::Refusal,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One item of a model's streamed answer, in wire order.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamItem {
    /// A fragment of visible text.
    TextDelta(String),
    /// A fragment of model reasoning.
    ThinkingDelta(String),
    /// The signature closing the current thinking block (passed back unchanged).
    ThinkingSignature(String),
    /// An opaque, redacted reasoning block (passed back unchanged).
    RedactedThinking(String),
    /// A tool call begins; its input follows in fragments.
    ToolUseStart {
        /// Wire index identifying the call within this turn.
        index: usize,
        /// The call id the tool result must answer.
        id: String,
        /// The tool name.
        name: String,
    },
    /// A fragment of the JSON input of call `index`.
    ToolUseInputDelta {
        /// Wire index identifying the call within this turn.
        index: usize,
        /// Raw partial JSON, not parseable on its own.
        partial_json: String,
    },
    /// The input of call `index` is complete and parsed; emitted as soon as it is known, so the
    /// scheduler can start the call while the model keeps streaming.
    ToolUseDone {
        /// Wire index identifying the call within this turn.
        index: usize,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The parsed input (`{}` when the model sent none).
        input: Value,
    },
    /// Token usage of the turn (emitted once, before [`StreamItem::Stop`]).
    Usage(Usage),
    /// The last item of a complete turn.
    Stop(StopReason),
}

/// A complete assistant turn, folded from a stream by [`crate::llm::collect`].
#[derive(Clone, Debug, PartialEq)]
pub struct AssistantTurn {
    /// Role assistant: thinking, text and tool_use blocks in wire order.
    pub message: Message,
    /// Token usage reported by the provider.
    pub usage: Usage,
    /// Why the model stopped.
    pub stop_reason: StopReason,
}
