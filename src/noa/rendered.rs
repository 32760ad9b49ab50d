//! The summary messages the last view sent, kept so that the next request shares them (an
//! `Arc` each) instead of formatting them again. Live messages need no keeping: a view shares
//! them with history and marks them ([`crate::message::ViewMessage`]).
//!
//! A summary depends only on its compression, immutable while the
//! [`ViewCache`](super::cache::ViewCache) that owns this stays valid (compressions are only
//! added), and the cache drops this whenever it starts over. What the last view did not send
//! is forgotten, so this holds at most one view's summaries.

use crate::message::Message;
use std::sync::Arc;

/// The summaries of one view (see the module doc).
#[derive(Debug, Default)]
pub struct RenderedMessages {
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

/// Renders the summaries of one view, taking from the previous view's what it sent again.
pub struct Renderer {
    previous: RenderedMessages,
    next: RenderedMessages,
}

/// Fixed overhead counted per kept message (the `Arc`, the `Message`, its block vector).
const PER_MESSAGE: usize = 128;

impl Renderer {
    pub fn new(previous: RenderedMessages) -> Self {
        Self {
            previous,
            next: RenderedMessages::default(),
        }
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

    /// The summaries of this view, to share with the next.
    pub fn finish(self) -> RenderedMessages {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_sent_again_is_shared_and_one_not_sent_is_forgotten() {
        let mut renderer = Renderer::new(RenderedMessages::default());
        let summary = renderer.summary(0, 5, || Message::user_text("summary"));
        renderer.summary(2, 5, || Message::user_text("other"));
        let kept = renderer.finish();
        assert_eq!(kept.bytes(), 10 * 4 + 2 * PER_MESSAGE);

        let mut renderer = Renderer::new(kept);
        let shared = renderer.summary(0, 5, || unreachable!("shared"));
        assert!(Arc::ptr_eq(&summary, &shared));
        let kept = renderer.finish();
        assert_eq!(kept.summaries.len(), 1, "the summary not sent is forgotten");

        let mut renderer = Renderer::new(kept);
        let made = renderer.summary(2, 5, || Message::user_text("other again"));
        assert_eq!(*made, Message::user_text("other again"));
    }
}
