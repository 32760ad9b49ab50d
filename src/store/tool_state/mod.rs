//! Rows of the session and tenant state that built-in tools keep in the store: a session's
//! todo list (TodoWrite), a session's permission-mode override (EnterPlanMode /
//! ExitPlanMode) and a tenant's memory notes (Memory).

use crate::permission::PermissionMode;
use crate::store::{StoreError, StoreResult};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The state of one todo item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

/// How important one todo item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoPriority {
    High,
    Medium,
    Low,
}

/// One item of a session's todo list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TodoItem {
    /// Caller-chosen id, unique within the list.
    pub id: String,
    pub content: String,
    pub status: TodoStatus,
    pub priority: TodoPriority,
}

/// A session's durable permission-mode override. When present it wins over the mode in the
/// session configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeOverride {
    /// The mode in force.
    pub mode: PermissionMode,
    /// The mode to return to when plan mode ends (set by EnterPlanMode).
    pub previous: Option<PermissionMode>,
}

/// One stored memory note of a tenant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryNote {
    /// The normalized path-like key (`projects/alpha/notes.md`).
    pub path: String,
    pub content: String,
    /// Starts at 1 and grows by one on every write; used for compare-and-set updates.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A memory note without its content, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryEntry {
    pub path: String,
    /// Content size in bytes (UTF-8).
    pub size_bytes: i64,
    pub version: i64,
    pub updated_at: DateTime<Utc>,
}

/// What a memory write expects to find, so concurrent writers never lose an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryExpect {
    /// The note must not exist yet (create).
    Absent,
    /// The note must exist with exactly this version (update).
    Version(i64),
}

/// How much memory a tenant uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    pub notes: i64,
    /// Sum of content sizes in bytes.
    pub bytes: i64,
}

/// The stored text of a permission mode (its serde name, e.g. `acceptEdits`).
pub fn mode_str(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::Default => "default",
        PermissionMode::AcceptEdits => "acceptEdits",
        PermissionMode::Plan => "plan",
        PermissionMode::Bypass => "bypass",
        PermissionMode::DontAsk => "dontAsk",
        PermissionMode::Auto => "auto",
    }
}

/// Parses the stored text of a permission mode.
pub fn parse_mode(value: &str) -> Option<PermissionMode> {
    serde_json::from_value(serde_json::Value::String(value.to_owned())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_text_round_trips_and_matches_serde() {
        for mode in [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Plan,
            PermissionMode::Bypass,
            PermissionMode::DontAsk,
            PermissionMode::Auto,
        ] {
            assert_eq!(parse_mode(mode_str(mode)), Some(mode));
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::Value::String(mode_str(mode).into())
            );
        }
        assert_eq!(parse_mode("nonsense"), None);
    }
}

/// The override stored as two mode texts.
pub(in crate::store) fn mode_override_from(
    mode: String,
    previous: Option<String>,
) -> StoreResult<ModeOverride> {
    let parse = |text: &str| {
        parse_mode(text)
            .ok_or_else(|| StoreError::Internal(format!("unknown permission mode {text}")))
    };
    Ok(ModeOverride {
        mode: parse(&mode)?,
        previous: previous.as_deref().map(parse).transpose()?,
    })
}

/// The conflict a memory write reports when the note was not in the expected state.
pub(in crate::store) fn memory_conflict(path: &str, expect: MemoryExpect) -> StoreError {
    match expect {
        MemoryExpect::Absent => StoreError::Conflict(format!("memory note {path} already exists")),
        MemoryExpect::Version(version) => StoreError::Conflict(format!(
            "memory note {path} is no longer at version {version}"
        )),
    }
}

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;
