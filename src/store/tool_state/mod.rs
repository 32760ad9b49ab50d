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

/// A memory note as both databases return it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct MemoryNoteRow {
    path: String,
    content: String,
    version: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

pub(in crate::store) fn memory_note<'r, R: sqlx::Row>(row: &'r R) -> StoreResult<MemoryNote>
where
    MemoryNoteRow: sqlx::FromRow<'r, R>,
{
    let row = <MemoryNoteRow as sqlx::FromRow<'r, R>>::from_row(row)?;
    Ok(MemoryNote {
        path: row.path,
        content: row.content,
        version: row.version,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

// The statements both databases read alike (`$N` placeholders).

/// Whether the session is the tenant's: `$1` session, `$2` tenant.
pub(in crate::store) const SESSION_OWNED: &str =
    "SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2";

/// `$1` session, `$2` tenant.
pub(in crate::store) const GET_TODOS: &str =
    "SELECT items FROM session_todos WHERE session_id = $1 AND tenant_id = $2";

/// `$1` session, `$2` tenant, `$3` items, `$4` time (nothing when the session is not the
/// tenant's).
pub(in crate::store) const PUT_TODOS: &str = "INSERT INTO session_todos (session_id, tenant_id, items, updated_at) \
     SELECT id, tenant_id, $3, $4 FROM sessions WHERE id = $1 AND tenant_id = $2 \
     ON CONFLICT (session_id) DO UPDATE SET items = EXCLUDED.items, \
         updated_at = EXCLUDED.updated_at";

/// `$1` session, `$2` tenant.
pub(in crate::store) const GET_MODE: &str =
    "SELECT mode, previous_mode FROM session_modes WHERE session_id = $1 AND tenant_id = $2";

/// `$1` session, `$2` tenant, `$3` mode, `$4` previous mode, `$5` time (nothing when the
/// session is not the tenant's).
pub(in crate::store) const SET_MODE: &str = "INSERT INTO session_modes (session_id, tenant_id, mode, previous_mode, updated_at) \
     SELECT id, tenant_id, $3, $4, $5 FROM sessions WHERE id = $1 AND tenant_id = $2 \
     ON CONFLICT (session_id) DO UPDATE SET mode = EXCLUDED.mode, \
         previous_mode = EXCLUDED.previous_mode, updated_at = EXCLUDED.updated_at";

/// `$1` tenant, `$2` path.
pub(in crate::store) const MEMORY_GET: &str = "SELECT path, content, version, created_at, \
     updated_at FROM memory_notes WHERE tenant_id = $1 AND path = $2";

/// The tenant's notes under a prefix: `$1` tenant, `$2` prefix.
pub(in crate::store) const MEMORY_LIST: &str = "SELECT path, size_bytes, version, updated_at \
     FROM memory_notes WHERE tenant_id = $1 AND substr(path, 1, length($2)) = $2 ORDER BY path";

/// A new note (nothing when the path is taken): `$1` tenant, `$2` path, `$3` content, `$4`
/// size, `$5` time.
pub(in crate::store) const MEMORY_INSERT: &str = "INSERT INTO memory_notes (tenant_id, path, content, size_bytes, version, created_at, \
         updated_at) VALUES ($1, $2, $3, $4, 1, $5, $5) \
     ON CONFLICT (tenant_id, path) DO NOTHING \
     RETURNING path, content, version, created_at, updated_at";

/// A note's next version (nothing when it is not at `$6`): `$1` tenant, `$2` path, `$3`
/// content, `$4` size, `$5` time.
pub(in crate::store) const MEMORY_UPDATE: &str = "UPDATE memory_notes SET content = $3, size_bytes = $4, version = version + 1, \
         updated_at = $5 \
     WHERE tenant_id = $1 AND path = $2 AND version = $6 \
     RETURNING path, content, version, created_at, updated_at";

/// `$1` tenant, `$2` path.
pub(in crate::store) const MEMORY_DELETE: &str =
    "DELETE FROM memory_notes WHERE tenant_id = $1 AND path = $2";

/// A memory listing entry as both databases return it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct MemoryEntryRow {
    path: String,
    size_bytes: i64,
    version: i64,
    updated_at: DateTime<Utc>,
}

impl From<MemoryEntryRow> for MemoryEntry {
    fn from(row: MemoryEntryRow) -> Self {
        Self {
            path: row.path,
            size_bytes: row.size_bytes,
            version: row.version,
            updated_at: row.updated_at,
        }
    }
}
