//! The messages the last view sent, kept so that the next request shares them (an `Arc`
//! each) instead of rendering and copying every live message again: a request renders only
//! the messages it did not send last time.
//!
//! A rendered message depends only on its history message, its position and — when pruned —
//! the size its stub quotes; a summary only on its compression. Both are immutable while the
//! [`ViewCache`](super::cache::ViewCache) that owns this stays valid (history is append-only,
//! compressions are only added), and the cache drops this whenever it starts over. What the
//! last view did not send is forgotten, so this holds at most one view's messages.

use crate::message::Message;
use std::sync::Arc;

/// One live message as sent: its position, the quoted size when pruned, the message.
type Live = (u32, Option<u64>, Arc<Message>);

/// The messages of one view (see the module doc).
#[derive(Debug, Default)]
pub struct RenderedMessages {
    /// Ascending positions.
    live: Vec<Live>,
    /// Compression index → its summary message.
    summaries: Vec<Option<Arc<Message>>>,
    /// Estimated bytes held (see [`RenderedMessages::bytes`]).
    bytes: usize,
}

impl RenderedMessages {
    /// Roughly the heap bytes these messages hold: four per estimated token plus a fixed
    /// overhead per message.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Renders one view, taking from the previous view's messages what it sent again.
pub struct Renderer {
    previous: RenderedMessages,
    /// Next entry of `previous.live` not yet passed.
    cursor: usize,
    next: RenderedMessages,
}

/// Fixed overhead counted per kept message (the `Arc`, the `Message`, its block vector).
const PER_MESSAGE: usize = 128;

impl Renderer {
    pub fn new(previous: RenderedMessages) -> Self {
        Self {
            previous,
            cursor: 0,
            next: RenderedMessages::default(),
        }
    }

    /// The live message at `position` (pruned to a stub quoting `pruned` tokens when set),
    /// shared from the previous view or made by `render`. Live messages must be asked for in
    /// ascending positions.
    pub fn live(
        &mut self,
        position: u32,
        pruned: Option<u64>,
        tokens: u64,
        render: impl FnOnce() -> Message,
    ) -> Arc<Message> {
        let previous = &mut self.previous.live;
        while self.cursor < previous.len() && previous[self.cursor].0 < position {
            self.cursor += 1;
        }
        let message = match previous.get_mut(self.cursor) {
            Some(entry) if entry.0 == position && entry.1 == pruned => {
                self.cursor += 1;
                entry.2.clone()
            }
            _ => Arc::new(render()),
        };
        debug_assert!(self.next.live.last().is_none_or(|last| last.0 < position));
        self.next.live.push((position, pruned, message.clone()));
        self.next.bytes += tokens as usize * 4 + PER_MESSAGE;
        message
    }

    /// The summary of compression `index`, shared or made by `render`.
    pub fn summary(
        &mut self,
        index: usize,
        tokens: u64,
        render: impl FnOnce() -> Message,
    ) -> Arc<Message> {
        let message = self
            .previous
            .summaries
            .get_mut(index)
            .and_then(Option::take)
            .unwrap_or_else(|| Arc::new(render()));
        if self.next.summaries.len() <= index {
            self.next.summaries.resize(index + 1, None);
        }
        self.next.summaries[index] = Some(message.clone());
        self.next.bytes += tokens as usize * 4 + PER_MESSAGE;
        message
    }

    /// The messages of this view, to share with the next.
    pub fn finish(self) -> RenderedMessages {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_sent_again_is_shared_and_one_not_sent_is_forgotten() {
        let mut renderer = Renderer::new(RenderedMessages::default());
        let first = renderer.live(1, None, 10, || Message::user_text("one"));
        renderer.live(2, None, 10, || Message::user_text("two"));
        let summary = renderer.summary(0, 5, || Message::user_text("summary"));
        let kept = renderer.finish();
        assert_eq!(kept.bytes(), 25 * 4 + 3 * PER_MESSAGE);

        let mut renderer = Renderer::new(kept);
        let again = renderer.live(1, None, 10, || unreachable!("shared"));
        assert!(Arc::ptr_eq(&first, &again));
        // Pruned now: a different message.
        let pruned = renderer.live(2, Some(10), 3, || Message::user_text("stub"));
        assert_eq!(*pruned, Message::user_text("stub"));
        let shared = renderer.summary(0, 5, || unreachable!("shared"));
        assert!(Arc::ptr_eq(&summary, &shared));
        let kept = renderer.finish();

        let mut renderer = Renderer::new(kept);
        let made = renderer.live(1, None, 10, || Message::user_text("one"));
        assert!(Arc::ptr_eq(&first, &made));
        // Position 2 was sent pruned last time: its full rendering is made again.
        let full = renderer.live(2, None, 10, || Message::user_text("two again"));
        assert_eq!(*full, Message::user_text("two again"));
        let kept = renderer.finish();
        assert!(kept.summaries.is_empty(), "a summary not sent is forgotten");
    }
}
