//! The SQLite group writer: every run's appends (events, history, outputs, usage, the run's
//! end) go through one task that owns the write path and commits the appends of many
//! sessions in ONE transaction (group commit), written synchronously on the connection.
//!
//! SQLite takes one writer at a time. Through sqlx, every statement is a hop to the
//! connection's worker thread and back (two thread wake-ups, a channel message per row), and
//! every connection given back to its pool is pinged (one more hop). The store's hot writes
//! therefore go through [`Writer`]: one `rusqlite` connection kept for the process's life,
//! used synchronously by whichever task holds its lock — no hand-off at all, and its prepared
//! statements stay cached from one write to the next. The other writes (approvals, webhooks,
//! registries…) still use sqlx's one write connection, but only while holding the same lock
//! ([`Writer::sqlx`]), so the two connections never write at once and neither meets
//! `SQLITE_BUSY` from the other.
//!
//! Under load the appends of concurrent runs queue here: the task takes every job waiting (at
//! most [`MAX_GROUP`]) — after yielding to the tasks ready on its worker, again while more
//! keep arriving (at most [`GATHER_YIELDS`] times), so that the writes they are about to
//! submit share the commit — writes them one after the other in one `BEGIN IMMEDIATE`
//! transaction, commits once and answers each job through its oneshot. One job's error is
//! never another job's: a job whose fence check (its first write) fails — a lost lease, a
//! closed session — has written nothing and fails alone; a job that fails after writing part
//! of itself, or a failed commit, rolls the whole group back and every job is written again
//! alone, each in its own transaction. Sequence numbers come from the session row as left by
//! the jobs before it, and results are answered only after the commit.
//!
//! The queue is bounded ([`QUEUE`]): a full queue makes the appending runs wait
//! (back-pressure), it never grows without bound. Reads keep using the read connections.

use super::dialect::now;
use super::postgres::role_str;
use super::sqlite::{parse_ts, ts};
use super::sqlite_webhooks::Outbox;
use super::{AppendBatch, Appended, StorableBatch, StoreError, StoreResult};
use crate::ids::{SessionId, TenantId};
use crate::usage::sql_count;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};
use sqlx::SqlitePool;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard, mpsc, oneshot};

/// Prepared statements the write connection keeps (every statement of the write path fits).
const STATEMENT_CACHE: usize = 128;

/// The database's one writer (see the module doc).
pub(super) struct Writer {
    /// The hot writes' connection; its lock is the right to write.
    db: Mutex<rusqlite::Connection>,
    /// sqlx's write connection (one), used only under `db`'s lock.
    pool: SqlitePool,
}

impl Writer {
    /// Opens the write connection on `path` (already migrated) beside sqlx's `pool`, with the
    /// settings of every store connection (`journal_mode` is the database's own).
    pub(super) fn open(
        path: &Path,
        pool: SqlitePool,
        busy_timeout: Duration,
        autocheckpoint: u32,
    ) -> StoreResult<Self> {
        use rusqlite::OpenFlags;
        let db = rusqlite::Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        db.busy_timeout(busy_timeout)?;
        db.pragma_update(None, "foreign_keys", true)?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.pragma_update(None, "wal_autocheckpoint", autocheckpoint)?;
        db.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Self {
            db: Mutex::new(db),
            pool,
        })
    }

    /// Runs `write` on the write connection, on the caller's thread, once it is this task's
    /// turn.
    pub(super) async fn with<T>(&self, write: impl FnOnce(&rusqlite::Connection) -> T) -> T {
        let db = self.db.lock().await;
        write(&db)
    }

    /// Runs `write` in one `IMMEDIATE` transaction on the write connection (see
    /// [`Writer::with`] and [`in_transaction`]).
    pub(super) async fn transaction<T>(
        &self,
        write: impl FnOnce(&rusqlite::Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.with(|db| in_transaction(db, write)).await
    }

    /// sqlx's write connection, for this task alone until the turn is dropped.
    pub(super) async fn sqlx(&self) -> StoreResult<SqlxTurn<'_>> {
        let turn = self.db.lock().await;
        let conn = self.pool.acquire().await?;
        Ok(SqlxTurn { conn, _turn: turn })
    }
}

/// sqlx's write connection during this task's turn (see [`Writer::sqlx`]).
pub(super) struct SqlxTurn<'a> {
    // Given back to its pool before the turn ends (fields drop in order).
    conn: sqlx::pool::PoolConnection<sqlx::Sqlite>,
    _turn: MutexGuard<'a, rusqlite::Connection>,
}

impl SqlxTurn<'_> {
    /// Opens a transaction on the connection.
    pub(super) async fn begin(&mut self) -> StoreResult<sqlx::Transaction<'_, sqlx::Sqlite>> {
        Ok(sqlx::Connection::begin(&mut *self.conn).await?)
    }
}

impl std::ops::Deref for SqlxTurn<'_> {
    type Target = sqlx::SqliteConnection;

    fn deref(&self) -> &sqlx::SqliteConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for SqlxTurn<'_> {
    fn deref_mut(&mut self) -> &mut sqlx::SqliteConnection {
        &mut self.conn
    }
}

/// Appends waiting for the writer at most; more wait to be queued.
const QUEUE: usize = 1_024;

/// Appends committed together at most.
const MAX_GROUP: usize = 64;

/// How many times the writer yields to let more writes join a group before it commits.
const GATHER_YIELDS: usize = 4;

/// A write the group writer commits with others. It can be attempted more than once (a group
/// that fails is written again job by job) and keeps its answer until the commit.
trait Job: Send {
    /// Writes in the open transaction and keeps the answer; `false` when that answer is an
    /// error.
    fn attempt(&mut self, db: &rusqlite::Connection, outbox: &Outbox) -> bool;
    /// The kept answer becomes `error` (the commit failed).
    fn fail(&mut self, error: StoreError);
    /// Sends the kept answer.
    fn reply(self: Box<Self>);
}

/// A write ([`GroupWriter::write`], [`GroupWriter::append`]) and the answer it keeps.
struct WriteJob<T, F> {
    write: F,
    answer: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for WriteJob<T, F>
where
    T: Send,
    F: FnMut(&rusqlite::Connection, &Outbox) -> StoreResult<T> + Send,
{
    fn attempt(&mut self, db: &rusqlite::Connection, outbox: &Outbox) -> bool {
        let answer = (self.write)(db, outbox);
        let ok = answer.is_ok();
        self.answer = Some(answer);
        ok
    }

    fn fail(&mut self, error: StoreError) {
        self.answer = Some(Err(error));
    }

    fn reply(self: Box<Self>) {
        // What the write holds goes first: an append's batch goes back to its writer whole.
        let WriteJob {
            write,
            answer,
            reply,
        } = *self;
        drop(write);
        let _ = reply.send(answer.unwrap_or_else(|| Err(unanswered())));
    }
}

fn unanswered() -> StoreError {
    StoreError::Internal("a grouped write was never attempted".into())
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the SQLite writer stopped".into())
}

/// The handle of the group writer task (it ends when the handle is dropped).
pub(super) struct GroupWriter {
    jobs: mpsc::Sender<Box<dyn Job>>,
}

impl GroupWriter {
    /// Starts the writer task on the current runtime; it writes through `writer`.
    pub(super) fn start(writer: Arc<Writer>, outbox: Arc<Outbox>) -> Self {
        let (jobs, queue) = mpsc::channel(QUEUE);
        tokio::spawn(run(writer, queue, outbox));
        Self { jobs }
    }

    /// Appends `batch` for `session`, committed with whatever other writes are waiting.
    pub(super) async fn append(
        &self,
        tenant: TenantId,
        session: SessionId,
        batch: StorableBatch,
    ) -> StoreResult<Appended> {
        self.submit(move |db, outbox| append_in(db, outbox, &tenant, &session, &batch))
            .await
    }

    /// Runs `write` in the writer's next transaction, committed with whatever other writes
    /// are waiting; answered after the commit. `write` may run more than once (each time in
    /// a transaction that is then rolled back, but for the last): it must write nothing
    /// before it knows it will succeed, or its failure costs the group a rollback and a
    /// rewrite, job by job.
    pub(super) async fn write<T, F>(&self, mut write: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&rusqlite::Connection) -> StoreResult<T> + Send + 'static,
    {
        self.submit(move |db, _: &Outbox| write(db)).await
    }

    async fn submit<T, F>(&self, write: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnMut(&rusqlite::Connection, &Outbox) -> StoreResult<T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = WriteJob {
            write,
            answer: None,
            reply,
        };
        self.jobs.send(Box::new(job)).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn run(writer: Arc<Writer>, mut queue: mpsc::Receiver<Box<dyn Job>>, outbox: Arc<Outbox>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while queue.recv_many(&mut group, MAX_GROUP).await > 0 {
        // Let the tasks ready on this worker run first: the writes they are about to submit
        // join this commit instead of waiting for the next one. Again while writes keep
        // coming (under load), at most a few times.
        for _ in 0..GATHER_YIELDS {
            if group.len() >= MAX_GROUP {
                break;
            }
            tokio::task::yield_now().await;
            let before = group.len();
            while group.len() < MAX_GROUP {
                match queue.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
            if group.len() == before {
                break;
            }
        }
        let mut jobs = std::mem::take(&mut group);
        writer.with(|db| write_group(db, &outbox, &mut jobs)).await;
        for job in jobs {
            job.reply();
        }
        outbox.wake_if_written();
    }
}

/// Writes `jobs` in one transaction, or each alone when the group could not be committed
/// (or a job failed part-way). Each job keeps its answer.
fn write_group(db: &rusqlite::Connection, outbox: &Outbox, jobs: &mut [Box<dyn Job>]) {
    let failure = match together(db, outbox, jobs) {
        Ok(()) => return,
        Err(failure) => failure,
    };
    if let [job] = jobs {
        // Alone already: a job that failed part-way keeps its own error.
        if let GroupFailure::Store(error) = failure {
            job.fail(error);
        }
        return;
    }
    tracing::debug!(?failure, "group commit failed; writing its jobs alone");
    for job in jobs.iter_mut() {
        if let Err(GroupFailure::Store(error)) = together(db, outbox, std::slice::from_mut(job)) {
            job.fail(error);
        }
    }
}

/// Why a group was not committed.
#[derive(Debug)]
enum GroupFailure {
    /// A job failed after writing part of itself (it keeps its own error).
    PartWritten,
    /// The transaction could not be opened or committed.
    Store(StoreError),
}

/// One transaction over `jobs`; `Err` when it could not be opened or committed, or when a
/// job failed after it had written part of itself (nothing of the group is stored then, and
/// [`write_group`] writes each job alone). A job that fails before writing anything (a lost
/// lease, a closed session, a refused admission: its first statement changes no row) fails
/// alone and the group goes on — no savepoint per job, which would copy every page it
/// touches into a sub-journal.
fn together(
    db: &rusqlite::Connection,
    outbox: &Outbox,
    jobs: &mut [Box<dyn Job>],
) -> Result<(), GroupFailure> {
    let tx = rusqlite::Transaction::new_unchecked(db, rusqlite::TransactionBehavior::Immediate)
        .map_err(|error| GroupFailure::Store(error.into()))?;
    for job in jobs.iter_mut() {
        let before = tx.total_changes();
        if !job.attempt(&tx, outbox) && tx.total_changes() != before {
            return Err(GroupFailure::PartWritten); // `tx` rolls back when dropped
        }
    }
    tx.commit()
        .map_err(|error| GroupFailure::Store(error.into()))
}

/// Runs `write` in one `IMMEDIATE` transaction: committed when it succeeds, rolled back when
/// it (or the commit) fails.
fn in_transaction<T>(
    db: &rusqlite::Connection,
    write: impl FnOnce(&rusqlite::Connection) -> StoreResult<T>,
) -> StoreResult<T> {
    let tx = rusqlite::Transaction::new_unchecked(db, rusqlite::TransactionBehavior::Immediate)?;
    let value = write(&tx)?;
    tx.commit()?;
    Ok(value)
}

/// Whether `session` of `tenant` exists (a write that changed nothing: gone, or fenced off?).
pub(super) fn session_exists(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<bool> {
    Ok(db
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")?
        .exists(params![session.as_str(), tenant.as_str()])?)
}

/// One append inside an open transaction.
pub(super) fn append_in(
    db: &rusqlite::Connection,
    outbox: &Outbox,
    tenant: &TenantId,
    session: &SessionId,
    batch: &StorableBatch,
) -> StoreResult<Appended> {
    let created_at = now();
    let created = ts(created_at);
    let event_count = batch.events.len() as i64;
    let message_count = batch.messages.len() as i64;
    if let (true, Some(id)) = (batch.retry, batch.id.as_deref()) {
        // The first attempt may have committed before its answer was lost.
        let row = db
            .prepare_cached(
                "SELECT last_append_id, last_event_seq, last_message_seq, updated_at \
                 FROM sessions WHERE id = ? AND tenant_id = ?",
            )?
            .query_row(params![session.as_str(), tenant.as_str()], |row| {
                Ok((
                    row.get::<_, Option<String>>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                ))
            })
            .optional()?
            .ok_or(StoreError::NotFound)?;
        let (last_append, last_event, last_message, updated_at) = row;
        if last_append.as_deref() == Some(id) {
            return Ok(Appended {
                first_event: last_event - event_count + 1,
                first_message: last_message - message_count + 1,
                created_at: parse_ts(&updated_at)?,
            });
        }
    }
    // The run's end is written with the fence check; any other append of a leased run checks
    // its fence inside the session's sequence update (one statement, not two).
    let mut fenced_in_update = None;
    if let Some(lease) = &batch.lease {
        match &batch.run_end {
            Some(end) => {
                let held =
                    db.prepare_cached(
                        "UPDATE runs SET status = ?, terminal = ?, ended_at = ?, \
                             lease_expires_at = NULL \
                         WHERE id = ? AND owner = ? AND fence = ? AND status = 'running'",
                    )?
                    .execute(params![
                        end.status.as_str(),
                        end.terminal.to_string(),
                        created,
                        lease.run_id.as_str(),
                        lease.owner,
                        lease.fence,
                    ])? == 1;
                if !held {
                    return Err(StoreError::LeaseLost);
                }
            }
            None => fenced_in_update = Some(lease),
        }
    }
    let sequences = db
        .prepare_cached(concat!(
            "UPDATE sessions SET last_event_seq = last_event_seq + ?1, \
                 last_message_seq = last_message_seq + ?2, updated_at = ?3, last_append_id = ?4, \
                 workspace_snapshot = COALESCE(?5, workspace_snapshot), ",
            super::sessions::active_at_after_append!(sqlite, "?3"),
            " WHERE id = ?6 AND tenant_id = ?7 \
               AND (?8 IS NULL OR EXISTS (SELECT 1 FROM runs WHERE id = ?8 AND owner = ?9 \
                    AND fence = ?10 AND status = 'running')) \
             RETURNING last_event_seq, last_message_seq",
        ))?
        .query_row(
            params![
                event_count,
                message_count,
                created,
                batch.id.as_deref(),
                batch.workspace_snapshot.as_deref(),
                session.as_str(),
                tenant.as_str(),
                fenced_in_update.map(|lease| lease.run_id.as_str()),
                fenced_in_update.map(|lease| lease.owner.as_str()),
                fenced_in_update.map(|lease| lease.fence),
            ],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
        )
        .optional()?;
    let Some((last_event, last_message)) = sequences else {
        // Nothing was written: the session is gone, or the run's lease is another claim's.
        if fenced_in_update.is_none() {
            return Err(StoreError::NotFound);
        }
        return Err(if session_exists(db, tenant, session)? {
            StoreError::LeaseLost
        } else {
            StoreError::NotFound
        });
    };
    let result = Appended {
        first_event: last_event - event_count + 1,
        first_message: last_message - message_count + 1,
        created_at,
    };
    insert_usage(db, tenant, session, batch, created_at, &created)?;
    if let Some(bytes) = batch.workspace_bytes {
        crate::store::limits::sqlite::record_workspace_bytes_in(
            db, tenant, session, bytes, &created,
        )?;
    }
    if !batch.events.is_empty() {
        let mut insert = db.prepare_cached(
            "INSERT INTO events (session_id, seq, tenant_id, kind, payload, run_id, \
                     created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )?;
        let payloads = batch.event_payloads();
        for ((event, payload), seq) in batch.events.iter().zip(payloads).zip(result.first_event..) {
            insert.execute(params![
                session.as_str(),
                seq,
                tenant.as_str(),
                event.kind.as_str(),
                payload,
                event.run_id.as_deref(),
                created,
            ])?;
        }
    }
    let notices = crate::webhooks::notices(
        session.as_str(),
        super::event_views(&batch.events, result.first_event),
        created_at,
    );
    outbox.insert_sync(db, tenant, session, &created, &notices)?;
    if !batch.messages.is_empty() {
        let mut insert = db.prepare_cached(
            "INSERT INTO messages (session_id, seq, tenant_id, role, content, run_id, \
                     compaction_boundary, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )?;
        for (message, seq) in batch.messages.iter().zip(result.first_message..) {
            let content = crate::json_text::json_text(&message.message.content)
                .map_err(|error| StoreError::Internal(error.to_string()))?;
            insert.execute(params![
                session.as_str(),
                seq,
                tenant.as_str(),
                role_str(message.message.role),
                content,
                message.run_id.as_deref(),
                message.compaction_boundary,
                created,
            ])?;
        }
    }
    for output in &batch.outputs {
        db.prepare_cached(
            "INSERT INTO outputs (id, session_id, tenant_id, tool_use_id, tool_name, sha256, \
                 size_bytes, content, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![
            output.id.as_str(),
            session.as_str(),
            tenant.as_str(),
            output.tool_use_id,
            output.tool_name,
            output.sha256,
            output.content.len() as i64,
            output.content,
            created,
        ])?;
    }
    Ok(result)
}

/// The usage ledger rows of the batch and the tenant's budget totals they add to, in the
/// append's transaction: the totals always equal the ledger.
fn insert_usage(
    db: &rusqlite::Connection,
    tenant: &TenantId,
    session: &SessionId,
    batch: &AppendBatch,
    at: DateTime<Utc>,
    created: &str,
) -> StoreResult<()> {
    if batch.usage.is_empty() {
        return Ok(());
    }
    let day = at.format("%Y-%m-%d").to_string();
    let mut insert = db.prepare_cached(
        "INSERT INTO usage_records (tenant_id, session_id, run_id, provider, model, \
                 input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_pico, \
                 day, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?;
    for record in &batch.usage {
        insert.execute(params![
            tenant.as_str(),
            session.as_str(),
            record.run_id.as_str(),
            record.provider.as_str(),
            record.model.as_str(),
            sql_count(record.tokens.input_tokens),
            sql_count(record.tokens.output_tokens),
            sql_count(record.tokens.cache_read_tokens),
            sql_count(record.tokens.cache_write_tokens),
            record.cost_pico,
            day,
            created,
        ])?;
    }
    // An integer sum past the largest integer becomes a real in SQLite; MIN brings it back.
    let mut spend = db.prepare_cached(
        "INSERT INTO tenant_spend (tenant_id, period, period_key, tokens, cost_pico) \
             VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (tenant_id, period, period_key) DO UPDATE SET \
             tokens = CAST(MIN(tokens + excluded.tokens, 9223372036854775807) AS INTEGER), \
             cost_pico = CAST(MIN(cost_pico + excluded.cost_pico, 9223372036854775807) AS INTEGER)",
    )?;
    for delta in crate::budgets::spend_deltas(&batch.usage, at) {
        spend.execute(params![
            tenant.as_str(),
            delta.period.as_str(),
            delta.key,
            delta.tokens,
            delta.cost_pico,
        ])?;
    }
    Ok(())
}
