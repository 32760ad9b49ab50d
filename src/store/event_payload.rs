//! An event's payload as JSON text: what the store writes, what it reads back and what the
//! wire carries, kept as that text from the typed event to the subscriber.
//!
//! A payload is rendered once from its typed event ([`crate::run_event::RunEvent::into_row`])
//! and never becomes a `serde_json::Value` on the run path: the store binds the text, the live
//! channel splices it into the event it sends, and a page of stored events is written out
//! without being parsed into a tree first. The few readers that look inside a payload (resume,
//! webhooks, AG-UI, subagents) parse it when they do ([`EventPayload::value`]).
//!
//! The text always comes from `serde_json` (a rendered value) or from the store (which only
//! ever kept such text), so it is valid JSON; serialising checks that once more, and a text that
//! is not (never written by this server) fails its serialisation rather than corrupting the
//! document it is part of.

use serde::{Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// An event's payload as JSON text (see the module doc).
#[derive(Clone, Debug)]
pub struct EventPayload(String);

impl EventPayload {
    /// The payload of `value`.
    pub fn of(value: &Value) -> Self {
        // A `Value` always serialises.
        Self(crate::json_text::json_text(value).unwrap_or_else(|_| "null".to_owned()))
    }

    /// A payload whose JSON text `serde_json` rendered or the store returned (see the module
    /// doc); it is not checked here.
    pub(crate) fn from_json_text(text: String) -> Self {
        Self(text)
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The payload parsed (`null` for a text that is not JSON, which this server never wrote).
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

impl From<Value> for EventPayload {
    fn from(value: Value) -> Self {
        Self::of(&value)
    }
}

/// Two payloads are equal when they hold the same JSON (Postgres gives `jsonb` back in its own
/// key order and spacing).
impl PartialEq for EventPayload {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 || self.value() == other.value()
    }
}

impl PartialEq<Value> for EventPayload {
    fn eq(&self, other: &Value) -> bool {
        self.value() == *other
    }
}

impl Serialize for EventPayload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_payload_is_written_as_its_text_and_read_as_its_value() {
        let value = json!({ "b": [1, "two", null], "a": { "nested": "\"quoted\"\n" } });
        let payload = EventPayload::of(&value);
        assert_eq!(payload.value(), value);
        // Inside a document, the text is written as it is.
        #[derive(Serialize)]
        struct Page<'a> {
            payload: &'a EventPayload,
        }
        let page = serde_json::to_string(&Page { payload: &payload }).unwrap();
        assert_eq!(page, format!("{{\"payload\":{}}}", payload.as_str()));
        assert_eq!(
            serde_json::from_str::<Value>(&page).unwrap(),
            json!({ "payload": value })
        );
    }

    #[test]
    fn payloads_compare_by_their_json_not_their_spelling() {
        let ours = EventPayload::of(&json!({ "long_key": 1, "k": [true] }));
        let postgres = EventPayload::from_json_text(r#"{"k": [true], "long_key": 1}"#.to_owned());
        assert_eq!(ours, postgres);
        assert_ne!(
            ours,
            EventPayload::of(&json!({ "long_key": 2, "k": [true] }))
        );
        assert_eq!(postgres, json!({ "long_key": 1, "k": [true] }));
    }

    #[test]
    fn a_text_that_is_not_json_fails_to_serialise_and_reads_as_null() {
        let broken = EventPayload::from_json_text("{\"open\": ".to_owned());
        assert!(serde_json::to_string(&broken).is_err());
        assert_eq!(broken.value(), Value::Null);
    }
}
