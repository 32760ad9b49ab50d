//! The Postgres store. Tenant-scoped work runs in transactions that switch to the `norma_app`
//! role and set `norma.tenant_id`, so row-level security hides every other tenant's rows even
//! from a query that forgets its tenant filter.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use crate::message::{ContentBlock, Role};
use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{PgPool, Postgres, Row, Transaction};
use std::str::FromStr;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// The row-level-security role tenant-scoped transactions run as.
pub const TENANT_ROLE: &str = "norma_app";

#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// Notified after a commit that wrote outbox rows.
    webhook_wakeup: std::sync::Arc<tokio::sync::Notify>,
}

impl PgStore {
    /// Connects lazily (the server starts even while Postgres is down) and migrates when the
    /// database answers.
    pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Self> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Internal(format!("invalid database url: {error}")))?
            .application_name("norma");
        // No ping before every acquire: it is one more round trip to Postgres per
        // transaction; a broken connection fails its statement instead (and is dropped).
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Self {
            pool,
            webhook_wakeup: Default::default(),
        })
    }

    /// Begins a transaction that sees only `tenant`'s rows (row-level security).
    pub async fn tenant_tx(
        &self,
        tenant: &TenantId,
    ) -> StoreResult<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('role', $1, true), set_config('norma.tenant_id', $2, true)")
            .bind(TENANT_ROLE)
            .bind(tenant.as_str())
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// A fresh listening connection on the signal channel.
    async fn listen(&self) -> StoreResult<sqlx::postgres::PgListener> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(SIGNAL_CHANNEL).await?;
        Ok(listener)
    }

    /// The pool, for tests that need to look under the hood.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

fn session_from_row(row: &PgRow) -> StoreResult<SessionRecord> {
    let status: String = row.try_get("status")?;
    Ok(SessionRecord {
        id: SessionId::from_string(row.try_get::<String, _>("id")?),
        tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
        config: row.try_get::<Json<Value>, _>("config")?.0,
        status: SessionStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown session status {status}")))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        closed_at: row.try_get("closed_at")?,
        last_event_seq: row.try_get("last_event_seq")?,
    })
}

const SESSION_COLUMNS: &str = "id, tenant_id, config, status, created_at, updated_at, closed_at, \
     last_event_seq";

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
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
        let mut tx = self.tenant_tx(&session.tenant).await?;
        let created = now();
        if let Some(key) = key {
            super::idempotency::postgres::insert(
                &mut tx,
                &session.tenant,
                key,
                session.id.as_str(),
                created,
            )
            .await?;
        }
        let row = sqlx::query(&format!(
            "INSERT INTO sessions (id, tenant_id, config, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $4) RETURNING {SESSION_COLUMNS}"
        ))
        .bind(session.id.as_str())
        .bind(session.tenant.as_str())
        .bind(Json(&session.config))
        .bind(created)
        .fetch_one(&mut *tx)
        .await?;
        let record = session_from_row(&row)?;
        tx.commit().await?;
        Ok(record)
    }

    async fn get_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 AND tenant_id = $2"
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.as_ref().map(session_from_row).transpose()
    }

    async fn list_sessions(
        &self,
        tenant: &TenantId,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<SessionRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = match cursor {
            Some(cursor) => {
                sqlx::query(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = $1 \
                     AND (created_at, id) < ($2, $3) ORDER BY created_at DESC, id DESC LIMIT $4"
                ))
                .bind(tenant.as_str())
                .bind(cursor.created_at)
                .bind(cursor.id.as_str())
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = $1 \
                     ORDER BY created_at DESC, id DESC LIMIT $2"
                ))
                .bind(tenant.as_str())
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?
            }
        };
        tx.commit().await?;
        rows.iter().map(session_from_row).collect()
    }

    async fn close_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>> {
        let at = now();
        let mut tx = self.tenant_tx(tenant).await?;
        // The close and its `session.closed` outbox rows, in one statement.
        let row = sqlx::query(&super::postgres_webhooks::close_session_sql(
            SESSION_COLUMNS,
        ))
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(at)
        .bind(crate::webhooks::session_closed(id.as_str(), at).body)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        if let Some(row) = &row
            && row.try_get::<i64, _>("notified")? > 0
        {
            self.webhook_wakeup.notify_one();
        }
        row.as_ref().map(session_from_row).transpose()
    }

    async fn append(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        mut batch: AppendBatch,
    ) -> StoreResult<AppendResult> {
        super::storable::append_batch(&mut batch);
        let created_at = now();
        let mut tx = self.tenant_tx(tenant).await?;
        let event_count = batch.events.len() as i64;
        let message_count = batch.messages.len() as i64;
        if let (true, Some(id)) = (batch.retry, batch.id.as_deref()) {
            // The first attempt may have committed before its answer was lost. The row lock
            // waits for that attempt if the server is still finishing it.
            let row = sqlx::query(
                "SELECT last_append_id, last_event_seq, last_message_seq, updated_at \
                 FROM sessions WHERE id = $1 AND tenant_id = $2 FOR UPDATE",
            )
            .bind(session.as_str())
            .bind(tenant.as_str())
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound)?;
            if row
                .try_get::<Option<String>, _>("last_append_id")?
                .as_deref()
                == Some(id)
            {
                return Ok(build_append_result(
                    &batch,
                    row.try_get::<i64, _>("last_event_seq")? - event_count + 1,
                    row.try_get::<i64, _>("last_message_seq")? - message_count + 1,
                    row.try_get("updated_at")?,
                ));
            }
        }
        if let Some(lease) = &batch.lease {
            // The row lock makes a concurrent claim wait for this write, or this write see it.
            let held = match &batch.run_end {
                None => sqlx::query(
                    "SELECT 1 FROM runs WHERE id = $1 AND owner = $2 AND fence = $3 \
                         AND status = 'running' FOR SHARE",
                )
                .bind(lease.run_id.as_str())
                .bind(&lease.owner)
                .bind(lease.fence)
                .fetch_optional(&mut *tx)
                .await?
                .is_some(),
                Some(end) => {
                    sqlx::query(
                        "UPDATE runs SET status = $4, terminal = $5, ended_at = $6, \
                             lease_expires_at = NULL \
                         WHERE id = $1 AND owner = $2 AND fence = $3 AND status = 'running'",
                    )
                    .bind(lease.run_id.as_str())
                    .bind(&lease.owner)
                    .bind(lease.fence)
                    .bind(end.status.as_str())
                    .bind(Json(&end.terminal))
                    .bind(created_at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                        == 1
                }
            };
            if !held {
                return Err(StoreError::LeaseLost);
            }
        }
        let row = sqlx::query(
            "UPDATE sessions SET last_event_seq = last_event_seq + $3, \
                 last_message_seq = last_message_seq + $4, updated_at = $5, last_append_id = $6, \
                 workspace_snapshot = COALESCE($7, workspace_snapshot) \
             WHERE id = $1 AND tenant_id = $2 RETURNING last_event_seq, last_message_seq",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(event_count)
        .bind(message_count)
        .bind(created_at)
        .bind(batch.id.as_deref())
        .bind(batch.workspace_snapshot.as_deref())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound)?;
        let first_event = row.try_get::<i64, _>("last_event_seq")? - event_count + 1;
        let first_message = row.try_get::<i64, _>("last_message_seq")? - message_count + 1;

        let result = build_append_result(&batch, first_event, first_message, created_at);
        super::postgres_usage::insert(&mut tx, tenant, session, &batch.usage, created_at).await?;

        let mut notified = 0;
        if !batch.events.is_empty() {
            let seqs: Vec<i64> = result.events.iter().map(|e| e.seq).collect();
            let kinds: Vec<&str> = batch.events.iter().map(|e| e.kind.as_str()).collect();
            let payloads: Vec<String> =
                batch.events.iter().map(|e| e.payload.to_string()).collect();
            let runs: Vec<Option<&str>> =
                batch.events.iter().map(|e| e.run_id.as_deref()).collect();
            let notices = crate::webhooks::notices(
                session.as_str(),
                super::event_views(&batch.events, &result.events),
                created_at,
            );
            notified = super::postgres_webhooks::insert_events(
                &mut tx, tenant, session, created_at, &seqs, &kinds, &payloads, &runs, &notices,
            )
            .await?;
        }
        if !batch.messages.is_empty() {
            let seqs: Vec<i64> = result.messages.iter().map(|m| m.seq).collect();
            let roles: Vec<&str> = batch
                .messages
                .iter()
                .map(|m| role_str(m.message.role))
                .collect();
            let contents: Vec<String> = batch
                .messages
                .iter()
                .map(|m| serde_json::to_string(&m.message.content))
                .collect::<Result<_, _>>()
                .map_err(|error| StoreError::Internal(error.to_string()))?;
            let runs: Vec<Option<&str>> =
                batch.messages.iter().map(|m| m.run_id.as_deref()).collect();
            let boundaries: Vec<bool> = batch
                .messages
                .iter()
                .map(|m| m.compaction_boundary)
                .collect();
            sqlx::query(
                "INSERT INTO messages (session_id, tenant_id, created_at, seq, role, content, run_id, \
                     compaction_boundary) \
                 SELECT $1, $2, $3, seq, role, content::jsonb, run_id, boundary \
                 FROM UNNEST($4::bigint[], $5::text[], $6::text[], $7::text[], $8::bool[]) \
                     AS t(seq, role, content, run_id, boundary)",
            )
            .bind(session.as_str())
            .bind(tenant.as_str())
            .bind(created_at)
            .bind(&seqs)
            .bind(&roles)
            .bind(&contents)
            .bind(&runs)
            .bind(&boundaries)
            .execute(&mut *tx)
            .await?;
        }
        if let (Some(first), Some(last)) = (result.events.first(), result.events.last()) {
            // Delivered at commit, to every replica listening (cross-replica SSE fan-out).
            notify(
                &mut tx,
                &Signal::Events {
                    tenant: tenant.clone(),
                    session: session.clone(),
                    first: first.seq,
                    last: last.seq,
                },
            )
            .await?;
        }
        for output in &batch.outputs {
            sqlx::query(
                "INSERT INTO outputs (id, session_id, tenant_id, tool_use_id, tool_name, sha256, \
                     size_bytes, content, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(output.id.as_str())
            .bind(session.as_str())
            .bind(tenant.as_str())
            .bind(&output.tool_use_id)
            .bind(&output.tool_name)
            .bind(&output.sha256)
            .bind(output.content.len() as i64)
            .bind(&output.content)
            .bind(created_at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        if notified > 0 {
            self.webhook_wakeup.notify_one();
        }
        Ok(result)
    }

    async fn list_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(
            "SELECT seq, kind, payload, run_id, created_at FROM events \
             WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn list_run_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        run: &RunId,
        kinds: &[&str],
    ) -> StoreResult<Vec<EventRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(
            "SELECT seq, kind, payload, run_id, created_at FROM events \
             WHERE session_id = $1 AND run_id = $2 AND kind = ANY($3) ORDER BY seq",
        )
        .bind(session.as_str())
        .bind(run.as_str())
        .bind(kinds)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
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
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(
            "SELECT seq, kind, payload, run_id, created_at FROM events \
             WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 AND kind = ANY($4) \
             ORDER BY seq LIMIT $5",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after)
        .bind(kinds)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn list_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(
            "SELECT seq, role, content, run_id, compaction_boundary, created_at FROM messages \
             WHERE session_id = $1 AND tenant_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter()
            .map(|row| {
                let role: String = row.try_get("role")?;
                Ok(MessageRecord {
                    seq: row.try_get("seq")?,
                    role: parse_role(&role)?,
                    content: row.try_get::<Json<Vec<ContentBlock>>, _>("content")?.0,
                    run_id: row.try_get("run_id")?,
                    compaction_boundary: row.try_get("compaction_boundary")?,
                    created_at: row.try_get("created_at")?,
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
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(
            "SELECT id, session_id, tool_use_id, tool_name, sha256, size_bytes, content, created_at \
             FROM outputs WHERE id = $1 AND session_id = $2 AND tenant_id = $3",
        )
        .bind(id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.map(|row| {
            Ok(OutputRecord {
                id: row.try_get("id")?,
                session_id: row.try_get("session_id")?,
                tool_use_id: row.try_get("tool_use_id")?,
                tool_name: row.try_get("tool_name")?,
                sha256: row.try_get("sha256")?,
                size_bytes: row.try_get("size_bytes")?,
                content: row.try_get("content")?,
                created_at: row.try_get("created_at")?,
            })
        })
        .transpose()
    }

    async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64> {
        let cutoff = now()
            - chrono::Duration::from_std(older_than)
                .map_err(|error| StoreError::Internal(error.to_string()))?;
        let done = sqlx::query("DELETE FROM outputs WHERE created_at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn list_idle_sessions(
        &self,
        idle_before: DateTime<Utc>,
        limit: u32,
    ) -> StoreResult<Vec<IdleSession>> {
        // Runs as the login role (the schema owner), outside any tenant's row-level security.
        let rows = sqlx::query(
            "SELECT id, tenant_id FROM sessions WHERE status = 'active' AND updated_at < $1 \
             ORDER BY updated_at LIMIT $2",
        )
        .bind(idle_before)
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
        let mut tx = self.tenant_tx(tenant).await?;
        let count: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sessions WHERE tenant_id = $1 AND status = 'active'",
        )
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
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
        let mut tx = self.tenant_tx(tenant).await?;
        super::postgres_limits::admit_approval(&mut tx, tenant, max_pending, now()).await?;
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

    async fn decide_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
        decision: ApprovalDecision,
    ) -> StoreResult<Option<ApprovalRecord>> {
        let at = now();
        let mut tx = self.tenant_tx(tenant).await?;
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

    async fn get_approval(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &ApprovalId,
    ) -> StoreResult<Option<ApprovalRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
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

    async fn list_approvals(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        status: Option<ApprovalStatus>,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
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

    async fn list_grants(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<GrantRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
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
                    scope: GrantScope::parse(&scope).ok_or_else(|| {
                        StoreError::Internal(format!("unknown grant scope {scope}"))
                    })?,
                    rule: row.try_get("rule")?,
                    created_by: row.try_get("created_by")?,
                    approval_id: row.try_get("approval_id")?,
                    expires_at: row.try_get("expires_at")?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    async fn revoke_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        let mut tx = self.tenant_tx(tenant).await?;
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

    async fn consume_grant(&self, tenant: &TenantId, id: &GrantId) -> StoreResult<bool> {
        let mut tx = self.tenant_tx(tenant).await?;
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

    // --- signals between replicas ---

    async fn signals(&self) -> StoreResult<Option<tokio::sync::mpsc::UnboundedReceiver<Signal>>> {
        let mut listener = self.listen().await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                // Signals sent while the connection is down are lost: after reconnecting, the
                // runtime is told (`Reconnected`) and reconciles from the store.
                match listener.try_recv().await {
                    Ok(Some(notification)) => {
                        match serde_json::from_str::<Signal>(notification.payload()) {
                            Ok(Signal::Reconnected) => {}
                            Ok(signal) => {
                                if tx.send(signal).is_err() {
                                    return; // nobody follows the signals any more
                                }
                            }
                            Err(error) => tracing::warn!(%error, "malformed signal"),
                        }
                    }
                    lost => {
                        if let Err(error) = lost {
                            tracing::warn!(%error, "signal listener failed; reconnecting");
                        } else {
                            tracing::warn!("signal listener lost its connection; reconnecting");
                        }
                        let mut pause = std::time::Duration::from_millis(100);
                        listener = loop {
                            if tx.is_closed() {
                                return;
                            }
                            match store.listen().await {
                                Ok(listener) => break listener,
                                Err(error) => {
                                    tracing::debug!(%error, "signal listener cannot reconnect yet");
                                    tokio::time::sleep(pause).await;
                                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                                }
                            }
                        };
                        tracing::info!("signal listener reconnected; reconciling from the store");
                        if tx.send(Signal::Reconnected).is_err() {
                            return;
                        }
                    }
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(Some(rx))
    }

    async fn settled_approvals(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<(String,)> =
            sqlx::query_as("SELECT id FROM approvals WHERE id = ANY($1) AND status <> 'pending'")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    async fn signal(&self, signal: Signal) -> StoreResult<()> {
        let mut conn = self.pool.acquire().await?;
        notify(&mut conn, &signal).await
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
        let mut tx = self.tenant_tx(tenant).await?;
        if let Some(key) = key {
            super::idempotency::postgres::insert(&mut tx, tenant, key, run.id.as_str(), created_at)
                .await?;
        }
        if claim.is_some() {
            super::postgres_limits::admit_running(&mut tx, tenant, caps, None, created_at).await?;
        } else {
            super::postgres_limits::admit_queued(&mut tx, tenant, &run.session, caps).await?;
        }
        let row = sqlx::query(&format!(
            "INSERT INTO runs (id, session_id, tenant_id, prompt, status, owner, lease_expires_at, \
                 fence, created_at, started_at) \
             SELECT $1, id, tenant_id, $4, $5, $6, $7, $8, $9, $10 FROM sessions \
                 WHERE id = $2 AND tenant_id = $3 \
             RETURNING {RUN_COLUMNS}"
        ))
        .bind(run.id.as_str())
        .bind(run.session.as_str())
        .bind(tenant.as_str())
        .bind(&run.prompt)
        .bind(start.status.as_str())
        .bind(start.owner)
        .bind(start.lease_expires_at)
        .bind(start.fence)
        .bind(created_at)
        .bind(start.started_at)
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
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query(
            "UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, $4) \
             WHERE id = $1 AND session_id = $2 AND tenant_id = $3 AND status = 'running'",
        )
        .bind(run.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    async fn requested_cancels(&self, owner: &str) -> StoreResult<Vec<(SessionId, RunId)>> {
        // System-level (login role), like the heartbeat.
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT session_id, id FROM runs WHERE owner = $1 AND status = 'running' \
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
        // System-level (login role): the sessions this replica's SSE subscribers follow.
        let ids: Vec<&str> = sessions.iter().map(SessionId::as_str).collect();
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT id, last_event_seq FROM sessions WHERE id = ANY($1)")
                .bind(&ids)
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
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(
            "SELECT request_sha256, resource_id, status, response, expires_at \
             FROM idempotency_keys \
             WHERE tenant_id = $1 AND scope = $2 AND key = $3 AND expires_at > $4",
        )
        .bind(tenant.as_str())
        .bind(scope)
        .bind(key)
        .bind(now())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.as_ref()
            .map(super::idempotency::postgres::record_of)
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
        let mut tx = self.tenant_tx(tenant).await?;
        sqlx::query(
            "UPDATE idempotency_keys SET status = $4, response = $5 \
             WHERE tenant_id = $1 AND scope = $2 AND key = $3 AND status IS NULL",
        )
        .bind(tenant.as_str())
        .bind(scope)
        .bind(key)
        .bind(i32::from(status))
        .bind(Json(body))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn purge_idempotency_keys(&self) -> StoreResult<u64> {
        // System-level (login role), like the outputs' purge.
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE expires_at <= $1")
            .bind(now())
            .execute(&self.pool)
            .await?;
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
        let mut tx = self.tenant_tx(tenant).await?;
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
        super::postgres_limits::admit_running(&mut tx, tenant, caps, Some(id), at).await?;
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

    async fn cancel_queued_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<bool> {
        let mut tx = self.tenant_tx(tenant).await?;
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

    async fn get_run(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &RunId,
    ) -> StoreResult<Option<RunRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 AND session_id = $2"
        ))
        .bind(id.as_str())
        .bind(session.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.as_ref().map(run_from_row).transpose()
    }

    async fn list_runs(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: Option<&RunId>,
        limit: u32,
    ) -> StoreResult<Vec<RunRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = $1 AND position > COALESCE(\
                 (SELECT position FROM runs WHERE id = $2 AND session_id = $1), 0) \
             ORDER BY position LIMIT $3"
        ))
        .bind(session.as_str())
        .bind(after.map(RunId::as_str))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn renew_leases(&self, owner: &str, lease: Duration) -> StoreResult<u64> {
        // System-level (login role): one statement for every run this replica holds.
        let done = sqlx::query(
            "UPDATE runs SET lease_expires_at = $2 WHERE owner = $1 AND status = 'running'",
        )
        .bind(owner)
        .bind(now() + lease_span(lease))
        .execute(&self.pool)
        .await?;
        self.renew_holds(owner, lease).await?;
        Ok(done.rows_affected())
    }

    async fn release_leases(&self, owner: &str) -> StoreResult<Vec<RunRecord>> {
        // System-level (login role), like the heartbeat.
        let rows = sqlx::query(&format!(
            "UPDATE runs SET owner = NULL, lease_expires_at = NULL \
             WHERE owner = $1 AND status = 'running' RETURNING {RUN_COLUMNS}"
        ))
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn register_replica(&self, name: &str, workspace_storage: &str) -> StoreResult<()> {
        // System-level (login role), like the heartbeat.
        sqlx::query(
            "INSERT INTO replicas (name, workspace_storage, heartbeat_at) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET workspace_storage = excluded.workspace_storage, \
             heartbeat_at = excluded.heartbeat_at",
        )
        .bind(name)
        .bind(workspace_storage)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn live_replicas(&self, within: Duration) -> StoreResult<Vec<ReplicaRecord>> {
        let rows = sqlx::query(
            "SELECT name, workspace_storage, heartbeat_at FROM replicas \
             WHERE heartbeat_at >= $1 ORDER BY name",
        )
        .bind(now() - lease_span(within))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ReplicaRecord {
                    name: row.try_get("name")?,
                    workspace_storage: row.try_get("workspace_storage")?,
                    heartbeat_at: row.try_get("heartbeat_at")?,
                })
            })
            .collect()
    }

    async fn list_unfinished_runs(&self, limit: u32) -> StoreResult<Vec<UnfinishedRun>> {
        let rows = sqlx::query(&format!(
            "SELECT {UNFINISHED_COLUMNS} FROM runs WHERE status IN ('queued', 'running') \
             ORDER BY position LIMIT $1"
        ))
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
        let mut tx = self.tenant_tx(tenant).await?;
        let head: Option<Option<String>> = sqlx::query_scalar(
            "SELECT workspace_snapshot FROM sessions WHERE id = $1 AND tenant_id = $2",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
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
        super::postgres_noa::state(self, tenant, session).await
    }

    async fn commit_noa(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        archives: &[NewNoaArchive],
        state: &serde_json::Value,
        expected: i64,
    ) -> StoreResult<i64> {
        super::postgres_noa::commit(self, tenant, session, archives, state, expected).await
    }

    async fn list_noa_archives(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: u32,
        limit: u32,
    ) -> StoreResult<Vec<NoaArchiveRecord>> {
        super::postgres_noa::list(self, tenant, session, after, limit).await
    }

    async fn get_noa_archive(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        ordinal: u32,
    ) -> StoreResult<Option<NoaArchiveRecord>> {
        super::postgres_noa::get(self, tenant, session, ordinal).await
    }

    // --- tool state (todos, memory, permission mode) ---

    async fn unlock_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        names: &[String],
    ) -> StoreResult<()> {
        let mut tx = self.tenant_tx(tenant).await?;
        let owned: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2")
                .bind(session.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        if owned.is_none() {
            return Err(StoreError::NotFound);
        }
        sqlx::query(
            "INSERT INTO session_unlocked_tools (session_id, tenant_id, tool_name) \
             SELECT $1, $2, name FROM UNNEST($3::text[]) AS t(name) ON CONFLICT DO NOTHING",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(names)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn unlocked_tools(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<String>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let names = sqlx::query_scalar(
            "SELECT tool_name FROM session_unlocked_tools WHERE session_id = $1 ORDER BY tool_name",
        )
        .bind(session.as_str())
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(names)
    }

    async fn get_todos(
        &self,
        tenant: &TenantId,
        session: &SessionId,
    ) -> StoreResult<Vec<TodoItem>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row =
            sqlx::query("SELECT items FROM session_todos WHERE session_id = $1 AND tenant_id = $2")
                .bind(session.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        match row {
            Some(row) => Ok(row.try_get::<Json<Vec<TodoItem>>, _>("items")?.0),
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
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query(
            "INSERT INTO session_todos (session_id, tenant_id, items, updated_at) \
             SELECT id, tenant_id, $3, $4 FROM sessions WHERE id = $1 AND tenant_id = $2 \
             ON CONFLICT (session_id) DO UPDATE SET items = EXCLUDED.items, \
                 updated_at = EXCLUDED.updated_at",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(Json(items))
        .bind(now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
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
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(
            "SELECT mode, previous_mode FROM session_modes \
             WHERE session_id = $1 AND tenant_id = $2",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.map(|row| mode_override_from(row.try_get("mode")?, row.try_get("previous_mode")?))
            .transpose()
    }

    async fn set_mode_override(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        state: ModeOverride,
    ) -> StoreResult<()> {
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query(
            "INSERT INTO session_modes (session_id, tenant_id, mode, previous_mode, updated_at) \
             SELECT id, tenant_id, $3, $4, $5 FROM sessions WHERE id = $1 AND tenant_id = $2 \
             ON CONFLICT (session_id) DO UPDATE SET mode = EXCLUDED.mode, \
                 previous_mode = EXCLUDED.previous_mode, updated_at = EXCLUDED.updated_at",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(mode_str(state.mode))
        .bind(state.previous.map(mode_str))
        .bind(now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    async fn memory_get(&self, tenant: &TenantId, path: &str) -> StoreResult<Option<MemoryNote>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(
            "SELECT path, content, version, created_at, updated_at FROM memory_notes \
             WHERE tenant_id = $1 AND path = $2",
        )
        .bind(tenant.as_str())
        .bind(path)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.as_ref().map(pg_memory_note).transpose()
    }

    async fn memory_list(&self, tenant: &TenantId, prefix: &str) -> StoreResult<Vec<MemoryEntry>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(
            "SELECT path, size_bytes, version, updated_at FROM memory_notes \
             WHERE tenant_id = $1 AND substr(path, 1, length($2)) = $2 ORDER BY path",
        )
        .bind(tenant.as_str())
        .bind(prefix)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter()
            .map(|row| {
                Ok(MemoryEntry {
                    path: row.try_get("path")?,
                    size_bytes: row.try_get("size_bytes")?,
                    version: row.try_get("version")?,
                    updated_at: row.try_get("updated_at")?,
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
        let mut tx = self.tenant_tx(tenant).await?;
        let at = now();
        let row = match expect {
            MemoryExpect::Absent => {
                sqlx::query(
                    "INSERT INTO memory_notes (tenant_id, path, content, size_bytes, version, \
                         created_at, updated_at) VALUES ($1, $2, $3, $4, 1, $5, $5) \
                     ON CONFLICT (tenant_id, path) DO NOTHING \
                     RETURNING path, content, version, created_at, updated_at",
                )
                .bind(tenant.as_str())
                .bind(path)
                .bind(content)
                .bind(content.len() as i64)
                .bind(at)
                .fetch_optional(&mut *tx)
                .await?
            }
            MemoryExpect::Version(version) => {
                sqlx::query(
                    "UPDATE memory_notes SET content = $3, size_bytes = $4, \
                         version = version + 1, updated_at = $5 \
                     WHERE tenant_id = $1 AND path = $2 AND version = $6 \
                     RETURNING path, content, version, created_at, updated_at",
                )
                .bind(tenant.as_str())
                .bind(path)
                .bind(content)
                .bind(content.len() as i64)
                .bind(at)
                .bind(version)
                .fetch_optional(&mut *tx)
                .await?
            }
        };
        tx.commit().await?;
        let row = row.ok_or_else(|| memory_conflict(path, expect))?;
        pg_memory_note(&row)
    }

    async fn memory_delete(&self, tenant: &TenantId, path: &str) -> StoreResult<bool> {
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query("DELETE FROM memory_notes WHERE tenant_id = $1 AND path = $2")
            .bind(tenant.as_str())
            .bind(path)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    async fn memory_usage(&self, tenant: &TenantId) -> StoreResult<MemoryUsage> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(
            "SELECT COUNT(*)::bigint AS notes, COALESCE(SUM(size_bytes), 0)::bigint AS bytes \
             FROM memory_notes WHERE tenant_id = $1",
        )
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
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
        super::postgres_mcp::create(self, tenant, name, config, max).await
    }

    async fn replace_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
        config: &serde_json::Value,
    ) -> StoreResult<Option<McpServerRecord>> {
        super::postgres_mcp::replace(self, tenant, name, config).await
    }

    async fn get_mcp_server(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> StoreResult<Option<McpServerRecord>> {
        super::postgres_mcp::get(self, tenant, name).await
    }

    async fn list_mcp_servers(
        &self,
        tenant: &TenantId,
        limit: u32,
    ) -> StoreResult<Vec<McpServerRecord>> {
        super::postgres_mcp::list(self, tenant, limit).await
    }

    async fn delete_mcp_server(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        super::postgres_mcp::delete(self, tenant, name).await
    }

    async fn create_skill(
        &self,
        tenant: &TenantId,
        skill: &NewSkill,
        max: u32,
    ) -> StoreResult<SkillRecord> {
        super::postgres_skills::create(self, tenant, skill, max).await
    }

    async fn get_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<Option<SkillRecord>> {
        super::postgres_skills::get(self, tenant, name).await
    }

    async fn list_skills(&self, tenant: &TenantId, limit: u32) -> StoreResult<Vec<SkillSummary>> {
        super::postgres_skills::list(self, tenant, limit).await
    }

    async fn delete_skill(&self, tenant: &TenantId, name: &str) -> StoreResult<bool> {
        super::postgres_skills::delete(self, tenant, name).await
    }

    async fn usage_totals(
        &self,
        tenant: &TenantId,
        scope: crate::usage::UsageScope<'_>,
    ) -> StoreResult<crate::usage::UsageTotals> {
        super::postgres_usage::totals(self, tenant, scope).await
    }

    async fn usage_report(
        &self,
        tenant: &TenantId,
        query: &crate::usage::UsageQuery,
    ) -> StoreResult<Vec<crate::usage::UsageGroup>> {
        super::postgres_usage::report(self, tenant, query).await
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

    fn webhook_wakeup(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.webhook_wakeup.clone()
    }

    async fn tenant_budget(
        &self,
        tenant: &TenantId,
    ) -> StoreResult<Option<crate::budgets::Budget>> {
        super::postgres_budgets::budget(self, tenant).await
    }

    async fn set_tenant_budget(
        &self,
        tenant: &TenantId,
        budget: Option<&crate::budgets::Budget>,
    ) -> StoreResult<()> {
        super::postgres_budgets::set_budget(self, tenant, budget).await
    }

    async fn tenant_spend(
        &self,
        tenant: &TenantId,
        at: chrono::DateTime<chrono::Utc>,
    ) -> StoreResult<crate::budgets::TenantSpend> {
        super::postgres_budgets::spend(self, tenant, at).await
    }
}

fn pg_memory_note(row: &PgRow) -> StoreResult<MemoryNote> {
    Ok(MemoryNote {
        path: row.try_get("path")?,
        content: row.try_get("content")?,
        version: row.try_get("version")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

/// The override stored as two mode texts.
pub(super) fn mode_override_from(
    mode: String,
    previous: Option<String>,
) -> StoreResult<ModeOverride> {
    let parse = |text: &str| {
        parse_mode(text)
            .ok_or_else(|| StoreError::Internal(format!("unknown permission mode {text}")))
    };
    Ok(ModeOverride {
        mode: parse(&mode)?,
        previous: previous.as_deref().map(parse).transpose()?,
    })
}

/// The conflict a memory write reports when the note was not in the expected state.
pub(super) fn memory_conflict(path: &str, expect: MemoryExpect) -> StoreError {
    match expect {
        MemoryExpect::Absent => StoreError::Conflict(format!("memory note {path} already exists")),
        MemoryExpect::Version(version) => StoreError::Conflict(format!(
            "memory note {path} is no longer at version {version}"
        )),
    }
}

const APPROVAL_COLUMNS: &str = "id, session_id, run_id, tool_use_id, tool_name, input, input_sha256, \
     reason, status, decided_by, decided_at, decision_reason, updated_input, grant_id, expires_at, created_at";

fn approval_from_row(row: &PgRow) -> StoreResult<ApprovalRecord> {
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

pub(super) fn role_str(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

pub(super) fn parse_role(role: &str) -> StoreResult<Role> {
    match role {
        "user" => Ok(Role::User),
        "assistant" => Ok(Role::Assistant),
        other => Err(StoreError::Internal(format!("unknown role {other}"))),
    }
}

/// The records an append writes, numbered from the first free sequence numbers.
pub(super) fn build_append_result(
    batch: &AppendBatch,
    first_event: i64,
    first_message: i64,
    created_at: DateTime<Utc>,
) -> AppendResult {
    AppendResult {
        events: batch
            .events
            .iter()
            .zip(first_event..)
            .map(|(event, seq)| EventRecord {
                seq,
                kind: event.kind.clone(),
                payload: event.payload.clone(),
                run_id: event.run_id.clone(),
                created_at,
            })
            .collect(),
        messages: batch
            .messages
            .iter()
            .zip(first_message..)
            .map(|(message, seq)| MessageRecord {
                seq,
                role: message.message.role,
                content: message.message.content.clone(),
                run_id: message.run_id.clone(),
                compaction_boundary: message.compaction_boundary,
                created_at,
            })
            .collect(),
    }
}

const RUN_COLUMNS: &str = "id, session_id, tenant_id, prompt, status, owner, lease_expires_at, \
     fence, terminal, created_at, started_at, ended_at";

fn run_from_row(row: &PgRow) -> StoreResult<RunRecord> {
    let status: String = row.try_get("status")?;
    Ok(RunRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
        prompt: row.try_get("prompt")?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown run status {status}")))?,
        owner: row.try_get("owner")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        fence: row.try_get("fence")?,
        terminal: row
            .try_get::<Option<Json<Value>>, _>("terminal")?
            .map(|json| json.0),
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
    })
}

const UNFINISHED_COLUMNS: &str = "id, session_id, tenant_id, status, owner, lease_expires_at";

fn unfinished_from_row(row: &PgRow) -> StoreResult<UnfinishedRun> {
    let status: String = row.try_get("status")?;
    Ok(UnfinishedRun {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Internal(format!("unknown run status {status}")))?,
        owner: row.try_get("owner")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
    })
}

fn event_from_row(row: &PgRow) -> StoreResult<EventRecord> {
    Ok(EventRecord {
        seq: row.try_get("seq")?,
        kind: row.try_get("kind")?,
        payload: row.try_get::<Json<Value>, _>("payload")?.0,
        run_id: row.try_get("run_id")?,
        created_at: row.try_get("created_at")?,
    })
}

/// The LISTEN/NOTIFY channel replicas signal each other on.
const SIGNAL_CHANNEL: &str = "norma_signals";

async fn notify(conn: &mut sqlx::PgConnection, signal: &Signal) -> StoreResult<()> {
    let payload =
        serde_json::to_string(signal).map_err(|error| StoreError::Internal(error.to_string()))?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SIGNAL_CHANNEL)
        .bind(payload)
        .execute(conn)
        .await?;
    Ok(())
}
