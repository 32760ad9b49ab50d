//! Text both backends can keep: the one place on the write path that makes model and tool
//! text storable.
//!
//! Postgres refuses the NUL character in `text` columns and (as `\u0000`) in `jsonb`, SQLite
//! keeps it. Tenant request bodies containing a NUL are refused at the API (`422`), but text
//! that reaches the store during a run — a command printing `\0`, a model emitting `\u0000` in
//! its text or a tool input — must not fail the run. Both backends therefore replace every
//! U+0000 with U+FFFD (the replacement character) in everything they are given to append
//! (event payloads, message content, spilled outputs, whose SHA-256 is then of the stored
//! text), in approval requests (input and reason), todo items and memory note contents, so
//! the two behave the same. Strings without a NUL are not copied.

use super::{AppendBatch, EventPayload, NewApproval, TodoItem};
use crate::message::{ContentBlock, Message};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::borrow::Cow;

/// What replaces a NUL.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// Makes an append batch storable (see the module doc).
pub fn append_batch(batch: &mut AppendBatch) {
    for event in &mut batch.events {
        payload(&mut event.payload);
    }
    for message in &mut batch.messages {
        self::message(&mut message.message);
    }
    for output in &mut batch.outputs {
        if string(&mut output.content) {
            output.sha256 = hex::encode(Sha256::digest(output.content.as_bytes()));
        }
    }
    if let Some(end) = &mut batch.run_end {
        value(&mut end.terminal);
    }
}

/// Makes an approval request storable. Its `input_sha256` stays the hash of the input the
/// call really had: the binding is to that input, not to its stored rendering.
pub fn approval(approval: &mut NewApproval) {
    value(&mut approval.input);
    string(&mut approval.reason);
}

/// A storable copy of a text, or the text itself when it has no NUL.
pub fn text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// Storable todo items (a copy only when one has a NUL).
pub fn todos(items: &[TodoItem]) -> Cow<'_, [TodoItem]> {
    if !items
        .iter()
        .any(|item| item.id.contains('\0') || item.content.contains('\0'))
    {
        return Cow::Borrowed(items);
    }
    Cow::Owned(
        items
            .iter()
            .map(|item| TodoItem {
                id: text(&item.id).into_owned(),
                content: text(&item.content).into_owned(),
                ..item.clone()
            })
            .collect(),
    )
}

/// Makes a history message storable.
pub fn message(message: &mut Message) {
    for block in &mut message.content {
        match block {
            ContentBlock::Text { text } => {
                string(text);
            }
            ContentBlock::Thinking {
                thinking,
                signature,
            } => {
                string(thinking);
                if let Some(signature) = signature {
                    string(signature);
                }
            }
            ContentBlock::RedactedThinking { data } => {
                string(data);
            }
            ContentBlock::ToolUse { id, name, input } => {
                string(id);
                string(name);
                value(input);
            }
            ContentBlock::ToolResult(result) => {
                string(&mut result.tool_use_id);
                string(&mut result.content);
                for image in &mut result.images {
                    string(&mut image.media_type);
                    string(&mut image.data);
                }
            }
        }
    }
}

/// Replaces NULs in a string; true when it changed.
pub fn string(text: &mut String) -> bool {
    if !text.contains('\0') {
        return false;
    }
    *text = text.replace('\0', "\u{FFFD}");
    true
}

/// Replaces NULs in an event payload's strings and keys. Its JSON text writes a NUL as
/// `\u0000`: a text without that sequence has none and is kept as it is; one with it (a NUL, or
/// a backslash followed by `u0000`) is parsed, cleaned and written again.
pub fn payload(payload: &mut EventPayload) {
    if payload.as_str().contains("\\u0000") {
        let mut parsed = payload.value();
        value(&mut parsed);
        *payload = EventPayload::of(&parsed);
    }
}

/// Replaces NULs in every string and key of a JSON value (iteratively: any depth).
pub fn value(root: &mut Value) {
    let mut pending: Vec<&mut Value> = vec![root];
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) => {
                string(text);
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(map) => {
                let bad_keys: Vec<String> =
                    map.keys().filter(|k| k.contains('\0')).cloned().collect();
                for key in bad_keys {
                    if let Some(item) = map.remove(&key) {
                        map.insert(key.replace('\0', "\u{FFFD}"), item);
                    }
                }
                pending.extend(map.values_mut());
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolResultBlock;
    use crate::store::{NewEvent, NewMessage, NewOutput};
    use serde_json::json;

    #[test]
    fn nuls_in_strings_keys_messages_and_outputs_are_replaced() {
        let mut batch = AppendBatch {
            events: vec![NewEvent {
                kind: "tool_call".into(),
                payload: json!({"input": {"com\u{0}mand": ["a\u{0}b", {"x": "\u{0}"}]}}).into(),
                run_id: None,
            }],
            messages: vec![NewMessage {
                message: Message {
                    role: crate::message::Role::User,
                    content: vec![
                        ContentBlock::Text {
                            text: "t\u{0}".into(),
                        },
                        ContentBlock::ToolResult(ToolResultBlock::ok("tu", "a\u{0}b")),
                    ],
                },
                run_id: None,
                compaction_boundary: false,
            }],
            outputs: vec![NewOutput {
                id: crate::ids::OutputId::generate(),
                tool_use_id: "tu".into(),
                tool_name: "Bash".into(),
                content: "a\u{0}b".into(),
                sha256: "stale".into(),
            }],
            ..Default::default()
        };
        append_batch(&mut batch);
        assert_eq!(
            batch.events[0].payload,
            json!({"input": {"com\u{FFFD}mand": ["a\u{FFFD}b", {"x": "\u{FFFD}"}]}})
        );
        let content = &batch.messages[0].message.content;
        assert_eq!(
            content[0],
            ContentBlock::Text {
                text: "t\u{FFFD}".into()
            }
        );
        assert!(matches!(&content[1], ContentBlock::ToolResult(r) if r.content == "a\u{FFFD}b"));
        assert_eq!(batch.outputs[0].content, "a\u{FFFD}b");
        assert_eq!(
            batch.outputs[0].sha256,
            hex::encode(Sha256::digest("a\u{FFFD}b".as_bytes()))
        );
    }

    #[test]
    fn a_payload_is_rewritten_only_when_its_text_holds_an_escaped_nul() {
        // Rendered in field order, not a map's: kept as it is.
        let text = r#"{"z":1,"a":"x\\u0000 is text, not a NUL"}"#;
        let mut kept = EventPayload::from_json_text(r#"{"z":1,"a":"plain"}"#.to_owned());
        payload(&mut kept);
        assert_eq!(kept.as_str(), r#"{"z":1,"a":"plain"}"#);
        // A backslash followed by `u0000` looks like the escape: parsed, nothing replaced.
        let mut lookalike = EventPayload::from_json_text(text.to_owned());
        payload(&mut lookalike);
        assert_eq!(
            lookalike,
            json!({"z": 1, "a": "x\\u0000 is text, not a NUL"})
        );
        let mut nul = EventPayload::of(&json!({"k\u{0}": ["\u{0}"]}));
        payload(&mut nul);
        assert_eq!(nul, json!({"k\u{FFFD}": ["\u{FFFD}"]}));
    }

    #[test]
    fn deep_values_do_not_recurse() {
        let mut deep = json!("\u{0}");
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        value(&mut deep);
        let mut inner = &deep;
        while let Value::Array(items) = inner {
            inner = &items[0];
        }
        assert_eq!(inner, &json!("\u{FFFD}"));
        // Dropping a 100,000-deep value recurses in serde_json; unwind it by hand.
        let mut current = deep;
        while let Value::Array(mut items) = current {
            current = items.pop().unwrap_or(Value::Null);
        }
    }
}
