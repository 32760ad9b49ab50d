//! Rows of Noa sessions (see `crate::noa`): the state of a session (one versioned JSON row)
//! and its archives (the original messages of every compressed range).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// A session's stored Noa state and its version (1 after the first write).
#[derive(Clone, Debug, PartialEq)]
pub struct NoaStateRecord {
    pub version: i64,
    pub state: Value,
}

/// An archive to write with a compression.
#[derive(Clone, Debug, PartialEq)]
pub struct NewNoaArchive {
    /// 1-based, per session; the archive's id is `a{ordinal}`.
    pub ordinal: u32,
    pub from_ref: String,
    pub to_ref: String,
    pub summary: String,
    pub message_count: u32,
    /// Snapshot tokens of the archived messages.
    pub tokens: u64,
    /// The original messages: `[{"ref": "m12", "message": {…}}, …]`.
    pub messages: Value,
}

/// A stored archive; `messages` only when one archive is read.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
pub struct NoaArchiveRecord {
    /// `a1`, `a2`, … in the order they were written.
    pub id: String,
    pub from_ref: String,
    pub to_ref: String,
    pub summary: String,
    pub message_count: u32,
    pub tokens: u64,
    pub created_at: DateTime<Utc>,
    /// The original messages, each with its ref (`[{"ref": "m12", "message": {…}}]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub messages: Option<Value>,
}

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
