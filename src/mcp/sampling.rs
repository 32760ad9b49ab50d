//! Sampling (`sampling/createMessage`): a server asks the session's model for a completion
//! during one of its tool calls.
//!
//! Refused unless the server's entry has `sampling` (then the client declares the capability
//! in `initialize`): the tenant pays for these calls, so it opts in per server, with bounds —
//! the largest `maxTokens` one request may ask for and how many requests one tool call may
//! make. A request is answered by the run's own provider and model (the session's), with only
//! what the server sent (its messages and system prompt: never the session's history or
//! tools), and its usage is recorded as an `mcp_sampling` event of the run, which the usage
//! ledger and the tenant's spend budgets count like any model call. Text only: a message with
//! an image or audio block, or asking for tools, is refused.

use crate::llm::StopReason;
use crate::message::Message;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

/// Bounds of `max_tokens`.
const MAX_MAX_TOKENS: u32 = 8192;
/// Bounds of `max_requests_per_call`.
const MAX_REQUESTS_PER_CALL: u32 = 20;
/// At most this many messages in one request…
const MAX_MESSAGES: usize = 64;
/// …and at most this much text (messages and system prompt together).
const MAX_TEXT_BYTES: usize = 64 * 1024;

/// A server entry's `sampling`: the server may ask the session's model, within these bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSampling {
    /// The largest `maxTokens` one request may ask for (1..=8192, default 1024); a request
    /// asking for more is refused.
    #[serde(default = "default_max_tokens")]
    #[schema(minimum = 1, maximum = 8192)]
    pub max_tokens: u32,
    /// How many requests one tool call of the server may make (1..=20, default 3); the ones
    /// after are refused.
    #[serde(default = "default_requests_per_call")]
    #[schema(minimum = 1, maximum = 20)]
    pub max_requests_per_call: u32,
}

fn default_max_tokens() -> u32 {
    1024
}

fn default_requests_per_call() -> u32 {
    3
}

impl McpSampling {
    /// `Err((field under sampling, message))`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if !(1..=MAX_MAX_TOKENS).contains(&self.max_tokens) {
            return Err((
                "max_tokens".into(),
                format!("must be between 1 and {MAX_MAX_TOKENS}"),
            ));
        }
        if !(1..=MAX_REQUESTS_PER_CALL).contains(&self.max_requests_per_call) {
            return Err((
                "max_requests_per_call".into(),
                format!("must be between 1 and {MAX_REQUESTS_PER_CALL}"),
            ));
        }
        Ok(())
    }
}

/// One checked request, for the run's sampler.
#[derive(Clone, Debug)]
pub struct SamplingRequest {
    pub server: String,
    /// The tool call during which the server asked.
    pub tool_use_id: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

/// The model's answer.
#[derive(Clone, Debug)]
pub struct SamplingAnswer {
    pub text: String,
    pub model: String,
    pub stop_reason: StopReason,
}

/// Answers sampling requests with the current run's model (set per run, like the elicitor).
#[async_trait]
pub trait Sampler: Send + Sync {
    /// `Err` with the reason the server is told.
    async fn sample(&self, request: SamplingRequest) -> Result<SamplingAnswer, String>;
}

/// A request that passed [`check_request`].
#[derive(Debug)]
pub struct CheckedRequest {
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

/// The checks of a request against the entry's bounds: its messages (text only), system
/// prompt, size and `maxTokens`. `params` is the request's JSON.
pub fn check_request(params: &Value, limits: &McpSampling) -> Result<CheckedRequest, String> {
    let max_tokens = params["maxTokens"]
        .as_u64()
        .ok_or("`maxTokens` is required")?;
    if max_tokens == 0 || max_tokens > u64::from(limits.max_tokens) {
        return Err(format!(
            "maxTokens {max_tokens} is outside this server's sampling bounds (1 to {})",
            limits.max_tokens
        ));
    }
    if params["tools"].as_array().is_some_and(|t| !t.is_empty()) {
        return Err("tools in sampling requests are not supported".into());
    }
    let messages = params["messages"]
        .as_array()
        .ok_or("`messages` is required")?;
    if messages.is_empty() || messages.len() > MAX_MESSAGES {
        return Err(format!("1 to {MAX_MESSAGES} messages"));
    }
    let system = params["systemPrompt"].as_str().map(str::to_owned);
    let mut size = system.as_ref().map_or(0, String::len);
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        let blocks: Vec<&Value> = match &message["content"] {
            Value::Array(blocks) => blocks.iter().collect(),
            block => vec![block],
        };
        let mut text = String::new();
        for block in blocks {
            match (block["type"].as_str(), block["text"].as_str()) {
                (Some("text"), Some(part)) => {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(part);
                }
                (kind, _) => {
                    return Err(format!(
                        "only text content is supported in sampling requests (got {})",
                        kind.unwrap_or("an unknown block")
                    ));
                }
            }
        }
        size += text.len();
        if size > MAX_TEXT_BYTES {
            return Err(format!(
                "the request's text is larger than {MAX_TEXT_BYTES} bytes"
            ));
        }
        out.push(match message["role"].as_str() {
            Some("user") => Message::user_text(text),
            Some("assistant") => Message::assistant_text(text),
            _ => return Err("a message's role must be `user` or `assistant`".into()),
        });
    }
    let temperature = params["temperature"]
        .as_f64()
        .map(|t| t.clamp(0.0, 2.0) as f32);
    Ok(CheckedRequest {
        system,
        messages: out,
        max_tokens: max_tokens as u32,
        temperature,
    })
}

/// The JSON of a `CreateMessageResult` for `answer`.
pub fn result_json(answer: &SamplingAnswer) -> Value {
    let stop = match answer.stop_reason {
        StopReason::MaxTokens => "maxTokens",
        StopReason::StopSequence => "stopSequence",
        _ => "endTurn",
    };
    json!({
        "model": answer.model,
        "stopReason": stop,
        "role": "assistant",
        "content": {"type": "text", "text": answer.text},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> McpSampling {
        McpSampling {
            max_tokens: 100,
            max_requests_per_call: 2,
        }
    }

    #[test]
    fn text_requests_within_bounds_are_taken() {
        let checked = check_request(
            &json!({"messages": [
                {"role": "user", "content": {"type": "text", "text": "hi"}},
                {"role": "assistant", "content": [{"type": "text", "text": "yes?"}]}
            ], "systemPrompt": "be brief", "maxTokens": 100}),
            &limits(),
        )
        .unwrap();
        assert_eq!(checked.system.as_deref(), Some("be brief"));
        assert_eq!(checked.messages.len(), 2);
        assert_eq!(checked.max_tokens, 100);
    }

    #[test]
    fn requests_over_the_bounds_or_not_text_are_refused() {
        let text = |t: &str| json!({"role": "user", "content": {"type": "text", "text": t}});
        for (params, why) in [
            (
                json!({"messages": [text("hi")], "maxTokens": 101}),
                "maxTokens 101",
            ),
            (
                json!({"messages": [text("hi")], "maxTokens": 0}),
                "maxTokens 0",
            ),
            (json!({"messages": [], "maxTokens": 10}), "messages"),
            (
                json!({"messages": [text(&"x".repeat(MAX_TEXT_BYTES + 1))], "maxTokens": 10}),
                "larger than",
            ),
            (
                json!({"messages": [{"role": "user", "content": {"type": "image", "data": "", "mimeType": "image/png"}}], "maxTokens": 10}),
                "only text",
            ),
            (
                json!({"messages": [text("hi")], "maxTokens": 10, "tools": [{"name": "x"}]}),
                "tools",
            ),
        ] {
            let error = check_request(&params, &limits()).unwrap_err();
            assert!(error.contains(why), "{error} / {why}");
        }
    }

    #[test]
    fn bounds_are_validated() {
        assert!(limits().validate().is_ok());
        for (limits, field) in [
            (
                McpSampling {
                    max_tokens: 0,
                    max_requests_per_call: 1,
                },
                "max_tokens",
            ),
            (
                McpSampling {
                    max_tokens: 10,
                    max_requests_per_call: 21,
                },
                "max_requests_per_call",
            ),
        ] {
            assert_eq!(limits.validate().unwrap_err().0, field);
        }
    }
}
