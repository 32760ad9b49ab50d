//! Outbound webhooks: a tenant (every session) or one session subscribes a URL to events of
//! its runs and sessions, and the server POSTs each event to it, signed in the Standard
//! Webhooks format, from a durable outbox.
//!
//! - **Events** ([`WebhookEvent`]): `run.completed` (a run ended normally: end of turn, turn
//!   or budget limit, a Stop hook), `run.failed` (a run ended with an error or was cancelled;
//!   `data.status` tells which), `run.parked` (a run parked on approvals), `approval.requested`
//!   and `session.closed` (closed over REST or for being idle).
//! - **Outbox.** Each notification is a row written in the SAME transaction as the event it
//!   reports ([`notices`] picks the events of an append that subscribers may want; the store
//!   joins them with the tenant's subscriptions in that transaction), so a crash or restart
//!   loses none; each row has a stable id, sent as `webhook-id`, so a receiver can drop the
//!   duplicates at-least-once delivery may bring.
//! - **Subscriptions** ([`subscription`]) are bounded per tenant and per session, their URLs
//!   checked like every outbound destination ([`crate::egress`]); each has a signing secret the
//!   server generates (`whsec_…`), returned once when it is created and never again.
//! - **Delivery** is the runtime's outbox worker (`crate::runtime::outbox`): retries with
//!   exponential backoff and jitter, a bounded number of attempts and a bounded age, and a
//!   delivery log readable over REST.
//!
//! This is not the approval webhook of a session's policy service (`approvals.webhook`,
//! [`crate::runtime::webhook`]), which asks for a decision; these only notify.

pub mod records;
pub mod subscription;

pub use records::*;
pub use subscription::*;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

/// An event a URL may subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum WebhookEvent {
    #[serde(rename = "run.completed")]
    RunCompleted,
    #[serde(rename = "run.failed")]
    RunFailed,
    #[serde(rename = "run.parked")]
    RunParked,
    #[serde(rename = "approval.requested")]
    ApprovalRequested,
    #[serde(rename = "session.closed")]
    SessionClosed,
}

impl WebhookEvent {
    pub const ALL: [Self; 5] = [
        Self::RunCompleted,
        Self::RunFailed,
        Self::RunParked,
        Self::ApprovalRequested,
        Self::SessionClosed,
    ];

    /// The wire name (`run.completed` …), the payload's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunCompleted => "run.completed",
            Self::RunFailed => "run.failed",
            Self::RunParked => "run.parked",
            Self::ApprovalRequested => "approval.requested",
            Self::SessionClosed => "session.closed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == name)
    }
}

/// One notification to write to the outbox: the event and its payload (the exact bytes that
/// are signed and sent), for every subscription of the tenant (or session) to `event`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub event: WebhookEvent,
    /// Index of the transcript event it reports in the append's events (`None`: not an
    /// event of the transcript, e.g. a session close).
    pub event_index: Option<usize>,
    /// The JSON body: `{"type", "timestamp", "data"}`.
    pub body: String,
}

/// The body of a notification: `{"type": "<event>", "timestamp": "<RFC 3339>", "data": …}`
/// (the Standard Webhooks payload shape).
pub fn body(event: WebhookEvent, at: chrono::DateTime<chrono::Utc>, data: Value) -> String {
    json!({
        "type": event.as_str(),
        "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "data": data,
    })
    .to_string()
}

/// A transcript event about to be committed, as [`notices`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct EventView<'a> {
    /// The event type (`terminal`, `run_parked`, …).
    pub kind: &'a str,
    pub payload: &'a crate::store::EventPayload,
    pub run_id: Option<&'a str>,
    /// The sequence number it gets.
    pub seq: i64,
}

/// The transcript event kinds that notify (see [`notices`]).
pub const NOTIFYING_KINDS: [&str; 3] = ["terminal", "run_parked", "approval_requested"];

/// Whether an event of `kind` notifies anyone (see [`notices`]).
pub fn notifies(kind: &str) -> bool {
    NOTIFYING_KINDS.contains(&kind)
}

/// The notifications of transcript events about to be committed: `terminal` (run.completed
/// or run.failed), `run_parked` and `approval_requested`. Every other event notifies nobody.
pub fn notices<'a>(
    session: &str,
    events: impl IntoIterator<Item = EventView<'a>>,
    at: chrono::DateTime<chrono::Utc>,
) -> Vec<Notice> {
    events
        .into_iter()
        .enumerate()
        .filter_map(|(index, event)| {
            if !notifies(event.kind) {
                return None;
            }
            let payload = event.payload.value();
            let run_id = event.run_id.or_else(|| payload["run_id"].as_str());
            let seq = event.seq;
            let (kind, data) = match event.kind {
                "terminal" => {
                    let status = match payload["reason"].as_str() {
                        Some("error") => "failed",
                        Some("cancelled") => "cancelled",
                        _ => "completed",
                    };
                    let kind = if status == "completed" {
                        WebhookEvent::RunCompleted
                    } else {
                        WebhookEvent::RunFailed
                    };
                    let data = json!({
                        "session_id": session, "run_id": run_id, "seq": seq,
                        "status": status, "terminal": payload,
                    });
                    (kind, data)
                }
                "run_parked" => (
                    WebhookEvent::RunParked,
                    json!({
                        "session_id": session, "run_id": run_id, "seq": seq,
                        "approval_ids": payload["approval_ids"],
                    }),
                ),
                "approval_requested" => (
                    WebhookEvent::ApprovalRequested,
                    json!({
                        "session_id": session, "run_id": run_id, "seq": seq,
                        "approval": payload["approval"],
                    }),
                ),
                other => {
                    debug_assert!(!notifies(other));
                    return None;
                }
            };
            Some(Notice {
                event: kind,
                event_index: Some(index),
                body: body(kind, at, data),
            })
        })
        .collect()
}

/// The notification of a session closed at `at`.
pub fn session_closed(session: &str, at: chrono::DateTime<chrono::Utc>) -> Notice {
    Notice {
        event: WebhookEvent::SessionClosed,
        event_index: None,
        body: body(
            WebhookEvent::SessionClosed,
            at,
            json!({ "session_id": session, "closed_at": at }),
        ),
    }
}

/// A fresh delivery id, sent as `webhook-id` on every attempt of that delivery.
pub fn delivery_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reported_events_notify_and_terminal_status_picks_the_event() {
        let at = chrono::Utc::now();
        let events = [
            ("assistant_delta", json!({"text": "x"})),
            ("terminal", json!({"reason": "end_turn"})),
            (
                "terminal",
                json!({"reason": "error", "code": "X", "message": "m"}),
            ),
            ("terminal", json!({"reason": "cancelled"})),
            (
                "run_parked",
                json!({"run_id": "run_1", "approval_ids": ["a"]}),
            ),
            ("approval_requested", json!({"approval": {"id": "a"}})),
        ];
        let events = events.map(|(kind, payload)| (kind, crate::store::EventPayload::of(&payload)));
        let views = events
            .iter()
            .zip(1..)
            .map(|((kind, payload), seq)| EventView {
                kind,
                payload,
                run_id: Some("run_1"),
                seq,
            });
        let found = notices("ses_1", views, at);
        let kinds: Vec<_> = found.iter().map(|n| (n.event, n.event_index)).collect();
        assert_eq!(
            kinds,
            [
                (WebhookEvent::RunCompleted, Some(1)),
                (WebhookEvent::RunFailed, Some(2)),
                (WebhookEvent::RunFailed, Some(3)),
                (WebhookEvent::RunParked, Some(4)),
                (WebhookEvent::ApprovalRequested, Some(5)),
            ]
        );
        let cancelled: Value = serde_json::from_str(&found[2].body).unwrap();
        assert_eq!(cancelled["type"], "run.failed");
        assert_eq!(cancelled["data"]["status"], "cancelled");
        assert_eq!(cancelled["data"]["seq"], 4);
        assert_eq!(cancelled["data"]["run_id"], "run_1");
        let approval: Value = serde_json::from_str(&found[4].body).unwrap();
        assert_eq!(approval["data"]["approval"]["id"], "a");
    }

    #[test]
    fn event_names_round_trip() {
        for event in WebhookEvent::ALL {
            assert_eq!(WebhookEvent::parse(event.as_str()), Some(event));
            assert_eq!(
                serde_json::to_value(event).unwrap(),
                Value::String(event.as_str().into())
            );
        }
        assert_eq!(WebhookEvent::parse("run.exploded"), None);
    }
}
