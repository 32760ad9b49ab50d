//! In-process fan-out of persisted events to live subscribers (SSE), one bounded broadcast
//! channel per session. Events are published only after the store committed them.

use crate::ids::SessionId;
use crate::store::EventRecord;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// How many events a subscriber may fall behind before it is told to reconnect.
pub const SUBSCRIBER_BUFFER: usize = 1024;

#[derive(Default)]
pub struct EventBus {
    channels: Mutex<HashMap<SessionId, broadcast::Sender<Arc<EventRecord>>>>,
}

impl EventBus {
    /// Subscribes to a session's live events.
    pub fn subscribe(&self, session: &SessionId) -> broadcast::Receiver<Arc<EventRecord>> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels
            .entry(session.clone())
            .or_insert_with(|| broadcast::channel(SUBSCRIBER_BUFFER).0)
            .subscribe()
    }

    /// Publishes committed events; drops the channel when nobody listens any more.
    pub fn publish(&self, session: &SessionId, events: &[EventRecord]) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sender) = channels.get(session) else {
            return;
        };
        if sender.receiver_count() == 0 {
            channels.remove(session);
            return;
        }
        for event in events {
            // A send error only means every receiver is gone.
            let _ = sender.send(Arc::new(event.clone()));
        }
    }
}
