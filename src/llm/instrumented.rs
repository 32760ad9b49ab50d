//! A provider wrapped for telemetry: every model call is a `chat {model}` span (GenAI
//! conventions, see [`crate::telemetry::genai`]) and counts in the model-call metrics
//! (outcome, latency, time to first token, tokens) with handles resolved once per run.

use super::{ItemStream, ModelRequest, Provider, ProviderError, StopReason, StreamItem};
use crate::metrics::{ModelInstruments, ModelOutcome};
use crate::telemetry::genai::{self, RunIds};
use async_trait::async_trait;
use futures::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

/// Wraps a run's provider.
#[derive(Debug)]
pub struct Instrumented {
    pub inner: Arc<dyn Provider>,
    /// The provider kind (`anthropic`, `openai`, `scripted`).
    pub kind: &'static str,
    /// The model sent when a request names none.
    pub model: String,
    pub ids: RunIds,
    pub instruments: ModelInstruments,
    /// Record prompts and outputs on the spans (`telemetry.capture_content`).
    pub capture_content: bool,
}

#[async_trait]
impl Provider for Instrumented {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        let model = if request.model.is_empty() {
            self.model.as_str()
        } else {
            request.model.as_str()
        };
        let span = genai::chat(&self.ids, self.kind, model);
        if self.capture_content && !span.is_disabled() {
            span.record(
                "gen_ai.input.messages",
                genai::content(&request.messages).as_str(),
            );
        }
        let started = Instant::now();
        let opened = self
            .inner
            .stream(request, cancel)
            .instrument(span.clone())
            .await;
        match opened {
            Ok(stream) => {
                // The answer's model is the one requested (providers' echoed names are not
                // parsed).
                span.record("gen_ai.response.model", model);
                Ok(Box::pin(Observed {
                    inner: stream,
                    span,
                    instruments: self.instruments.clone(),
                    started,
                    first_item: false,
                    ended: false,
                    input_tokens: 0,
                    output: self.capture_content.then(String::new),
                }))
            }
            Err(error) => {
                genai::record_error(&span, error.code());
                self.instruments.call(outcome_of(&error), started.elapsed());
                Err(error)
            }
        }
    }
}

fn outcome_of(error: &ProviderError) -> ModelOutcome {
    match error {
        ProviderError::Cancelled => ModelOutcome::cancelled,
        _ => ModelOutcome::error,
    }
}

fn finish_reason(stop: &StopReason) -> &str {
    match stop {
        StopReason::EndTurn => "end_turn",
        StopReason::ToolUse => "tool_use",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::Refusal => "refusal",
        StopReason::Other(other) => other,
    }
}

/// The stream of one call: times the first item and the end, counts tokens, ends the span.
struct Observed {
    inner: ItemStream,
    span: Span,
    instruments: ModelInstruments,
    started: Instant,
    first_item: bool,
    ended: bool,
    input_tokens: u64,
    /// The streamed text and tool calls, when content is captured.
    output: Option<String>,
}

impl Observed {
    fn end(&mut self, outcome: ModelOutcome, code: Option<&str>) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Some(code) = code {
            genai::record_error(&self.span, code);
        }
        if let Some(mut output) = self.output.take() {
            genai::cut(&mut output);
            let parts = serde_json::json!([{
                "role": "assistant",
                "parts": [{"type": "text", "content": output}],
            }]);
            self.span
                .record("gen_ai.output.messages", parts.to_string().as_str());
        }
        self.instruments.call(outcome, self.started.elapsed());
    }

    fn observe(&mut self, item: &Result<StreamItem, ProviderError>) {
        if !self.first_item {
            self.first_item = true;
            self.instruments.first_token(self.started.elapsed());
        }
        match item {
            Ok(StreamItem::TextDelta(text)) => {
                if let Some(output) = &mut self.output
                    && output.len() < genai::CONTENT_LIMIT
                {
                    output.push_str(text);
                }
            }
            Ok(StreamItem::ToolUseDone { name, input, .. }) => {
                if let Some(output) = &mut self.output
                    && output.len() < genai::CONTENT_LIMIT
                {
                    output.push_str(&format!("\n[tool call {name} {input}]"));
                }
            }
            Ok(StreamItem::Usage(usage)) => {
                self.input_tokens =
                    usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens;
                // As integers: the exporter writes a `u64` attribute as a string.
                let int = |tokens: u64| i64::try_from(tokens).unwrap_or(i64::MAX);
                self.span
                    .record("gen_ai.usage.input_tokens", int(self.input_tokens));
                self.span
                    .record("gen_ai.usage.output_tokens", int(usage.output_tokens));
                self.instruments.tokens(usage);
            }
            Ok(StreamItem::Stop(stop)) => {
                self.span
                    .record("gen_ai.response.finish_reasons", finish_reason(stop));
                self.end(ModelOutcome::ok, None);
            }
            Ok(_) => {}
            Err(error) => self.end(outcome_of(error), Some(error.code())),
        }
    }
}

impl Stream for Observed {
    type Item = Result<StreamItem, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let polled = {
            let _entered = this.span.enter();
            this.inner.as_mut().poll_next(cx)
        };
        match &polled {
            Poll::Ready(Some(item)) => this.observe(item),
            Poll::Ready(None) => this.end(ModelOutcome::error, Some("STREAM_DROPPED")),
            Poll::Pending => {}
        }
        polled
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        // Dropped before its end: the loop stopped reading (a cancel, a hand-off, an output
        // budget).
        self.end(ModelOutcome::cancelled, Some("CANCELLED"));
    }
}
