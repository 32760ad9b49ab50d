//! JSON text of hot values (event payloads, history messages, model request bodies).
//!
//! `serde_json::to_string` starts from 128 bytes and doubles, copying the text at every step,
//! and `Value`'s `Display` goes through the formatter for every piece it writes; a tool result
//! of a few KiB paid both on every append and every model call. A text that is kept (an
//! event's payload, a history entry) is written into a scratch buffer the thread keeps and
//! copied once into a buffer of its exact size; the scratch buffer grows to the largest text
//! the thread wrote and stays, unless that is over [`SCRATCH_KEPT`]: a huge text does not pin
//! its size per thread. A request body, sent and dropped at once, is written straight into
//! the buffer it is sent from ([`json_bytes`]), sized by the thread's last body: the model
//! call's tens of KiB (the tool list, the history) are not copied a second time.

use serde::Serialize;
use std::cell::{Cell, RefCell};

/// The largest scratch buffer a thread keeps between two texts.
const SCRATCH_KEPT: usize = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The length of the last body [`json_bytes`] wrote on this thread (at most
    /// [`SCRATCH_KEPT`]): the next one's starting capacity.
    static LAST_BODY: Cell<usize> = const { Cell::new(0) };
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

/// The JSON text of `value`, as bytes to send: written into a buffer that becomes the bytes
/// (no copy), starting at a little more than the thread's last body so that a body like the
/// last one (the same run's next model call) is written without regrowing it.
pub fn json_bytes(value: &impl Serialize) -> Result<bytes::Bytes, serde_json::Error> {
    let last = LAST_BODY.get();
    let mut body = Vec::with_capacity(last + last / 4 + 512);
    serde_json::to_writer(&mut body, value)?;
    LAST_BODY.set(body.len().min(SCRATCH_KEPT));
    Ok(bytes::Bytes::from(body))
}

/// The length of `value`'s JSON text, counted as it is written (nothing is kept).
pub fn json_len(value: &impl Serialize) -> usize {
    let mut counted = ByteCount(0);
    // Writing to a counter cannot fail; a value that fails to serialise counts what it wrote.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

/// Counts what is written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
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
    fn a_body_is_written_whole_and_sizes_the_next_one() {
        let body = json!({"messages": ["z".repeat(5_000)], "tools": [{"name": "Read"}]});
        let bytes = json_bytes(&body).unwrap();
        assert_eq!(
            bytes.as_ref(),
            serde_json::to_vec(&body).unwrap().as_slice()
        );
        assert_eq!(LAST_BODY.get(), bytes.len());
        let huge = json!("y".repeat(SCRATCH_KEPT * 2));
        assert_eq!(json_bytes(&huge).unwrap().len(), SCRATCH_KEPT * 2 + 2);
        assert_eq!(
            LAST_BODY.get(),
            SCRATCH_KEPT,
            "a huge body does not size every next one"
        );
        assert_eq!(json_bytes(&json!([])).unwrap().as_ref(), b"[]");
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

    #[test]
    fn json_len_counts_the_text_written() {
        let value = serde_json::json!({"a": [1, "two", null], "é": true});
        assert_eq!(
            json_len(&value),
            serde_json::to_string(&value).unwrap().len()
        );
    }
}
