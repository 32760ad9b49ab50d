//! A message as one model request shows it ([`ViewMessage`]): a history message shared (an
//! `Arc`, never a copy of its content) and, in a Noa view, the [`Mark`] that labels it with
//! its ref or prunes its tool results. The mark is applied where the request is written —
//! a provider's serialiser walks [`ViewMessage::blocks`] — so building a view of thousands of
//! marked messages copies no text, and the same message in the next request is the same
//! `Arc` again.
//!
//! How a mark shows (Noa's refs, N24; its prune step):
//! - a message without tool results gets the marker `[ref m<position>]` as a text block of
//!   its own, after any leading thinking;
//! - a message with tool results gets `[ref m<position>] ` in front of the text of its first
//!   result;
//! - a pruned message (a mark with `pruned`) shows its first result as the stub
//!   `[ref m…] [result pruned: about N tokens; call Expand with ref m… to read it again]`
//!   and every other result as `[result pruned]` (images stay).

use super::{ContentBlock, Message, Role, ToolResultBlock};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// The model-visible ref of the message at a position in the session's history, written
/// where it is shown without a `String` of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageRef(pub u32);

impl fmt::Display for MessageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

/// How a view shows a history message: labelled with the ref of its position, and with its
/// tool results pruned to a stub quoting `pruned` tokens when set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub position: u32,
    pub pruned: Option<u64>,
}

/// One message of a request view (see the module doc).
#[derive(Clone, Debug)]
pub struct ViewMessage {
    message: Arc<Message>,
    mark: Option<Mark>,
}

/// One content block of a [`ViewMessage`] as shown.
#[derive(Clone, Copy, Debug)]
pub enum ViewBlock<'a> {
    /// A block of the message, shown as it is.
    Block(&'a ContentBlock),
    /// The ref marker, a text block of its own.
    Marker(MessageRef),
    /// A tool result whose text the mark changes.
    Result {
        result: &'a ToolResultBlock,
        text: ResultText<'a>,
    },
}

/// The text a mark gives a tool result.
#[derive(Clone, Copy, Debug)]
pub enum ResultText<'a> {
    /// The first result of a marked message: the marker, a space, its own text.
    Marked(MessageRef, &'a str),
    /// The first result of a pruned message: the stub naming its ref and size.
    Stub(MessageRef, u64),
    /// Every other result of a pruned message.
    MorePruned,
}

/// The text of every pruned result after the first.
pub const MORE_PRUNED: &str = "[result pruned]";

impl fmt::Display for ResultText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Marked(reference, text) => write!(f, "[ref {reference}] {text}"),
            Self::Stub(reference, about) => write!(
                f,
                "[ref {reference}] [result pruned: about {about} tokens; call Expand with ref \
                 {reference} to read it again]"
            ),
            Self::MorePruned => f.write_str(MORE_PRUNED),
        }
    }
}

/// The marker's text, `[ref m…]`.
pub struct MarkerText(pub MessageRef);

impl fmt::Display for MarkerText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[ref {}]", self.0)
    }
}

impl ViewMessage {
    /// `message` shown as it is.
    pub fn new(message: Arc<Message>) -> Self {
        Self {
            message,
            mark: None,
        }
    }

    /// `message` shown with `mark`.
    pub fn marked(message: Arc<Message>, mark: Mark) -> Self {
        Self {
            message,
            mark: Some(mark),
        }
    }

    pub fn role(&self) -> Role {
        self.message.role
    }

    /// The shared message, without its mark.
    pub fn original(&self) -> &Arc<Message> {
        &self.message
    }

    pub fn mark(&self) -> Option<Mark> {
        self.mark
    }

    /// The blocks as shown, in order.
    pub fn blocks(&self) -> impl Iterator<Item = ViewBlock<'_>> {
        let content = &self.message.content;
        let shape = self.mark.map(|mark| Shape::of(content, mark));
        let mut marker = match shape {
            Some(Shape::Marker { at, reference }) => Some((at, reference)),
            _ => None,
        };
        let mut index = 0;
        std::iter::from_fn(move || {
            // The marker goes before the block at `at` (after the last block when `at` is
            // the length).
            if let Some((at, reference)) = marker
                && index == at
            {
                marker = None;
                return Some(ViewBlock::Marker(reference));
            }
            let (this, block) = (index, content.get(index)?);
            index += 1;
            Some(match (shape, block) {
                (
                    Some(Shape::Results {
                        first,
                        reference,
                        pruned,
                    }),
                    ContentBlock::ToolResult(result),
                ) => {
                    let text = match pruned {
                        Some(about) if this == first => ResultText::Stub(reference, about),
                        Some(_) => ResultText::MorePruned,
                        None if this == first => ResultText::Marked(reference, &result.content),
                        None => return Some(ViewBlock::Block(block)),
                    };
                    ViewBlock::Result { result, text }
                }
                _ => ViewBlock::Block(block),
            })
        })
    }

    /// The message as shown, copied only when it has a mark.
    pub fn rendered(&self) -> Cow<'_, Message> {
        if self.mark.is_none() {
            return Cow::Borrowed(&self.message);
        }
        Cow::Owned(Message {
            role: self.message.role,
            content: self.blocks().map(ViewBlock::to_block).collect(),
        })
    }

    /// Removes the block at `at` (an index into [`original`](Self::original)'s content). A
    /// marked message becomes its rendered copy without that block, so the mark shows
    /// exactly as it did before; a shared unmarked message is copied first.
    pub fn remove_block(&mut self, at: usize) {
        let Some(mark) = self.mark else {
            Arc::make_mut(&mut self.message).content.remove(at);
            return;
        };
        let shown = match Shape::of(&self.message.content, mark) {
            Shape::Marker { at: marker, .. } if at >= marker => at + 1,
            _ => at,
        };
        let mut message = self.rendered().into_owned();
        message.content.remove(shown);
        *self = Self::new(Arc::new(message));
    }

    /// Whether the message shows no block at all.
    pub fn is_empty(&self) -> bool {
        self.mark.is_none() && self.message.content.is_empty()
    }
}

/// Where a mark shows in a message.
#[derive(Clone, Copy)]
enum Shape {
    /// No tool result: the marker goes before block `at`.
    Marker { at: usize, reference: MessageRef },
    /// The results change from the one at `first` on.
    Results {
        first: usize,
        reference: MessageRef,
        pruned: Option<u64>,
    },
}

impl Shape {
    fn of(content: &[ContentBlock], mark: Mark) -> Self {
        let reference = MessageRef(mark.position);
        match content
            .iter()
            .position(|b| matches!(b, ContentBlock::ToolResult(_)))
        {
            Some(first) => Self::Results {
                first,
                reference,
                pruned: mark.pruned,
            },
            None => Self::Marker {
                at: content
                    .iter()
                    .position(|b| {
                        !matches!(
                            b,
                            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. }
                        )
                    })
                    .unwrap_or(content.len()),
                reference,
            },
        }
    }
}

impl ViewBlock<'_> {
    /// The block as a content block of its own (a copy).
    pub fn to_block(self) -> ContentBlock {
        match self {
            Self::Block(block) => block.clone(),
            Self::Marker(reference) => ContentBlock::Text {
                text: MarkerText(reference).to_string(),
            },
            Self::Result { result, text } => ContentBlock::ToolResult(ToolResultBlock {
                tool_use_id: result.tool_use_id.clone(),
                content: text.to_string(),
                is_error: result.is_error,
                code: result.code.clone(),
                output_id: result.output_id.clone(),
                capped: result.capped,
                images: result.images.clone(),
            }),
        }
    }
}

impl From<Message> for ViewMessage {
    fn from(message: Message) -> Self {
        Self::new(Arc::new(message))
    }
}

impl From<Arc<Message>> for ViewMessage {
    fn from(message: Arc<Message>) -> Self {
        Self::new(message)
    }
}

/// Equal when they show the same message.
impl PartialEq for ViewMessage {
    fn eq(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.message, &other.message) && self.mark == other.mark)
            || *self.rendered() == *other.rendered()
    }
}

/// As the message it shows (telemetry, the scripted provider, request snapshots).
impl Serialize for ViewMessage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.rendered().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolResultBlock;

    fn result(id: &str, text: &str) -> ContentBlock {
        ContentBlock::ToolResult(ToolResultBlock::ok(id, text))
    }

    fn texts(message: &Message) -> Vec<String> {
        message
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => format!("text:{text}"),
                ContentBlock::Thinking { thinking, .. } => format!("thinking:{thinking}"),
                ContentBlock::ToolResult(result) => format!("result:{}", result.content),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_marker_follows_leading_thinking_and_results_carry_it_in_front() {
        let assistant = Arc::new(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hm".into(),
                    signature: None,
                },
                ContentBlock::Text { text: "hi".into() },
            ],
        });
        let view = ViewMessage::marked(
            assistant.clone(),
            Mark {
                position: 7,
                pruned: None,
            },
        );
        assert_eq!(
            texts(&view.rendered()),
            ["thinking:hm", "text:[ref m7]", "text:hi"]
        );
        let only_thinking = Arc::new(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::Thinking {
                thinking: "hm".into(),
                signature: None,
            }],
        });
        let view = ViewMessage::marked(
            only_thinking,
            Mark {
                position: 2,
                pruned: None,
            },
        );
        assert_eq!(texts(&view.rendered()), ["thinking:hm", "text:[ref m2]"]);

        let results = Arc::new(Message {
            role: Role::User,
            content: vec![result("a", "one"), result("b", "two")],
        });
        let marked = ViewMessage::marked(
            results.clone(),
            Mark {
                position: 3,
                pruned: None,
            },
        );
        assert_eq!(
            texts(&marked.rendered()),
            ["result:[ref m3] one", "result:two"]
        );
        let pruned = ViewMessage::marked(
            results.clone(),
            Mark {
                position: 3,
                pruned: Some(40),
            },
        );
        assert_eq!(
            texts(&pruned.rendered()),
            [
                "result:[ref m3] [result pruned: about 40 tokens; call Expand with ref m3 to \
                 read it again]",
                "result:[result pruned]"
            ]
        );
        assert!(matches!(
            ViewMessage::new(results.clone()).rendered(),
            Cow::Borrowed(_)
        ));
        assert_eq!(pruned, pruned.clone());
        assert_ne!(pruned, marked);
        assert_eq!(marked, ViewMessage::from(marked.rendered().into_owned()));
    }

    #[test]
    fn removing_a_block_keeps_the_mark_where_it_showed() {
        let message = Arc::new(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text { text: "a".into() },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "Read".into(),
                    input: serde_json::json!({}),
                },
            ],
        });
        let mut view = ViewMessage::marked(
            message.clone(),
            Mark {
                position: 1,
                pruned: None,
            },
        );
        view.remove_block(1);
        assert_eq!(texts(&view.rendered()), ["text:[ref m1]", "text:a"]);
        assert_eq!(message.content.len(), 2, "the shared message is untouched");

        let mut plain = ViewMessage::new(message.clone());
        plain.remove_block(0);
        assert_eq!(plain.original().content.len(), 1);
        assert_eq!(message.content.len(), 2, "copied before the change");
    }

    #[test]
    fn a_marked_message_serialises_as_its_rendering() {
        let message = Arc::new(Message::user_text("\"quoted\""));
        let view = ViewMessage::marked(
            message,
            Mark {
                position: 12,
                pruned: None,
            },
        );
        assert_eq!(
            serde_json::to_value(&view).unwrap(),
            serde_json::to_value(&*view.rendered()).unwrap()
        );
    }
}
