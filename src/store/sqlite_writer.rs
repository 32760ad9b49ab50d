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

use super::events::sqlite_append::append_in;
use super::sqlite_webhooks::Outbox;
use super::{Appended, StorableBatch, StoreError, StoreResult};
use crate::ids::{SessionId, TenantId};
use sqlx::SqlitePool;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard, mpsc, oneshot};

/// Prepared statements the write connection keeps (every statement of the write path and of
/// the reads that take the connection when it is free fits).
const STATEMENT_CACHE: usize = 192;

/// The database's one writer (see the module doc).
pub(super) struct Writer {
    /// The hot writes' connection; its lock is the right to write.
    db: Mutex<rusqlite::Connection>,
    /// sqlx's write connection (one), used only under `db`'s lock.
    pool: SqlitePool,
    /// What `db`'s WAL hook points at: dropped after `db` (fields drop in order).
    _checkpointer: Box<super::sqlite_checkpoint::Checkpointer>,
}

impl Writer {
    /// Opens the write connection on `path` (already migrated) beside sqlx's `pool`, with the
    /// settings of every store connection (`journal_mode` is the database's own). Its commits
    /// never checkpoint: once the log holds `checkpoint_pages` pages they wake the store's
    /// checkpoint thread (see `sqlite_checkpoint`).
    pub(super) fn open(
        path: &Path,
        pool: SqlitePool,
        busy_timeout: Duration,
        checkpoint_pages: u32,
    ) -> StoreResult<Self> {
        let db = super::sqlite::open_connection(path, busy_timeout, false)?;
        db.pragma_update(None, "foreign_keys", true)?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        db.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let checkpointer = super::sqlite_checkpoint::Checkpointer::install(
            &db,
            path,
            busy_timeout,
            checkpoint_pages,
        )?;
        Ok(Self {
            db: Mutex::new(db),
            pool,
            _checkpointer: checkpointer,
        })
    }

    /// Runs `write` on the write connection, on the caller's thread, once it is this task's
    /// turn.
    pub(super) async fn with<T>(&self, write: impl FnOnce(&rusqlite::Connection) -> T) -> T {
        let db = self.db.lock().await;
        write(&db)
    }

    /// The write connection, if no task holds it now (for a read: see `sqlite_reads`). Held,
    /// it keeps every write waiting, so a holder only reads, briefly.
    pub(super) fn try_idle(&self) -> Option<MutexGuard<'_, rusqlite::Connection>> {
        self.db.try_lock().ok()
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
    let tx = Immediate::begin(db).map_err(|error| GroupFailure::Store(error.into()))?;
    for job in jobs.iter_mut() {
        let before = db.total_changes();
        if !job.attempt(db, outbox) && db.total_changes() != before {
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
    let tx = Immediate::begin(db)?;
    let value = write(db)?;
    tx.commit()?;
    Ok(value)
}

/// An `IMMEDIATE` transaction on the write connection, begun and committed through its cached
/// statements (`rusqlite::Transaction` parses `BEGIN` and `COMMIT` anew every time: two
/// statements compiled per commit); rolled back when dropped uncommitted, a failed commit
/// included.
struct Immediate<'a> {
    db: &'a rusqlite::Connection,
    committed: bool,
}

impl<'a> Immediate<'a> {
    fn begin(db: &'a rusqlite::Connection) -> rusqlite::Result<Self> {
        db.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self {
            db,
            committed: false,
        })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.db.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        if !self.committed
            && !self.db.is_autocommit()
            && let Err(error) = self.db.execute_batch("ROLLBACK")
        {
            tracing::warn!(%error, "could not roll back a failed SQLite write");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Immediate;

    fn rows(db: &rusqlite::Connection) -> i64 {
        db.query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    /// Committed, the rows stay; dropped uncommitted — a failed write, a failed commit — the
    /// transaction is rolled back and the connection is out of it, ready for the next one.
    #[test]
    fn a_transaction_commits_or_rolls_back_when_dropped() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            .unwrap();

        let tx = Immediate::begin(&db).unwrap();
        db.execute("INSERT INTO t VALUES (1)", []).unwrap();
        tx.commit().unwrap();
        assert_eq!(rows(&db), 1);
        assert!(db.is_autocommit());

        let tx = Immediate::begin(&db).unwrap();
        db.execute("INSERT INTO t VALUES (2)", []).unwrap();
        assert!(db.execute("INSERT INTO t VALUES (1)", []).is_err());
        drop(tx);
        assert!(db.is_autocommit(), "rolled back");
        assert_eq!(rows(&db), 1);

        // A commit that fails (a deferred foreign key still violated) rolls back too.
        db.execute_batch(
            "CREATE TABLE c (p INTEGER REFERENCES t (x) DEFERRABLE INITIALLY DEFERRED); \
             PRAGMA foreign_keys = ON",
        )
        .unwrap();
        let tx = Immediate::begin(&db).unwrap();
        db.execute("INSERT INTO c VALUES (42)", []).unwrap();
        assert!(tx.commit().is_err());
        assert!(db.is_autocommit(), "rolled back after the failed commit");
        let orphans: i64 = db
            .query_row("SELECT count(*) FROM c", [], |row| row.get(0))
            .unwrap();
        assert_eq!(orphans, 0);
        // And the next transaction begins and commits as usual.
        let tx = Immediate::begin(&db).unwrap();
        db.execute("INSERT INTO t VALUES (3)", []).unwrap();
        tx.commit().unwrap();
        assert_eq!(rows(&db), 2);
    }
}
