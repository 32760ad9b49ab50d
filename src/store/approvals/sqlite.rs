//! Approvals on SQLite.

use super::*;
use crate::ids::{ApprovalId, GrantId, SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::dialect::sqlite::{opt_ts_column, ts, ts_column};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use serde_json::Value;

// --- approvals and grants ---
pub(in crate::store) async fn create_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    mut approval: NewApproval,
    max_pending: u32,
) -> StoreResult<ApprovalRecord> {
    crate::store::storable::approval(&mut approval);
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    crate::store::limits::sqlite::admit_approval(&mut tx, tenant, max_pending, now()).await?;
    let row = sqlx::query(&format!(
        "INSERT INTO approvals (id, session_id, tenant_id, run_id, tool_use_id, tool_name, input, \
             input_sha256, reason, expires_at, created_at) \
         SELECT ?, id, tenant_id, ?, ?, ?, ?, ?, ?, ?, ? FROM sessions WHERE id = ? AND tenant_id = ? \
         RETURNING {APPROVAL_COLUMNS}"
    ))
    .bind(approval.id.as_str())
    .bind(approval.run_id.as_deref())
    .bind(&approval.tool_use_id)
    .bind(&approval.tool_name)
    .bind(approval.input.to_string())
    .bind(&approval.input_sha256)
    .bind(&approval.reason)
    .bind(ts(approval.expires_at))
    .bind(ts(now()))
    .bind(approval.session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&mut *tx)
    .await?
    .ok_or(StoreError::NotFound)?;
    let record = approval_from_row(&row)?;
    tx.commit().await?;
    Ok(record)
}

pub(in crate::store) async fn decide_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
    decision: ApprovalDecision,
) -> StoreResult<Option<ApprovalRecord>> {
    let at = ts(now());
    let must_be_live = decision.status != ApprovalStatus::Expired;
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
    let row = sqlx::query(DECIDE_APPROVAL)
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(decision.status.as_str())
        .bind(&decision.decided_by)
        .bind(&at)
        .bind(decision.reason.as_deref())
        .bind(decision.updated_input.as_ref().map(Value::to_string))
        .bind(decision.grant.as_ref().map(|g| g.id.as_str()))
        .bind(must_be_live)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if let Some(grant) = &decision.grant {
        sqlx::query(INSERT_GRANT)
            .bind(grant.id.as_str())
            .bind(tenant.as_str())
            .bind(grant.session.as_str())
            .bind(grant.scope.as_str())
            .bind(&grant.rule)
            .bind(&grant.created_by)
            .bind(grant.approval_id.as_deref())
            .bind(grant.expires_at.map(ts))
            .bind(&at)
            .execute(&mut *tx)
            .await?;
    }
    let record = approval_from_row(&row)?;
    tx.commit().await?;
    Ok(Some(record))
}

pub(in crate::store) async fn get_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let row = sqlx::query(GET_APPROVAL)
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&store.pool)
        .await?;
    row.as_ref().map(approval_from_row).transpose()
}

pub(in crate::store) async fn list_approvals(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    status: Option<ApprovalStatus>,
) -> StoreResult<Vec<ApprovalRecord>> {
    let rows = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = ? AND tenant_id = ? \
             AND (? IS NULL OR status = ?) ORDER BY created_at, id"
    ))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(status.map(ApprovalStatus::as_str))
    .bind(status.map(ApprovalStatus::as_str))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(approval_from_row).collect()
}

/// The session's live grants, read on the caller's thread (see `sqlite_reads`; `$1`..`$3`
/// bind in order; the partial index `grants_live` keeps it to live grants).
pub(in crate::store) async fn list_grants(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<GrantRecord>> {
    let rows = store.reads.read(|db| {
        db.prepare_cached(LIVE_GRANTS)?
            .query_and_then(
                rusqlite::params![tenant.as_str(), session.as_str(), ts(now())],
                grant_row,
            )?
            .collect::<StoreResult<Vec<GrantRow>>>()
    })?;
    grants(rows)
}

/// A [`GrantRow`] of [`LIVE_GRANTS`]' columns, in order, read by `rusqlite`.
fn grant_row(row: &rusqlite::Row<'_>) -> StoreResult<GrantRow> {
    Ok(GrantRow {
        id: row.get(0)?,
        session_id: row.get(1)?,
        scope: row.get(2)?,
        rule: row.get(3)?,
        created_by: row.get(4)?,
        approval_id: row.get(5)?,
        expires_at: opt_ts_column(row, 6)?,
        created_at: ts_column(row, 7)?,
    })
}

pub(in crate::store) async fn revoke_grant(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let done = sqlx::query(REVOKE_GRANT)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(ts(now()))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn consume_grant(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let done = sqlx::query(CONSUME_GRANT)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(ts(now()))
        .execute(&mut *store.writer.sqlx().await?)
        .await?;
    Ok(done.rows_affected() == 1)
}
