//! RFC 3339 timestamps written byte by byte into a stack buffer, the same text `chrono` writes.
//!
//! `chrono`'s `Serialize` for `DateTime` hands a `Display` to `collect_str`, so serde_json
//! escapes the timestamp one character at a time through the formatting machinery: about
//! 2,400 instructions for each event record's `created_at`, 2 % of a run's instructions on the
//! embedded store (33 events per run of the end-to-end benchmark; the live events' JSON,
//! `runtime::bus::LiveEvent`, and the event records). Here the text is written
//! into 32 bytes and serialized as one string. Years outside 0–9999 (which `chrono` writes
//! with a sign) fall back to `chrono`.

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use serde::Serialize;

/// Digits after the seconds.
#[derive(Clone, Copy)]
enum Fraction {
    /// As `chrono`'s `SecondsFormat::AutoSi`: none, 3, 6 or 9 digits, the fewest that are exact.
    Auto,
    /// Always 6 digits (`SecondsFormat::Micros`).
    Micros,
}

/// `YYYY-MM-DDTHH:MM:SS.fffffffffZ` at the longest.
struct Text {
    bytes: [u8; 32],
    len: usize,
}

impl Text {
    fn push(&mut self, byte: u8) {
        self.bytes[self.len] = byte;
        self.len += 1;
    }

    /// `value` in `width` decimal digits, zero-padded (`value < 10^width`).
    fn digits(&mut self, mut value: u32, width: usize) {
        for at in (self.len..self.len + width).rev() {
            self.bytes[at] = b'0' + (value % 10) as u8;
            value /= 10;
        }
        self.len += width;
    }

    fn as_str(&self) -> &str {
        // Only ASCII digits and separators were written.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// The text of `value`, or `None` when its year needs a sign (outside 0–9999).
fn write(value: &DateTime<Utc>, fraction: Fraction) -> Option<Text> {
    let year = value.year();
    if !(0..=9999).contains(&year) {
        return None;
    }
    let mut text = Text {
        bytes: [0; 32],
        len: 0,
    };
    text.digits(year as u32, 4);
    text.push(b'-');
    text.digits(value.month(), 2);
    text.push(b'-');
    text.digits(value.day(), 2);
    text.push(b'T');
    text.digits(value.hour(), 2);
    text.push(b':');
    text.digits(value.minute(), 2);
    text.push(b':');
    // A leap second is second 59 with a nanosecond count past one second: written as 60.
    let (mut second, mut nano) = (value.second(), value.nanosecond());
    if nano >= 1_000_000_000 {
        second += 1;
        nano -= 1_000_000_000;
    }
    text.digits(second, 2);
    match fraction {
        Fraction::Micros => {
            text.push(b'.');
            text.digits(nano / 1_000, 6);
        }
        Fraction::Auto if nano == 0 => {}
        Fraction::Auto if nano % 1_000_000 == 0 => {
            text.push(b'.');
            text.digits(nano / 1_000_000, 3);
        }
        Fraction::Auto if nano % 1_000 == 0 => {
            text.push(b'.');
            text.digits(nano / 1_000, 6);
        }
        Fraction::Auto => {
            text.push(b'.');
            text.digits(nano, 9);
        }
    }
    text.push(b'Z');
    Some(text)
}

/// `#[serde(serialize_with = "crate::timestamp::serialize")]`: the text `chrono`'s own
/// `Serialize` writes (RFC 3339, `Z`, the fewest exact fraction digits), as one string.
pub fn serialize<S: serde::Serializer>(
    value: &DateTime<Utc>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match write(value, Fraction::Auto) {
        Some(text) => serializer.serialize_str(text.as_str()),
        None => value.serialize(serializer),
    }
}

/// Appends `value` as a JSON string, the text [`serialize`] writes (no character of it needs
/// escaping).
pub fn write_json(value: &DateTime<Utc>, out: &mut Vec<u8>) {
    match write(value, Fraction::Auto) {
        Some(text) => {
            out.push(b'"');
            out.extend_from_slice(text.as_str().as_bytes());
            out.push(b'"');
        }
        // Writing into a `Vec` cannot fail.
        None => {
            let _ = serde_json::to_writer(out, value);
        }
    }
}

/// RFC 3339 with microseconds and `Z`, fixed width for years 0–9999 (as
/// `to_rfc3339_opts(SecondsFormat::Micros, true)`).
pub fn micros(value: &DateTime<Utc>) -> String {
    match write(value, Fraction::Micros) {
        Some(text) => text.as_str().to_owned(),
        None => value.to_rfc3339_opts(SecondsFormat::Micros, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{NaiveDate, TimeZone};
    use proptest::prelude::*;

    fn chrono_json(value: &DateTime<Utc>) -> String {
        serde_json::to_string(value).unwrap()
    }

    #[derive(Serialize)]
    struct Fast(#[serde(serialize_with = "serialize")] DateTime<Utc>);

    fn same_as_chrono(value: DateTime<Utc>) {
        assert_eq!(
            serde_json::to_string(&Fast(value)).unwrap(),
            chrono_json(&value)
        );
        let mut written = Vec::new();
        write_json(&value, &mut written);
        assert_eq!(String::from_utf8(written).unwrap(), chrono_json(&value));
        assert_eq!(
            micros(&value),
            value.to_rfc3339_opts(SecondsFormat::Micros, true)
        );
    }

    #[test]
    fn every_fraction_width_a_leap_second_and_signed_years_read_as_chrono_writes_them() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 6).unwrap();
        for nano in [
            0,
            5_000_000,
            123_000_000,
            123_456_000,
            1_000,
            123_456_789,
            1,
            999_999_999,
            // Leap seconds (second 59 only).
            1_000_000_000,
            1_500_000_000,
            1_999_999_999,
        ] {
            let time = day.and_hms_nano_opt(23, 59, 59, nano).unwrap();
            same_as_chrono(Utc.from_utc_datetime(&time));
        }
        for year in [-1, 0, 1, 999, 9999, 10_000, 262_000] {
            let time = NaiveDate::from_ymd_opt(year, 1, 2)
                .unwrap()
                .and_hms_micro_opt(3, 4, 5, 60)
                .unwrap();
            same_as_chrono(Utc.from_utc_datetime(&time));
        }
    }

    proptest! {
        #[test]
        fn any_instant_reads_as_chrono_writes_it(
            seconds in -62_135_596_800_i64..253_402_300_799,
            nano in prop_oneof![
                Just(0_u32),
                (0_u32..1_000).prop_map(|ms| ms * 1_000_000),
                (0_u32..1_000_000).prop_map(|us| us * 1_000),
                0_u32..1_000_000_000,
            ],
        ) {
            same_as_chrono(DateTime::from_timestamp(seconds, nano).unwrap());
        }
    }
}
