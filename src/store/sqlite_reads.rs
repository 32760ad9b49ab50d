//! Reads on SQLite without a hand-off: the hot bounded reads of a run (a session's record, a
//! tenant's budget row, live grants, a page of events) run synchronously with `rusqlite` on the
//! calling thread — on the writer's connection when it is free, on a read connection when not.
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
//!
//! **The writer's connection first.** A connection's page cache holds only while the database
//! is unchanged: in WAL mode, a read that begins after any commit of another connection drops
//! its whole cache and reads every page it needs again (a system call per page, from the WAL
//! or the file). A run commits several times, so each of its reads on a read connection paid
//! two to four page reads. The writer's connection made those commits and keeps its cache, so
//! a read takes it when nothing holds it at that moment ([`Writer::try_idle`]: never waiting
//! for a write), and falls back to a read connection otherwise (under load, the group writer
//! holds it most of the time). Between two writes the connection is in no transaction, and a
//! read there sees every commit, as on any other connection.

use super::StoreResult;
use super::sqlite_writer::Writer;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Idle read connections kept at most.
const KEEP: usize = 4;

pub(super) struct SyncReads {
    /// The database file (the store's pools are separate connections, so it is always a file).
    path: PathBuf,
    busy_timeout: Duration,
    idle: Mutex<Vec<rusqlite::Connection>>,
    /// The writer, whose connection a read takes when it is free.
    writer: Arc<Writer>,
}

impl SyncReads {
    pub(super) fn new(path: &Path, busy_timeout: Duration, writer: Arc<Writer>) -> Self {
        Self {
            path: path.to_owned(),
            busy_timeout,
            idle: Mutex::new(Vec::new()),
            writer,
        }
    }

    /// Runs `read` on the writer's connection if it is free, else on an idle read connection
    /// (opened when none is). `read` only reads.
    pub(super) fn read<T>(
        &self,
        read: impl FnOnce(&rusqlite::Connection) -> StoreResult<T>,
    ) -> StoreResult<T> {
        if let Some(db) = self.writer.try_idle() {
            return read(&db);
        }
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

#[cfg(test)]
#[path = "sqlite_reads_tests.rs"]
mod tests;
