//! The Anthropic Messages API provider: history → wire translation, the streaming request
//! (`POST {base_url}/v1/messages`, `stream: true`) and the SSE decoder for message_start,
//! content_block_start/delta/stop (text, tool_use, thinking, redacted_thinking), message_delta,
//! message_stop, ping and error events.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use eventsource_stream::Event;
use reqwest::header::CONTENT_TYPE;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::retry::{RetryingSender, resend_on_empty};
use super::sse::{self, SseDecoder, parse_data, parse_tool_input};
use super::{
    ItemStream, ModelRequest, Provider, ProviderConfig, ProviderError, StopReason, StreamItem,
    Usage,
};

/// The `anthropic-version` header value this decoder understands.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A provider speaking the Anthropic Messages API.
pub struct AnthropicProvider {
    endpoint: String,
    model: String,
    max_tokens: u32,
    api_key: SecretString,
    sender: RetryingSender,
    empty_response_retry: bool,
    tools_json: super::anthropic_wire::ToolsJson,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &"[REDACTED]")
            .field("sender", &self.sender)
            .finish()
    }
}

impl AnthropicProvider {
    /// A provider for `config`, sending through `sender`. Requires an API key.
    pub fn new(config: &ProviderConfig, sender: RetryingSender) -> Result<Self, ProviderError> {
        let api_key = config.api_key.clone().ok_or_else(|| {
            ProviderError::Config("the anthropic provider needs an api_key".into())
        })?;
        Ok(Self {
            endpoint: format!("{}/v1/messages", config.effective_base_url()),
            model: config.model.clone(),
            max_tokens: config.max_tokens,
            api_key,
            sender,
            empty_response_retry: config.empty_response_retry,
            tools_json: Default::default(),
        })
    }

    async fn open(
        &self,
        body: &Bytes,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        let response = self
            .sender
            .send(
                cancel,
                |http| {
                    http.post(&self.endpoint)
                        .header("x-api-key", self.api_key.expose_secret())
                        .header("anthropic-version", ANTHROPIC_VERSION)
                        .header(CONTENT_TYPE, "application/json")
                        .body(body.clone())
                },
                classify_status,
            )
            .await?;
        Ok(sse::decode(
            response,
            cancel.clone(),
            AnthropicDecoder::default(),
        ))
    }
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        let tools = self
            .tools_json
            .of(&request.tools)
            .map_err(|error| ProviderError::Decode(error.to_string()))?;
        let body = super::encode_body(&super::anthropic_wire::WireRequest::new(
            request,
            &self.model,
            self.max_tokens,
            tools,
        ))?;
        resend_on_empty(self.empty_response_retry, || self.open(&body, cancel)).await
    }
}

/// Classifies a final non-2xx answer: "prompt is too long" 400s are context overflows.
pub fn classify_status(status: u16, body: String) -> ProviderError {
    let lower = body.to_ascii_lowercase();
    if (400..500).contains(&status)
        && (lower.contains("prompt is too long") || lower.contains("exceed context limit"))
    {
        return ProviderError::ContextOverflow(body);
    }
    ProviderError::Status { status, body }
}

/// What an open content block is, by wire index.
enum Block {
    Text,
    Thinking,
    Tool {
        id: String,
        name: String,
        /// Joined `input_json_delta` fragments.
        json: String,
        /// A non-empty input sent whole in content_block_start.
        initial: Option<Value>,
    },
    /// Block types this decoder does not surface (server tools, future types).
    Other,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// The Anthropic SSE decoder (see the module doc for the events).
#[derive(Default)]
pub struct AnthropicDecoder {
    blocks: HashMap<usize, Block>,
    usage: Usage,
    stop: Option<StopReason>,
    done: bool,
}

impl AnthropicDecoder {
    fn merge_usage(&mut self, usage: Option<WireUsage>) {
        let Some(usage) = usage else { return };
        if let Some(n) = usage.input_tokens {
            self.usage.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            self.usage.output_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = n;
        }
        if let Some(n) = usage.cache_read_input_tokens {
            self.usage.cache_read_tokens = n;
        }
    }

    fn block_start(&mut self, index: usize, block: &Value) -> Vec<StreamItem> {
        let text_of = |key: &str| block[key].as_str().unwrap_or_default().to_owned();
        match block["type"].as_str().unwrap_or_default() {
            "text" => {
                self.blocks.insert(index, Block::Text);
                let text = text_of("text");
                if text.is_empty() {
                    vec![]
                } else {
                    vec![StreamItem::TextDelta(text)]
                }
            }
            "thinking" => {
                self.blocks.insert(index, Block::Thinking);
                let mut items = vec![];
                let thinking = text_of("thinking");
                if !thinking.is_empty() {
                    items.push(StreamItem::ThinkingDelta(thinking));
                }
                let signature = text_of("signature");
                if !signature.is_empty() {
                    items.push(StreamItem::ThinkingSignature(signature));
                }
                items
            }
            "redacted_thinking" => {
                self.blocks.insert(index, Block::Other);
                vec![StreamItem::RedactedThinking(text_of("data"))]
            }
            "tool_use" => {
                let id = text_of("id");
                let name = text_of("name");
                // Normally `{}` with the input streamed as deltas; some proxies send it whole.
                let initial = match &block["input"] {
                    Value::Object(map) if !map.is_empty() => Some(block["input"].clone()),
                    _ => None,
                };
                self.blocks.insert(
                    index,
                    Block::Tool {
                        id: id.clone(),
                        name: name.clone(),
                        json: String::new(),
                        initial,
                    },
                );
                vec![StreamItem::ToolUseStart { index, id, name }]
            }
            _ => {
                self.blocks.insert(index, Block::Other);
                vec![]
            }
        }
    }

    fn block_delta(
        &mut self,
        index: usize,
        delta: &Value,
    ) -> Result<Vec<StreamItem>, ProviderError> {
        let field = |key: &str| delta[key].as_str().unwrap_or_default().to_owned();
        let Some(block) = self.blocks.get_mut(&index) else {
            return Err(ProviderError::Decode(format!(
                "content_block_delta for unknown block {index}"
            )));
        };
        let item = match (delta["type"].as_str().unwrap_or_default(), block) {
            ("text_delta", Block::Text) => StreamItem::TextDelta(field("text")),
            ("thinking_delta", Block::Thinking) => StreamItem::ThinkingDelta(field("thinking")),
            ("signature_delta", Block::Thinking) => {
                StreamItem::ThinkingSignature(field("signature"))
            }
            ("input_json_delta", Block::Tool { json, .. }) => {
                let partial_json = field("partial_json");
                json.push_str(&partial_json);
                StreamItem::ToolUseInputDelta {
                    index,
                    partial_json,
                }
            }
            (_, Block::Other) => return Ok(vec![]),
            ("citations_delta", _) => return Ok(vec![]),
            (kind, _) => {
                return Err(ProviderError::Decode(format!(
                    "unexpected {kind} for content block {index}"
                )));
            }
        };
        Ok(vec![item])
    }
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    message: Option<StartMessage>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

impl SseDecoder for AnthropicDecoder {
    fn on_event(&mut self, event: &Event) -> Result<Vec<StreamItem>, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(vec![]);
        }
        let envelope: Envelope = parse_data(event)?;
        let index = || {
            envelope.index.ok_or_else(|| {
                ProviderError::Decode(format!("`{}` event without an index", envelope.kind))
            })
        };
        match envelope.kind.as_str() {
            "message_start" => {
                self.merge_usage(envelope.message.and_then(|message| message.usage));
                Ok(vec![])
            }
            "content_block_start" => {
                let index = index()?;
                Ok(self.block_start(index, &envelope.content_block.unwrap_or_default()))
            }
            "content_block_delta" => {
                let index = index()?;
                self.block_delta(index, &envelope.delta.unwrap_or_default())
            }
            "content_block_stop" => match self.blocks.remove(&index()?) {
                Some(Block::Tool {
                    id,
                    name,
                    json,
                    initial,
                }) => {
                    let input = match initial {
                        Some(input) if json.trim().is_empty() => {
                            sse::bounded_tool_input(&name, input)?
                        }
                        _ => parse_tool_input(&name, &json)?,
                    };
                    Ok(vec![StreamItem::ToolUseDone {
                        index: index()?,
                        id,
                        name,
                        input,
                    }])
                }
                _ => Ok(vec![]),
            },
            "message_delta" => {
                if let Some(reason) = envelope
                    .delta
                    .as_ref()
                    .and_then(|delta| delta["stop_reason"].as_str())
                {
                    self.stop = Some(StopReason::from_anthropic(reason));
                }
                self.merge_usage(envelope.usage);
                Ok(vec![])
            }
            "message_stop" => {
                self.done = true;
                let stop = self
                    .stop
                    .take()
                    .unwrap_or_else(|| StopReason::Other("missing".into()));
                Ok(vec![StreamItem::Usage(self.usage), StreamItem::Stop(stop)])
            }
            "error" => {
                let error = envelope.error.unwrap_or_default();
                Err(ProviderError::StreamDropped(format!(
                    "{}: {}",
                    error["type"].as_str().unwrap_or("error"),
                    error["message"].as_str().unwrap_or_default()
                )))
            }
            // `ping` and event types added after this decoder was written.
            _ => Ok(vec![]),
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn on_end(&mut self) -> Result<Vec<StreamItem>, ProviderError> {
        Err(ProviderError::StreamDropped(
            "the stream ended before message_stop".into(),
        ))
    }
}
