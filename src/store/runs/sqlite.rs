//! Runs on SQLite.

use super::*;
use crate::ids::{RunId, SessionId, TenantId};
use crate::store::dialect::sqlite::ts;
use crate::store::dialect::{lease_span, now};
use crate::store::sqlite::SqliteStore;
use crate::store::*;

// --- runs ---
pub(in crate::store) async fn create_run_keyed(
    store: &SqliteStore,
    tenant: &TenantId,
    run: NewRun,
    claim: Option<(&str, Duration)>,
    caps: RunCaps,
    key: Option<&NewIdempotencyKey>,
) -> StoreResult<RunRecord> {
    let created_at = now();
    let start = RunStart::new(claim, created_at);
    // One writer connection: the check and the insert cannot interleave with another
    // admission.
    let mut tx = store.writer.begin().await?;
    if let Some(key) = key {
        crate::store::idempotency::sqlite::insert(
            &mut tx,
            tenant,
            key,
            run.id.as_str(),
            created_at,
        )
        .await?;
    }
    if claim.is_some() {
        crate::store::limits::sqlite::admit_running(&mut tx, tenant, caps, None, created_at)
            .await?;
    } else {
        crate::store::limits::sqlite::admit_queued(&mut tx, tenant, &run.session, caps).await?;
    }
    let row = sqlx::query(INSERT_RUN)
        .bind(run.id.as_str())
        .bind(run.session.as_str())
        .bind(tenant.as_str())
        .bind(&run.prompt)
        .bind(start.status.as_str())
        .bind(start.owner)
        .bind(start.lease_expires_at.map(ts))
        .bind(start.fence)
        .bind(ts(created_at))
        .bind(start.started_at.map(ts))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
    let record = run_from_row(&row)?;
    tx.commit().await?;
    Ok(record)
}

pub(in crate::store) async fn request_cancel(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
) -> StoreResult<bool> {
    let mut tx = store.writer.begin().await?;
    let done = sqlx::query(REQUEST_CANCEL)
        .bind(run.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(ts(now()))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn requested_cancels(
    store: &SqliteStore,
    owner: &str,
) -> StoreResult<Vec<(SessionId, RunId)>> {
    let rows: Vec<(String, String)> = sqlx::query_as(REQUESTED_CANCELS)
        .bind(owner)
        .fetch_all(&store.pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(session, run)| (SessionId::from_string(session), RunId::from_string(run)))
        .collect())
}

pub(in crate::store) async fn claim_run(
    store: &SqliteStore,
    tenant: &TenantId,
    id: &RunId,
    owner: &str,
    lease: Duration,
    caps: RunCaps,
) -> StoreResult<Option<RunRecord>> {
    let at = now();
    let mut tx = store.writer.begin().await?;
    let claimable: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ? AND tenant_id = ? AND \
             (status = 'queued' OR (status = 'running' AND (owner = ? \
             OR lease_expires_at IS NULL OR lease_expires_at < ?))))",
    )
    .bind(id.as_str())
    .bind(tenant.as_str())
    .bind(owner)
    .bind(ts(at))
    .fetch_one(&mut *tx)
    .await?;
    if !claimable {
        return Ok(None);
    }
    crate::store::limits::sqlite::admit_running(&mut tx, tenant, caps, Some(id), at).await?;
    let row = sqlx::query(&format!(
        "UPDATE runs SET status = 'running', owner = ?, lease_expires_at = ?, \
             fence = fence + 1, started_at = COALESCE(started_at, ?) \
         WHERE id = ? AND tenant_id = ? AND (status = 'queued' OR (status = 'running' \
             AND (owner = ? OR lease_expires_at IS NULL OR lease_expires_at < ?))) \
         RETURNING {RUN_COLUMNS}"
    ))
    .bind(owner)
    .bind(ts(at + lease_span(lease)))
    .bind(ts(at))
    .bind(id.as_str())
    .bind(tenant.as_str())
    .bind(owner)
    .bind(ts(at))
    .fetch_optional(&mut *tx)
    .await?;
    let record = row.as_ref().map(run_from_row).transpose()?;
    tx.commit().await?;
    Ok(record)
}

pub(in crate::store) async fn cancel_queued_run(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &RunId,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "UPDATE runs SET status = 'cancelled', ended_at = ?, terminal = '{\"reason\":\"cancelled\"}' \
         WHERE id = ? AND session_id = ? AND tenant_id = ? AND status = 'queued'",
    )
    .bind(ts(now()))
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .execute(&store.writer)
    .await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn get_run(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &RunId,
) -> StoreResult<Option<RunRecord>> {
    let row = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id = ? AND session_id = ? AND tenant_id = ?"
    ))
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&store.pool)
    .await?;
    row.as_ref().map(run_from_row).transpose()
}

pub(in crate::store) async fn list_runs(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    after: Option<&RunId>,
    limit: u32,
) -> StoreResult<Vec<RunRecord>> {
    let rows = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? AND tenant_id = ? \
             AND position > COALESCE((SELECT position FROM runs WHERE id = ? AND session_id = ?), 0) \
         ORDER BY position LIMIT ?"
    ))
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(after.map(RunId::as_str))
    .bind(session.as_str())
    .bind(i64::from(limit))
    .fetch_all(&store.pool)
    .await?;
    rows.iter().map(run_from_row).collect()
}

pub(in crate::store) async fn renew_leases(
    store: &SqliteStore,
    owner: &str,
    lease: Duration,
) -> StoreResult<u64> {
    let done = sqlx::query(RENEW_LEASES)
        .bind(owner)
        .bind(ts(now() + lease_span(lease)))
        .execute(&store.writer)
        .await?;
    store.renew_holds(owner, lease).await?;
    Ok(done.rows_affected())
}

pub(in crate::store) async fn release_leases(
    store: &SqliteStore,
    owner: &str,
) -> StoreResult<Vec<RunRecord>> {
    let rows = sqlx::query(RELEASE_LEASES)
        .bind(owner)
        .fetch_all(&store.writer)
        .await?;
    rows.iter().map(run_from_row).collect()
}

pub(in crate::store) async fn list_unfinished_runs(
    store: &SqliteStore,
    limit: u32,
) -> StoreResult<Vec<UnfinishedRun>> {
    let rows = sqlx::query(UNFINISHED_RUNS)
        .bind(i64::from(limit))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(unfinished_from_row).collect()
}
