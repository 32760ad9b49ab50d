//! Server-sent events over a reqwest response body (parsed by `eventsource-stream`), driven
//! through a wire-format [`SseDecoder`] into [`StreamItem`]s.
//!
//! Transport failures after the response began are [`ProviderError::StreamDropped`] (never
//! retried, N20); cancellation ends the stream with [`ProviderError::Cancelled`]; reading stops
//! as soon as the decoder has seen its terminal event.

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::budget::MAX_RESPONSE_BYTES;
use super::{ItemStream, ProviderError, StreamItem};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Turns one wire format's events into stream items.
pub trait SseDecoder: Send + 'static {
    /// Handles one event; may produce any number of items.
    fn on_event(&mut self, event: &Event) -> Result<Vec<StreamItem>, ProviderError>;
    /// Whether the terminal event was seen (nothing more is read).
    fn is_done(&self) -> bool;
    /// The body ended before [`SseDecoder::is_done`]: flush what is complete or report a drop.
    fn on_end(&mut self) -> Result<Vec<StreamItem>, ProviderError>;
}

/// Decodes the SSE body of `response` with `decoder`.
pub fn decode<D: SseDecoder>(
    response: reqwest::Response,
    cancel: CancellationToken,
    mut decoder: D,
) -> ItemStream {
    // The body is read through a byte budget: past it the byte stream ends early and the
    // response fails with `MODEL_OUTPUT_TOO_LARGE`, which also bounds what the event parser
    // buffers for one endless event line.
    let over_budget = Arc::new(AtomicBool::new(false));
    let body = {
        let over_budget = over_budget.clone();
        let mut seen = 0usize;
        response.bytes_stream().take_while(move |chunk| {
            if let Ok(bytes) = chunk {
                seen = seen.saturating_add(bytes.len());
                if seen > MAX_RESPONSE_BYTES {
                    over_budget.store(true, Ordering::Relaxed);
                    return futures::future::ready(false);
                }
            }
            futures::future::ready(true)
        })
    };
    let stream = async_stream::stream! {
        let mut events = body.eventsource();
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    yield Err(ProviderError::Cancelled);
                    return;
                }
                next = events.next() => next,
            };
            let ended = next.is_none();
            let produced = match next {
                Some(Ok(event)) => decoder.on_event(&event),
                Some(Err(EventStreamError::Transport(error))) => {
                    Err(ProviderError::StreamDropped(error_text(&error)))
                }
                Some(Err(EventStreamError::Utf8(error))) => {
                    Err(ProviderError::Decode(error.to_string()))
                }
                Some(Err(EventStreamError::Parser(error))) => {
                    Err(ProviderError::Decode(error.to_string()))
                }
                None if over_budget.load(Ordering::Relaxed) => {
                    Err(ProviderError::OutputTooLarge(format!(
                        "the response body passed {MAX_RESPONSE_BYTES} bytes"
                    )))
                }
                None => decoder.on_end(),
            };
            match produced {
                Ok(items) => {
                    for item in items {
                        yield Ok(item);
                    }
                }
                Err(error) => {
                    yield Err(error);
                    return;
                }
            }
            if ended || decoder.is_done() {
                return;
            }
        }
    };
    stream.boxed()
}

fn error_text(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

use crate::message::MAX_TOOL_INPUT_DEPTH;

/// Parses the joined input fragments of one tool call: empty input is `{}`; malformed JSON
/// or an input nested deeper than [`MAX_TOOL_INPUT_DEPTH`] is a [`ProviderError::Decode`].
pub fn parse_tool_input(name: &str, joined: &str) -> Result<Value, ProviderError> {
    if joined.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let input = serde_json::from_str(joined).map_err(|error| {
        ProviderError::Decode(format!("tool `{name}` input is not valid JSON: {error}"))
    })?;
    bounded_tool_input(name, input)
}

/// `input` when it nests at most [`MAX_TOOL_INPUT_DEPTH`] levels, else a
/// [`ProviderError::Decode`].
pub fn bounded_tool_input(name: &str, input: Value) -> Result<Value, ProviderError> {
    if crate::message::tool_input_within_depth(&input) {
        Ok(input)
    } else {
        Err(ProviderError::Decode(format!(
            "tool `{name}` input nests deeper than {MAX_TOOL_INPUT_DEPTH} levels"
        )))
    }
}

/// Parses an event's data as JSON.
pub fn parse_data<T: serde::de::DeserializeOwned>(event: &Event) -> Result<T, ProviderError> {
    serde_json::from_str(&event.data)
        .map_err(|error| ProviderError::Decode(format!("bad `{}` event: {error}", event.event)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `levels` nested arrays around `1`, as JSON text.
    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn a_tool_input_nested_up_to_the_bound_parses_and_one_level_more_is_refused() {
        let within = format!(r#"{{"a": {}}}"#, nested(MAX_TOOL_INPUT_DEPTH - 1));
        assert!(parse_tool_input("Read", &within).is_ok());
        let beyond = format!(r#"{{"a": {}}}"#, nested(MAX_TOOL_INPUT_DEPTH));
        let error = parse_tool_input("Read", &beyond).unwrap_err();
        assert_eq!(error.code(), "PROVIDER_DECODE");
        assert!(
            error.to_string().contains("nests deeper than 64"),
            "{error}"
        );
        // Whole inputs (sent in the block's start, not streamed) are held to the same bound.
        let value: Value = serde_json::from_str(&beyond).unwrap();
        assert!(bounded_tool_input("Read", value).is_err());
        assert_eq!(
            parse_tool_input("Read", " ").unwrap(),
            serde_json::json!({})
        );
    }

    #[test]
    fn the_bound_leaves_room_under_the_parsers_own_limit() {
        // The premise of the bound: serde_json parses 127 levels and refuses 128, so a
        // 127-level input inside any wrapper could not be read back.
        assert!(serde_json::from_str::<Value>(&nested(127)).is_ok());
        assert!(serde_json::from_str::<Value>(&nested(128)).is_err());
        // The deepest wrapper (an approval inside a subagent event nested three times) stays
        // far below it.
        let wrapped = format!(
            "{}{}{}",
            "[".repeat(10),
            nested(MAX_TOOL_INPUT_DEPTH),
            "]".repeat(10)
        );
        assert!(serde_json::from_str::<Value>(&wrapped).is_ok());
    }
}
