//! WAL checkpoints off the write path.
//!
//! SQLite appends every commit to the write-ahead log; a checkpoint copies the log's pages back
//! into the database file and syncs it, so the log can start over. By default the connection
//! that commits runs the checkpoint inside that commit once the log holds
//! `wal_autocheckpoint` pages: the store's write connection did, on a tokio worker, holding the
//! writer's lock — thousands of pages copied and two `fsync`s while every run's next write
//! waited (on the benchmark, the 1-in-flight e2e p99 of 15–18 ms against a p50 of ~3 ms).
//!
//! Here the write connection's WAL hook (called after each of its commits with the log's size
//! in pages) only wakes a thread of the store's own, which runs a `PASSIVE` checkpoint on its
//! own connection. A passive checkpoint takes no write lock: writers go on appending while it
//! copies, readers keep their snapshots, and whatever it could not copy (frames a reader still
//! needs, frames committed meanwhile) the next one does. The log starts over at the first
//! commit after a checkpoint that copied everything. A checkpoint that fails is logged and
//! tried again at the next wake-up; the log only grows meanwhile, nothing is lost (the pages
//! stay in the log, which every reader consults first).
//!
//! Commits while a checkpoint runs ask for none (a second one right after would copy only what
//! was committed meanwhile, and keep the log from starting over); the first commit past the
//! threshold after it asks again. The thread ends when the writer (its only sender) is
//! dropped.

use super::{StoreError, StoreResult};
use rusqlite::ffi;
use std::ffi::{c_char, c_int, c_void};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// The checkpoint thread's wake-up and what it has done, shared with the write connection's
/// WAL hook (which points at it: see [`Checkpointer::install`]).
pub(super) struct Checkpointer {
    /// The log's size, in pages, from which a commit wakes the thread.
    pages: c_int,
    /// Set from a wake-up until its checkpoint has run: commits meanwhile ask for no other
    /// (what it could not copy, the next commit past `pages` asks for).
    running: Arc<AtomicBool>,
    wake: SyncSender<()>,
    /// Checkpoints the thread has run (read by tests).
    #[cfg(test)]
    done: Arc<AtomicU64>,
}

impl Checkpointer {
    /// Starts the checkpoint thread on its own connection to the database at `path` and sets
    /// the WAL hook of `writer` (which replaces its automatic checkpoints) to wake it once a
    /// commit leaves `pages` pages or more in the log.
    ///
    /// The returned box is what the hook points at: it must outlive `writer` (the writer's
    /// owner drops the connection first).
    pub(super) fn install(
        writer: &rusqlite::Connection,
        path: &Path,
        busy_timeout: Duration,
        pages: u32,
    ) -> StoreResult<Box<Self>> {
        let db = super::sqlite::open_connection(path, busy_timeout, false)?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        let (wake, woken) = sync_channel(1);
        let running = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let (ran, counted) = (running.clone(), done.clone());
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || {
                let checkpoint = || {
                    db.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                        Ok((row.get(1)?, row.get(2)?))
                    })
                };
                checkpoint_when_woken(&woken, &ran, &counted, checkpoint, RETRY_AFTER_FAILURE);
            })
            .map_err(|error| {
                StoreError::Internal(format!("cannot start the checkpoint thread: {error}"))
            })?;
        let this = Box::new(Self {
            pages: c_int::try_from(pages).unwrap_or(c_int::MAX),
            running,
            wake,
            #[cfg(test)]
            done,
        });
        // SAFETY: the handle is the open connection's; the argument is the boxed
        // `Checkpointer`, which the caller keeps alive as long as the connection (see above).
        unsafe {
            ffi::sqlite3_wal_hook(
                writer.handle(),
                Some(after_commit),
                std::ptr::from_ref::<Self>(&this)
                    .cast_mut()
                    .cast::<c_void>(),
            );
        }
        Ok(this)
    }

    /// Checkpoints the thread has finished (copied everything it could), for tests.
    #[cfg(test)]
    pub(super) fn checkpoints(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// The WAL hook: after a commit of the write connection, with the log's size in pages.
extern "C" fn after_commit(
    checkpointer: *mut c_void,
    _db: *mut ffi::sqlite3,
    _schema: *const c_char,
    pages: c_int,
) -> c_int {
    // SAFETY: `install` passed a pointer to a `Checkpointer` that outlives the connection.
    let checkpointer = unsafe { &*checkpointer.cast::<Checkpointer>() };
    if pages >= checkpointer.pages {
        ask(&checkpointer.running, &checkpointer.wake);
    }
    ffi::SQLITE_OK
}

/// Wakes the thread unless a checkpoint (or the pause after a failed one) is under way.
fn ask(running: &AtomicBool, wake: &SyncSender<()>) {
    if !running.swap(true, Ordering::AcqRel) {
        match wake.try_send(()) {
            // Full: a wake-up is already waiting; disconnected: the store is closing.
            Ok(()) | Err(TrySendError::Full(()) | TrySendError::Disconnected(())) => {}
        }
    }
}

/// After a failed checkpoint (a full disk, an I/O error) the thread pauses this long before it
/// can be woken again: one attempt and one log line per second at most, however many commits
/// ask meanwhile.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The thread's loop: one `checkpoint` (a passive one: the log's pages and the pages copied)
/// per wake-up, until the writer is gone; after a failure, a pause of `retry_after`.
fn checkpoint_when_woken(
    woken: &Receiver<()>,
    running: &AtomicBool,
    done: &AtomicU64,
    mut checkpoint: impl FnMut() -> rusqlite::Result<(i64, i64)>,
    retry_after: Duration,
) {
    while woken.recv().is_ok() {
        match checkpoint() {
            Ok((log, copied)) => {
                tracing::debug!(log, copied, "WAL checkpoint");
                done.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                tracing::warn!(%error, ?retry_after, "WAL checkpoint failed; retried after a pause");
                std::thread::sleep(retry_after);
            }
        }
        running.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of ~2 KiB: each commit adds a page or more to the log.
    fn write_rows(db: &rusqlite::Connection, rows: usize) {
        for _ in 0..rows {
            db.execute("INSERT INTO t (body) VALUES (?1)", ["x".repeat(2_000)])
                .unwrap();
        }
    }

    #[test]
    fn commits_wake_the_checkpoint_thread_which_copies_the_log_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let writer =
            super::super::sqlite::open_connection(&path, Duration::from_secs(5), true).unwrap();
        writer.pragma_update(None, "journal_mode", "WAL").unwrap();
        writer
            .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
            .unwrap();
        let checkpointer =
            Checkpointer::install(&writer, &path, Duration::from_secs(5), 40).unwrap();
        let file_size = || std::fs::metadata(&path).unwrap().len();
        let before = file_size();

        // Below the threshold: nothing wakes the thread, the rows stay in the log.
        write_rows(&writer, 10);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(checkpointer.checkpoints(), 0);
        assert_eq!(file_size(), before, "no commit checkpointed by itself");

        // Past it: the thread copies the log into the database file.
        write_rows(&writer, 40);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while checkpointer.checkpoints() == 0 || file_size() <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint: {} done, file {} bytes",
                checkpointer.checkpoints(),
                file_size()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The writer goes on; every row is there.
        write_rows(&writer, 5);
        let count: i64 = writer
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(count, 55);
        drop(writer);
        drop(checkpointer);
    }

    #[test]
    fn a_failed_checkpoint_pauses_the_thread_however_often_commits_ask() {
        let (wake, woken) = sync_channel(1);
        let running = Arc::new(AtomicBool::new(false));
        let attempts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let pause = Duration::from_millis(200);
        let thread = {
            let (running, attempts) = (running.clone(), attempts.clone());
            std::thread::spawn(move || {
                let failing = || {
                    attempts.lock().unwrap().push(std::time::Instant::now());
                    Err(rusqlite::Error::SqliteFailure(
                        ffi::Error::new(ffi::SQLITE_FULL),
                        Some("database or disk is full".into()),
                    ))
                };
                checkpoint_when_woken(&woken, &running, &AtomicU64::new(0), failing, pause);
            })
        };
        // Commits asking all the time, for a little over three pauses.
        let until = std::time::Instant::now() + pause * 3 + pause / 2;
        while std::time::Instant::now() < until {
            ask(&running, &wake);
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(wake);
        thread.join().unwrap();
        let attempts = attempts.lock().unwrap();
        assert!(
            (2..=4).contains(&attempts.len()),
            "{} attempts in 3.5 pauses",
            attempts.len()
        );
        for pair in attempts.windows(2) {
            assert!(pair[1] - pair[0] >= pause, "{:?} apart", pair[1] - pair[0]);
        }
    }
}
