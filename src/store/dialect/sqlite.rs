//! SQLite: no row-level security (every tenant-owned query filters on `tenant_id`), timestamps
//! as fixed-width RFC 3339 text, JSON as text.

use crate::store::{StoreError, StoreResult};
use chrono::{DateTime, Utc};

/// Timestamps are fixed-width RFC 3339 in UTC so text order is time order.
pub(in crate::store) fn ts(value: DateTime<Utc>) -> String {
    value.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
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
