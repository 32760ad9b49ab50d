//! Tenant limits on SQLite: run admission and holds. All writes go through the store's one
//! writer connection, so a check and the write after it in one transaction cannot interleave
//! with another admission. Holds are counted in memory (`local_holds`): the store is this
//! process's alone.

use super::over;
use crate::limits::Limit;
use crate::store::sqlite::{SqliteStore, ts};
use crate::store::*;
use chrono::{DateTime, Utc};

/// The tenant's running runs with a live lease, but one: `?1` tenant, `?2` now, `?3` the run
/// being claimed (or NULL). Served by the partial index `runs_tenant_running`.
pub(in crate::store) const COUNT_RUNNING: &str = "SELECT count(*) FROM runs \
     WHERE tenant_id = ?1 AND status = 'running' AND lease_expires_at > ?2 AND id IS NOT ?3";

/// The queued runs of a session and of its tenant: `?1` session, `?2` tenant (partial index
/// `runs_tenant_queued`).
pub(in crate::store) const COUNT_QUEUED: &str = "SELECT COALESCE(SUM(session_id = ?1), 0), \
     count(*) FROM runs WHERE tenant_id = ?2 AND status = 'queued'";

/// The tenant's pending approval requests not yet expired: `?1` tenant, `?2` now (partial
/// index `approvals_tenant_pending`).
pub(in crate::store) const COUNT_PENDING_APPROVALS: &str = "SELECT count(*) FROM approvals \
     WHERE tenant_id = ?1 AND status = 'pending' AND expires_at > ?2";

/// Checks that one more running run fits the tenant's cap (`except`: the run being claimed),
/// in the caller's transaction on the write connection.
pub(in crate::store) fn admit_running(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    caps: RunCaps,
    except: Option<&RunId>,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    if !caps.caps_running() {
        return Ok(());
    }
    let running: i64 = db.prepare_cached(COUNT_RUNNING)?.query_row(
        rusqlite::params![tenant.as_str(), ts(at), except.map(RunId::as_str)],
        |row| row.get(0),
    )?;
    over(Limit::ConcurrentRuns, caps.concurrent_runs, running)
}

/// Checks that one more queued run fits the session's and the tenant's caps (in the
/// caller's transaction, like [`admit_running`]).
pub(in crate::store) fn admit_queued(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
    caps: RunCaps,
) -> StoreResult<()> {
    if !caps.caps_queued() {
        return Ok(());
    }
    let (in_session, in_tenant): (i64, i64) = db.prepare_cached(COUNT_QUEUED)?.query_row(
        rusqlite::params![session.as_str(), tenant.as_str()],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    over(
        Limit::QueuedPromptsPerSession,
        caps.queued_per_session,
        in_session,
    )?;
    over(Limit::QueuedPrompts, caps.queued_per_tenant, in_tenant)
}

/// Checks that one more pending approval request fits the tenant's cap (a read: a refusal
/// writes nothing).
pub(in crate::store) fn admit_approval(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    max_pending: u32,
    at: DateTime<Utc>,
) -> StoreResult<()> {
    if max_pending == u32::MAX {
        return Ok(());
    }
    let pending: i64 = db
        .prepare_cached(COUNT_PENDING_APPROVALS)?
        .query_row(rusqlite::params![tenant.as_str(), ts(at)], |row| row.get(0))?;
    over(Limit::PendingApprovals, max_pending, pending)
}

impl SqliteStore {
    /// The session as read, then its hold (both on the caller's thread: the read on a read
    /// connection, the hold in memory); nothing when the session is not the tenant's.
    pub(in crate::store) async fn read_session_and_hold_tx(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<Option<SessionRecord>> {
        let Some(session) =
            crate::store::sessions::sqlite::get_session(self, tenant, &hold.session).await?
        else {
            return Ok(None);
        };
        self.holds.acquire(tenant, hold, caps)?;
        Ok(Some(session))
    }

    /// Takes a hold when the tenant's live holds stay under the caps (in memory: see
    /// `limits::local_holds`).
    pub(in crate::store) async fn acquire_hold_tx(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<()> {
        self.holds.acquire(tenant, hold, caps)
    }

    pub(in crate::store) async fn record_workspace_bytes_tx(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        bytes: u64,
    ) -> StoreResult<()> {
        let (tenant, session) = (tenant.clone(), session.clone());
        let now = ts(Utc::now());
        self.group
            .write(move |db| record_workspace_bytes_in(db, &tenant, &session, bytes, &now))
            .await
    }

    pub(in crate::store) async fn workspace_bytes_tx(&self, tenant: &TenantId) -> StoreResult<u64> {
        let bytes: i64 = self.reads.read(|db| {
            Ok(db
                .prepare_cached(super::TENANT_WORKSPACE_BYTES)?
                .query_row([tenant.as_str()], |row| row.get(0))?)
        })?;
        Ok(bytes.max(0) as u64)
    }

    pub(in crate::store) async fn release_hold_tx(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> StoreResult<()> {
        self.holds.release(tenant, id);
        Ok(())
    }

    pub(in crate::store) async fn count_holds_tx(
        &self,
        tenant: &TenantId,
        kind: HoldKind,
        session: Option<&SessionId>,
    ) -> StoreResult<u64> {
        Ok(self.holds.count(tenant, kind, session))
    }

    /// The holds `replica` took before `before`, given back.
    pub(in crate::store) async fn release_replica_holds_tx(
        &self,
        replica: &str,
        before: DateTime<Utc>,
    ) -> StoreResult<u64> {
        Ok(self.holds.release_replica(replica, before))
    }

    /// Extends the expiry of every hold of `owner` (the heartbeat's second step).
    pub(in crate::store) async fn renew_holds(
        &self,
        owner: &str,
        lease: Duration,
    ) -> StoreResult<()> {
        self.holds.renew(owner, lease);
        Ok(())
    }
}

/// Records a session's workspace measurement in the caller's transaction (`NotFound` when the
/// session is gone); an unchanged measurement writes nothing (most mutating calls leave the
/// size as it was).
pub(in crate::store) fn record_workspace_bytes_in(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
    bytes: u64,
    now: &str,
) -> StoreResult<()> {
    let changed = db
        .prepare_cached(
            "INSERT INTO workspace_usage (session_id, tenant_id, bytes, updated_at) \
             SELECT id, tenant_id, ?1, ?2 FROM sessions WHERE id = ?3 AND tenant_id = ?4 \
             ON CONFLICT (session_id) DO UPDATE SET bytes = excluded.bytes, \
                 updated_at = excluded.updated_at \
                 WHERE workspace_usage.bytes <> excluded.bytes",
        )?
        .execute(rusqlite::params![
            i64::try_from(bytes).unwrap_or(i64::MAX),
            now,
            session.as_str(),
            tenant.as_str()
        ])?;
    if changed == 0 && !crate::store::events::sqlite_append::session_exists(db, tenant, session)? {
        return Err(StoreError::NotFound);
    }
    Ok(())
}
