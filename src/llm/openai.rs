//! The OpenAI-compatible Chat Completions provider: history → wire translation (assistant
//! `tool_calls`, `tool` role messages for results), the streaming request
//! (`POST {base_url}/chat/completions`, `stream: true`, `stream_options.include_usage`) and the
//! chunk decoder (`delta.content`, `delta.tool_calls[i]` fragments, `finish_reason`, the usage
//! chunk and `[DONE]`).
//!
//! Tool calls stream one after another: a call is complete (and [`StreamItem::ToolUseDone`] is
//! emitted) when a call with a higher index starts or the choice finishes. A fragment for a
//! call already completed is a [`ProviderError::Decode`].

use std::collections::BTreeMap;

use async_trait::async_trait;
use bytes::Bytes;
use eventsource_stream::Event;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::retry::{RetryingSender, resend_on_empty};
use super::sse::{self, SseDecoder, parse_data, parse_tool_input};
use super::{
    ItemStream, ModelRequest, Provider, ProviderConfig, ProviderError, StopReason, StreamItem,
    Usage,
};
use crate::message::{ContentBlock, Message, Role};

/// A provider speaking OpenAI-compatible Chat Completions.
pub struct OpenAiProvider {
    endpoint: String,
    model: String,
    max_tokens: u32,
    api_key: Option<SecretString>,
    sender: RetryingSender,
    empty_response_retry: bool,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[REDACTED]"))
            .field("sender", &self.sender)
            .finish()
    }
}

impl OpenAiProvider {
    /// A provider for `config`, sending through `sender`. The key is optional (self-hosted
    /// endpoints often need none); without one no `Authorization` header is sent.
    pub fn new(config: &ProviderConfig, sender: RetryingSender) -> Self {
        Self {
            endpoint: format!("{}/chat/completions", config.effective_base_url()),
            model: config.model.clone(),
            max_tokens: config.max_tokens,
            api_key: config.api_key.clone(),
            sender,
            empty_response_retry: config.empty_response_retry,
        }
    }

    async fn open(
        &self,
        body: &Bytes,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        let response =
            self.sender
                .send(
                    cancel,
                    |http| {
                        let builder = http
                            .post(&self.endpoint)
                            .header(CONTENT_TYPE, "application/json")
                            .body(body.clone());
                        match &self.api_key {
                            Some(key) => builder
                                .header(AUTHORIZATION, format!("Bearer {}", key.expose_secret())),
                            None => builder,
                        }
                    },
                    classify_status,
                )
                .await?;
        Ok(sse::decode(
            response,
            cancel.clone(),
            OpenAiDecoder::default(),
        ))
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        let body = super::encode_body(&WireRequest::new(request, &self.model, self.max_tokens))?;
        resend_on_empty(self.empty_response_retry, || self.open(&body, cancel)).await
    }
}

/// Classifies a final non-2xx answer: `context_length_exceeded` is a context overflow.
pub fn classify_status(status: u16, body: String) -> ProviderError {
    let lower = body.to_ascii_lowercase();
    if (400..500).contains(&status)
        && (lower.contains("context_length_exceeded") || lower.contains("maximum context length"))
    {
        return ProviderError::ContextOverflow(body);
    }
    ProviderError::Status { status, body }
}

/// The Chat Completions request body (streaming, usage included): the history as wire
/// messages, the rest borrowed from the request and serialised without a JSON tree.
#[derive(Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<Value>,
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> WireRequest<'a> {
    /// The body for `request`; `model` and `max_tokens` stand in where the request leaves
    /// them unset (the provider's configuration).
    pub fn new(request: &'a ModelRequest, model: &'a str, max_tokens: u32) -> Self {
        let mut messages = Vec::new();
        if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(json!({"role": "system", "content": system}));
        }
        for message in &request.messages {
            // The JSON tree copies every text anyway; a marked message is rendered first.
            wire_messages(&message.rendered(), &mut messages);
        }
        Self {
            model: request.model_or(model),
            messages,
            max_tokens: request.max_tokens_or(max_tokens),
            stream: true,
            stream_options: StreamOptions {
                include_usage: true,
            },
            tools: request
                .tools
                .iter()
                .map(|tool| WireTool {
                    kind: "function",
                    function: WireFunction {
                        name: &tool.name,
                        description: &tool.description,
                        parameters: &tool.input_schema,
                    },
                })
                .collect(),
            temperature: request.temperature,
        }
    }
}

fn joined_text(message: &Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One history message as Chat Completions messages: tool results become `tool` messages (first,
/// so they directly follow the assistant's `tool_calls`), thinking is not sent back.
fn wire_messages(message: &Message, out: &mut Vec<Value>) {
    let text = joined_text(message);
    match message.role {
        Role::User => {
            // Chat Completions `tool` messages are text only: images follow them in a user
            // message of image parts.
            let mut images = Vec::new();
            for block in &message.content {
                if let ContentBlock::ToolResult(result) = block {
                    images.extend(result.images.iter().map(|image| {
                        json!({"type": "image_url", "image_url": {
                            "url": format!("data:{};base64,{}", image.media_type, image.data),
                        }})
                    }));
                    let content = match (&result.is_error, &result.code) {
                        (true, Some(code)) => format!("Error ({code}): {}", result.content),
                        (true, None) => format!("Error: {}", result.content),
                        (false, _) => result.content.clone(),
                    };
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": result.tool_use_id,
                        "content": content,
                    }));
                }
            }
            if !images.is_empty() {
                let mut parts = vec![json!({"type": "text", "text": "Images the tools returned:"})];
                parts.extend(images);
                out.push(json!({"role": "user", "content": parts}));
            }
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
        Role::Assistant => {
            let calls: Vec<Value> = message
                .tool_uses()
                .map(|(id, name, input)| {
                    json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": input.to_string()},
                    })
                })
                .collect();
            let mut wire = json!({
                "role": "assistant",
                "content": if text.is_empty() { Value::Null } else { json!(text) },
            });
            if !calls.is_empty() {
                wire["tool_calls"] = json!(calls);
            }
            out.push(wire);
        }
    }
}

/// One tool call being assembled.
struct Call {
    id: String,
    name: String,
    arguments: String,
    started: bool,
    done: bool,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<CallDelta>,
}

#[derive(Deserialize)]
struct CallDelta {
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

/// The Chat Completions chunk decoder.
#[derive(Default)]
pub struct OpenAiDecoder {
    calls: BTreeMap<usize, Call>,
    finish: Option<StopReason>,
    usage: Usage,
    done: bool,
}

impl OpenAiDecoder {
    /// Completes every open call with an index below `below` (all when `None`), in index order.
    fn finish_calls(&mut self, below: Option<usize>) -> Result<Vec<StreamItem>, ProviderError> {
        let mut items = Vec::new();
        for (&index, call) in self.calls.iter_mut() {
            if call.done || below.is_some_and(|limit| index >= limit) {
                continue;
            }
            call.done = true;
            if !call.started {
                return Err(ProviderError::Decode(format!(
                    "tool call {index} never received a function name"
                )));
            }
            let input = parse_tool_input(&call.name, &call.arguments)?;
            items.push(StreamItem::ToolUseDone {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
                input,
            });
        }
        Ok(items)
    }

    fn call_delta(&mut self, delta: CallDelta) -> Result<Vec<StreamItem>, ProviderError> {
        let index = delta.index;
        let mut items = Vec::new();
        if !self.calls.contains_key(&index) {
            items.extend(self.finish_calls(Some(index))?);
            self.calls.insert(
                index,
                Call {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                    started: false,
                    done: false,
                },
            );
        }
        let Some(call) = self.calls.get_mut(&index) else {
            return Ok(items);
        };
        if call.done {
            return Err(ProviderError::Decode(format!(
                "fragment for tool call {index} after it was complete"
            )));
        }
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        let (name, arguments) = match delta.function {
            Some(function) => (function.name, function.arguments.unwrap_or_default()),
            None => (None, String::new()),
        };
        if let Some(name) = name.filter(|name| !name.is_empty()) {
            call.name.push_str(&name);
        }
        call.arguments.push_str(&arguments);
        if !call.started && !call.name.is_empty() {
            call.started = true;
            if call.id.is_empty() {
                call.id = format!("call_{index}");
            }
            items.push(StreamItem::ToolUseStart {
                index,
                id: call.id.clone(),
                name: call.name.clone(),
            });
            if !call.arguments.is_empty() {
                items.push(StreamItem::ToolUseInputDelta {
                    index,
                    partial_json: call.arguments.clone(),
                });
            }
        } else if call.started && !arguments.is_empty() {
            items.push(StreamItem::ToolUseInputDelta {
                index,
                partial_json: arguments,
            });
        }
        Ok(items)
    }

    /// Flushes open calls and emits usage and the stop reason.
    fn terminate(&mut self) -> Result<Vec<StreamItem>, ProviderError> {
        self.done = true;
        let mut items = self.finish_calls(None)?;
        let inferred = if self.calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        };
        let stop = self.finish.take().unwrap_or(inferred);
        items.push(StreamItem::Usage(self.usage));
        items.push(StreamItem::Stop(stop));
        Ok(items)
    }
}

impl SseDecoder for OpenAiDecoder {
    fn on_event(&mut self, event: &Event) -> Result<Vec<StreamItem>, ProviderError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(vec![]);
        }
        if data == "[DONE]" {
            return self.terminate();
        }
        let chunk: Chunk = parse_data(event)?;
        if let Some(error) = chunk.error {
            let message = error["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            return Err(ProviderError::StreamDropped(message));
        }
        if let Some(usage) = chunk.usage {
            let cached = usage
                .prompt_tokens_details
                .map(|details| details.cached_tokens)
                .unwrap_or(0);
            self.usage = Usage {
                input_tokens: usage.prompt_tokens.saturating_sub(cached),
                output_tokens: usage.completion_tokens,
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            };
        }
        let mut items = Vec::new();
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(thinking) = delta.reasoning_content.filter(|t| !t.is_empty()) {
                    items.push(StreamItem::ThinkingDelta(thinking));
                }
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    items.push(StreamItem::TextDelta(text));
                }
                for call in delta.tool_calls {
                    items.extend(self.call_delta(call)?);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(StopReason::from_openai(&reason));
                items.extend(self.finish_calls(None)?);
            }
        }
        Ok(items)
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<StreamItem>, ProviderError> {
        if self.finish.is_some() {
            // Some compatible servers close without `[DONE]` after the final chunk.
            return self.terminate();
        }
        Err(ProviderError::StreamDropped(
            "the stream ended before a finish_reason".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolImage, ToolResultBlock};

    #[test]
    fn tool_result_images_follow_the_tool_messages_as_image_parts() {
        let result = ToolResultBlock {
            images: vec![ToolImage {
                media_type: "image/png".into(),
                data: "aGVsbG8=".into(),
            }],
            ..ToolResultBlock::ok("call_1", "a picture: [image 1: image/png]")
        };
        let message = Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(result)],
        };
        let mut out = Vec::new();
        wire_messages(&message, &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0]["role"], "tool");
        assert_eq!(out[0]["content"], "a picture: [image 1: image/png]");
        assert_eq!(out[1]["role"], "user");
        assert_eq!(
            out[1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,aGVsbG8="
        );
    }
}
