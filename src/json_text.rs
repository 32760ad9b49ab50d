//! JSON text of hot values (event payloads, history messages, model request bodies), written
//! into a scratch buffer the thread keeps and copied once into a buffer of its exact size.
//!
//! `serde_json::to_string` starts from 128 bytes and doubles, copying the text at every step,
//! and `Value`'s `Display` goes through the formatter for every piece it writes; a tool result
//! of a few KiB paid both on every append and every model call. The scratch buffer grows to
//! the largest text the thread wrote and stays, unless that is over [`SCRATCH_KEPT`]: a huge
//! text does not pin its size per thread.

use serde::Serialize;
use std::cell::RefCell;

/// The largest scratch buffer a thread keeps between two texts.
const SCRATCH_KEPT: usize = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Serialises `value` into this thread's scratch buffer and gives it to `take`.
fn with_json<T>(
    value: &impl Serialize,
    take: impl FnOnce(&[u8]) -> T,
) -> Result<T, serde_json::Error> {
    SCRATCH.with(|scratch| {
        // A value whose serialisation writes JSON text itself would find the buffer taken:
        // it gets a buffer of its own.
        let Ok(mut buffer) = scratch.try_borrow_mut() else {
            return serde_json::to_vec(value).map(|bytes| take(&bytes));
        };
        buffer.clear();
        let written = serde_json::to_writer(&mut *buffer, value).map(|()| take(&buffer));
        if buffer.capacity() > SCRATCH_KEPT {
            *buffer = Vec::new();
        }
        written
    })
}

/// The JSON text of `value`.
pub fn json_text(value: &impl Serialize) -> Result<String, serde_json::Error> {
    with_json(value, |bytes| {
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidData, error))
    })?
    .map_err(serde_json::Error::io)
}

/// The JSON text of `value`, as bytes.
pub fn json_bytes(value: &impl Serialize) -> Result<bytes::Bytes, serde_json::Error> {
    with_json(value, bytes::Bytes::copy_from_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_text_is_what_serde_json_writes() {
        let values = [
            json!(null),
            json!({"text": "tab\t quote\" nul\u{0} é 🦀", "n": [1, 2.5, -3], "deep": {"a": {}}}),
            json!("x".repeat(100_000)),
        ];
        for value in &values {
            assert_eq!(
                json_text(value).unwrap(),
                serde_json::to_string(value).unwrap()
            );
            assert_eq!(
                json_bytes(value).unwrap().as_ref(),
                serde_json::to_vec(value).unwrap().as_slice()
            );
        }
    }

    #[test]
    fn a_huge_text_does_not_stay_in_the_scratch_buffer() {
        let huge = json!("y".repeat(SCRATCH_KEPT * 2));
        assert_eq!(json_text(&huge).unwrap().len(), SCRATCH_KEPT * 2 + 2);
        SCRATCH.with(|scratch| assert!(scratch.borrow().capacity() <= SCRATCH_KEPT));
        // A small one after it still comes out whole.
        assert_eq!(json_text(&json!({"a": 1})).unwrap(), r#"{"a":1}"#);
    }

    /// A value that writes JSON text while it is being serialised (the scratch buffer is
    /// taken): it still comes out right.
    #[test]
    fn text_written_inside_a_serialisation_is_right() {
        struct Nested;
        impl Serialize for Nested {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let inner =
                    json_text(&json!({"inner": [1, 2]})).map_err(serde::ser::Error::custom)?;
                serializer.serialize_str(&inner)
            }
        }
        assert_eq!(
            json_text(&Nested).unwrap(),
            serde_json::to_string(r#"{"inner":[1,2]}"#).unwrap()
        );
    }
}
