//! In-process fan-out of persisted events to live subscribers (SSE), one bounded broadcast
//! channel per session. Events are published only after the store committed them.

use crate::ids::{SessionId, TenantId};
use crate::store::EventRecord;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// How many events a subscriber may fall behind before it is told to reconnect.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// A published event with its JSON text, rendered once for every subscriber.
pub struct LiveEvent {
    pub record: EventRecord,
    pub json: String,
}

impl LiveEvent {
    /// The event with its JSON text: the record's fields around its payload's text as it is
    /// (what the store wrote), the same text `serde_json` writes for the record.
    pub fn new(record: EventRecord) -> Self {
        let payload = record.payload.as_str();
        let mut out = Vec::with_capacity(payload.len() + 64 + record.kind.len());
        // Writes into a Vec<u8> cannot fail; the fields are strings, an integer and a time.
        out.extend_from_slice(b"{\"seq\":");
        let _ = serde_json::to_writer(&mut out, &record.seq);
        out.extend_from_slice(b",\"type\":");
        let _ = serde_json::to_writer(&mut out, &record.kind);
        out.extend_from_slice(b",\"payload\":");
        out.extend_from_slice(payload.as_bytes());
        if let Some(run) = &record.run_id {
            out.extend_from_slice(b",\"run_id\":");
            let _ = serde_json::to_writer(&mut out, run);
        }
        out.extend_from_slice(b",\"created_at\":");
        crate::timestamp::write_json(&record.created_at, &mut out);
        out.push(b'}');
        Self {
            json: String::from_utf8(out).unwrap_or_default(),
            record,
        }
    }
}

impl std::ops::Deref for LiveEvent {
    type Target = EventRecord;

    fn deref(&self) -> &EventRecord {
        &self.record
    }
}

/// One session's live channel and the highest `seq` published on it.
struct Channel {
    sender: broadcast::Sender<Arc<LiveEvent>>,
    last_seq: Option<i64>,
    /// The session's tenant, when a subscriber named it (to catch up from the store).
    tenant: Option<TenantId>,
}

/// See [`EventBus::drop_when_unheard`].
pub struct Unheard<'a> {
    bus: &'a EventBus,
    session: &'a SessionId,
}

impl Drop for Unheard<'_> {
    fn drop(&mut self) {
        let mut channels = self.bus.channels.lock().unwrap_or_else(|e| e.into_inner());
        if channels
            .get(self.session)
            .is_some_and(|channel| channel.sender.receiver_count() == 0)
        {
            channels.remove(self.session);
        }
    }
}

#[derive(Default)]
pub struct EventBus {
    channels: Mutex<HashMap<SessionId, Channel>>,
}

impl EventBus {
    /// Subscribes to a session's live events.
    pub fn subscribe(&self, session: &SessionId) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.subscribe_in(None, session)
    }

    /// Subscribes to a session of `tenant`: its channel can be caught up from the store
    /// when signals were lost (see [`EventBus::followed`]).
    pub fn subscribe_for(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.subscribe_in(Some(tenant), session)
    }

    /// Names the tenant of a session subscribed to with [`EventBus::subscribe`] once the
    /// subscriber has proved the session is that tenant's (see [`EventBus::subscribe_for`]).
    pub fn follow(&self, tenant: &TenantId, session: &SessionId) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(channel) = channels.get_mut(session) {
            channel.tenant = Some(tenant.clone());
        }
    }

    /// A guard that drops `session`'s channel when it goes, if nobody listens to it then: for
    /// a subscriber that may give up before it is served (the session turns out not to be its
    /// caller's, a limit refuses the stream), so a request naming any id leaves no channel
    /// behind until the next prune.
    pub fn drop_when_unheard<'a>(&'a self, session: &'a SessionId) -> Unheard<'a> {
        Unheard { bus: self, session }
    }

    fn subscribe_in(
        &self,
        tenant: Option<&TenantId>,
        session: &SessionId,
    ) -> broadcast::Receiver<Arc<LiveEvent>> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let channel = channels.entry(session.clone()).or_insert_with(|| Channel {
            sender: broadcast::channel(SUBSCRIBER_BUFFER).0,
            last_seq: None,
            tenant: None,
        });
        if let Some(tenant) = tenant {
            channel.tenant = Some(tenant.clone());
        }
        channel.sender.subscribe()
    }

    /// The sessions someone here listens to, with their tenant and the highest `seq`
    /// published (channels that published nothing yet are left out: their subscribers
    /// still read their backlog from the store).
    pub fn followed(&self) -> Vec<(TenantId, SessionId, i64)> {
        let channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels
            .iter()
            .filter(|(_, channel)| channel.sender.receiver_count() > 0)
            .filter_map(|(session, channel)| {
                Some((channel.tenant.clone()?, session.clone(), channel.last_seq?))
            })
            .collect()
    }

    /// Publishes committed events in `seq` order; an event at or below the highest `seq`
    /// already published is skipped, so events arriving both from this replica's writer and
    /// from another replica's notification are delivered once. Drops the channel when nobody
    /// listens any more.
    pub fn publish(&self, session: &SessionId, events: Vec<EventRecord>) {
        {
            let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
            let Some(channel) = channels.get(session) else {
                return;
            };
            if channel.sender.receiver_count() == 0 {
                channels.remove(session);
                return;
            }
        }
        // Rendered once for every subscriber, outside the lock.
        let rendered: Vec<Arc<LiveEvent>> = events
            .into_iter()
            .map(|event| Arc::new(LiveEvent::new(event)))
            .collect();
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let Some(channel) = channels.get_mut(session) else {
            return;
        };
        for event in rendered {
            if channel.last_seq.is_some_and(|last| event.seq <= last) {
                continue;
            }
            channel.last_seq = Some(event.seq);
            // A send error only means every receiver is gone.
            let _ = channel.sender.send(event);
        }
    }

    /// Drops the channels nobody listens to any more (with the events they still buffer).
    pub fn prune(&self) -> usize {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let before = channels.len();
        channels.retain(|_, channel| channel.sender.receiver_count() > 0);
        before - channels.len()
    }

    /// For events `first..=last` committed elsewhere: `None` when nobody here listens to the
    /// session or they were already published; otherwise the `seq` to read after.
    pub fn missing(&self, session: &SessionId, first: i64, last: i64) -> Option<i64> {
        let channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let channel = channels.get(session)?;
        if channel.sender.receiver_count() == 0 {
            return None;
        }
        match channel.last_seq {
            Some(published) if published >= last => None,
            Some(published) => Some(published),
            None => Some(first - 1),
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
            payload: json!({ "text": "x" }).into(),
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
            bus.publish(&session, vec![event(seq)]);
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
        bus.publish(&session, vec![event(1)]);
        assert!(bus.channels.lock().unwrap().is_empty());
    }

    #[test]
    fn a_subscriber_that_gives_up_leaves_no_channel() {
        let bus = EventBus::default();
        let (mine, refused) = (SessionId::generate(), SessionId::generate());
        let kept = {
            let _unheard = bus.drop_when_unheard(&mine);
            bus.subscribe(&mine)
        };
        {
            let _unheard = bus.drop_when_unheard(&refused);
            let _gone = bus.subscribe(&refused);
        }
        let channels = bus.channels.lock().unwrap();
        assert!(
            channels.contains_key(&mine),
            "a served subscriber's channel stays"
        );
        assert!(
            !channels.contains_key(&refused),
            "nothing left for one that gave up"
        );
        drop(kept);
    }

    #[test]
    fn pruning_drops_only_channels_without_subscribers() {
        let bus = EventBus::default();
        let (gone, kept) = (SessionId::generate(), SessionId::generate());
        let reader = bus.subscribe(&gone);
        let _kept = bus.subscribe(&kept);
        bus.publish(&gone, vec![event(1)]);
        drop(reader);
        assert_eq!(bus.prune(), 1);
        assert_eq!(bus.channels.lock().unwrap().len(), 1);
        assert!(bus.channels.lock().unwrap().contains_key(&kept));
    }

    #[test]
    fn events_published_twice_are_delivered_once_and_gaps_are_reported() {
        let bus = EventBus::default();
        let session = SessionId::generate();
        assert_eq!(bus.missing(&session, 1, 2), None, "nobody listens");
        let mut reader = bus.subscribe(&session);
        assert_eq!(
            bus.missing(&session, 3, 4),
            Some(2),
            "read from just before the batch"
        );
        bus.publish(&session, vec![event(3), event(4)]);
        bus.publish(&session, vec![event(4), event(5)]);
        let seqs: Vec<i64> = std::iter::from_fn(|| reader.try_recv().ok().map(|e| e.seq)).collect();
        assert_eq!(seqs, vec![3, 4, 5]);
        assert_eq!(bus.missing(&session, 4, 5), None, "already published");
        assert_eq!(
            bus.missing(&session, 8, 9),
            Some(5),
            "the gap 6..=7 is read too"
        );
    }

    #[test]
    fn an_event_rendered_from_its_payload_text_is_the_event_serialised() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-06T09:30:01.123456789Z")
            .expect("time")
            .with_timezone(&Utc);
        let records = [
            EventRecord {
                seq: 1,
                kind: "tool_result".into(),
                payload: json!({
                    "tool_use_id": "toolu_1",
                    "content": "line \"one\"\n\ttab \\ back\u{7f} \u{1} é 😀",
                    "is_error": false,
                    "nested": {"list": [1, 2.5, null, {"b": true, "a": "x"}]},
                })
                .into(),
                run_id: Some("run_0123".into()),
                created_at: at,
            },
            EventRecord {
                seq: 9_007_199_254_740_993,
                kind: "odd \"kind\"".into(),
                payload: json!("just a string").into(),
                run_id: None,
                created_at: Utc::now(),
            },
            EventRecord {
                seq: 0,
                kind: "empty".into(),
                payload: json!({}).into(),
                run_id: Some(String::new()),
                created_at: at,
            },
        ];
        for record in records {
            let expected = serde_json::to_string(&record).expect("json");
            assert_eq!(LiveEvent::new(record).json, expected);
        }
    }
}
