//! The Anthropic Messages API request body, as typed structs that borrow from the
//! [`ModelRequest`]: serialised straight to bytes, without building (and freeing) a JSON tree
//! of the history and the tool schemas for every model call.

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::sync::{Arc, Mutex};

use super::{ModelRequest, ToolSpec};
use crate::message::{
    ContentBlock, MarkerText, MessageRef, ResultText, Role, ToolImage, ViewBlock, ViewMessage,
};

/// The streaming request body (`POST /v1/messages`).
#[derive(Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    /// The tool list, serialised once per list (see [`ToolsJson`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Arc<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
}

/// One history message: thinking passed back unchanged, tool results (with `is_error`) as
/// user content blocks; a message left without content says so (the API refuses empty ones).
#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: WireText<'a>,
    },
    Thinking {
        thinking: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<&'a str>,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        is_error: bool,
    },
}

/// A text as the view shows it: borrowed from the message, or written with the view's mark
/// (a ref marker, a marked or pruned result) straight into the body, never copied first.
#[derive(Clone, Copy)]
enum WireText<'a> {
    Plain(&'a str),
    Marker(MessageRef),
    Result(ResultText<'a>),
}

impl Serialize for WireText<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Plain(text) => serializer.serialize_str(text),
            Self::Marker(reference) => serializer.collect_str(&MarkerText(*reference)),
            Self::Result(text) => serializer.collect_str(text),
        }
    }
}

/// A tool result's content: its text alone, or text and images as parts.
#[derive(Serialize)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(WireText<'a>),
    Parts(Vec<ResultPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResultPart<'a> {
    Text { text: WireText<'a> },
    Image { source: ImageSource<'a> },
}

#[derive(Serialize)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

impl<'a> WireRequest<'a> {
    /// The body for `request`; `model` and `max_tokens` stand in where the request leaves
    /// them unset (the provider's configuration); `tools` is the request's tool list as JSON.
    pub fn new(
        request: &'a ModelRequest,
        model: &'a str,
        max_tokens: u32,
        tools: Option<Arc<RawValue>>,
    ) -> Self {
        Self {
            model: request.model_or(model),
            max_tokens: request.max_tokens_or(max_tokens),
            messages: request.messages.iter().map(WireMessage::of).collect(),
            stream: true,
            system: request.system.as_deref().filter(|s| !s.is_empty()),
            tools,
            temperature: request.temperature,
        }
    }
}

/// The tool list of the latest request, serialised: every request of a run offers the same
/// shared list (one per tool registry), so its JSON — the tools' schemas are most of a short
/// request — is written once per run, not once per model call. The list is kept (not only
/// its address), so a new list can never be mistaken for it. A list not seen by this provider
/// is looked up among the lists the process serialised last ([`SHARED_LISTS`]): runs of
/// sessions with the same tools (most of a server's runs) share one serialisation.
#[derive(Default)]
pub struct ToolsJson {
    last: Mutex<Option<SerialisedTools>>,
}

/// A tool list and its JSON.
struct SerialisedTools {
    list: Arc<[ToolSpec]>,
    json: Arc<RawValue>,
}

/// Tool lists the process keeps serialised at most (the most recently used first).
const SHARED_LISTS: usize = 8;

/// The process's recently serialised tool lists (see [`ToolsJson`]).
static SHARED: Mutex<Vec<SerialisedTools>> = Mutex::new(Vec::new());

impl ToolsJson {
    /// `tools` as a JSON array (the specs have the wire's own shape: `name`, `description`,
    /// `input_schema`); `None` for no tools.
    pub fn of(&self, tools: &Arc<[ToolSpec]>) -> Result<Option<Arc<RawValue>>, serde_json::Error> {
        if tools.is_empty() {
            return Ok(None);
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = last.as_ref()
            && Arc::ptr_eq(&kept.list, tools)
        {
            return Ok(Some(kept.json.clone()));
        }
        let json = shared_json(tools)?;
        *last = Some(SerialisedTools {
            list: tools.clone(),
            json: json.clone(),
        });
        Ok(Some(json))
    }
}

/// The JSON of `tools`: from the process's recent lists when an equal one is there (built-in
/// tools share their schemas, so comparing is mostly comparing names and descriptions),
/// serialised and kept otherwise (under the lock, so that two runs meeting a new list at once
/// serialise and keep it once).
fn shared_json(tools: &Arc<[ToolSpec]>) -> Result<Arc<RawValue>, serde_json::Error> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(at) = shared.iter().position(|kept| *kept.list == **tools) {
        shared[..=at].rotate_right(1);
    } else {
        let json: Arc<RawValue> = serde_json::value::to_raw_value(&**tools)?.into();
        shared.truncate(SHARED_LISTS - 1);
        shared.insert(
            0,
            SerialisedTools {
                list: tools.clone(),
                json,
            },
        );
    }
    Ok(shared[0].json.clone())
}

impl<'a> WireMessage<'a> {
    fn of(message: &'a ViewMessage) -> Self {
        let role = match message.role() {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut content: Vec<WireBlock<'a>> = message.blocks().filter_map(WireBlock::of).collect();
        if content.is_empty() {
            content.push(WireBlock::Text {
                text: WireText::Plain("(no content)"),
            });
        }
        Self { role, content }
    }
}

impl<'a> WireBlock<'a> {
    fn of(block: ViewBlock<'a>) -> Option<Self> {
        let block = match block {
            ViewBlock::Block(block) => block,
            ViewBlock::Marker(reference) => {
                return Some(Self::Text {
                    text: WireText::Marker(reference),
                });
            }
            ViewBlock::Result { result, text } => {
                return Some(Self::result(result, WireText::Result(text)));
            }
        };
        Some(match block {
            ContentBlock::Text { text } if text.trim().is_empty() => return None,
            ContentBlock::Text { text } => Self::Text {
                text: WireText::Plain(text),
            },
            ContentBlock::Thinking {
                thinking,
                signature,
            } => Self::Thinking {
                thinking,
                signature: signature.as_deref(),
            },
            ContentBlock::RedactedThinking { data } => Self::RedactedThinking { data },
            ContentBlock::ToolUse { id, name, input } => Self::ToolUse { id, name, input },
            ContentBlock::ToolResult(result) => {
                Self::result(result, WireText::Plain(&result.content))
            }
        })
    }

    /// A tool result showing `text`, with its images as parts.
    fn result(result: &'a crate::message::ToolResultBlock, text: WireText<'a>) -> Self {
        Self::ToolResult {
            tool_use_id: &result.tool_use_id,
            content: if result.images.is_empty() {
                ResultContent::Text(text)
            } else {
                ResultContent::Parts(
                    std::iter::once(ResultPart::Text { text })
                        .chain(result.images.iter().map(ResultPart::image))
                        .collect(),
                )
            },
            is_error: result.is_error,
        }
    }
}

impl<'a> ResultPart<'a> {
    fn image(image: &'a ToolImage) -> Self {
        Self::Image {
            source: ImageSource {
                kind: "base64",
                media_type: &image.media_type,
                data: &image.data,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Mark, Message, ToolResultBlock};
    use serde_json::json;

    fn body(messages: Vec<ViewMessage>) -> Value {
        let request = ModelRequest {
            model: String::new(),
            system: None,
            messages,
            tools: Vec::new().into(),
            max_tokens: 0,
            temperature: None,
        };
        serde_json::to_value(WireRequest::new(&request, "m", 1, None)).unwrap()
    }

    #[test]
    fn a_marked_message_is_written_as_its_rendering_without_being_copied() {
        let mut with_image = ToolResultBlock::ok("t2", "second \"quoted\"");
        with_image.images.push(ToolImage {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        });
        let results = Arc::new(Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult(ToolResultBlock::ok("t1", "first\nline")),
                ContentBlock::ToolResult(with_image),
            ],
        });
        let text = Arc::new(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::Text { text: "ok".into() },
            ],
        });
        let mark = |position, pruned| Mark { position, pruned };
        let views = vec![
            ViewMessage::marked(text, mark(4, None)),
            ViewMessage::marked(results.clone(), mark(5, None)),
            ViewMessage::marked(results, mark(5, Some(99))),
        ];
        let copies = views
            .iter()
            .map(|view| ViewMessage::from(view.rendered().into_owned()))
            .collect();
        let written = body(views);
        assert_eq!(written, body(copies));
        assert_eq!(
            written["messages"][0]["content"][1],
            json!({"type": "text", "text": "[ref m4]"})
        );
        assert_eq!(
            written["messages"][1]["content"][0]["content"],
            json!("[ref m5] first\nline")
        );
        assert_eq!(
            written["messages"][2]["content"][1]["content"][0],
            json!({"type": "text", "text": "[result pruned]"})
        );
    }

    #[test]
    fn the_body_has_the_messages_api_shape() {
        let mut result = ToolResultBlock::ok("t1", "file text");
        result.images.push(ToolImage {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        });
        let request = ModelRequest {
            model: String::new(),
            system: Some("be brief".into()),
            messages: vec![
                Message::user_text("hi"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Thinking {
                            thinking: "hm".into(),
                            signature: None,
                        },
                        ContentBlock::Text { text: "  ".into() },
                        ContentBlock::ToolUse {
                            id: "t1".into(),
                            name: "Read".into(),
                            input: json!({"path": "a"}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult(ToolResultBlock::ok("t0", "plain")),
                        ContentBlock::ToolResult(result),
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![],
                },
            ]
            .into_iter()
            .map(ViewMessage::from)
            .collect(),
            tools: vec![ToolSpec {
                name: "Read".into(),
                description: "reads".into(),
                input_schema: json!({"type": "object"}).into(),
            }]
            .into(),
            max_tokens: 0,
            temperature: None,
        };
        let cache = ToolsJson::default();
        let tools = cache.of(&request.tools).unwrap();
        let body: Value =
            serde_json::to_value(WireRequest::new(&request, "claude-x", 1024, tools)).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 1024,
                "stream": true,
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hm"},
                        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t0", "content": "plain", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "t1", "is_error": false, "content": [
                            {"type": "text", "text": "file text"},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                        ]},
                    ]},
                    {"role": "assistant", "content": [{"type": "text", "text": "(no content)"}]},
                ],
                "tools": [{"name": "Read", "description": "reads", "input_schema": {"type": "object"}}],
            })
        );
    }

    #[test]
    fn a_tool_list_is_serialised_once_and_a_new_list_again() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}).into(),
        };
        let cache = ToolsJson::default();
        let first: Arc<[ToolSpec]> = vec![spec("A")].into();
        let a = cache.of(&first).unwrap().unwrap();
        assert!(Arc::ptr_eq(&a, &cache.of(&first.clone()).unwrap().unwrap()));
        let second: Arc<[ToolSpec]> = vec![spec("B")].into();
        let b = cache.of(&second).unwrap().unwrap();
        assert!(b.get().contains("\"B\"") && !b.get().contains("\"A\""));
        assert!(cache.of(&Arc::from(Vec::new())).unwrap().is_none());
    }

    #[test]
    fn equal_lists_of_different_runs_share_one_serialisation_and_a_changed_one_does_not() {
        let spec = |name: &str, description: &str| ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object", "title": "shared_json test"}).into(),
        };
        // Two runs' providers, each with its own list of equal content.
        let run_one: Arc<[ToolSpec]> = vec![spec("SharedA", "reads"), spec("SharedB", "x")].into();
        let run_two: Arc<[ToolSpec]> = vec![spec("SharedA", "reads"), spec("SharedB", "x")].into();
        let one = ToolsJson::default().of(&run_one).unwrap().unwrap();
        let two = ToolsJson::default().of(&run_two).unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&one, &two),
            "equal lists share one serialisation"
        );
        // A description changed: serialised anew, never the other list's JSON.
        let changed: Arc<[ToolSpec]> =
            vec![spec("SharedA", "reads files"), spec("SharedB", "x")].into();
        let three = ToolsJson::default().of(&changed).unwrap().unwrap();
        assert!(!Arc::ptr_eq(&one, &three));
        assert!(three.get().contains("reads files"));
        let parsed: Value = serde_json::from_str(three.get()).unwrap();
        assert_eq!(parsed, serde_json::to_value(&*changed).unwrap());
    }
}
