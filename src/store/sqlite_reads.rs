//! Reads on SQLite without a hand-off: the hot bounded reads of a run (a session's record, a
//! tenant's budget row, live grants, a page of events) run synchronously with `rusqlite` on the
//! calling thread.
//!
//! Through sqlx every read is a round trip to its connection's worker thread: the worker is
//! woken, steps the statement, sends the row back over a channel and sleeps again. A profile
//! of the end-to-end benchmark put those wake-ups and task switches at about 14 % of the
//! server's CPU, against 4 % for SQLite's own work on the same threads. A point read costs
//! SQLite microseconds (WAL: readers never wait for the writer), so it is cheaper to run it
//! where the caller is. Connections are opened on first need (`query_only`, the store's busy
//! timeout) and kept idle for the next read, at most [`KEEP`]; concurrency is bounded by the
//! threads that call. Reads here are bounded (a point read, a session's live grants, a page of
//! events of at most its `limit`); a whole history stays on sqlx.

use super::StoreResult;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Idle read connections kept at most.
const KEEP: usize = 4;

pub(super) struct SyncReads {
    /// The database file (the store's pools are separate connections, so it is always a file).
    path: PathBuf,
    busy_timeout: Duration,
    idle: Mutex<Vec<rusqlite::Connection>>,
}

impl SyncReads {
    pub(super) fn new(path: &Path, busy_timeout: Duration) -> Self {
        Self {
            path: path.to_owned(),
            busy_timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `read` on an idle connection (opened when none is).
    pub(super) fn read<T>(
        &self,
        read: impl FnOnce(&rusqlite::Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let db = match idle {
            Some(db) => db,
            None => self.open()?,
        };
        let answer = read(&db);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < KEEP {
            idle.push(db);
        }
        answer
    }

    fn open(&self) -> StoreResult<rusqlite::Connection> {
        let db = super::sqlite::open_connection(&self.path, self.busy_timeout, false)?;
        db.pragma_update(None, "query_only", true)?;
        Ok(db)
    }
}
