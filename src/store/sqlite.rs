//! The embedded SQLite store (the zero-setup default): the pools, migrations, and the `Store`
//! facade, each method one line delegating to its aggregate (`sessions`, `runs`, `events` …). SQLite has no row-level security, so
//! every tenant-owned query filters on `tenant_id` explicitly. WAL mode with `synchronous =
//! NORMAL` gives group-commit-like throughput; every write transaction starts with a write so
//! it takes the write lock up front.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use chrono::{DateTime, Utc};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;

// What `sqlite_writer` and the aggregates import from here.
pub(super) use super::dialect::sqlite::{parse_ts, ts};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");

/// How long a statement waits for a lock (the writer's, a checkpoint's) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The VFS of every connection to the database: SQLite's `unix-excl`, which takes an exclusive
/// lock on the database file for the whole process once, the first time it is used, and keeps
/// the WAL's index in the process's heap instead of a shared `-shm` mapping, wrapped so that a
/// commit's WAL frames are written in one call (see `sqlite_vfs`). The store is the process's
/// alone (stream holds and the group writer's sequence numbers live in memory), so a second
/// process on the same file is refused (see [`SqliteStore::connect`]) instead of sharing it;
/// connections within the process still take SQLite's locks, but in memory: with the default
/// `unix` VFS every transaction's begin and end were `fcntl` lock calls on the database and
/// `-shm` files, about 54 per run of the end-to-end benchmark.
pub(super) const VFS: &str = super::sqlite_vfs::NAME;

/// WAL pages between checkpoints: a checkpoint copies every page changed since the last one
/// back into the database; at 4,000 pages (16 MiB of WAL) instead of 1,000 the hot pages
/// (session rows, index roots) are copied a quarter as often. The write connection's commits
/// wake the checkpoint thread at this size (`sqlite_checkpoint`); sqlx's connections keep it as
/// their automatic checkpoint, which the thread normally keeps them from reaching.
const AUTOCHECKPOINT_PAGES: u32 = 4_000;

/// Turns off SQLite's memory statistics for this process: with them on (the library's
/// default) every allocation and free inside SQLite takes a process-wide mutex to count
/// itself, about 1.5 % of a run's instructions on the embedded store, and nothing here reads
/// the counts. Takes effect only before SQLite is first used in the process (`norma serve`
/// and `norma migrate` call it first thing); afterwards SQLite refuses the change and this
/// answers `false`.
pub fn disable_memory_statistics() -> bool {
    // SAFETY: `sqlite3_config` takes the option and, for `SQLITE_CONFIG_MEMSTATUS`, one C int.
    // It must not run concurrently with other SQLite calls: it is called from `main` before
    // any thread that uses SQLite exists; once the library is initialised it only answers
    // `SQLITE_MISUSE`.
    let code = unsafe {
        rusqlite::ffi::sqlite3_config(
            rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
            std::os::raw::c_int::from(0u8),
        )
    };
    code == rusqlite::ffi::SQLITE_OK
}

pub struct SqliteStore {
    /// Reads (WAL: they never wait for the writer).
    pub(super) pool: SqlitePool,
    /// The one writer (SQLite takes one at a time; see `sqlite_writer`).
    pub(super) writer: Arc<super::sqlite_writer::Writer>,
    /// The run path's writes (appends, session and run creation, holds), committed together
    /// (see `sqlite_writer`).
    pub(super) group: super::sqlite_writer::GroupWriter,
    /// Which tenants have webhook subscriptions, and the outbox worker's wake-up.
    pub(super) outbox: Arc<webhooks::sqlite::Outbox>,
    /// Point reads run on the caller's thread (see `sqlite_reads`).
    pub(super) reads: super::sqlite_reads::SyncReads,
    /// What this process holds open per tenant (see `limits::local_holds`).
    pub(super) holds: super::limits::local_holds::LocalHolds,
}

impl SqliteStore {
    /// The one writer.
    pub(super) fn writer(&self) -> &super::sqlite_writer::Writer {
        &self.writer
    }

    /// The read pool.
    pub(super) fn reader(&self) -> &SqlitePool {
        &self.pool
    }

    /// The outbox's in-memory state.
    pub(super) fn outbox(&self) -> &webhooks::sqlite::Outbox {
        &self.outbox
    }

    /// Opens (creating it if missing) and migrates the database at `url`. Another process
    /// using the file makes this wait as long as the busy timeout (a restarting predecessor
    /// lets go when it exits), then fail with an error that says so.
    pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Self> {
        super::sqlite_vfs::register().map_err(StoreError::Internal)?;
        let (spill, spill_off) = super::sqlite_vfs::CONNECTION_PRAGMA;
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|error| StoreError::Internal(format!("invalid database url: {error}")))?
            .vfs(VFS)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .pragma(spill, spill_off)
            .pragma("wal_autocheckpoint", AUTOCHECKPOINT_PAGES.to_string());
        let filename = connect.get_filename().to_owned();
        if let Some(parent) = filename.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Internal(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        // The process's lock on the file, taken before anything else opens it and held (by
        // this connection, then by the pools) until the store is dropped.
        let _claim = claim(&filename)?;
        // No ping before every acquire: it is one more hop to the connection's worker thread
        // per statement; a broken connection fails its statement instead (and is dropped).
        // The acquire timeout is an outage detector for a database over the network; a local
        // SQLite file has no outage to detect, only its own queue (a connection being opened
        // while migrations or a checkpoint hold the file), so it waits as long as the busy
        // timeout, like the writer below, instead of failing a request under load.
        let patience = options.acquire_timeout.max(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections)
            .test_before_acquire(false)
            .acquire_timeout(patience)
            .connect_with(connect.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        // SQLite has one writer at a time: writes queue here, in process (`Writer`'s lock),
        // instead of sleeping in SQLite's busy handler while another connection holds it.
        let sqlx_writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            // A queue of writers, not an outage: as patient as SQLite's own busy timeout.
            .acquire_timeout(patience)
            .connect_with(connect)
            .await?;
        let writer = Arc::new(super::sqlite_writer::Writer::open(
            &filename,
            sqlx_writer,
            BUSY_TIMEOUT,
            AUTOCHECKPOINT_PAGES,
        )?);
        let outbox = Arc::new(webhooks::sqlite::Outbox::load(&pool).await?);
        let group = super::sqlite_writer::GroupWriter::start(writer.clone(), outbox.clone());
        Ok(Self {
            pool,
            reads: super::sqlite_reads::SyncReads::new(&filename, BUSY_TIMEOUT, writer.clone()),
            writer,
            group,
            outbox,
            holds: Default::default(),
        })
    }
}

/// A `rusqlite` connection to the database file through [`VFS`] (the file created when missing
/// if `create`), waiting `busy_timeout` for a lock, without cache spills (which the VFS needs);
/// the caller sets its other pragmas.
pub(super) fn open_connection(
    path: &std::path::Path,
    busy_timeout: Duration,
    create: bool,
) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    super::sqlite_vfs::register().map_err(|error| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(error),
        )
    })?;
    let db = rusqlite::Connection::open_with_flags_and_vfs(path, flags, VFS)?;
    db.busy_timeout(busy_timeout)?;
    let (spill, spill_off) = super::sqlite_vfs::CONNECTION_PRAGMA;
    db.pragma_update(None, spill, spill_off)?;
    Ok(db)
}

/// Opens the database file (created if missing) with [`VFS`] and reads from it, which takes the
/// process's exclusive lock; another process holding it is a clear error once the busy
/// timeout has passed.
fn claim(path: &std::path::Path) -> StoreResult<rusqlite::Connection> {
    let in_use = |error: rusqlite::Error| match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            StoreError::Internal(format!(
                "the SQLite database {} is in use by another process: the embedded store is one \
                 process's alone (one server per SQLite file; replicas share a Postgres database)",
                path.display()
            ))
        }
        _ => StoreError::from(error),
    };
    let db = open_connection(path, BUSY_TIMEOUT, true)?;
    db.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))
        .map_err(in_use)?;
    Ok(db)
}

super::facade::store_facade!(SqliteStore, sqlite, {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn webhook_wakeup(&self) -> Arc<tokio::sync::Notify> {
        self.outbox.wakeup.clone()
    }
});
