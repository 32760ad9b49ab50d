//! Runs on Postgres.

use super::*;
use crate::ids::{RunId, SessionId, TenantId};
use crate::limits::Limit;
use crate::store::dialect::{lease_span, now};
use crate::store::events::{PAGE_BYTES, PageBytes};
use crate::store::postgres::PgStore;
use crate::store::*;

// --- runs ---
pub(in crate::store) async fn create_run_keyed(
    store: &PgStore,
    tenant: &TenantId,
    run: NewRun,
    claim: Option<(&str, Duration)>,
    caps: RunCaps,
    key: Option<&NewIdempotencyKey>,
) -> StoreResult<RunRecord> {
    let created_at = now();
    let start = RunStart::new(claim, created_at);
    let (running, queued) = match start.status {
        RunStatus::Running if caps.caps_running() => (Some(i64::from(caps.concurrent_runs)), None),
        RunStatus::Queued if caps.caps_queued() => (
            None,
            Some((
                i64::from(caps.queued_per_session),
                i64::from(caps.queued_per_tenant),
            )),
        ),
        _ => (None, None),
    };
    let statement = sqlx::query(CREATE_RUN)
        .bind(crate::store::limits::postgres::LIMITS_LOCK_SPACE)
        .bind(running)
        .bind(queued.map(|q| q.0))
        .bind(queued.map(|q| q.1))
        .bind(run.id.as_str())
        .bind(run.session.as_str())
        .bind(tenant.as_str())
        .bind(&run.prompt)
        .bind(start.status.as_str())
        .bind(start.owner)
        .bind(start.lease_expires_at)
        .bind(start.fence)
        .bind(created_at)
        .bind(start.started_at);
    admit(store, tenant, &run, key, created_at, caps, statement).await?;
    Ok(start.record(&run, tenant, created_at))
}

/// A run's admission in one statement (`norma_create_run`: the tenant's limits lock, the
/// counts with a fresh snapshot, the insert of an active session's run): `$1` limits lock
/// space, `$2` running cap, `$3`/`$4` queued caps per session/tenant (NULL: not capped),
/// `$5` run, `$6` session, `$7` tenant, `$8` prompt, `$9` status, `$10` owner, `$11` lease
/// expiry, `$12` fence, `$13` created, `$14` started. Column `created` counts the inserted
/// run.
const CREATE_RUN: &str = "SELECT count(*) AS created FROM norma_create_run($1, $2, $3, $4, \
     $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

/// A running run's admission (`norma_create_run`, run once: a materialised `WITH`) and the
/// session's permission state, in one statement: `$1` tenant, `$2` session, `$3` now (the
/// permission state's parameters, see [`permission_state_over`]; also the run's creation and
/// start), `$4` limits lock space, `$5` running cap (NULL: none), `$6` run, `$7` prompt,
/// `$8` owner, `$9` lease expiry, `$10` fence. Column `created` counts the inserted run; the
/// state is read from the statement's snapshot, taken as it starts.
const START_RUN: &str = concat!(
    "WITH admitted AS MATERIALIZED (SELECT count(*) AS created FROM norma_create_run(\
         $4, $5, NULL, NULL, $6, $2, $1, $7, 'running', $8, $9, $10, $3, $3)) ",
    crate::store::approvals::permission_state_over!("admitted.created, ", "admitted")
);

/// Runs a run's admitting statement ([`CREATE_RUN`], [`START_RUN`]): alone, its own
/// transaction, or after `key`'s insert in one transaction (the admitting function's lock is
/// held to its end). `NotFound` when it inserted no run (the session is not the tenant's, or
/// not active), `TenantLimit` when a cap refused it; the statement's rows otherwise.
async fn admit(
    store: &PgStore,
    tenant: &TenantId,
    run: &NewRun,
    key: Option<&NewIdempotencyKey>,
    created_at: chrono::DateTime<chrono::Utc>,
    caps: RunCaps,
    statement: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> StoreResult<Vec<sqlx::postgres::PgRow>> {
    let rows = match key {
        None => {
            let mut conn = store.tenant_conn(tenant).await?;
            let rows = statement
                .fetch_all(&mut *conn)
                .await
                .map_err(|error| refusal(error, caps))?;
            // (An error above drops the connection, which is checked before it is used again.)
            conn.commit().await?;
            rows
        }
        Some(key) => {
            let mut tx = store.tenant_tx(tenant).await?;
            crate::store::idempotency::postgres::insert(
                &mut tx,
                tenant,
                key,
                run.id.as_str(),
                created_at,
            )
            .await?;
            let rows = statement
                .fetch_all(&mut *tx)
                .await
                .map_err(|error| refusal(error, caps))?;
            tx.commit().await?;
            rows
        }
    };
    let created: i64 = match rows.first() {
        Some(row) => row.try_get("created")?,
        None => 0,
    };
    if created == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(rows)
}

/// A run admission's error: `TenantLimit` naming the cap that refused it, or the error.
fn refusal(error: sqlx::Error, caps: RunCaps) -> StoreError {
    crate::store::limits::postgres::refusal(
        error,
        &[
            (Limit::ConcurrentRuns, caps.concurrent_runs),
            (Limit::QueuedPromptsPerSession, caps.queued_per_session),
            (Limit::QueuedPrompts, caps.queued_per_tenant),
        ],
    )
}

/// Creates a running run under the tenant's caps and reads the session's permission state
/// with it (see [`START_RUN`]); with `key`, the key's insert comes first in one transaction.
pub(in crate::store) async fn start_run(
    store: &PgStore,
    tenant: &TenantId,
    run: NewRun,
    claim: (&str, Duration),
    caps: RunCaps,
    key: Option<&NewIdempotencyKey>,
) -> StoreResult<StartedRun> {
    let created_at = now();
    let start = RunStart::new(Some(claim), created_at);
    let statement = sqlx::query(START_RUN)
        .bind(tenant.as_str())
        .bind(run.session.as_str())
        .bind(created_at)
        .bind(crate::store::limits::postgres::LIMITS_LOCK_SPACE)
        .bind(
            caps.caps_running()
                .then_some(i64::from(caps.concurrent_runs)),
        )
        .bind(run.id.as_str())
        .bind(&run.prompt)
        .bind(start.owner)
        .bind(start.lease_expires_at)
        .bind(start.fence);
    let rows = admit(store, tenant, &run, key, created_at, caps, statement).await?;
    Ok(StartedRun {
        run: start.record(&run, tenant, created_at),
        permissions: crate::store::approvals::postgres::permission_state_of(&rows)?,
    })
}

pub(in crate::store) async fn request_cancel(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(REQUEST_CANCEL)
        .bind(run.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(now())
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn requested_cancels(
    store: &PgStore,
    owner: &str,
) -> StoreResult<Vec<(SessionId, RunId)>> {
    // System-level (login role), like the heartbeat.
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
    store: &PgStore,
    tenant: &TenantId,
    id: &RunId,
    owner: &str,
    lease: Duration,
    caps: RunCaps,
) -> StoreResult<Option<RunRecord>> {
    let at = now();
    let mut tx = store
        .tenant_tx_admitting(tenant, caps.caps_running())
        .await?;
    let claimable: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND (status = 'queued' OR \
             (status = 'running' AND (owner = $2 OR lease_expires_at IS NULL \
             OR lease_expires_at < $3))))",
    )
    .bind(id.as_str())
    .bind(owner)
    .bind(at)
    .fetch_one(&mut *tx)
    .await?;
    if !claimable {
        return Ok(None);
    }
    crate::store::limits::postgres::admit_running(&mut tx, tenant, caps, Some(id), at).await?;
    let row = sqlx::query(&format!(
        "UPDATE runs SET status = 'running', owner = $2, lease_expires_at = $3, \
             fence = fence + 1, started_at = COALESCE(started_at, $4) \
         WHERE id = $1 AND (status = 'queued' OR (status = 'running' \
             AND (owner = $2 OR lease_expires_at IS NULL OR lease_expires_at < $4))) \
         RETURNING {RUN_COLUMNS}"
    ))
    .bind(id.as_str())
    .bind(owner)
    .bind(at + lease_span(lease))
    .bind(at)
    .fetch_optional(&mut *tx)
    .await?;
    let record = row.as_ref().map(run_from_row).transpose()?;
    tx.commit().await?;
    Ok(record)
}

pub(in crate::store) async fn cancel_queued_run(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &RunId,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(
        "UPDATE runs SET status = 'cancelled', ended_at = $3, \
             terminal = '{\"reason\": \"cancelled\"}'::jsonb \
         WHERE id = $1 AND session_id = $2 AND status = 'queued'",
    )
    .bind(id.as_str())
    .bind(session.as_str())
    .bind(now())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected() == 1)
}

pub(in crate::store) async fn get_run(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    id: &RunId,
) -> StoreResult<Option<RunRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 AND session_id = $2"
    ))
    .bind(id.as_str())
    .bind(session.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    conn.commit().await?;
    row.as_ref().map(run_from_row).transpose()
}

pub(in crate::store) async fn list_runs(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    after: Option<&RunId>,
    limit: u32,
) -> StoreResult<Vec<RunRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let page = {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = $1 AND position > COALESCE(\
                 (SELECT position FROM runs WHERE id = $2 AND session_id = $1), 0) \
             ORDER BY position LIMIT $3"
        );
        let rows = sqlx::query(&sql)
            .bind(session.as_str())
            .bind(after.map(RunId::as_str))
            .bind(i64::from(limit))
            .fetch(&mut *conn);
        PageBytes::new(PAGE_BYTES)
            .collect_stream(rows, |row| run_from_row(&row), RunRecord::page_bytes)
            .await?
    };
    conn.commit().await?;
    Ok(page)
}

pub(in crate::store) async fn renew_leases(
    store: &PgStore,
    owner: &str,
    lease: Duration,
) -> StoreResult<u64> {
    // System-level (login role): one statement for every run this replica holds.
    let done = sqlx::query(RENEW_LEASES)
        .bind(owner)
        .bind(now() + lease_span(lease))
        .execute(&store.pool)
        .await?;
    store.renew_holds(owner, lease).await?;
    Ok(done.rows_affected())
}

pub(in crate::store) async fn release_leases(
    store: &PgStore,
    owner: &str,
) -> StoreResult<Vec<RunRecord>> {
    // System-level (login role), like the heartbeat.
    let rows = sqlx::query(RELEASE_LEASES)
        .bind(owner)
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(run_from_row).collect()
}

pub(in crate::store) async fn list_unfinished_runs(
    store: &PgStore,
    limit: u32,
) -> StoreResult<Vec<UnfinishedRun>> {
    let rows = sqlx::query(UNFINISHED_RUNS)
        .bind(i64::from(limit))
        .fetch_all(&store.pool)
        .await?;
    rows.iter().map(unfinished_from_row).collect()
}
