//! The SQLite group writer: every run's appends (events, history, outputs, the run's end) go
//! through one task that owns the write path and commits the appends of many sessions in ONE
//! transaction (group commit).
//!
//! SQLite takes one writer at a time, and every statement is a hop to sqlx's worker thread and
//! back; a transaction per append costs a `BEGIN` and a `COMMIT` hop (and the WAL frames of every
//! page it touched) for each run's batch. Under load the appends of concurrent runs queue here
//! instead: the task takes every job waiting (at most [`MAX_GROUP`]), writes them one after the
//! other in one transaction, commits once and answers each job through its oneshot.
//!
//! Each job keeps its own guarantees inside the shared transaction: its fence check is its first
//! write (a job refused with `LeaseLost` wrote nothing, so it does not disturb the others), its
//! sequence numbers come from the session row as left by the jobs before it, and its result is
//! only answered after the commit. Any other failure inside the group (or of the commit) rolls the
//! group back and writes every job of it again alone, in its own transaction, so one job's error
//! is never another job's.
//!
//! The queue is bounded ([`QUEUE`]): a full queue makes the appending runs wait (back-pressure),
//! it never grows without bound. Reads keep using the read pool; the other writes (sessions,
//! runs, approvals…) share the single write connection with this task through the write pool.

use super::postgres::{build_append_result, role_str};
use super::sqlite::{parse_ts, ts};
use super::sqlite_webhooks::Outbox;
use super::{AppendBatch, AppendResult, StoreError, StoreResult};
use crate::ids::{SessionId, TenantId};
use chrono::{DateTime, SubsecRound, Utc};
use sqlx::{Row, SqliteConnection, SqlitePool};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Appends waiting for the writer at most; more wait to be queued.
const QUEUE: usize = 1_024;

/// Appends committed together at most.
const MAX_GROUP: usize = 64;

/// Rows per multi-row `INSERT` (8 columns × 100 stays under SQLite's oldest bound-parameter
/// limit of 999).
const ROWS_PER_INSERT: usize = 100;

struct AppendJob {
    tenant: TenantId,
    session: SessionId,
    batch: AppendBatch,
    reply: oneshot::Sender<StoreResult<AppendResult>>,
}

/// The handle of the group writer task (it ends when the handle is dropped).
pub(super) struct GroupWriter {
    jobs: mpsc::Sender<AppendJob>,
}

impl GroupWriter {
    /// Starts the writer task on the current runtime; it writes through `writer`.
    pub(super) fn start(writer: SqlitePool, outbox: Arc<Outbox>) -> Self {
        let (jobs, queue) = mpsc::channel(QUEUE);
        tokio::spawn(run(writer, queue, outbox));
        Self { jobs }
    }

    /// Appends `batch` (already made storable) for `session`, committed with whatever other
    /// appends are waiting.
    pub(super) async fn append(
        &self,
        tenant: TenantId,
        session: SessionId,
        batch: AppendBatch,
    ) -> StoreResult<AppendResult> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Unavailable("the SQLite writer stopped".into());
        self.jobs
            .send(AppendJob {
                tenant,
                session,
                batch,
                reply,
            })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(pool: SqlitePool, mut queue: mpsc::Receiver<AppendJob>, outbox: Arc<Outbox>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queue.recv_many(&mut group, MAX_GROUP).await > 0 {
        write_group(&pool, &outbox, std::mem::take(&mut group)).await;
        outbox.wake_if_written();
    }
}

/// Writes `jobs` in one transaction, or each alone when the group failed.
async fn write_group(pool: &SqlitePool, outbox: &Outbox, jobs: Vec<AppendJob>) {
    if jobs.len() > 1 {
        match together(pool, outbox, &jobs).await {
            Group::Committed(results) => {
                for (job, result) in jobs.into_iter().zip(results) {
                    let _ = job.reply.send(result);
                }
                return;
            }
            Group::Unavailable(error) => {
                for job in jobs {
                    let _ = job.reply.send(Err(StoreError::Unavailable(error.clone())));
                }
                return;
            }
            Group::Replay => {}
        }
    }
    for job in jobs {
        let result = alone(pool, outbox, &job).await;
        let _ = job.reply.send(result);
    }
}

enum Group {
    /// One answer per job, in order (an answer may be a clean `LeaseLost`).
    Committed(Vec<StoreResult<AppendResult>>),
    /// The transaction could not be opened: every job gets this transient error.
    Unavailable(String),
    /// A job failed after it wrote, or the commit failed: nothing of the group is stored.
    Replay,
}

async fn together(pool: &SqlitePool, outbox: &Outbox, jobs: &[AppendJob]) -> Group {
    let mut tx = match pool.begin().await {
        Ok(tx) => tx,
        Err(error) => {
            return match StoreError::from(error) {
                StoreError::Unavailable(message) => Group::Unavailable(message),
                _ => Group::Replay,
            };
        }
    };
    let mut results = Vec::with_capacity(jobs.len());
    for job in jobs {
        match append_in(&mut tx, outbox, &job.tenant, &job.session, &job.batch).await {
            // Refused at its fence check, its first write: it wrote nothing.
            Err(StoreError::LeaseLost) => results.push(Err(StoreError::LeaseLost)),
            Err(error) => {
                tracing::debug!(%error, session = %job.session, "group append failed; writing its jobs alone");
                return Group::Replay;
            }
            Ok(result) => results.push(Ok(result)),
        }
    }
    match tx.commit().await {
        Ok(()) => Group::Committed(results),
        Err(error) => {
            tracing::debug!(%error, "group commit failed; writing its jobs alone");
            Group::Replay
        }
    }
}

async fn alone(pool: &SqlitePool, outbox: &Outbox, job: &AppendJob) -> StoreResult<AppendResult> {
    let mut tx = pool.begin().await?;
    let result = append_in(&mut tx, outbox, &job.tenant, &job.session, &job.batch).await?;
    tx.commit().await?;
    Ok(result)
}

fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// One append inside an open transaction. Its first write is the fence check, so a
/// `LeaseLost` leaves the transaction as it found it.
async fn append_in(
    conn: &mut SqliteConnection,
    outbox: &Outbox,
    tenant: &TenantId,
    session: &SessionId,
    batch: &AppendBatch,
) -> StoreResult<AppendResult> {
    let created_at = now();
    let created = ts(created_at);
    let event_count = batch.events.len() as i64;
    let message_count = batch.messages.len() as i64;
    if let (true, Some(id)) = (batch.retry, batch.id.as_deref()) {
        // The first attempt may have committed before its answer was lost.
        let row = sqlx::query(
            "SELECT last_append_id, last_event_seq, last_message_seq, updated_at \
             FROM sessions WHERE id = ? AND tenant_id = ?",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?
        .ok_or(StoreError::NotFound)?;
        if row
            .try_get::<Option<String>, _>("last_append_id")?
            .as_deref()
            == Some(id)
        {
            let committed_at = parse_ts(&row.try_get::<String, _>("updated_at")?)?;
            return Ok(build_append_result(
                batch,
                row.try_get::<i64, _>("last_event_seq")? - event_count + 1,
                row.try_get::<i64, _>("last_message_seq")? - message_count + 1,
                committed_at,
            ));
        }
    }
    // The run's end is written with the fence check; any other append of a leased run checks
    // its fence inside the session's sequence update (one statement, not two).
    let mut fenced_in_update = None;
    if let Some(lease) = &batch.lease {
        match &batch.run_end {
            Some(end) => {
                // A write (even a no-op one) takes SQLite's write lock at once, so no claim
                // can slip in between this check and the commit.
                let held = sqlx::query(
                    "UPDATE runs SET status = ?, terminal = ?, ended_at = ?, \
                         lease_expires_at = NULL \
                     WHERE id = ? AND owner = ? AND fence = ? AND status = 'running'",
                )
                .bind(end.status.as_str())
                .bind(end.terminal.to_string())
                .bind(&created)
                .bind(lease.run_id.as_str())
                .bind(&lease.owner)
                .bind(lease.fence)
                .execute(&mut *conn)
                .await?
                .rows_affected()
                    == 1;
                if !held {
                    return Err(StoreError::LeaseLost);
                }
            }
            None => fenced_in_update = Some(lease),
        }
    }
    let row = sqlx::query(
        "UPDATE sessions SET last_event_seq = last_event_seq + ?, \
             last_message_seq = last_message_seq + ?, updated_at = ?, last_append_id = ?, \
             workspace_snapshot = COALESCE(?, workspace_snapshot) \
         WHERE id = ? AND tenant_id = ? \
           AND (? IS NULL OR EXISTS (SELECT 1 FROM runs WHERE id = ? AND owner = ? \
                AND fence = ? AND status = 'running')) \
         RETURNING last_event_seq, last_message_seq",
    )
    .bind(event_count)
    .bind(message_count)
    .bind(&created)
    .bind(batch.id.as_deref())
    .bind(batch.workspace_snapshot.as_deref())
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(fenced_in_update.map(|lease| lease.run_id.as_str()))
    .bind(fenced_in_update.map(|lease| lease.run_id.as_str()))
    .bind(fenced_in_update.map(|lease| lease.owner.as_str()))
    .bind(fenced_in_update.map(|lease| lease.fence))
    .fetch_optional(&mut *conn)
    .await?;
    let row = match row {
        Some(row) => row,
        // Nothing was written: the session is gone, or the run's lease is another claim's.
        None if fenced_in_update.is_some() => {
            let exists = sqlx::query("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")
                .bind(session.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&mut *conn)
                .await?
                .is_some();
            return Err(if exists {
                StoreError::LeaseLost
            } else {
                StoreError::NotFound
            });
        }
        None => return Err(StoreError::NotFound),
    };
    let first_event = row.try_get::<i64, _>("last_event_seq")? - event_count + 1;
    let first_message = row.try_get::<i64, _>("last_message_seq")? - message_count + 1;
    let result = build_append_result(batch, first_event, first_message, created_at);
    super::sqlite_usage::insert(&mut *conn, tenant, session, &batch.usage, created_at).await?;

    // Multi-row inserts: one statement (one hop to SQLite's worker thread) per table and
    // chunk of rows, not one per row.
    let payloads: Vec<String> = batch.events.iter().map(|e| e.payload.to_string()).collect();
    let rows: Vec<_> = batch
        .events
        .iter()
        .zip(&result.events)
        .zip(&payloads)
        .collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO events (session_id, seq, tenant_id, kind, payload, run_id, created_at) ",
        );
        insert.push_values(chunk, |mut row, ((event, record), payload)| {
            row.push_bind(session.as_str())
                .push_bind(record.seq)
                .push_bind(tenant.as_str())
                .push_bind(event.kind.as_str())
                .push_bind(payload.as_str())
                .push_bind(event.run_id.as_deref())
                .push_bind(created.as_str());
        });
        insert.build().execute(&mut *conn).await?;
    }
    let notices = crate::webhooks::notices(
        session.as_str(),
        super::event_views(&batch.events, &result.events),
        created_at,
    );
    outbox
        .insert(&mut *conn, tenant, session, &created, &notices)
        .await?;
    let contents: Vec<String> = batch
        .messages
        .iter()
        .map(|m| serde_json::to_string(&m.message.content))
        .collect::<Result<_, _>>()
        .map_err(|error| StoreError::Internal(error.to_string()))?;
    let rows: Vec<_> = batch
        .messages
        .iter()
        .zip(&result.messages)
        .zip(&contents)
        .collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let mut insert = sqlx::QueryBuilder::<sqlx::Sqlite>::new(
            "INSERT INTO messages (session_id, seq, tenant_id, role, content, run_id, \
                 compaction_boundary, created_at) ",
        );
        insert.push_values(chunk, |mut row, ((message, record), content)| {
            row.push_bind(session.as_str())
                .push_bind(record.seq)
                .push_bind(tenant.as_str())
                .push_bind(role_str(message.message.role))
                .push_bind(content.as_str())
                .push_bind(message.run_id.as_deref())
                .push_bind(message.compaction_boundary)
                .push_bind(created.as_str());
        });
        insert.build().execute(&mut *conn).await?;
    }
    for output in &batch.outputs {
        sqlx::query(
            "INSERT INTO outputs (id, session_id, tenant_id, tool_use_id, tool_name, sha256, \
                 size_bytes, content, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(output.id.as_str())
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(&output.tool_use_id)
        .bind(&output.tool_name)
        .bind(&output.sha256)
        .bind(output.content.len() as i64)
        .bind(&output.content)
        .bind(&created)
        .execute(&mut *conn)
        .await?;
    }
    Ok(result)
}
