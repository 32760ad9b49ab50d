//! Tenant limits on Postgres: run admission and holds, checked inside the writing
//! transaction under a per-tenant advisory lock, so replicas sharing the database take turns
//! per tenant and cannot both take the last slot.

use super::over;
use crate::limits::{Limit, LimitExceeded};
use crate::store::dialect::lease_span;
use crate::store::dialect::postgres::TenantTx;
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// The advisory-lock namespace of tenant limits (first key of the two-key lock).
pub(in crate::store) const LIMITS_LOCK_SPACE: i32 = 0x4e4c_4d54; // "NLMT"

/// Serializes the tenant's limit checks until the transaction ends (nothing to do in a
/// transaction opened with the lock: `PgStore::tenant_tx_admitting`).
pub(in crate::store) async fn lock_tenant(tx: &mut TenantTx, tenant: &TenantId) -> StoreResult<()> {
    if tx.holds_lock(LIMITS_LOCK_SPACE) {
        return Ok(());
    }
    let conn: &mut PgConnection = tx;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(LIMITS_LOCK_SPACE)
        .bind(tenant.as_str())
        .execute(conn)
        .await?;
    Ok(())
}

/// The SQLSTATE of a refusal by an admission function (migration 0020); its message names
/// the limit.
const LIMIT_REFUSED: &str = "NL001";

/// `error` as the store error it is: an admission function's refusal of one of `caps` (limit
/// and its maximum) is `TenantLimit`.
pub(in crate::store) fn refusal(error: sqlx::Error, caps: &[(Limit, u32)]) -> StoreError {
    if let sqlx::Error::Database(db) = &error
        && db.code().as_deref() == Some(LIMIT_REFUSED)
        && let Some((limit, max)) = caps
            .iter()
            .find(|(limit, _)| limit.as_str() == db.message())
    {
        return LimitExceeded {
            limit: *limit,
            max: u64::from(*max),
        }
        .into();
    }
    error.into()
}

/// Checks that one more running run fits the tenant's cap (`except`: the run being claimed,
/// which may still show as running under its own expired or restarted lease).
pub(in crate::store) async fn admit_running(
    tx: &mut TenantTx,
    tenant: &TenantId,
    caps: RunCaps,
    except: Option<&RunId>,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    if !caps.caps_running() {
        return Ok(());
    }
    lock_tenant(tx, tenant).await?;
    let conn: &mut PgConnection = tx;
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'running' \
             AND lease_expires_at > $2 AND id IS DISTINCT FROM $3",
    )
    .bind(tenant.as_str())
    .bind(at)
    .bind(except.map(RunId::as_str))
    .fetch_one(conn)
    .await?;
    over(Limit::ConcurrentRuns, caps.concurrent_runs, running)
}

/// A hold (migrations 0020, 0023): the counts and whether it was inserted.
const TAKE_HOLD: &str = "SELECT * FROM norma_take_hold($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// A stream's session and its hold (migration 0024): the session's columns, then the hold's.
const TAKE_SESSION_HOLD: &str =
    "SELECT * FROM norma_take_session_hold($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";

/// Whether a hold-taking function's row (`in_session`, `in_tenant`, `inserted`) took the
/// hold; the limit that stopped it otherwise.
fn held(caps: HoldCaps, row: &sqlx::postgres::PgRow) -> StoreResult<()> {
    use sqlx::Row;
    if row.try_get::<i64, _>("inserted")? > 0 {
        return Ok(());
    }
    if let Some((limit, max)) = caps.per_session {
        over(limit, max, row.try_get("in_session")?)?;
    }
    over(
        caps.per_tenant.0,
        caps.per_tenant.1,
        row.try_get("in_tenant")?,
    )?;
    Err(StoreError::Internal(
        "a hold within its caps was not inserted".into(),
    ))
}

impl PgStore {
    pub(in crate::store) async fn acquire_hold_tx(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<()> {
        // One statement, its own transaction (migration 0020): under the tenant's limits
        // lock, it counts the live holds, sweeps the expired ones and inserts the hold when
        // the counts allow it; its commit does not wait for the flush (migration 0023).
        let row = self
            .take_hold(TAKE_HOLD, tenant, &hold, caps)
            .await?
            .ok_or_else(|| StoreError::Internal("norma_take_hold answered no row".into()))?;
        held(caps, &row)
    }

    /// The session as read and its hold, in one statement (migration 0024: the session read
    /// first, then the hold taken as [`PgStore::acquire_hold_tx`] takes it); no row when
    /// the session is not the tenant's.
    pub(in crate::store) async fn read_session_and_hold_tx(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<Option<SessionRecord>> {
        let Some(row) = self
            .take_hold(TAKE_SESSION_HOLD, tenant, &hold, caps)
            .await?
        else {
            return Ok(None);
        };
        held(caps, &row)?;
        crate::store::sessions::session_from_row(&row).map(Some)
    }

    /// Runs `sql` (a call of one of the hold-taking functions: their ten arguments are the
    /// same) as one statement on a tenant connection.
    async fn take_hold(
        &self,
        sql: &'static str,
        tenant: &TenantId,
        hold: &NewHold,
        caps: HoldCaps,
    ) -> StoreResult<Option<sqlx::postgres::PgRow>> {
        let at = Utc::now();
        let mut conn = self.tenant_conn(tenant).await?;
        let per_session = caps.per_session.map(|(_, max)| i64::from(max));
        let row = sqlx::query(sql)
            .bind(LIMITS_LOCK_SPACE)
            .bind(tenant.as_str())
            .bind(hold.kind.as_str())
            .bind(hold.session.as_str())
            .bind(&hold.id)
            .bind(&hold.replica)
            .bind(at + lease_span(hold.lease))
            .bind(at)
            .bind(per_session)
            .bind(i64::from(caps.per_tenant.1))
            .fetch_optional(&mut *conn)
            .await?;
        conn.commit().await?;
        Ok(row)
    }

    pub(in crate::store) async fn record_workspace_bytes_tx(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        bytes: u64,
    ) -> StoreResult<()> {
        let mut tx = self.tenant_tx(tenant).await?;
        record_workspace_bytes_in(&mut tx, tenant, session, bytes, Utc::now()).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in crate::store) async fn workspace_bytes_tx(&self, tenant: &TenantId) -> StoreResult<u64> {
        let mut tx = self.tenant_tx(tenant).await?;
        let bytes: i64 = sqlx::query_scalar(super::TENANT_WORKSPACE_BYTES)
            .bind(tenant.as_str())
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(bytes.max(0) as u64)
    }

    pub(in crate::store) async fn release_hold_tx(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> StoreResult<()> {
        // Without waiting for the commit's flush, like a take (migration 0023).
        let mut conn = self.tenant_conn(tenant).await?;
        sqlx::query("SELECT norma_release_hold($1)")
            .bind(id)
            .execute(&mut *conn)
            .await?;
        conn.commit().await?;
        Ok(())
    }

    pub(in crate::store) async fn count_holds_tx(
        &self,
        tenant: &TenantId,
        kind: HoldKind,
        session: Option<&SessionId>,
    ) -> StoreResult<u64> {
        let mut tx = self.tenant_tx(tenant).await?;
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM tenant_holds WHERE tenant_id = $1 AND kind = $2 \
                 AND expires_at > $3 AND ($4::text IS NULL OR session_id = $4)",
        )
        .bind(tenant.as_str())
        .bind(kind.as_str())
        .bind(Utc::now())
        .bind(session.map(SessionId::as_str))
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(count.max(0) as u64)
    }

    /// System-level: the holds `replica` took before `before`, deleted.
    pub(in crate::store) async fn release_replica_holds_tx(
        &self,
        replica: &str,
        before: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM tenant_holds WHERE replica = $1 AND created_at < $2")
            .bind(replica)
            .bind(before)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected())
    }

    /// Extends the expiry of every hold of `owner` (the heartbeat's second statement).
    pub(in crate::store) async fn renew_holds(
        &self,
        owner: &str,
        lease: Duration,
    ) -> StoreResult<()> {
        sqlx::query("UPDATE tenant_holds SET expires_at = $2 WHERE replica = $1")
            .bind(owner)
            .bind(Utc::now() + lease_span(lease))
            .execute(self.pool())
            .await?;
        Ok(())
    }
}

/// Records a session's workspace measurement in the caller's tenant-scoped transaction
/// (`NotFound` when the session is gone).
pub(in crate::store) async fn record_workspace_bytes_in(
    conn: &mut PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    bytes: u64,
    now: DateTime<Utc>,
) -> StoreResult<()> {
    let done = sqlx::query(
        "INSERT INTO workspace_usage (session_id, tenant_id, bytes, updated_at) \
         SELECT id, tenant_id, $3, $4 FROM sessions WHERE id = $1 AND tenant_id = $2 \
         ON CONFLICT (session_id) DO UPDATE SET bytes = EXCLUDED.bytes, \
             updated_at = EXCLUDED.updated_at",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
    .bind(now)
    .execute(conn)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound);
    }
    Ok(())
}
