//! Approvals on SQLite.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::store::dialect::sqlite::{parse_json, parse_opt_ts, parse_ts, ts};
use crate::store::dialect::{lease_span, now};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

// --- approvals and grants ---
pub(in crate::store) async fn create_approval(
    store: &SqliteStore,
    tenant: &TenantId,
    mut approval: NewApproval,
    max_pending: u32,
) -> StoreResult<ApprovalRecord> {
    crate::store::storable::approval(&mut approval);
    let mut tx = store.writer.begin().await?;
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
    let mut tx = store.writer.begin().await?;
    let row = sqlx::query(&format!(
        "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, decision_reason = ?, \
             updated_input = ?, grant_id = ? \
         WHERE id = ? AND session_id = ? AND tenant_id = ? AND status = 'pending' \
             AND (NOT ? OR expires_at > ?) RETURNING {APPROVAL_COLUMNS}"
    ))
    .bind(decision.status.as_str())
    .bind(&decision.decided_by)
    .bind(&at)
    .bind(decision.reason.as_deref())
    .bind(decision.updated_input.as_ref().map(Value::to_string))
    .bind(decision.grant.as_ref().map(|g| g.id.as_str()))
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(must_be_live)
    .bind(&at)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if let Some(grant) = &decision.grant {
        sqlx::query(
            "INSERT INTO grants (id, tenant_id, session_id, scope, rule, created_by, approval_id, \
                 expires_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
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
    let row = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = ? AND session_id = ? AND tenant_id = ?"
    ))
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

pub(in crate::store) async fn list_grants(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<GrantRecord>> {
    let rows = sqlx::query(
        "SELECT id, session_id, scope, rule, created_by, approval_id, expires_at, created_at \
         FROM grants WHERE tenant_id = ? AND (scope = 'tenant' OR session_id = ?) \
             AND revoked_at IS NULL AND consumed_at IS NULL \
             AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at, id",
    )
    .bind(tenant.as_str())
    .bind(session.as_str())
    .bind(ts(now()))
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            let scope: String = row.try_get("scope")?;
            Ok(GrantRecord {
                id: row.try_get("id")?,
                session_id: row.try_get("session_id")?,
                scope: GrantScope::parse(&scope)
                    .ok_or_else(|| StoreError::Internal(format!("unknown grant scope {scope}")))?,
                rule: row.try_get("rule")?,
                created_by: row.try_get("created_by")?,
                approval_id: row.try_get("approval_id")?,
                expires_at: parse_opt_ts(row.try_get("expires_at")?)?,
                created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
            })
        })
        .collect()
}

pub(in crate::store) async fn revoke_grant(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "UPDATE grants SET revoked_at = ? WHERE id = ? AND tenant_id = ? \
             AND revoked_at IS NULL AND consumed_at IS NULL",
    )
    .bind(ts(now()))
    .bind(id.as_str())
    .bind(tenant.as_str())
    .execute(&store.writer)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn consume_grant(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "UPDATE grants SET consumed_at = ? WHERE id = ? AND tenant_id = ? AND scope = 'once' \
             AND revoked_at IS NULL AND consumed_at IS NULL",
    )
    .bind(ts(now()))
    .bind(id.as_str())
    .bind(tenant.as_str())
    .execute(&store.writer)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) fn approval_from_row(row: &SqliteRow) -> StoreResult<ApprovalRecord> {
    let status: String = row.try_get("status")?;
    Ok(ApprovalRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        tool_use_id: row.try_get("tool_use_id")?,
        tool_name: row.try_get("tool_name")?,
        input: parse_json(&row.try_get::<String, _>("input")?)?,
        input_sha256: row.try_get("input_sha256")?,
        reason: row.try_get("reason")?,
        status: ApprovalStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown approval status {status}")))?,
        decided_by: row.try_get("decided_by")?,
        decided_at: parse_opt_ts(row.try_get("decided_at")?)?,
        decision_reason: row.try_get("decision_reason")?,
        updated_input: row
            .try_get::<Option<String>, _>("updated_input")?
            .as_deref()
            .map(parse_json)
            .transpose()?,
        grant_id: row.try_get("grant_id")?,
        expires_at: parse_ts(&row.try_get::<String, _>("expires_at")?)?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}
