//! Approvals (a tool call waiting for a decision) and the grants a decision can leave behind.
//! Row types and the statements both databases read alike are here; the decisions differ
//! (Postgres signals the other replicas once the decision is committed, through the store's
//! notifier, and only while other replicas share the store).

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

use crate::store::tool_state::mode_override_from;
use crate::store::{
    ApprovalRecord, ApprovalStatus, GrantRecord, GrantScope, PermissionState, StoreError,
    StoreResult,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{FromRow, Row};

/// The columns of an [`ApprovalRow`].
macro_rules! approval_columns {
    () => {
        "id, session_id, run_id, tool_use_id, tool_name, input, input_sha256, reason, status, \
         decided_by, decided_at, decision_reason, updated_input, grant_id, expires_at, created_at"
    };
}

pub(in crate::store) const APPROVAL_COLUMNS: &str = approval_columns!();

/// `$1` id, `$2` session, `$3` tenant.
pub(in crate::store) const GET_APPROVAL: &str = concat!(
    "SELECT ",
    approval_columns!(),
    " FROM approvals WHERE id = $1 AND session_id = $2 AND tenant_id = $3"
);

/// A run's request for one call with one input, the oldest if several: `$1` session, `$2`
/// tenant, `$3` run, `$4` tool use id, `$5` the input's digest (through `approvals_tool_use`,
/// migrations 0035 / 0029). The placeholders appear in order: SQLite numbers `$N` by first
/// appearance.
pub(in crate::store) const RUN_REQUEST: &str = concat!(
    "SELECT ",
    approval_columns!(),
    " FROM approvals WHERE session_id = $1 AND tenant_id = $2 AND run_id = $3 \
         AND tool_use_id = $4 AND input_sha256 = $5 ORDER BY created_at, id LIMIT 1"
);

/// Decides a pending approval (nothing when it is not pending, or — `$10` — expired): `$1`
/// id, `$2` session, `$3` tenant, `$4` status, `$5` decided by, `$6` time, `$7` reason, `$8`
/// updated input, `$9` grant.
pub(in crate::store) const DECIDE_APPROVAL: &str = concat!(
    "UPDATE approvals SET status = $4, decided_by = $5, decided_at = $6, decision_reason = $7, \
         updated_input = $8, grant_id = $9 \
     WHERE id = $1 AND session_id = $2 AND tenant_id = $3 AND status = 'pending' \
         AND (NOT $10 OR expires_at > $6) RETURNING ",
    approval_columns!()
);

/// `$1` id, `$2` tenant, `$3` session, `$4` scope, `$5` rule, `$6` created by, `$7` approval,
/// `$8` expiry, `$9` time.
pub(in crate::store) const INSERT_GRANT: &str = "INSERT INTO grants (id, tenant_id, session_id, \
     scope, rule, created_by, approval_id, expires_at, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// `$1` id, `$2` tenant, `$3` time.
pub(in crate::store) const REVOKE_GRANT: &str = "UPDATE grants SET revoked_at = $3 \
     WHERE id = $1 AND tenant_id = $2 AND revoked_at IS NULL AND consumed_at IS NULL";

/// `$1` id, `$2` tenant, `$3` time.
pub(in crate::store) const CONSUME_GRANT: &str = "UPDATE grants SET consumed_at = $3 \
     WHERE id = $1 AND tenant_id = $2 AND scope = 'once' \
         AND revoked_at IS NULL AND consumed_at IS NULL";

/// The live grants that apply to a session, as a table: the tenant's tenant-wide grants and
/// the session's own, each read through its own partial index (`grants_live_tenant_wide`,
/// `grants_live_session`: migrations Postgres 0031, SQLite 0025), so no other session's grant
/// is read — a tenant's session-scoped grants accumulate across its sessions. `$1` tenant,
/// `$2` session, first used in that order (SQLite numbers them by first use); expiry is left to
/// the reader (`$3`, the same on both arms).
macro_rules! live_grants_of_session {
    () => {
        "(SELECT id, session_id, scope, rule, created_by, approval_id, expires_at, created_at \
         FROM grants WHERE tenant_id = $1 AND scope = 'tenant' \
             AND revoked_at IS NULL AND consumed_at IS NULL \
         UNION ALL \
         SELECT id, session_id, scope, rule, created_by, approval_id, expires_at, created_at \
         FROM grants WHERE session_id = $2 AND tenant_id = $1 AND scope <> 'tenant' \
             AND revoked_at IS NULL AND consumed_at IS NULL)"
    };
}

/// The tenant's live grants that apply to a session: `$1` tenant, `$2` session, `$3` now.
pub(in crate::store) const LIVE_GRANTS: &str = concat!(
    "SELECT id, session_id, scope, rule, created_by, approval_id, expires_at, created_at FROM ",
    live_grants_of_session!(),
    " AS g WHERE g.expires_at IS NULL OR g.expires_at > $3 ORDER BY created_at, id"
);

/// A session's permission-mode override (one row; NULLs when none) joined with the live grants
/// that apply to it ([`LIVE_GRANTS`]' conditions; the grant columns NULL when none applies):
/// `$1` tenant, `$2` session, `$3` now (bound in order of first use on SQLite too), read
/// beside the one row of `$source` with its `$columns` first.
macro_rules! permission_state_over {
    ($columns:literal, $source:literal) => {
        concat!(
            "SELECT ",
            $columns,
            "m.mode, m.previous_mode, g.id, g.session_id, g.scope, g.rule, g.created_by, \
             g.approval_id, g.expires_at, g.created_at FROM ",
            $source,
            " LEFT JOIN session_modes m ON m.tenant_id = $1 AND m.session_id = $2 \
             LEFT JOIN ",
            crate::store::approvals::live_grants_of_session!(),
            " g ON g.expires_at IS NULL OR g.expires_at > $3 \
             ORDER BY g.created_at, g.id"
        )
    };
}
pub(in crate::store) use live_grants_of_session;
pub(in crate::store) use permission_state_over;

/// The session's permission state alone (see [`permission_state_over`]).
pub(in crate::store) const PERMISSION_STATE: &str = permission_state_over!("", "(SELECT 1) AS one");

/// A row of [`PERMISSION_STATE`]: the override's columns, and the grant's when one applies.
pub(in crate::store) struct PermissionRow {
    pub(in crate::store) mode: Option<String>,
    pub(in crate::store) previous_mode: Option<String>,
    pub(in crate::store) grant: Option<GrantRow>,
}

/// The rows of [`PERMISSION_STATE`] as the state they describe.
pub(in crate::store) fn permission_state_from(
    rows: Vec<PermissionRow>,
) -> StoreResult<PermissionState> {
    let mode = match rows.first() {
        Some(PermissionRow {
            mode: Some(mode),
            previous_mode,
            ..
        }) => Some(mode_override_from(mode.clone(), previous_mode.clone())?),
        _ => None,
    };
    let grants = grants(rows.into_iter().filter_map(|row| row.grant).collect())?;
    Ok(PermissionState { grants, mode })
}

/// An approval as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct ApprovalRow {
    id: String,
    session_id: String,
    run_id: Option<String>,
    tool_use_id: String,
    tool_name: String,
    input: Json<Value>,
    input_sha256: String,
    reason: String,
    status: String,
    decided_by: Option<String>,
    decided_at: Option<DateTime<Utc>>,
    decision_reason: Option<String>,
    updated_input: Option<Json<Value>>,
    grant_id: Option<String>,
    expires_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
}

impl TryFrom<ApprovalRow> for ApprovalRecord {
    type Error = StoreError;

    fn try_from(row: ApprovalRow) -> StoreResult<Self> {
        Ok(Self {
            status: ApprovalStatus::parse(&row.status).ok_or_else(|| {
                StoreError::Internal(format!("unknown approval status {}", row.status))
            })?,
            id: row.id,
            session_id: row.session_id,
            run_id: row.run_id,
            tool_use_id: row.tool_use_id,
            tool_name: row.tool_name,
            input: row.input.0,
            input_sha256: row.input_sha256,
            reason: row.reason,
            decided_by: row.decided_by,
            decided_at: row.decided_at,
            decision_reason: row.decision_reason,
            updated_input: row.updated_input.map(|json| json.0),
            grant_id: row.grant_id,
            expires_at: row.expires_at,
            created_at: row.created_at,
        })
    }
}

pub(in crate::store) fn approval_from_row<'r, R: Row>(row: &'r R) -> StoreResult<ApprovalRecord>
where
    ApprovalRow: FromRow<'r, R>,
{
    ApprovalRow::from_row(row)?.try_into()
}

/// A grant as both databases return it.
#[derive(FromRow)]
pub(in crate::store) struct GrantRow {
    id: String,
    session_id: Option<String>,
    scope: String,
    rule: String,
    created_by: String,
    approval_id: Option<String>,
    expires_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

impl TryFrom<GrantRow> for GrantRecord {
    type Error = StoreError;

    fn try_from(row: GrantRow) -> StoreResult<Self> {
        Ok(Self {
            scope: GrantScope::parse(&row.scope).ok_or_else(|| {
                StoreError::Internal(format!("unknown grant scope {}", row.scope))
            })?,
            id: row.id,
            session_id: row.session_id,
            rule: row.rule,
            created_by: row.created_by,
            approval_id: row.approval_id,
            expires_at: row.expires_at,
            created_at: row.created_at,
        })
    }
}

/// Grants as both databases return them, as records.
pub(in crate::store) fn grants(rows: Vec<GrantRow>) -> StoreResult<Vec<GrantRecord>> {
    rows.into_iter().map(TryInto::try_into).collect()
}
