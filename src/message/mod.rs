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
}
