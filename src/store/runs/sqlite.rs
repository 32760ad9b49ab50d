//! Runs on SQLite.

use super::*;
use crate::ids::{RunId, SessionId, TenantId};
use crate::store::dialect::sqlite::{opt_json_column, opt_ts_column, ts, ts_column};
use crate::store::dialect::{lease_span, now};
use crate::store::events::{PAGE_BYTES, PageBytes};
use crate::store::limits::sqlite::{admit_queued, admit_running};
use crate::store::sqlite::SqliteStore;
use crate::store::*;
use rusqlite::params;

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
    // Committed with the other writes waiting (the group writer), whose one transaction at a
    // time keeps the admission check and the insert from interleaving with another
    // admission. The checks come before the first write (the key's insert), so a refusal
    // writes nothing; a key already taken is told first, as before any other refusal.
    let (tenant, key) = (tenant.clone(), key.cloned());
    let claim = claim.map(|(owner, lease)| (owner.to_owned(), lease));
    store
        .group
        .write(move |db| {
            let start = RunStart::new(
                claim
                    .as_ref()
                    .map(|(owner, lease)| (owner.as_str(), *lease)),
                created_at,
            );
            crate::store::idempotency::sqlite::ensure_free(db, &tenant, key.as_ref(), created_at)?;
            if claim.is_some() {
                admit_running(db, &tenant, caps, None, created_at)?;
            } else {
                admit_queued(db, &tenant, &run.session, caps)?;
            }
            crate::store::idempotency::sqlite::insert(
                db,
                &tenant,
                key.as_ref(),
                run.id.as_str(),
                created_at,
            )?;
            let inserted = db
                .prepare_cached(
                    "INSERT INTO runs (id, session_id, tenant_id, prompt, status, owner, \
                         lease_expires_at, fence, created_at, started_at) \
                     SELECT ?1, id, tenant_id, ?4, ?5, ?6, ?7, ?8, ?9, ?10 FROM sessions \
                         WHERE id = ?2 AND tenant_id = ?3 AND status = 'active'",
                )?
                .execute(params![
                    run.id.as_str(),
                    run.session.as_str(),
                    tenant.as_str(),
                    run.prompt,
                    start.status.as_str(),
                    start.owner,
                    start.lease_expires_at.map(ts),
                    start.fence,
                    ts(created_at),
                    start.started_at.map(ts),
                ])?;
            if inserted == 0 {
                return Err(StoreError::NotFound);
            }
            Ok(start.record(&run, &tenant, created_at))
        })
        .await
}

/// Creates a running run under the tenant's caps (as [`create_run_keyed`]), then reads the
/// session's permission state (a point read on the caller's thread: no round trip to save).
pub(in crate::store) async fn start_run(
    store: &SqliteStore,
    tenant: &TenantId,
    run: NewRun,
    claim: (&str, Duration),
    caps: RunCaps,
    key: Option<&NewIdempotencyKey>,
) -> StoreResult<StartedRun> {
    let session = run.session.clone();
    let run = create_run_keyed(store, tenant, run, Some(claim), caps, key).await?;
    let permissions =
        crate::store::approvals::sqlite::permission_state(store, tenant, &session).await?;
    Ok(StartedRun { run, permissions })
}

pub(in crate::store) async fn request_cancel(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
) -> StoreResult<bool> {
    let mut turn = store.writer.sqlx().await?;
    let mut tx = turn.begin().await?;
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
    store
        .writer
        .transaction(|db| {
            let claimable: bool = db
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ? AND tenant_id = ? AND \
                         (status = 'queued' OR (status = 'running' AND (owner = ? \
                         OR lease_expires_at IS NULL OR lease_expires_at < ?))))",
                )?
                .query_row(
                    params![id.as_str(), tenant.as_str(), owner, ts(at)],
                    |row| row.get(0),
                )?;
            if !claimable {
                return Ok(None);
            }
            admit_running(db, tenant, caps, Some(id), at)?;
            db.prepare_cached(&format!(
                "UPDATE runs SET status = 'running', owner = ?1, lease_expires_at = ?2, \
                         fence = fence + 1, started_at = COALESCE(started_at, ?3) \
                     WHERE id = ?4 AND tenant_id = ?5 AND (status = 'queued' OR \
                         (status = 'running' AND (owner = ?1 OR lease_expires_at IS NULL \
                         OR lease_expires_at < ?3))) \
                     RETURNING {RUN_COLUMNS}"
            ))?
            .query_and_then(
                params![
                    owner,
                    ts(at + lease_span(lease)),
                    ts(at),
                    id.as_str(),
                    tenant.as_str(),
                ],
                run_record,
            )?
            .next()
            .transpose()
        })
        .await
}

/// A [`RunRow`] of [`RUN_COLUMNS`], in order, read by `rusqlite`.
fn run_record(row: &rusqlite::Row<'_>) -> StoreResult<RunRecord> {
    RunRow {
        id: row.get(0)?,
        session_id: row.get(1)?,
        tenant_id: row.get(2)?,
        prompt: row.get(3)?,
        status: row.get(4)?,
        owner: row.get(5)?,
        lease_expires_at: opt_ts_column(row, 6)?,
        fence: row.get(7)?,
        terminal: opt_json_column(row, 8)?,
        created_at: ts_column(row, 9)?,
        started_at: opt_ts_column(row, 10)?,
        ended_at: opt_ts_column(row, 11)?,
    }
    .try_into()
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
    .execute(&mut *store.writer.sqlx().await?)
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
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? AND tenant_id = ? \
             AND position > COALESCE((SELECT position FROM runs WHERE id = ? AND session_id = ?), 0) \
         ORDER BY position LIMIT ?"
    );
    let rows = sqlx::query(&sql)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after.map(RunId::as_str))
        .bind(session.as_str())
        .bind(i64::from(limit))
        .fetch(&store.pool);
    PageBytes::new(PAGE_BYTES)
        .collect_stream(rows, |row| run_from_row(&row), RunRecord::page_bytes)
        .await
}

pub(in crate::store) async fn renew_leases(
    store: &SqliteStore,
    owner: &str,
    lease: Duration,
) -> StoreResult<u64> {
    let done = sqlx::query(RENEW_LEASES)
        .bind(owner)
        .bind(ts(now() + lease_span(lease)))
        .execute(&mut *store.writer.sqlx().await?)
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
        .fetch_all(&mut *store.writer.sqlx().await?)
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
