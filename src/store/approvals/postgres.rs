//! Approvals on Postgres.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::store::dialect::postgres::notify;
use crate::store::dialect::{lease_span, now};
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

// --- approvals and grants ---
pub(in crate::store) async fn create_approval(
    store: &PgStore,
    tenant: &TenantId,
    mut approval: NewApproval,
    max_pending: u32,
) -> StoreResult<ApprovalRecord> {
    crate::store::storable::approval(&mut approval);
    let mut tx = store.tenant_tx(tenant).await?;
    crate::store::limits::postgres::admit_approval(&mut tx, tenant, max_pending, now()).await?;
    let row = sqlx::query(&format!(
        "INSERT INTO approvals (id, session_id, tenant_id, run_id, tool_use_id, tool_name, input, \
             input_sha256, reason, expires_at, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING {APPROVAL_COLUMNS}"
    ))
    .bind(approval.id.as_str())
    .bind(approval.session.as_str())
    .bind(tenant.as_str())
    .bind(approval.run_id.as_deref())
    .bind(&approval.tool_use_id)
    .bind(&approval.tool_name)
    .bind(Json(&approval.input))
    .bind(&approval.input_sha256)
    .bind(&approval.reason)
    .bind(approval.expires_at.trunc_subsecs(6))
    .bind(now())
    .fetch_one(&mut *tx)
    .await?;
    let record = approval_from_row(&row)?;
    tx.commit().await?;
    Ok(record)
}

pub(in crate::store) async fn decide_approval(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
    decision: ApprovalDecision,
) -> StoreResult<Option<ApprovalRecord>> {
    let at = now();
    let mut tx = store.tenant_tx(tenant).await?;
    let must_be_live = decision.status != ApprovalStatus::Expired;
    let row = sqlx::query(&format!(
        "UPDATE approvals SET status = $4, decided_by = $5, decided_at = $6, decision_reason = $7, \
             updated_input = $8, grant_id = $9 \
         WHERE id = $1 AND session_id = $2 AND tenant_id = $3 AND status = 'pending' \
             AND (NOT $10 OR expires_at > $6) RETURNING {APPROVAL_COLUMNS}"
    ))
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(decision.status.as_str())
    .bind(&decision.decided_by)
    .bind(at)
    .bind(decision.reason.as_deref())
    .bind(decision.updated_input.as_ref().map(Json))
    .bind(decision.grant.as_ref().map(|g| g.id.as_str()))
    .bind(must_be_live)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    if let Some(grant) = &decision.grant {
        sqlx::query(
            "INSERT INTO grants (id, tenant_id, session_id, scope, rule, created_by, approval_id, \
                 expires_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(grant.id.as_str())
        .bind(tenant.as_str())
        .bind(grant.session.as_str())
        .bind(grant.scope.as_str())
        .bind(&grant.rule)
        .bind(&grant.created_by)
        .bind(grant.approval_id.as_deref())
        .bind(grant.expires_at.map(|t| t.trunc_subsecs(6)))
        .bind(at)
        .execute(&mut *tx)
        .await?;
    }
    notify(&mut tx, &Signal::ApprovalDecided { id: id.to_string() }).await?;
    let record = approval_from_row(&row)?;
    tx.commit().await?;
    Ok(Some(record))
}

pub(in crate::store) async fn get_approval(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1 AND session_id = $2 AND tenant_id = $3"
    ))
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.as_ref().map(approval_from_row).transpose()
}

pub(in crate::store) async fn list_approvals(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    status: Option<ApprovalStatus>,
) -> StoreResult<Vec<ApprovalRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let rows = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = $1 AND tenant_id = $2 \
             AND ($3::text IS NULL OR status = $3) ORDER BY created_at, id"
    ))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(status.map(ApprovalStatus::as_str))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    rows.iter().map(approval_from_row).collect()
}

pub(in crate::store) async fn list_grants(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<GrantRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let rows = sqlx::query(
        "SELECT id, session_id, scope, rule, created_by, approval_id, expires_at, created_at \
         FROM grants WHERE tenant_id = $1 AND (scope = 'tenant' OR session_id = $2) \
             AND revoked_at IS NULL AND consumed_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $3) ORDER BY created_at, id",
    )
    .bind(tenant.as_str())
    .bind(session.as_str())
    .bind(now())
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
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
                expires_at: row.try_get("expires_at")?,
                created_at: row.try_get("created_at")?,
            })
        })
        .collect()
}

pub(in crate::store) async fn revoke_grant(
    store: &PgStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(
        "UPDATE grants SET revoked_at = $3 WHERE id = $1 AND tenant_id = $2 \
             AND revoked_at IS NULL AND consumed_at IS NULL",
    )
    .bind(id.as_str())
    .bind(tenant.as_str())
    .bind(now())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn consume_grant(
    store: &PgStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(
        "UPDATE grants SET consumed_at = $3 WHERE id = $1 AND tenant_id = $2 AND scope = 'once' \
             AND revoked_at IS NULL AND consumed_at IS NULL",
    )
    .bind(id.as_str())
    .bind(tenant.as_str())
    .bind(now())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn settled_approvals(
    store: &PgStore,
    ids: &[String],
) -> StoreResult<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT id FROM approvals WHERE id = ANY($1) AND status <> 'pending'")
            .bind(ids)
            .fetch_all(&store.pool)
            .await?;
    Ok(rows.into_iter().map(|(id,)| id).collect())
}

pub(in crate::store) fn approval_from_row(row: &PgRow) -> StoreResult<ApprovalRecord> {
    let status: String = row.try_get("status")?;
    Ok(ApprovalRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        tool_use_id: row.try_get("tool_use_id")?,
        tool_name: row.try_get("tool_name")?,
        input: row.try_get::<Json<Value>, _>("input")?.0,
        input_sha256: row.try_get("input_sha256")?,
        reason: row.try_get("reason")?,
        status: ApprovalStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown approval status {status}")))?,
        decided_by: row.try_get("decided_by")?,
        decided_at: row.try_get("decided_at")?,
        decision_reason: row.try_get("decision_reason")?,
        updated_input: row
            .try_get::<Option<Json<Value>>, _>("updated_input")?
            .map(|j| j.0),
        grant_id: row.try_get("grant_id")?,
        expires_at: row.try_get("expires_at")?,
        created_at: row.try_get("created_at")?,
    })
}
