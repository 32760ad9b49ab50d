//! The deterministic scripted provider: the offline default and the demo/test model.
//!
//! A script is JSON:
//! ```json
//! { "turns": [
//!     { "text": "Let me look.", "tool_calls": [ {"name": "Read", "input": {"file_path": "a"}} ] },
//!     { "when_last_tool_result_contains": "No such file", "text": "It is missing." },
//!     { "text": "It says: {{last_tool_result}}", "stop": "end_turn" }
//! ] }
//! ```
//! The turn played is derived from the request alone, so playback is deterministic and survives
//! restarts: with `k` = the number of assistant messages in the history, the first *reaction*
//! turn (one with `when_last_tool_result_contains`) whose text occurs in the last tool result of
//! the last message wins; otherwise the `k`-th *sequential* turn (one without) is played. A
//! reaction therefore replaces the sequential turn at its position. Past the end of the script,
//! a short end_turn text says so. `{{last_tool_result}}` and `{{last_user_text}}` are replaced
//! in the text and in string values of tool inputs. Tool call ids are `toolu_scripted_{k}_{i}`
//! (`toolu_scripted_{k}_{ref}_{i}` when the request shows refs, `ref` the newest).
//! `stop` defaults to `tool_use` when the turn calls tools and `end_turn` otherwise.
//! With `"per_prompt": true`, `k` counts only the assistant messages since the last user
//! text (the last prompt), so every prompt plays the script from its start (the built-in
//! demo agent of [`super::demo`] does this).
//!
//! Size budget: a placeholder's value is cut to [`MAX_PLACEHOLDER_BYTES`] (with a marker), the
//! substitution is one pass (a value that itself contains a placeholder is not expanded
//! again), and the expanded size of the whole turn — thinking, text and every tool-input
//! string — is computed from the placeholder counts *before* anything is expanded; over
//! [`MAX_EXPANDED_BYTES`] the request fails with `MODEL_OUTPUT_TOO_LARGE`. Each block streams
//! in at most [`MAX_DELTAS_PER_BLOCK`] deltas, so one turn yields a bounded number of events.
//!
//! **Context window.** With `"context_window": N` (tokens), a request whose estimated size
//! (system, messages and tool schemas as JSON, four characters per token — the same estimate
//! its usage reports) passes `N` fails with [`ProviderError::ContextOverflow`], like a real
//! provider's context-overflow error.
//!
//! **Ref placeholders.** `{{ref:I}}` in a tool-input string resolves to the `I`-th message ref
//! visible in the request (the `[ref m…]` markers a context policy such as Noa writes into its
//! view), counting from 0 at the oldest, or from the end when `I` is negative (`-1` is the
//! newest). An index with no ref resolves to `none`. So a scripted turn can call a
//! compression tool on ranges that really exist in the request it answers.
//!
//! **Delays.** `"delay_ms": N` on a turn makes the model wait `N` ms (at most
//! [`MAX_DELAY_MS`]) before its first output, like a slow provider; a cancelled run stops
//! waiting at once. Tests use it to hold one run while another proceeds.
//!
//! Without a script, every request is answered with one end_turn text turn echoing the last
//! user text. Output streams as the same [`StreamItem`]s as the HTTP providers (several text
//! deltas, tool input in fragments), with usage estimated at 4 characters per token.

use async_trait::async_trait;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{ItemStream, ModelRequest, Provider, ProviderError, StopReason, StreamItem, Usage};
use crate::message::{ContentBlock, Message, Role, ViewMessage};
use std::borrow::Cow;

/// Characters per text delta (at least; long blocks use bigger deltas).
const DELTA_CHARS: usize = 12;
/// Most deltas one text or thinking block is streamed in.
pub const MAX_DELTAS_PER_BLOCK: usize = 50_000;
/// Longest value a placeholder expands to, in bytes; longer values are cut with a marker.
pub const MAX_PLACEHOLDER_BYTES: usize = 64 * 1024;
/// Largest expanded turn (thinking + text + tool-input strings), in bytes.
pub const MAX_EXPANDED_BYTES: usize = 512 * 1024;
const LAST_TOOL_RESULT: &str = "{{last_tool_result}}";
const LAST_USER_TEXT: &str = "{{last_user_text}}";
/// Longest wait a turn's `delay_ms` may ask for; more is a malformed script.
pub const MAX_DELAY_MS: u64 = 10_000;
/// Characters per estimated token.
const CHARS_PER_TOKEN: u64 = 4;

/// A parsed script.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The turns, sequential and reactions mixed, in order.
    pub turns: Vec<ScriptTurn>,
    /// Counts turns from the last prompt instead of from the start of the session.
    #[serde(default)]
    pub per_prompt: bool,
    /// The model's context window in estimated tokens: a bigger request is a context overflow.
    #[serde(default)]
    pub context_window: Option<u64>,
}

/// One assistant turn of a script.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// Makes this a reaction: played when the last tool result contains this text.
    #[serde(default)]
    pub when_last_tool_result_contains: Option<String>,
    /// Reasoning streamed before the text.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Visible text (placeholders allowed).
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Stop reason in Anthropic spelling (`end_turn`, `tool_use`, `max_tokens`, …).
    #[serde(default)]
    pub stop: Option<String>,
    /// Wait before the first output, in milliseconds (at most [`MAX_DELAY_MS`]).
    #[serde(default)]
    pub delay_ms: u64,
}

/// One scripted tool call.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// Tool name.
    pub name: String,
    /// Tool input (`{}` when absent; placeholders allowed in strings).
    #[serde(default = "empty_object")]
    pub input: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// The scripted provider (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct ScriptedProvider {
    script: Option<Script>,
}

impl ScriptedProvider {
    /// A provider playing `script`, or echoing when `None`. A malformed script is a
    /// [`ProviderError::Config`].
    pub fn new(script: Option<&Value>) -> Result<Self, ProviderError> {
        let script = script
            .map(|value| {
                Script::deserialize(value)
                    .map_err(|error| ProviderError::Config(format!("invalid script: {error}")))
            })
            .transpose()?;
        if let Some(turn) = script
            .iter()
            .flat_map(|script| &script.turns)
            .find(|turn| turn.delay_ms > MAX_DELAY_MS)
        {
            return Err(ProviderError::Config(format!(
                "invalid script: delay_ms {} is over the {MAX_DELAY_MS} ms limit",
                turn.delay_ms
            )));
        }
        Ok(Self { script })
    }

    /// The turn to play for `request`, placeholders not yet substituted.
    fn choose(&self, request: &ModelRequest) -> ScriptTurn {
        let context = Context::of(request);
        let Some(script) = &self.script else {
            return ScriptTurn {
                when_last_tool_result_contains: None,
                thinking: None,
                text: Some(context.last_user_text.clone()),
                tool_calls: vec![],
                stop: Some("end_turn".into()),
                delay_ms: 0,
            };
        };
        if let Some(result) = &context.trailing_tool_result {
            let reaction = script.turns.iter().find(|turn| {
                turn.when_last_tool_result_contains
                    .as_deref()
                    .is_some_and(|needle| result.contains(needle))
            });
            if let Some(turn) = reaction {
                return turn.clone();
            }
        }
        let sequential = script
            .turns
            .iter()
            .filter(|turn| turn.when_last_tool_result_contains.is_none())
            .nth(if script.per_prompt {
                context.turns_since_prompt
            } else {
                context.assistant_turns
            });
        match sequential {
            Some(turn) => turn.clone(),
            None => ScriptTurn {
                when_last_tool_result_contains: None,
                thinking: None,
                text: Some(format!(
                    "[scripted provider: the script has no turn {}]",
                    context.assistant_turns
                )),
                tool_calls: vec![],
                stop: Some("end_turn".into()),
                delay_ms: 0,
            },
        }
    }
}

/// What the script can see of a request.
struct Context {
    assistant_turns: usize,
    /// Assistant messages after the last user message that carries text (the last prompt).
    turns_since_prompt: usize,
    /// The last tool result of the last message, when that message carries tool results.
    trailing_tool_result: Option<String>,
    last_tool_result: String,
    last_user_text: String,
}

impl Context {
    fn of(request: &ModelRequest) -> Self {
        // What the model would read: every message as shown (marks applied).
        let messages: Vec<Cow<'_, Message>> =
            request.messages.iter().map(ViewMessage::rendered).collect();
        let assistant_turns = messages
            .iter()
            .filter(|message| message.role == Role::Assistant)
            .count();
        let turns_since_prompt = messages
            .iter()
            .rev()
            .take_while(|message| {
                message.role == Role::Assistant
                    || !message
                        .content
                        .iter()
                        .any(|block| matches!(block, ContentBlock::Text { .. }))
            })
            .filter(|message| message.role == Role::Assistant)
            .count();
        let last_result_of = |content: &[ContentBlock]| {
            content.iter().rev().find_map(|block| match block {
                ContentBlock::ToolResult(result) => Some(result.content.clone()),
                _ => None,
            })
        };
        let trailing_tool_result = messages
            .last()
            .filter(|message| message.role == Role::User)
            .and_then(|message| last_result_of(&message.content));
        let last_tool_result = messages
            .iter()
            .rev()
            .find_map(|message| last_result_of(&message.content))
            .unwrap_or_default();
        let last_user_text = messages
            .iter()
            .rev()
            .filter(|message| message.role == Role::User)
            .find_map(|message| {
                let texts: Vec<&str> = message
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                (!texts.is_empty()).then(|| texts.join("\n"))
            })
            .unwrap_or_default();
        Self {
            assistant_turns,
            turns_since_prompt,
            trailing_tool_result,
            last_tool_result: cut_placeholder_value(last_tool_result),
            last_user_text: cut_placeholder_value(last_user_text),
        }
    }

    /// The byte length of `text` once filled, computed without expanding.
    fn filled_len(&self, text: &str) -> usize {
        let results = text.matches(LAST_TOOL_RESULT).count();
        let users = text.matches(LAST_USER_TEXT).count();
        text.len() - results * LAST_TOOL_RESULT.len() - users * LAST_USER_TEXT.len()
            + results.saturating_mul(self.last_tool_result.len())
            + users.saturating_mul(self.last_user_text.len())
    }

    /// The byte length of every string of `value` once filled (keys and structure aside).
    fn filled_value_len(&self, value: &Value) -> usize {
        let mut total = 0usize;
        let mut pending = vec![value];
        while let Some(value) = pending.pop() {
            match value {
                Value::String(text) => total = total.saturating_add(self.filled_len(text)),
                Value::Array(items) => pending.extend(items),
                Value::Object(map) => {
                    total = total.saturating_add(map.keys().map(String::len).sum());
                    pending.extend(map.values());
                }
                _ => total = total.saturating_add(8),
            }
        }
        total
    }

    /// Replaces the placeholders in one pass: substituted values are not scanned again.
    fn fill(&self, text: &str) -> String {
        let mut out = String::with_capacity(self.filled_len(text));
        let mut rest = text;
        while let Some(at) = rest.find("{{") {
            out.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix(LAST_TOOL_RESULT) {
                out.push_str(&self.last_tool_result);
                rest = after;
            } else if let Some(after) = tail.strip_prefix(LAST_USER_TEXT) {
                out.push_str(&self.last_user_text);
                rest = after;
            } else {
                out.push('{');
                rest = &tail[1..];
            }
        }
        out.push_str(rest);
        out
    }

    fn fill_value(&self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.fill(text)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.fill_value(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, v)| (key.clone(), self.fill_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

const REF_MARKER: &str = "[ref ";

/// The message refs visible in `request`, oldest first (`[ref m12]` markers in texts and
/// tool results).
fn visible_refs(request: &ModelRequest) -> Vec<String> {
    let mut refs = Vec::new();
    for message in &request.messages {
        for block in &message.rendered().content {
            let text = match block {
                ContentBlock::Text { text } => text.as_str(),
                ContentBlock::ToolResult(result) => result.content.as_str(),
                _ => continue,
            };
            let mut rest = text;
            while let Some(at) = rest.find(REF_MARKER) {
                let after = &rest[at + REF_MARKER.len()..];
                let Some(end) = after.find(']') else { break };
                let name = &after[..end];
                if name.len() <= 16 && name.chars().all(|c| c.is_ascii_alphanumeric()) {
                    refs.push(name.to_owned());
                }
                rest = &after[end..];
            }
        }
    }
    refs
}

/// Replaces `{{ref:I}}` placeholders in the strings of `value` (see the module doc).
fn fill_refs(value: &Value, refs: &[String]) -> Value {
    match value {
        Value::String(text) if text.contains("{{ref:") => {
            let mut out = String::new();
            let mut rest = text.as_str();
            while let Some(at) = rest.find("{{ref:") {
                out.push_str(&rest[..at]);
                let after = &rest[at + 6..];
                let Some(end) = after.find("}}") else {
                    out.push_str(&rest[at..]);
                    rest = "";
                    break;
                };
                let resolved = after[..end].trim().parse::<i64>().ok().and_then(|index| {
                    let index = if index < 0 {
                        refs.len().checked_sub(index.unsigned_abs() as usize)?
                    } else {
                        index as usize
                    };
                    refs.get(index)
                });
                out.push_str(resolved.map_or("none", String::as_str));
                rest = &after[end + 2..];
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_refs(v, refs)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, v)| (key.clone(), fill_refs(v, refs)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `value` cut to [`MAX_PLACEHOLDER_BYTES`] on a character boundary, with a marker.
fn cut_placeholder_value(value: String) -> String {
    if value.len() <= MAX_PLACEHOLDER_BYTES {
        return value;
    }
    let mut end = MAX_PLACEHOLDER_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [cut at {MAX_PLACEHOLDER_BYTES} bytes]", &value[..end])
}

/// Characters per delta for a block of `text`: at least [`DELTA_CHARS`], and large enough that
/// the block takes at most [`MAX_DELTAS_PER_BLOCK`] deltas.
fn delta_size(text: &str) -> usize {
    DELTA_CHARS.max(text.chars().count().div_ceil(MAX_DELTAS_PER_BLOCK))
}

/// Splits `text` into pieces of at most `size` characters.
fn chunks(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(size.max(1))
        .map(|piece| piece.iter().collect())
        .collect()
}

fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(CHARS_PER_TOKEN)
}

fn request_chars(request: &ModelRequest) -> usize {
    let messages = serde_json::to_string(&request.messages).map_or(0, |s| s.len());
    let tools = serde_json::to_string(&request.tools).map_or(0, |s| s.len());
    request.system.as_deref().map_or(0, str::len) + messages + tools
}

/// The stream items of one scripted turn, or `MODEL_OUTPUT_TOO_LARGE` when its expansion
/// would pass [`MAX_EXPANDED_BYTES`] (checked before expanding).
fn play(turn: &ScriptTurn, request: &ModelRequest) -> Result<Vec<StreamItem>, ProviderError> {
    let context = Context::of(request);
    let expanded = turn
        .thinking
        .as_deref()
        .map_or(0, str::len)
        .saturating_add(turn.text.as_deref().map_or(0, |t| context.filled_len(t)))
        .saturating_add(
            turn.tool_calls
                .iter()
                .map(|call| context.filled_value_len(&call.input))
                .fold(0usize, usize::saturating_add),
        );
    if expanded > MAX_EXPANDED_BYTES {
        return Err(ProviderError::OutputTooLarge(format!(
            "the scripted turn expands to {expanded} bytes, more than the \
             {MAX_EXPANDED_BYTES}-byte limit"
        )));
    }
    let refs = visible_refs(request);
    let mut items = Vec::new();
    let mut output_chars = 0;
    if let Some(thinking) = turn.thinking.as_deref().filter(|t| !t.is_empty()) {
        output_chars += thinking.len();
        items.extend(
            chunks(thinking, delta_size(thinking))
                .into_iter()
                .map(StreamItem::ThinkingDelta),
        );
        items.push(StreamItem::ThinkingSignature("scripted".into()));
    }
    if let Some(text) = turn.text.as_deref() {
        let text = context.fill(text);
        output_chars += text.len();
        items.extend(
            chunks(&text, delta_size(&text))
                .into_iter()
                .map(StreamItem::TextDelta),
        );
    }
    for (i, call) in turn.tool_calls.iter().enumerate() {
        let index = i;
        // Behind a context policy that drops messages the count repeats: the newest ref
        // visible (a history position) keeps the ids unique.
        let id = match refs.last() {
            Some(newest) => format!("toolu_scripted_{}_{newest}_{i}", context.assistant_turns),
            None => format!("toolu_scripted_{}_{i}", context.assistant_turns),
        };
        let input = fill_refs(&context.fill_value(&call.input), &refs);
        let json = input.to_string();
        output_chars += json.len() + call.name.len();
        items.push(StreamItem::ToolUseStart {
            index,
            id: id.clone(),
            name: call.name.clone(),
        });
        let half = json.chars().count().div_ceil(2);
        for partial_json in chunks(&json, half) {
            items.push(StreamItem::ToolUseInputDelta {
                index,
                partial_json,
            });
        }
        items.push(StreamItem::ToolUseDone {
            index,
            id,
            name: call.name.clone(),
            input,
        });
    }
    let stop = match turn.stop.as_deref() {
        Some(reason) => StopReason::from_anthropic(reason),
        None if turn.tool_calls.is_empty() => StopReason::EndTurn,
        None => StopReason::ToolUse,
    };
    items.push(StreamItem::Usage(Usage {
        input_tokens: estimate_tokens(request_chars(request)),
        output_tokens: estimate_tokens(output_chars).max(1),
        cache_read_tokens: 0,
        cache_write_tokens: 0,
    }));
    items.push(StreamItem::Stop(stop));
    Ok(items)
}

#[async_trait]
impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
    ) -> Result<ItemStream, ProviderError> {
        if cancel.is_cancelled() {
            return Err(ProviderError::Cancelled);
        }
        if let Some(window) = self.script.as_ref().and_then(|s| s.context_window) {
            let tokens = estimate_tokens(request_chars(request));
            if tokens > window {
                return Err(ProviderError::ContextOverflow(format!(
                    "prompt is too long: {tokens} tokens > {window} maximum"
                )));
            }
        }
        let turn = self.choose(request);
        let delay = std::time::Duration::from_millis(turn.delay_ms);
        let items = play(&turn, request)?;
        let cancel = cancel.clone();
        let stream = async_stream::stream! {
            if !delay.is_zero() {
                tokio::select! {
                    () = cancel.cancelled() => {
                        yield Err(ProviderError::Cancelled);
                        return;
                    }
                    () = tokio::time::sleep(delay) => {}
                }
            }
            for item in items {
                if cancel.is_cancelled() {
                    yield Err(ProviderError::Cancelled);
                    return;
                }
                yield Ok(item);
            }
        };
        Ok(stream.boxed())
    }
}

#[cfg(test)]
#[path = "scripted_tests.rs"]
mod tests;
