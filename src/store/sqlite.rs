//! The embedded SQLite store (the zero-setup default). SQLite has no row-level security, so
//! every tenant-owned query filters on `tenant_id` explicitly. WAL mode with `synchronous =
//! NORMAL` gives group-commit-like throughput; every write transaction starts with a write so
//! it takes the write lock up front.

use super::postgres::{memory_conflict, mode_override_from, parse_role};
use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::message::ContentBlock;
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool};
use std::str::FromStr;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

pub struct SqliteStore {
    /// Reads (WAL: they never wait for the writer).
    pool: SqlitePool,
    /// Writes, one connection: SQLite takes one writer at a time.
    writer: SqlitePool,
    /// Runs' appends, committed together (see `sqlite_writer`).
    appends: super::sqlite_writer::GroupWriter,
    /// Which tenants have webhook subscriptions, and the outbox worker's wake-up.
    outbox: Arc<super::sqlite_webhooks::Outbox>,
}

impl SqliteStore {
    /// The one writer connection.
    pub(super) fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    /// The read pool.
    pub(super) fn reader(&self) -> &SqlitePool {
        &self.pool
    }

    /// The outbox's in-memory state.
    pub(super) fn outbox(&self) -> &super::sqlite_webhooks::Outbox {
        &self.outbox
    }

    pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Self> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|error| StoreError::Internal(format!("invalid database url: {error}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        if let Some(parent) = connect.get_filename().parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Internal(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        // No ping before every acquire: it is one more hop to the connection's worker thread
        // per statement; a broken connection fails its statement instead (and is dropped).
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        // SQLite has one writer at a time: writes queue here, in process, instead of
        // sleeping in SQLite's busy handler while another connection holds the lock.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            // A queue of writers, not an outage: as patient as SQLite's own busy timeout.
            .acquire_timeout(options.acquire_timeout.max(Duration::from_secs(10)))
            .connect_with(connect)
            .await?;
        let outbox = Arc::new(super::sqlite_webhooks::Outbox::load(&pool).await?);
        let appends = super::sqlite_writer::GroupWriter::start(writer.clone(), outbox.clone());
        Ok(Self {
            pool,
            writer,
            appends,
            outbox,
        })
    }
}

/// Timestamps are fixed-width RFC 3339 in UTC so text order is time order.
pub(super) fn ts(value: DateTime<Utc>) -> String {
    value.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

pub(super) fn parse_ts(value: &str) -> StoreResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value)
        .map(|dt| dt.with_timezone(&Utc))
        .map_err(|error| StoreError::Internal(format!("bad timestamp {value}: {error}")))
}

fn parse_opt_ts(value: Option<String>) -> StoreResult<Option<DateTime<Utc>>> {
    value.as_deref().map(parse_ts).transpose()
}

fn parse_json<T: serde::de::DeserializeOwned>(value: &str) -> StoreResult<T> {
    serde_json::from_str(value).map_err(|error| StoreError::Internal(format!("bad json: {error}")))
}

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

fn session_from_row(row: &SqliteRow) -> StoreResult<SessionRecord> {
    let status: String = row.try_get("status")?;
    Ok(SessionRecord {
        id: SessionId::from_string(row.try_get::<String, _>("id")?),
        tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
        config: parse_json(&row.try_get::<String, _>("config")?)?,
        status: SessionStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown session status {status}")))?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
        closed_at: parse_opt_ts(row.try_get("closed_at")?)?,
        last_event_seq: row.try_get("last_event_seq")?,
    })
}

const SESSION_COLUMNS: &str = "id, tenant_id, config, status, created_at, updated_at, closed_at, \
     last_event_seq";

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn create_session_keyed(
        &self,
        session: NewSession,
        key: Option<&NewIdempotencyKey>,
    ) -> StoreResult<SessionRecord> {
        let at = now();
        let created = ts(at);
        // An explicit transaction: an autocommit `RETURNING` statement commits when it is reset,
        // after its row was read, and a failed commit (a full disk) would go unreported.
        let mut tx = self.writer.begin().await?;
        if let Some(key) = key {
            super::idempotency::sqlite::insert(
                &mut tx,
                &session.tenant,
                key,
                session.id.as_str(),
                at,
            )
            .await?;
        }
        let row = sqlx::query(&format!(
            "INSERT INTO sessions (id, tenant_id, config, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?) RETURNING {SESSION_COLUMNS}"
        ))
        .bind(session.id.as_str())
        .bind(session.tenant.as_str())
        .bind(session.config.to_string())
        .bind(&created)
        .bind(&created)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        session_from_row(&row)
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ? AND tenant_id = ?"
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn list_sessions(
        &self,
        tenant: &TenantId,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<SessionRecord>> {
        let rows = match cursor {
            Some(cursor) => {
                let created = ts(cursor.created_at);
                sqlx::query(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? \
                     AND (created_at < ? OR (created_at = ? AND id < ?)) \
                     ORDER BY created_at DESC, id DESC LIMIT ?"
                ))
                .bind(tenant.as_str())
                .bind(&created)
                .bind(&created)
                .bind(cursor.id.as_str())
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = ? \
                     ORDER BY created_at DESC, id DESC LIMIT ?"
                ))
                .bind(tenant.as_str())
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await?
            }
        };
        rows.iter().map(session_from_row).collect()
    }

    async fn close_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        let closed_at = now();
        let at = ts(closed_at);
        // Explicit transaction: see `create_session`.
        let mut tx = self.writer.begin().await?;
        let row = sqlx::query(&format!(
            "UPDATE sessions SET status = 'closed', closed_at = COALESCE(closed_at, ?), \
                 updated_at = ? \
             WHERE id = ? AND tenant_id = ? RETURNING {SESSION_COLUMNS}"
        ))
        .bind(&at)
        .bind(&at)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        let record = row.as_ref().map(session_from_row).transpose()?;
        // This close closed it (an earlier one kept its own `closed_at`): notify, in the
        // same transaction.
        if record
            .as_ref()
            .is_some_and(|record| record.closed_at == Some(closed_at))
        {
            let notice = crate::webhooks::session_closed(id.as_str(), closed_at);
            self.outbox
                .insert(&mut tx, tenant, id, &at, std::slice::from_ref(&notice))
                .await?;
        }
        tx.commit().await?;
        self.outbox.wake_if_written();
        Ok(record)
    }

    async fn append(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        mut batch: AppendBatch,
    ) -> StoreResult<AppendResult> {
        super::storable::append_batch(&mut batch);
        self.appends
            .append(tenant.clone(), session.clone(), batch)
            .await
    }

    async fn list_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, kind, payload, run_id, created_at FROM events \
             WHERE session_id = ? AND tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn list_run_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
        kinds: &[&str],
    ) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, kind, payload, run_id, created_at FROM events \
             WHERE session_id = ? AND tenant_id = ? AND run_id = ? \
                 AND kind IN (SELECT value FROM json_each(?)) ORDER BY seq",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(run.as_str())
        .bind(serde_json::to_string(kinds).unwrap_or_else(|_| "[]".into()))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn list_session_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        kinds: &[&str],
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, kind, payload, run_id, created_at FROM events \
             WHERE session_id = ? AND tenant_id = ? AND seq > ? \
                 AND kind IN (SELECT value FROM json_each(?)) ORDER BY seq LIMIT ?",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after)
        .bind(serde_json::to_string(kinds).unwrap_or_else(|_| "[]".into()))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let rows = sqlx::query(
            "SELECT seq, role, content, run_id, compaction_boundary, created_at FROM messages \
             WHERE session_id = ? AND tenant_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let role: String = row.try_get("role")?;
                Ok(MessageRecord {
                    seq: row.try_get("seq")?,
                    role: parse_role(&role)?,
                    content: parse_json::<Vec<ContentBlock>>(
                        &row.try_get::<String, _>("content")?,
                    )?,
                    run_id: row.try_get("run_id")?,
                    compaction_boundary: row.try_get("compaction_boundary")?,
                    created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
                })
            })
            .collect()
    }

    async fn get_output(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &OutputId,
    ) -> StoreResult<Option<OutputRecord>> {
        let row = sqlx::query(
            "SELECT id, session_id, tool_use_id, tool_name, sha256, size_bytes, content, created_at \
             FROM outputs WHERE id = ? AND session_id = ? AND tenant_id = ?",
        )
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok(OutputRecord {
                id: row.try_get("id")?,
                session_id: row.try_get("session_id")?,
                tool_use_id: row.try_get("tool_use_id")?,
                tool_name: row.try_get("tool_name")?,
                sha256: row.try_get("sha256")?,
                size_bytes: row.try_get("size_bytes")?,
                content: row.try_get("content")?,
                created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
            })
        })
        .transpose()
    }

    async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64> {
        let cutoff = now()
            - chrono::Duration::from_std(older_than)
                .map_err(|error| StoreError::Internal(error.to_string()))?;
        let done = sqlx::query("DELETE FROM outputs WHERE created_at < ?")
            .bind(ts(cutoff))
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    async fn list_idle_sessions(
        &self,
        idle_before: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<IdleSession>> {
        let rows = sqlx::query(
            "SELECT id, tenant_id FROM sessions WHERE status = 'active' AND updated_at < ? \
             ORDER BY updated_at LIMIT ?",
        )
        .bind(ts(idle_before))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(IdleSession {
                    id: SessionId::from_string(row.try_get::<String, _>("id")?),
                    tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
                })
            })
            .collect()
    }

    async fn count_open_sessions(&self, tenant: &TenantId) -> StoreResult<i64> {
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sessions WHERE tenant_id = ? AND status = 'active'",
        )
        .bind(tenant.as_str())
        .fetch_one(&self.pool)
        .await?;
        Ok(count)
    }

    // --- approvals and grants ---

    async fn create_approval(
        &self,
        tenant: &TenantId,
        mut approval: NewApproval,
        max_pending: u32,
    ) -> StoreResult<ApprovalRecord> {
        super::storable::approval(&mut approval);
        let mut tx = self.writer.begin().await?;
        super::sqlite_limits::admit_approval(&mut tx, tenant, max_pending, now()).await?;
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

    async fn decide_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
        decision: ApprovalDecision,
    ) -> StoreResult<Option<ApprovalRecord>> {
        let at = ts(now());
        let must_be_live = decision.status != ApprovalStatus::Expired;
        let mut tx = self.writer.begin().await?;
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

    async fn get_approval(
        &self,
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
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    async fn list_approvals(
        &self,
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
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(approval_from_row).collect()
    }

    async fn list_grants(
        &self,
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
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let scope: String = row.try_get("scope")?;
                Ok(GrantRecord {
                    id: row.try_get("id")?,
                    session_id: row.try_get("session_id")?,
                    scope: GrantScope::parse(&scope).ok_or_else(|| {
                        StoreError::Internal(format!("unknown grant scope {scope}"))
                    })?,
                    rule: row.try_get("rule")?,
                    created_by: row.try_get("created_by")?,
                    approval_id: row.try_get("approval_id")?,
                    expires_at: parse_opt_ts(row.try_get("expires_at")?)?,
                    created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
                })
            })
            .collect()
    }

    async fn revoke_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE grants SET revoked_at = ? WHERE id = ? AND tenant_id = ? \
                 AND revoked_at IS NULL AND consumed_at IS NULL",
        )
        .bind(ts(now()))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn consume_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        let done = sqlx::query(
            "UPDATE grants SET consumed_at = ? WHERE id = ? AND tenant_id = ? AND scope = 'once' \
                 AND revoked_at IS NULL AND consumed_at IS NULL",
        )
        .bind(ts(now()))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    // --- runs ---

    async fn create_run_keyed(
        &self,
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
        let mut tx = self.writer.begin().await?;
        if let Some(key) = key {
            super::idempotency::sqlite::insert(&mut tx, tenant, key, run.id.as_str(), created_at)
                .await?;
        }
        if claim.is_some() {
            super::sqlite_limits::admit_running(&mut tx, tenant, caps, None, created_at).await?;
        } else {
            super::sqlite_limits::admit_queued(&mut tx, tenant, &run.session, caps).await?;
        }
        let row = sqlx::query(&format!(
            "INSERT INTO runs (id, session_id, tenant_id, prompt, status, owner, lease_expires_at, \
                 fence, created_at, started_at) \
             SELECT ?, id, tenant_id, ?, ?, ?, ?, ?, ?, ? FROM sessions \
                 WHERE id = ? AND tenant_id = ? \
             RETURNING {RUN_COLUMNS}"
        ))
        .bind(run.id.as_str())
        .bind(&run.prompt)
        .bind(start.status.as_str())
        .bind(start.owner)
        .bind(start.lease_expires_at.map(ts))
        .bind(start.fence)
        .bind(ts(created_at))
        .bind(start.started_at.map(ts))
        .bind(run.session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
        let record = run_from_row(&row)?;
        tx.commit().await?;
        Ok(record)
    }

    async fn request_cancel(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
    ) -> StoreResult<bool> {
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query(
            "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, ?) \
             WHERE id = ? AND session_id = ? AND tenant_id = ? AND status = 'running'",
        )
        .bind(ts(now()))
        .bind(run.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn requested_cancels(&self, owner: &str) -> StoreResult<Vec<(SessionId, RunId)>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT session_id, id FROM runs WHERE owner = ? AND status = 'running' \
                 AND cancel_requested_at IS NOT NULL",
        )
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(session, run)| (SessionId::from_string(session), RunId::from_string(run)))
            .collect())
    }

    async fn last_event_seqs(&self, sessions: &[SessionId]) -> StoreResult<Vec<(SessionId, i64)>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = sessions.iter().map(SessionId::as_str).collect();
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT id, last_event_seq FROM sessions WHERE id IN (SELECT value FROM json_each(?))",
        )
        .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, seq)| (SessionId::from_string(id), seq))
            .collect())
    }

    async fn idempotency_key(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
    ) -> StoreResult<Option<IdempotencyRecord>> {
        let row = sqlx::query(
            "SELECT request_sha256, resource_id, status, response, expires_at \
             FROM idempotency_keys WHERE tenant_id = ? AND scope = ? AND key = ? AND expires_at > ?",
        )
        .bind(tenant.as_str())
        .bind(scope)
        .bind(key)
        .bind(ts(now()))
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(super::idempotency::sqlite::record_of)
            .transpose()
    }

    async fn record_idempotent_response(
        &self,
        tenant: &TenantId,
        scope: &str,
        key: &str,
        status: u16,
        body: &serde_json::Value,
    ) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "UPDATE idempotency_keys SET status = ?, response = ? \
             WHERE tenant_id = ? AND scope = ? AND key = ? AND status IS NULL",
        )
        .bind(i64::from(status))
        .bind(body.to_string())
        .bind(tenant.as_str())
        .bind(scope)
        .bind(key)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn purge_idempotency_keys(&self) -> StoreResult<u64> {
        let mut tx = self.writer.begin().await?;
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE expires_at <= ?")
            .bind(ts(now()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    }

    async fn claim_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        owner: &str,
        lease: Duration,
        caps: RunCaps,
    ) -> StoreResult<Option<RunRecord>> {
        let at = now();
        let mut tx = self.writer.begin().await?;
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
        super::sqlite_limits::admit_running(&mut tx, tenant, caps, Some(id), at).await?;
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

    async fn cancel_queued_run(
        &self,
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
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn get_run(
        &self,
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
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn list_runs(
        &self,
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
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn renew_leases(&self, owner: &str, lease: Duration) -> StoreResult<u64> {
        let done = sqlx::query(
            "UPDATE runs SET lease_expires_at = ? WHERE owner = ? AND status = 'running'",
        )
        .bind(ts(now() + lease_span(lease)))
        .bind(owner)
        .execute(&self.writer)
        .await?;
        self.renew_holds(owner, lease).await?;
        Ok(done.rows_affected())
    }

    async fn release_leases(&self, owner: &str) -> StoreResult<Vec<RunRecord>> {
        let rows = sqlx::query(&format!(
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL \
             WHERE owner = ? AND status = 'running' RETURNING {RUN_COLUMNS}"
        ))
        .bind(owner)
        .fetch_all(&self.writer)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn register_replica(&self, name: &str, workspace_storage: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO replicas (name, workspace_storage, heartbeat_at) VALUES (?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET workspace_storage = excluded.workspace_storage, \
             heartbeat_at = excluded.heartbeat_at",
        )
        .bind(name)
        .bind(workspace_storage)
        .bind(ts(now()))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn live_replicas(&self, within: Duration) -> StoreResult<Vec<ReplicaRecord>> {
        let rows = sqlx::query(
            "SELECT name, workspace_storage, heartbeat_at FROM replicas \
             WHERE heartbeat_at >= ? ORDER BY name",
        )
        .bind(ts(now() - lease_span(within)))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ReplicaRecord {
                    name: row.try_get("name")?,
                    workspace_storage: row.try_get("workspace_storage")?,
                    heartbeat_at: parse_ts(&row.try_get::<String, _>("heartbeat_at")?)?,
                })
            })
            .collect()
    }

    async fn list_unfinished_runs(&self, limit: u32) -> StoreResult<Vec<UnfinishedRun>> {
        let rows = sqlx::query(
            "SELECT id, session_id, tenant_id, status, owner, lease_expires_at FROM runs \
             WHERE status IN ('queued', 'running') ORDER BY position LIMIT ?",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(unfinished_from_row).collect()
    }

    async fn acquire_hold(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<()> {
        self.acquire_hold_tx(tenant, hold, caps).await
    }

    async fn record_workspace_bytes(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        bytes: u64,
    ) -> StoreResult<()> {
        self.record_workspace_bytes_tx(tenant, session, bytes).await
    }

    async fn workspace_snapshot(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<String>> {
        let head: Option<Option<String>> = sqlx::query_scalar(
            "SELECT workspace_snapshot FROM sessions WHERE id = ? AND tenant_id = ?",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(self.reader())
        .await?;
        Ok(head.flatten())
    }

    async fn workspace_bytes(&self, tenant: &TenantId) -> StoreResult<u64> {
        self.workspace_bytes_tx(tenant).await
    }

    async fn release_hold(&self, tenant: &TenantId, id: &str) -> StoreResult<()> {
        self.release_hold_tx(tenant, id).await
    }

    async fn count_holds(
        &self,
        tenant: &TenantId,
        kind: HoldKind,
        session: Option<&SessionId>,
    ) -> StoreResult<u64> {
        self.count_holds_tx(tenant, kind, session).await
    }

    // --- Noa context state ---

    async fn noa_state(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<NoaStateRecord>> {
        super::sqlite_noa::state(self, tenant, session).await
    }

    async fn commit_noa(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        archives: &[NewNoaArchive],
        state: &serde_json::Value,
        expected: i64,
    ) -> StoreResult<i64> {
        super::sqlite_noa::commit(self, tenant, session, archives, state, expected).await
    }

    async fn list_noa_archives(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<NoaArchiveRecord>> {
        super::sqlite_noa::list(self, tenant, session, after, limit).await
    }

    async fn get_noa_archive(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        ordinal: u32,
    ) -> StoreResult<Option<NoaArchiveRecord>> {
        super::sqlite_noa::get(self, tenant, session, ordinal).await
    }

    // --- tool state (todos, memory, permission mode) ---

    async fn unlock_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        names: &[String],
    ) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        let owned: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")
                .bind(session.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        if owned.is_none() {
            return Err(StoreError::NotFound);
        }
        for name in names {
            sqlx::query(
                "INSERT INTO session_unlocked_tools (session_id, tenant_id, tool_name) \
                 VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(session.as_str())
            .bind(tenant.as_str())
            .bind(name)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn unlocked_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<String>> {
        let names = sqlx::query_scalar(
            "SELECT tool_name FROM session_unlocked_tools WHERE session_id = ? AND tenant_id = ? \
             ORDER BY tool_name",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_all(&self.pool)
        .await?;
        Ok(names)
    }

    async fn get_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<TodoItem>> {
        let row =
            sqlx::query("SELECT items FROM session_todos WHERE session_id = ? AND tenant_id = ?")
                .bind(session.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&self.pool)
                .await?;
        match row {
            Some(row) => parse_json(&row.try_get::<String, _>("items")?),
            None => Ok(Vec::new()),
        }
    }

    async fn put_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        items: &[TodoItem],
    ) -> StoreResult<()> {
        let items = super::storable::todos(items);
        let items: &[TodoItem] = &items;
        let items = serde_json::to_string(items)
            .map_err(|error| StoreError::Internal(error.to_string()))?;
        let done = sqlx::query(
            "INSERT INTO session_todos (session_id, tenant_id, items, updated_at) \
             SELECT id, tenant_id, ?, ? FROM sessions WHERE id = ? AND tenant_id = ? \
             ON CONFLICT (session_id) DO UPDATE SET items = excluded.items, \
                 updated_at = excluded.updated_at",
        )
        .bind(items)
        .bind(ts(now()))
        .bind(session.as_str())
        .bind(tenant.as_str())
        .execute(&self.writer)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    async fn get_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Option<ModeOverride>> {
        let row = sqlx::query(
            "SELECT mode, previous_mode FROM session_modes WHERE session_id = ? AND tenant_id = ?",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| mode_override_from(row.try_get("mode")?, row.try_get("previous_mode")?))
            .transpose()
    }

    async fn set_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        state: ModeOverride,
    ) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO session_modes (session_id, tenant_id, mode, previous_mode, updated_at) \
             SELECT id, tenant_id, ?, ?, ? FROM sessions WHERE id = ? AND tenant_id = ? \
             ON CONFLICT (session_id) DO UPDATE SET mode = excluded.mode, \
                 previous_mode = excluded.previous_mode, updated_at = excluded.updated_at",
        )
        .bind(mode_str(state.mode))
        .bind(state.previous.map(mode_str))
        .bind(ts(now()))
        .bind(session.as_str())
        .bind(tenant.as_str())
        .execute(&self.writer)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    async fn memory_get(&self, tenant: &TenantId, path: &str) -> StoreResult<Option<MemoryNote>> {
        let row = sqlx::query(
            "SELECT path, content, version, created_at, updated_at FROM memory_notes \
             WHERE tenant_id = ? AND path = ?",
        )
        .bind(tenant.as_str())
        .bind(path)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(sqlite_memory_note).transpose()
    }

    async fn memory_list(&self, tenant: &TenantId, prefix: &str) -> StoreResult<Vec<MemoryEntry>> {
        let rows = sqlx::query(
            "SELECT path, size_bytes, version, updated_at FROM memory_notes \
             WHERE tenant_id = ? AND substr(path, 1, length(?)) = ? ORDER BY path",
        )
        .bind(tenant.as_str())
        .bind(prefix)
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(MemoryEntry {
                    path: row.try_get("path")?,
                    size_bytes: row.try_get("size_bytes")?,
                    version: row.try_get("version")?,
                    updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
                })
            })
            .collect()
    }

    async fn memory_put(
        &self,
        tenant: &TenantId,
        path: &str,
        content: &str,
        expect: MemoryExpect,
    ) -> StoreResult<MemoryNote> {
        let content = super::storable::text(content);
        let content: &str = &content;
        let at = ts(now());
        // Explicit transaction: see `create_session`.
        let mut tx = self.writer.begin().await?;
        let row = match expect {
            MemoryExpect::Absent => {
                sqlx::query(
                    "INSERT INTO memory_notes (tenant_id, path, content, size_bytes, version, \
                         created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?) \
                     ON CONFLICT (tenant_id, path) DO NOTHING \
                     RETURNING path, content, version, created_at, updated_at",
                )
                .bind(tenant.as_str())
                .bind(path)
                .bind(content)
                .bind(content.len() as i64)
                .bind(&at)
                .bind(&at)
                .fetch_optional(&mut *tx)
                .await?
            }
            MemoryExpect::Version(version) => {
                sqlx::query(
                    "UPDATE memory_notes SET content = ?, size_bytes = ?, \
                         version = version + 1, updated_at = ? \
                     WHERE tenant_id = ? AND path = ? AND version = ? \
                     RETURNING path, content, version, created_at, updated_at",
                )
                .bind(content)
                .bind(content.len() as i64)
                .bind(&at)
                .bind(tenant.as_str())
                .bind(path)
                .bind(version)
                .fetch_optional(&mut *tx)
                .await?
            }
        };
        tx.commit().await?;
        let row = row.ok_or_else(|| memory_conflict(path, expect))?;
        sqlite_memory_note(&row)
    }

    async fn memory_delete(&self, tenant: &TenantId, path: &str) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM memory_notes WHERE tenant_id = ? AND path = ?")
            .bind(tenant.as_str())
            .bind(path)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn memory_usage(&self, tenant: &TenantId) -> StoreResult<MemoryUsage> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS notes, COALESCE(SUM(size_bytes), 0) AS bytes \
             FROM memory_notes WHERE tenant_id = ?",
        )
        .bind(tenant.as_str())
        .fetch_one(&self.pool)
        .await?;
        Ok(MemoryUsage {
            notes: row.try_get("notes")?,
            bytes: row.try_get("bytes")?,
        })
    }

    async fn create_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
        max: u32,
    ) -> StoreResult<McpServerRecord> {
        super::sqlite_mcp::create(self, tenant, name, config, max).await
    }

    async fn replace_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
    ) -> StoreResult<Option<McpServerRecord>> {
        super::sqlite_mcp::replace(self, tenant, name, config).await
    }

    async fn get_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> StoreResult<Option<McpServerRecord>> {
        super::sqlite_mcp::get(self, tenant, name).await
    }

    async fn list_mcp_servers(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> StoreResult<Vec<McpServerRecord>> {
        super::sqlite_mcp::list(self, tenant, limit).await
    }

    async fn delete_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        super::sqlite_mcp::delete(self, tenant, name).await
    }

    async fn create_skill(
        &self,
        tenant: &TenantId,
        skill: &NewSkill,
        max: u32,
    ) -> StoreResult<SkillRecord> {
        super::sqlite_skills::create(self, tenant, skill, max).await
    }

    async fn get_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SkillRecord>> {
        super::sqlite_skills::get(self, tenant, name).await
    }

    async fn list_skills(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<SkillSummary>> {
        super::sqlite_skills::list(self, tenant, limit).await
    }

    async fn delete_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        super::sqlite_skills::delete(self, tenant, name).await
    }

    async fn usage_totals(
        &self,
        tenant: &TenantId,
        scope: crate::usage::UsageScope<'_>,
    ) -> StoreResult<crate::usage::UsageTotals> {
        super::sqlite_usage::totals(&self.pool, tenant, scope).await
    }

    async fn usage_report(
        &self,
        tenant: &TenantId,
        query: &crate::usage::UsageQuery,
    ) -> StoreResult<Vec<crate::usage::UsageGroup>> {
        super::sqlite_usage::report(&self.pool, tenant, query).await
    }

    async fn create_webhook(
        &self,
        tenant: &TenantId,
        webhook: NewWebhook,
        caps: WebhookCaps,
    ) -> StoreResult<Result<WebhookRecord, WebhookCapReached>> {
        self.create_webhook_tx(tenant, webhook, caps).await
    }

    async fn list_webhooks(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> StoreResult<Vec<WebhookRecord>> {
        self.list_webhooks_tx(tenant, session).await
    }

    async fn get_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<Option<WebhookRecord>> {
        self.get_webhook_tx(tenant, id).await
    }

    async fn delete_webhook(&self, tenant: &TenantId, id: &str) -> StoreResult<bool> {
        self.delete_webhook_tx(tenant, id).await
    }

    async fn list_webhook_deliveries(
        &self,
        tenant: &TenantId,
        webhook: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        self.list_deliveries_tx(tenant, webhook, before, limit)
            .await
    }

    async fn claim_webhook_deliveries(
        &self,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<DueDelivery>> {
        self.claim_deliveries(lease, limit).await
    }

    async fn finish_webhook_attempt(&self, result: &AttemptResult) -> StoreResult<()> {
        self.finish_attempt(result).await
    }

    async fn next_webhook_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        self.next_due().await
    }

    async fn purge_webhook_deliveries(&self, before: DateTime<Utc>) -> StoreResult<u64> {
        self.purge_deliveries(before).await
    }

    fn webhook_wakeup(&self) -> Arc<tokio::sync::Notify> {
        self.outbox.wakeup.clone()
    }

    async fn tenant_budget(
        &self,
        tenant: &TenantId,
    ) -> StoreResult<Option<crate::budgets::Budget>> {
        super::sqlite_budgets::budget(self, tenant).await
    }

    async fn set_tenant_budget(
        &self,
        tenant: &TenantId,
        budget: Option<&crate::budgets::Budget>,
    ) -> StoreResult<()> {
        super::sqlite_budgets::set_budget(self, tenant, budget).await
    }

    async fn tenant_spend(
        &self,
        tenant: &TenantId,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<crate::budgets::TenantSpend> {
        super::sqlite_budgets::spend(self, tenant, at).await
    }
}

fn sqlite_memory_note(row: &SqliteRow) -> StoreResult<MemoryNote> {
    Ok(MemoryNote {
        path: row.try_get("path")?,
        content: row.try_get("content")?,
        version: row.try_get("version")?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&row.try_get::<String, _>("updated_at")?)?,
    })
}

const APPROVAL_COLUMNS: &str = "id, session_id, run_id, tool_use_id, tool_name, input, input_sha256, \
     reason, status, decided_by, decided_at, decision_reason, updated_input, grant_id, expires_at, created_at";

fn approval_from_row(row: &SqliteRow) -> StoreResult<ApprovalRecord> {
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

const RUN_COLUMNS: &str = "id, session_id, tenant_id, prompt, status, owner, lease_expires_at, \
     fence, terminal, created_at, started_at, ended_at";

fn run_from_row(row: &SqliteRow) -> StoreResult<RunRecord> {
    let status: String = row.try_get("status")?;
    Ok(RunRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
        prompt: row.try_get("prompt")?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown run status {status}")))?,
        owner: row.try_get("owner")?,
        lease_expires_at: parse_opt_ts(row.try_get("lease_expires_at")?)?,
        fence: row.try_get("fence")?,
        terminal: row
            .try_get::<Option<String>, _>("terminal")?
            .as_deref()
            .map(parse_json)
            .transpose()?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        started_at: parse_opt_ts(row.try_get("started_at")?)?,
        ended_at: parse_opt_ts(row.try_get("ended_at")?)?,
    })
}

fn unfinished_from_row(row: &SqliteRow) -> StoreResult<UnfinishedRun> {
    let status: String = row.try_get("status")?;
    Ok(UnfinishedRun {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown run status {status}")))?,
        owner: row.try_get("owner")?,
        lease_expires_at: parse_opt_ts(row.try_get("lease_expires_at")?)?,
    })
}

fn event_from_row(row: &SqliteRow) -> StoreResult<EventRecord> {
    Ok(EventRecord {
        seq: row.try_get("seq")?,
        kind: row.try_get("kind")?,
        payload: parse_json::<Value>(&row.try_get::<String, _>("payload")?)?,
        run_id: row.try_get("run_id")?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}
