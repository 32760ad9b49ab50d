//! Approvals on Postgres.

use super::*;
use crate::ids::{ApprovalId, GrantId, RunId, SessionId, TenantId};
use crate::store::dialect::now;
use crate::store::events::{PAGE_BYTES, PageBytes};
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::SubsecRound;
use sqlx::types::Json;
use sqlx::{FromRow, Row};

// --- approvals and grants ---
pub(in crate::store) async fn create_approval(
    store: &PgStore,
    tenant: &TenantId,
    mut approval: NewApproval,
    max_pending: u32,
) -> StoreResult<ApprovalRecord> {
    crate::store::storable::approval(&mut approval);
    // Admission and insert in one statement, its own transaction (migration 0020): the
    // tenant's limits lock is held for that statement alone.
    let at = now();
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM norma_create_approval($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, $11, $12, $13)"
    ))
    .bind(crate::store::limits::postgres::LIMITS_LOCK_SPACE)
    .bind((max_pending != u32::MAX).then_some(i64::from(max_pending)))
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
    .bind(at)
    .fetch_one(&mut *conn)
    .await
    .map_err(|error| {
        crate::store::limits::postgres::refusal(
            error,
            &[(crate::limits::Limit::PendingApprovals, max_pending)],
        )
    })?;
    // (An error above drops the connection, which is checked before it is used again.)
    conn.commit().await?;
    approval_from_row(&row)
}

pub(in crate::store) async fn decide_approval(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
    decision: ApprovalDecision,
) -> StoreResult<Option<ApprovalRecord>> {
    let at = now();
    let must_be_live = decision.status != ApprovalStatus::Expired;
    let decide = sqlx::query(DECIDE_APPROVAL)
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(decision.status.as_str())
        .bind(&decision.decided_by)
        .bind(at)
        .bind(decision.reason.as_deref())
        .bind(decision.updated_input.as_ref().map(Json))
        .bind(decision.grant.as_ref().map(|g| g.id.as_str()))
        .bind(must_be_live);
    let row = match &decision.grant {
        // The conditional update alone: its own transaction, one round trip.
        None => {
            let mut conn = store.tenant_conn(tenant).await?;
            let row = decide.fetch_optional(&mut *conn).await?;
            conn.commit().await?;
            row
        }
        // With the grant it adds, in one transaction.
        Some(grant) => {
            let mut tx = store.tenant_tx(tenant).await?;
            let row = decide.fetch_optional(&mut *tx).await?;
            if row.is_some() {
                sqlx::query(INSERT_GRANT)
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
            tx.commit().await?;
            row
        }
    };
    let Some(row) = row else {
        return Ok(None);
    };
    let record = approval_from_row(&row)?;
    // Once committed, the other replicas are told (a run parked there on this approval
    // resumes at once; a lost signal is caught up by their reconcile).
    store.signal_after_commit(&Signal::ApprovalDecided { id: id.to_string() });
    Ok(Some(record))
}

pub(in crate::store) async fn get_approval(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &ApprovalId,
) -> StoreResult<Option<ApprovalRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(GET_APPROVAL)
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    row.as_ref().map(approval_from_row).transpose()
}

pub(in crate::store) async fn run_request(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
    tool_use_id: &str,
    input_sha256: &str,
) -> StoreResult<Option<ApprovalRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(RUN_REQUEST)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(run.as_str())
        .bind(tool_use_id)
        .bind(input_sha256)
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    row.as_ref().map(approval_from_row).transpose()
}

pub(in crate::store) async fn list_approvals(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    status: Option<ApprovalStatus>,
) -> StoreResult<Vec<ApprovalRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows = sqlx::query(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = $1 AND tenant_id = $2 \
             AND ($3::text IS NULL OR status = $3) ORDER BY created_at, id"
    ))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(status.map(ApprovalStatus::as_str))
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    rows.iter().map(approval_from_row).collect()
}

pub(in crate::store) async fn list_approvals_page(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    status: Option<ApprovalStatus>,
    after: Option<&ApprovalId>,
    limit: u32,
) -> StoreResult<Vec<ApprovalRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let page = {
        // Through `approvals_session_created` (migration 0034).
        let sql = format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE session_id = $1 AND tenant_id = $2 \
                 AND ($3::text IS NULL OR status = $3) \
                 AND ($4::text IS NULL OR (created_at, id) > \
                     (SELECT created_at, id FROM approvals WHERE id = $4 AND session_id = $1)) \
             ORDER BY created_at, id LIMIT $5"
        );
        let rows = sqlx::query(&sql)
            .bind(session.as_str())
            .bind(tenant.as_str())
            .bind(status.map(ApprovalStatus::as_str))
            .bind(after.map(ApprovalId::as_str))
            .bind(i64::from(limit))
            .fetch(&mut *conn);
        PageBytes::new(PAGE_BYTES)
            .collect_stream(
                rows,
                |row| approval_from_row(&row),
                ApprovalRecord::page_bytes,
            )
            .await?
    };
    conn.commit().await?;
    Ok(page)
}

pub(in crate::store) async fn list_grants(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Vec<GrantRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows: Vec<GrantRow> = sqlx::query_as(LIVE_GRANTS)
        .bind(tenant.as_str())
        .bind(session.as_str())
        .bind(now())
        .fetch_all(&mut *conn)
        .await?;
    conn.commit().await?;
    grants(rows)
}

pub(in crate::store) async fn permission_state(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<PermissionState> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows = sqlx::query(PERMISSION_STATE)
        .bind(tenant.as_str())
        .bind(session.as_str())
        .bind(now())
        .fetch_all(&mut *conn)
        .await?;
    conn.commit().await?;
    permission_state_of(&rows)
}

/// The permission state the rows of a [`permission_state_over`] statement describe.
pub(in crate::store) fn permission_state_of(
    rows: &[sqlx::postgres::PgRow],
) -> StoreResult<PermissionState> {
    let rows = rows
        .iter()
        .map(|row| {
            let applies = row.try_get::<Option<String>, _>("id")?.is_some();
            Ok(PermissionRow {
                mode: row.try_get("mode")?,
                previous_mode: row.try_get("previous_mode")?,
                grant: applies.then(|| GrantRow::from_row(row)).transpose()?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    permission_state_from(rows)
}

pub(in crate::store) async fn revoke_grant(
    store: &PgStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(REVOKE_GRANT)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(now())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    let revoked = done.rows_affected() == 1;
    if revoked {
        // Runs of other replicas holding the grant withdraw it (advisory, see `Signal`).
        store.signal_after_commit(&Signal::GrantRevoked { id: id.to_string() });
    }
    Ok(revoked)
}

pub(in crate::store) async fn consume_grant(
    store: &PgStore,
    tenant: &TenantId,
    id: &GrantId,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(CONSUME_GRANT)
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
