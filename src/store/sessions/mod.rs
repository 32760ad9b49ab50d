//! Sessions: create, read, list, close, and the sweeps over them (idle, open counts, last
//! sequence numbers, the workspace snapshot head). The statements both databases read alike
//! are written here once (`$N` placeholders: sqlx binds them by number on SQLite too), and
//! one row type decodes a session from either.

use crate::ids::{SessionId, TenantId};
use crate::store::{ForkedNoa, IdleSession, SessionRecord, SessionStatus, StoreError, StoreResult};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{FromRow, Row};

/// The columns of a [`SessionRow`].
macro_rules! session_columns {
    () => {
        "id, tenant_id, config, status, created_at, updated_at, closed_at, last_event_seq"
    };
}

pub(in crate::store) const SESSION_COLUMNS: &str = session_columns!();

// Declared after `session_columns!` so that they can use it.
pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

/// `$1` session, `$2` tenant.
pub(in crate::store) const SELECT_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE id = $1 AND tenant_id = $2"
);

/// The tenant's newest sessions: `$1` tenant, `$2` limit.
pub(in crate::store) const LIST_SESSIONS: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM sessions WHERE tenant_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
);

/// System-level: `$1` idle before, `$2` limit. Idle by `active_at` (see `active_at_after_append`).
pub(in crate::store) const IDLE_SESSIONS: &str = "SELECT id, tenant_id FROM sessions \
     WHERE status = 'active' AND active_at < $1 ORDER BY active_at LIMIT $2";

/// A session's `active_at`, the idle sweep's clock (migrations: Postgres 0026, SQLite 0022),
/// as an append leaves it: moved to the append's time (`$t`) only when it was set in an
/// earlier second, while `updated_at` moves with every append. The appends of a run within a
/// second leave the column and its index (`sessions_idle_active`) untouched: on Postgres the
/// session's update changes no indexed column and can be a HOT update (no new entry in any of
/// the session's indexes). The clock lags the last append by less than a second, so an idle
/// session expires at most that much early. SQLite rewrites an index entry whenever an
/// `UPDATE` sets one of its columns, even to the value it had, so its append does not set the
/// column in its sequence update: it moves it with a statement of its own, only when it
/// must ([`ACTIVE_AT_SECOND`]).
macro_rules! active_at_after_append {
    (postgres, $t:literal) => {
        concat!(
            "active_at = CASE WHEN active_at < date_trunc('second', ",
            $t,
            "::timestamptz) THEN ",
            $t,
            " ELSE active_at END"
        )
    };
}
pub(in crate::store) use active_at_after_append;

/// SQLite's times are RFC 3339 text of fixed width: the first this many characters are the
/// second (see [`active_at_after_append`]).
pub(in crate::store) const ACTIVE_AT_SECOND: usize = 19;

/// `$1` tenant. The count is kept by triggers (migration 0018), not counted.
pub(in crate::store) const COUNT_OPEN_SESSIONS: &str = "SELECT COALESCE((SELECT open FROM \
     tenant_open_sessions WHERE tenant_id = $1), 0)";

/// `$1` session, `$2` tenant.
pub(in crate::store) const WORKSPACE_SNAPSHOT: &str =
    "SELECT workspace_snapshot FROM sessions WHERE id = $1 AND tenant_id = $2";

/// A session as both databases return it (JSON and timestamps decode from `jsonb` and
/// `timestamptz` on Postgres, from text on SQLite).
#[derive(FromRow)]
pub(in crate::store) struct SessionRow {
    id: String,
    tenant_id: String,
    config: Json<Value>,
    status: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    closed_at: Option<DateTime<Utc>>,
    last_event_seq: i64,
}

impl TryFrom<SessionRow> for SessionRecord {
    type Error = StoreError;

    fn try_from(row: SessionRow) -> StoreResult<Self> {
        Ok(Self {
            status: SessionStatus::parse(&row.status).ok_or_else(|| {
                StoreError::Internal(format!("unknown session status {}", row.status))
            })?,
            id: SessionId::from_string(row.id),
            tenant: TenantId::new(row.tenant_id),
            config: row.config.0,
            created_at: row.created_at,
            updated_at: row.updated_at,
            closed_at: row.closed_at,
            last_event_seq: row.last_event_seq,
        })
    }
}

pub(in crate::store) fn session_from_row<'r, R: Row>(row: &'r R) -> StoreResult<SessionRecord>
where
    SessionRow: FromRow<'r, R>,
{
    SessionRow::from_row(row)?.try_into()
}

/// An idle session's keys.
#[derive(FromRow)]
pub(in crate::store) struct IdleRow {
    id: String,
    tenant_id: String,
}

impl From<IdleRow> for IdleSession {
    fn from(row: IdleRow) -> Self {
        Self {
            id: SessionId::from_string(row.id),
            tenant: TenantId::new(row.tenant_id),
        }
    }
}

/// `(id, last_event_seq)` rows as the pairs callers read.
pub(in crate::store) fn seqs(rows: Vec<(String, i64)>) -> Vec<(SessionId, i64)> {
    rows.into_iter()
        .map(|(id, seq)| (SessionId::from_string(id), seq))
        .collect()
}

/// Every archive a fork's Noa state names was copied (archives are never deleted, so a
/// shortfall means the source's rows disagree with its state: nothing of the fork is kept).
pub(in crate::store) fn archives_copied(copied: u64, noa: &ForkedNoa) -> StoreResult<()> {
    if copied == noa.archives.len() as u64 {
        return Ok(());
    }
    Err(StoreError::Internal(format!(
        "fork: {copied} of the {} archives its Noa state names were found",
        noa.archives.len()
    )))
}
