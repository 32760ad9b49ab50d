//! The conversation vocabulary shared by history, providers and tools.
//!
//! History (stored, durable) is a list of [`Message`]s. Providers translate these to and from
//! their wire formats; the loop never sees wire formats.

mod view;

pub use view::{MORE_PRUNED, Mark, MarkerText, MessageRef, ResultText, ViewBlock, ViewMessage};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Who said a message. The system prompt is not a message; it travels beside them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One message of history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    pub fn assistant_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// The tool_use blocks of this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// The deepest nesting of a tool input (objects and arrays, the input itself counting as one)
/// the server takes from anyone: a model's tool call, a hook's or an approver's replacement.
/// The input is kept inside other JSON — the `tool_call` event's payload, the history message's
/// content, an approval and its `approval_decided` event, a subagent's events nested in its
/// parent's — and every one of them must still read back under `serde_json`'s nesting limit
/// (128): an input nested 127 levels deep once made the session's transcript and history
/// unreadable.
pub const MAX_TOOL_INPUT_DEPTH: usize = 64;

/// Whether `input` nests at most [`MAX_TOOL_INPUT_DEPTH`] levels (walked without recursion).
pub fn tool_input_within_depth(input: &Value) -> bool {
    let mut pending = vec![(input, 1)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Array(_) | Value::Object(_) if depth > MAX_TOOL_INPUT_DEPTH => return false,
            Value::Array(items) => pending.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => pending.extend(map.values().map(|item| (item, depth + 1))),
            _ => {}
        }
    }
    true
}

/// A block of message content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Model reasoning, passed through to the provider unchanged.
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[schema(value_type = Object)]
        input: Value,
    },
    ToolResult(ToolResultBlock),
}

/// The answer to one tool_use, always paired with its id (N4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolResultBlock {
    pub tool_use_id: String,
    /// The text the model reads (already capped).
    pub content: String,
    #[serde(default)]
    pub is_error: bool,
    /// Machine-readable error code (`TOOL_NOT_FOUND`, `PERMISSION_DENIED`, …) when `is_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Set when the output was capped; the full output is kept under this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_id: Option<String>,
    /// Structured "already capped" flag (D9): never inferred from the text.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capped: bool,
    /// Images the tool returned (MCP tools), sent to the model beside the text where the
    /// provider takes images in tool results; never capped with the text (they are bounded
    /// where they are made).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ToolImage>,
}

/// One image of a tool result: its media type and its base64 data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolImage {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// Standard base64.
    pub data: String,
}

impl ToolResultBlock {
    pub fn ok(tool_use_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error: false,
            code: None,
            output_id: None,
            capped: false,
            images: Vec::new(),
        }
    }

    pub fn error(tool_use_id: impl Into<String>, code: &str, content: impl Into<String>) -> Self {
        Self {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error: true,
            code: Some(code.to_owned()),
            output_id: None,
            capped: false,
            images: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_blocks_round_trip_with_type_tags() {
        let message = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text { text: "hi".into() },
                ContentBlock::ToolUse {
                    id: "tu_1".into(),
                    name: "Read".into(),
                    input: json!({"file_path": "a"}),
                },
                ContentBlock::ToolResult(ToolResultBlock::error("tu_1", "TOOL_FAILED", "boom")),
            ],
        };
        let value = serde_json::to_value(&message).unwrap();
        assert_eq!(value["content"][1]["type"], "tool_use");
        assert_eq!(value["content"][2]["type"], "tool_result");
        assert_eq!(value["content"][2]["code"], "TOOL_FAILED");
        let back: Message = serde_json::from_value(value).unwrap();
        assert_eq!(back, message);
    }

    /// `levels` nested arrays and objects, alternating, around a number.
    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, level| {
            if level % 2 == 0 {
                json!([inner])
            } else {
                json!({ "k": inner })
            }
        })
    }

    #[test]
    fn tool_input_depth_counts_arrays_and_objects_up_to_the_bound() {
        assert!(tool_input_within_depth(&json!(1)));
        assert!(tool_input_within_depth(&json!({})));
        assert!(tool_input_within_depth(&nested(MAX_TOOL_INPUT_DEPTH)));
        assert!(!tool_input_within_depth(&nested(MAX_TOOL_INPUT_DEPTH + 1)));
        // A deep branch beside shallow ones is found.
        let mixed = json!({ "a": 1, "b": [1, 2], "c": nested(MAX_TOOL_INPUT_DEPTH) });
        assert!(!tool_input_within_depth(&mixed));
        let wide = json!({ "a": [1, 2], "c": nested(MAX_TOOL_INPUT_DEPTH - 1) });
        assert!(tool_input_within_depth(&wide));
    }
}
