//! Model providers: the [`Provider`] trait the loop calls, the provider-neutral stream items,
//! [`collect`] (stream → [`AssistantTurn`]), and the three implementations (Anthropic Messages,
//! OpenAI-compatible Chat Completions, scripted). Retry and rate limiting (N19–N20) live in
//! [`retry`], once, around every HTTP request; the loop never sees wire formats.

pub mod anthropic;
mod anthropic_wire;
pub mod budget;
pub mod config;
pub mod demo;
pub mod error;
pub mod instrumented;
pub mod openai;
pub mod retry;
pub mod scripted;
pub mod sse;
pub mod types;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use config::{ProviderConfig, ProviderKind};
pub use error::ProviderError;
pub use types::{AssistantTurn, ModelRequest, StopReason, StreamItem, ToolSpec, Usage};

use crate::message::{ContentBlock, Message, Role};

/// The stream of one model turn.
pub type ItemStream = BoxStream<'static, Result<StreamItem, ProviderError>>;

/// A model provider.
#[async_trait]
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// Short provider name (`anthropic`, `openai`, `scripted`).
    fn name(&self) -> &str;

    /// One logical request: rate limit, retry per N19 before the body is consumed, then a
    /// stream of items ending with [`StreamItem::Usage`] and [`StreamItem::Stop`]. Errors after
    /// the stream began are stream items and are never retried (N20).
    async fn stream(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError>;
}

/// Serialises a wire request body (shared by the HTTP providers).
fn encode_body(body: &impl serde::Serialize) -> Result<bytes::Bytes, ProviderError> {
    crate::json_text::json_bytes(body).map_err(|error| ProviderError::Decode(error.to_string()))
}

/// Builds the provider `config` describes, sending HTTP requests through `http`.
pub fn build_provider(
    config: &ProviderConfig,
    http: reqwest::Client,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let sender = || -> Result<retry::RetryingSender, ProviderError> {
        if config.model.trim().is_empty() {
            return Err(ProviderError::Config(format!(
                "the {:?} provider needs a model",
                config.kind
            )));
        }
        if let Some(url) = &config.base_url {
            url::Url::parse(url).map_err(|error| {
                ProviderError::Config(format!("invalid base_url `{url}`: {error}"))
            })?;
        }
        Ok(retry::RetryingSender::new(
            http.clone(),
            retry::RetryPolicy::new(config.retries),
            retry::rate_limiter(config.requests_per_second)?,
            config.request_timeout,
        ))
    };
    Ok(match config.kind {
        ProviderKind::Anthropic => Arc::new(anthropic::AnthropicProvider::new(config, sender()?)?),
        ProviderKind::OpenAi => Arc::new(openai::OpenAiProvider::new(config, sender()?)),
        ProviderKind::Scripted => {
            Arc::new(scripted::ScriptedProvider::new(config.script.as_ref())?)
        }
    })
}

/// Folds a provider stream into one assistant turn, calling `on_item` for every item as it
/// arrives (for live events). Blocks keep wire order: consecutive text deltas form one text
/// block, thinking deltas one thinking block (closed by its signature), each tool call one
/// tool_use block at the position where it started. The first error is returned; a stream
/// that ends without [`StreamItem::Stop`] is [`ProviderError::StreamDropped`]. Every item is
/// counted against the per-turn [`budget`] first; past a limit the stream is dropped with
/// [`ProviderError::OutputTooLarge`] and the item is neither reported nor kept.
pub async fn collect<S>(
    mut stream: S,
    mut on_item: impl FnMut(&StreamItem),
) -> Result<AssistantTurn, ProviderError>
where
    S: Stream<Item = Result<StreamItem, ProviderError>> + Unpin,
{
    let mut blocks: Vec<ContentBlock> = Vec::new();
    let mut tool_positions: HashMap<usize, usize> = HashMap::new();
    let mut usage = Usage::default();
    let mut stop = None;
    let mut budget = budget::TurnBudget::default();
    while let Some(item) = stream.next().await {
        let item = item?;
        budget.admit(&item)?;
        on_item(&item);
        match item {
            StreamItem::TextDelta(delta) => match blocks.last_mut() {
                Some(ContentBlock::Text { text }) => text.push_str(&delta),
                _ => blocks.push(ContentBlock::Text { text: delta }),
            },
            StreamItem::ThinkingDelta(delta) => match blocks.last_mut() {
                Some(ContentBlock::Thinking {
                    thinking,
                    signature: None,
                }) => thinking.push_str(&delta),
                _ => blocks.push(ContentBlock::Thinking {
                    thinking: delta,
                    signature: None,
                }),
            },
            StreamItem::ThinkingSignature(part) => match blocks.last_mut() {
                Some(ContentBlock::Thinking { signature, .. }) => {
                    signature.get_or_insert_with(String::new).push_str(&part);
                }
                _ => blocks.push(ContentBlock::Thinking {
                    thinking: String::new(),
                    signature: Some(part),
                }),
            },
            StreamItem::RedactedThinking(data) => {
                blocks.push(ContentBlock::RedactedThinking { data });
            }
            StreamItem::ToolUseStart { index, id, name } => {
                tool_positions.insert(index, blocks.len());
                blocks.push(ContentBlock::ToolUse {
                    id,
                    name,
                    input: Value::Null,
                });
            }
            StreamItem::ToolUseInputDelta { .. } => {}
            StreamItem::ToolUseDone {
                index,
                id,
                name,
                input,
            } => {
                let block = ContentBlock::ToolUse { id, name, input };
                match tool_positions.get(&index) {
                    Some(&position) => blocks[position] = block,
                    None => {
                        tool_positions.insert(index, blocks.len());
                        blocks.push(block);
                    }
                }
            }
            StreamItem::Usage(reported) => usage = reported,
            StreamItem::Stop(reason) => {
                stop = Some(reason);
                break;
            }
        }
    }
    let stop_reason = stop.ok_or_else(|| {
        ProviderError::StreamDropped("the stream ended without a stop reason".into())
    })?;
    if let Some(ContentBlock::ToolUse { name, .. }) = blocks.iter().find(|block| {
        matches!(
            block,
            ContentBlock::ToolUse {
                input: Value::Null,
                ..
            }
        )
    }) {
        return Err(ProviderError::Decode(format!(
            "tool call `{name}` started but its input never completed"
        )));
    }
    Ok(AssistantTurn {
        message: Message {
            role: Role::Assistant,
            content: blocks,
        },
        usage,
        stop_reason,
    })
}

#[cfg(test)]
#[path = "collect_tests.rs"]
mod tests;
