//! How the view's messages are made (N24 refs, the prune stub, summaries), and their token
//! counts without making them. A live message is sent shared and marked
//! ([`crate::message::ViewMessage`], which owns how a mark shows); a copy is rendered only
//! for a step that changes the message (the nudge) and for summaries.

use super::state::{Compression, tokens_of_chars};
use crate::harness::context::{IMAGE_CHARS, block_chars};
use crate::message::{
    ContentBlock, MORE_PRUNED, Mark, MarkerText, Message, MessageRef, ResultText, ViewBlock,
    ViewMessage,
};
use std::fmt::{self, Write as _};
use std::sync::Arc;

/// Replaces the content of every tool result of `message` by the prune stub.
pub(super) fn prune_message(message: &mut Message, position: u32, about: u64) {
    let stub = ResultText::Stub(MessageRef(position), about);
    let mut first = true;
    for content in &mut message.content {
        if let ContentBlock::ToolResult(result) = content {
            result.content = if first {
                stub.to_string()
            } else {
                MORE_PRUNED.into()
            };
            first = false;
        }
    }
}

/// [`message_tokens`](super::state::message_tokens) of `message` marked and pruned, without
/// building it: the characters of the blocks the view shows ([`ViewMessage::blocks`]).
pub(super) fn pruned_tokens(message: &Arc<Message>, position: u32, about: u64) -> u64 {
    let chars = live(message, position, Some(about))
        .blocks()
        .map(shown_chars)
        .sum();
    u64::from(tokens_of_chars(chars))
}

/// The characters `block` counts for as shown ([`block_chars`] of its rendered copy).
fn shown_chars(block: ViewBlock<'_>) -> usize {
    let shown = |text: &dyn fmt::Display| {
        let mut count = CharCount(0);
        let _ = write!(count, "{text}");
        count.0
    };
    match block {
        ViewBlock::Block(block) => block_chars(block),
        ViewBlock::Marker(reference) => shown(&MarkerText(reference)),
        ViewBlock::Result { result, text } => shown(&text) + result.images.len() * IMAGE_CHARS,
    }
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
/// otherwise as a text block after any leading thinking (a copy: a view shares the message
/// and marks it as `live` does).
pub fn marked(message: &Arc<Message>, position: u32) -> Message {
    render_live(message, position, None)
}

/// The view message of the history message at `position`: shared, marked with its ref, and
/// with every tool result pruned to a stub quoting `pruned` tokens when set.
pub(super) fn live(message: &Arc<Message>, position: u32, pruned: Option<u64>) -> ViewMessage {
    ViewMessage::marked(message.clone(), Mark { position, pruned })
}

/// [`live`] as a message of its own (a copy), for a step that changes it.
pub(super) fn render_live(message: &Arc<Message>, position: u32, pruned: Option<u64>) -> Message {
    live(message, position, pruned).rendered().into_owned()
}
