//! SQLite: no row-level security (every tenant-owned query filters on `tenant_id`), timestamps
//! as fixed-width RFC 3339 text, JSON as text.

use crate::store::{StoreError, StoreResult};
use chrono::{DateTime, Utc};

/// Timestamps are fixed-width RFC 3339 in UTC so text order is time order
/// (`%Y-%m-%dT%H:%M:%S%.6fZ`, written byte by byte: [`crate::timestamp::micros`]).
pub(in crate::store) fn ts(value: DateTime<Utc>) -> String {
    crate::timestamp::micros(&value)
}

pub(in crate::store) fn parse_ts(value: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value)
        .map(|dt| dt.with_timezone(&Utc))
        .map_err(|error| StoreError::Internal(format!("bad timestamp {value}: {error}")))
}

/// Timestamp column `index` of a row read by `rusqlite`.
pub(in crate::store) fn ts_column(
    row: &rusqlite::Row<'_>,
    index: usize,
) -> StoreResult<DateTime<Utc>> {
    parse_ts(&row.get::<_, String>(index)?)
}

/// Nullable timestamp column `index` of a row read by `rusqlite`.
pub(in crate::store) fn opt_ts_column(
    row: &rusqlite::Row<'_>,
    index: usize,
) -> StoreResult<Option<DateTime<Utc>>> {
    row.get::<_, Option<String>>(index)?
        .as_deref()
        .map(parse_ts)
        .transpose()
}

pub(in crate::store) fn parse_json<T: serde::de::DeserializeOwned>(value: &str) -> StoreResult<T> {
    serde_json::from_str(value).map_err(|error| StoreError::Internal(format!("bad json: {error}")))
}

/// JSON text column `index` of a row read by `rusqlite`.
pub(in crate::store) fn json_column<T: serde::de::DeserializeOwned>(
    row: &rusqlite::Row<'_>,
    index: usize,
) -> StoreResult<sqlx::types::Json<T>> {
    parse_json(&row.get::<_, String>(index)?).map(sqlx::types::Json)
}

/// Nullable JSON text column `index` of a row read by `rusqlite`.
pub(in crate::store) fn opt_json_column<T: serde::de::DeserializeOwned>(
    row: &rusqlite::Row<'_>,
    index: usize,
) -> StoreResult<Option<sqlx::types::Json<T>>> {
    row.get::<_, Option<String>>(index)?
        .as_deref()
        .map(|text| parse_json(text).map(sqlx::types::Json))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_fixed_width_as_before() {
        let samples = [
            "1970-01-01T00:00:00Z",
            "2026-12-06T09:30:01.123456789Z",
            "2026-02-28T23:59:59.999999999Z",
            "2000-01-01T00:00:00.000001Z",
            "9999-12-31T23:59:59.5Z",
        ];
        for sample in samples {
            let at = DateTime::parse_from_rfc3339(sample)
                .expect("sample")
                .with_timezone(&Utc);
            let written = ts(at);
            assert_eq!(written, at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string());
            assert_eq!(written.len(), 27, "{written}");
        }
        let now = Utc::now();
        assert_eq!(ts(now), now.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string());
    }
}
