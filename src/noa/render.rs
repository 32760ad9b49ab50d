//! How the view's messages are made (N24 refs, the prune stub, summaries), and their token
//! counts without making them: the pipeline renders only what it sends.

use super::state::{Compression, tokens_of_chars};
use super::{MessageRef, message_ref};
use crate::harness::context::block_chars;
use crate::message::{ContentBlock, Message, ToolResultBlock};
use std::fmt::{self, Write as _};

/// The stub a pruned result shows in place of its content.
pub(super) fn write_stub(out: &mut impl fmt::Write, reference: &str, about: u64) -> fmt::Result {
    write!(
        out,
        "[ref {reference}] [result pruned: about {about} tokens; call Expand with ref \
         {reference} to read it again]"
    )
}

/// The stub of every tool result after the first.
const MORE_PRUNED: &str = "[result pruned]";

/// Replaces the content of every tool result of `message` by the prune stub.
pub(super) fn prune_message(message: &mut Message, position: u32, about: u64) {
    let reference = message_ref(position);
    let mut first = true;
    for content in &mut message.content {
        if let ContentBlock::ToolResult(result) = content {
            result.content = if first {
                let mut stub = String::new();
                let _ = write_stub(&mut stub, &reference, about);
                stub
            } else {
                MORE_PRUNED.into()
            };
            first = false;
        }
    }
}

/// [`message_tokens`](super::state::message_tokens) of `message` marked and pruned, without
/// building it.
pub(super) fn pruned_tokens(message: &Message, position: u32, about: u64) -> u64 {
    let reference = message_ref(position);
    let mut chars = 0usize;
    let mut first = true;
    for block in &message.content {
        match block {
            ContentBlock::ToolResult(result) => {
                chars += if first {
                    let mut stub = CharCount(0);
                    let _ = write_stub(&mut stub, &reference, about);
                    stub.0
                } else {
                    MORE_PRUNED.len()
                };
                chars += result.images.len() * 6400;
                first = false;
            }
            other => chars += block_chars(other),
        }
    }
    if first {
        // No tool result: the marker is a text block of its own.
        chars += "[ref ]".len() + reference.len();
    }
    u64::from(tokens_of_chars(chars))
}

/// Counts the bytes written through it.
struct CharCount(usize);

impl fmt::Write for CharCount {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// The text of the message showing a compression in the view.
fn write_summary(out: &mut impl fmt::Write, compression: &Compression) -> fmt::Result {
    write!(
        out,
        "[archive {}: {}..{} compressed; call Expand with ref {} to read the originals]\n{}",
        compression.archive_id,
        compression.from_ref,
        compression.to_ref,
        compression.archive_id,
        compression.summary
    )
}

/// The message showing a compression in the view.
pub fn summary_message(compression: &Compression) -> Message {
    let mut text = String::new();
    let _ = write_summary(&mut text, compression);
    Message::user_text(text)
}

/// [`message_tokens`](super::state::message_tokens) of [`summary_message`], without building
/// it.
pub fn summary_tokens(compression: &Compression) -> u32 {
    let mut chars = CharCount(0);
    let _ = write_summary(&mut chars, compression);
    tokens_of_chars(chars.0)
}

/// `message` with its ref marker: in front of the first tool result of a results message,
/// otherwise as a text block after any leading thinking.
pub fn marked(message: &Message, position: u32) -> Message {
    render_live(message, position, None)
}

/// [`marked`], and with `pruned` (the size the stub quotes) every tool result replaced by the
/// prune stub (as the prune step does to a marked message), copying only what is shown: one
/// allocation for the block list and one per copied string, none to grow or shift them.
pub(super) fn render_live(message: &Message, position: u32, pruned: Option<u64>) -> Message {
    let first_result = message
        .content
        .iter()
        .position(|b| matches!(b, ContentBlock::ToolResult(_)));
    let Some(first_result) = first_result else {
        let at = message
            .content
            .iter()
            .position(|b| {
                !matches!(
                    b,
                    ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. }
                )
            })
            .unwrap_or(message.content.len());
        let mut content = Vec::with_capacity(message.content.len() + 1);
        content.extend_from_slice(&message.content[..at]);
        content.push(ContentBlock::Text {
            text: format!("[ref {}]", MessageRef(position)),
        });
        content.extend_from_slice(&message.content[at..]);
        return Message {
            role: message.role,
            content,
        };
    };
    let content = message
        .content
        .iter()
        .enumerate()
        .map(|(index, block)| {
            let ContentBlock::ToolResult(result) = block else {
                return block.clone();
            };
            let text = match pruned {
                Some(about) if index == first_result => {
                    let mut stub = String::new();
                    let _ = write_stub(&mut stub, &message_ref(position), about);
                    stub
                }
                Some(_) => MORE_PRUNED.to_owned(),
                None if index == first_result => {
                    // "[ref m" + at most 10 digits + "] ".
                    let mut text = String::with_capacity(18 + result.content.len());
                    let _ = write!(text, "[ref {}] ", MessageRef(position));
                    text.push_str(&result.content);
                    text
                }
                None => return block.clone(),
            };
            ContentBlock::ToolResult(ToolResultBlock {
                tool_use_id: result.tool_use_id.clone(),
                content: text,
                is_error: result.is_error,
                code: result.code.clone(),
                output_id: result.output_id.clone(),
                capped: result.capped,
                images: result.images.clone(),
            })
        })
        .collect();
    Message {
        role: message.role,
        content,
    }
}
