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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use serde_json::json;
    use tokio::sync::broadcast::error::TryRecvError;

    fn event(seq: i64) -> EventRecord {
        EventRecord {
            seq,
            kind: "assistant_delta".into(),
            payload: json!({ "text": "x" }),
            run_id: None,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn a_stalled_subscriber_lags_without_slowing_publishers_or_others() {
        let bus = EventBus::default();
        let session = SessionId::generate();
        let mut stalled = bus.subscribe(&session);
        let mut reader = bus.subscribe(&session);
        let total = SUBSCRIBER_BUFFER as i64 + 10;
        let mut received = Vec::new();
        for seq in 1..=total {
            // Publishing never waits for the stalled subscriber.
            bus.publish(&session, &[event(seq)]);
            received.push(
                reader
                    .try_recv()
                    .expect("the reading subscriber keeps up")
                    .seq,
            );
        }
        assert_eq!(received, (1..=total).collect::<Vec<_>>());
        // The stalled one is told it lagged (the SSE handler turns this into `reconnect`).
        assert!(matches!(stalled.try_recv(), Err(TryRecvError::Lagged(10))));
    }

    #[test]
    fn channels_without_subscribers_are_dropped() {
        let bus = EventBus::default();
        let session = SessionId::generate();
        drop(bus.subscribe(&session));
        bus.publish(&session, &[event(1)]);
        assert!(bus.channels.lock().unwrap().is_empty());
    }
}
