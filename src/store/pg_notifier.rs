//! The `events` signals of committed appends, sent after their commit, in batches, by one task
//! on a connection of its own.
//!
//! Postgres serialises the commits of the transactions that sent a `NOTIFY` in a database: a
//! database-wide lock, held until the commit is flushed. When every append sent its own signal
//! in its own statement, every append of every tenant took turns on that lock across its
//! commit's WAL flush (at 16 runs in flight, appends were seen waiting on it). Now an append
//! queues its signal once it has committed, and this task sends all that is queued in one
//! statement, on a connection whose commits are not waited for (`synchronous_commit = off`:
//! a signal needs no durability), so the lock is taken once per batch and held for
//! microseconds, and no append waits for another's signal.
//!
//! Signals stay advisory (see `runtime::reconcile`): a full queue ([`QUEUE`] signals) drops the
//! new one and a failed send loses its batch — the replicas catch up from the store. The task
//! ends when the store is dropped.
//!
//! While no other replica shares the store (the runtime reads the replica registry at start-up
//! and on every lease heartbeat, and a replica that starts signals it at once — see
//! `runtime::replicas`), nobody would hear these signals: none is sent
//! ([`Notifier::set_others`]). A replica that joins meanwhile catches up from the store on its
//! next reconcile until the first replica has heard of it.

use crate::store::dialect::postgres::SIGNAL_CHANNEL;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::mpsc;

/// Bound on the signals waiting to be sent.
const QUEUE: usize = 4096;
/// Bound on the signals one statement sends.
const BATCH: usize = 512;

#[derive(Clone)]
pub(in crate::store) struct Notifier {
    queue: mpsc::Sender<String>,
    /// Whether another replica may be listening (until told otherwise: yes).
    others: Arc<AtomicBool>,
}

impl Notifier {
    /// Starts the sending task (on the current Tokio runtime).
    pub(in crate::store) fn start(options: PgConnectOptions) -> Self {
        let (queue, signals) = mpsc::channel(QUEUE);
        tokio::spawn(send_all(options, signals));
        Self {
            queue,
            others: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Whether another replica shares the store: without one, nothing is sent.
    pub(in crate::store) fn set_others(&self, present: bool) {
        self.others.store(present, Ordering::Relaxed);
    }

    /// Whether signals are sent (another replica may hear them): asked before a signal is
    /// rendered and [`Notifier::send`], so nothing is rendered for nobody.
    pub(in crate::store) fn sending(&self) -> bool {
        self.others.load(Ordering::Relaxed)
    }

    /// Queues a signal (a [`Signal`](crate::store::Signal) as sent) for the other replicas.
    pub(in crate::store) fn send(&self, payload: String) {
        if self.queue.try_send(payload).is_err() {
            tracing::debug!("the signal queue is full; a signal was dropped");
        }
    }
}

async fn send_all(options: PgConnectOptions, mut signals: mpsc::Receiver<String>) {
    let mut conn: Option<PgConnection> = None;
    let mut batch = Vec::with_capacity(BATCH);
    while signals.recv_many(&mut batch, BATCH).await > 0 {
        if conn.is_none() {
            conn = match connect(&options).await {
                Ok(conn) => Some(conn),
                Err(error) => {
                    tracing::debug!(%error, "cannot connect to send signals; dropping a batch");
                    None
                }
            };
        }
        if let Some(open) = conn.as_mut() {
            let sent = sqlx::query("SELECT count(pg_notify($1, p)) FROM UNNEST($2::text[]) AS p")
                .bind(SIGNAL_CHANNEL)
                .bind(&batch)
                .execute(&mut *open)
                .await;
            if let Err(error) = sent {
                tracing::debug!(%error, "sending signals failed; dropping a batch");
                conn = None;
            }
        }
        batch.clear();
    }
}

async fn connect(options: &PgConnectOptions) -> Result<PgConnection, sqlx::Error> {
    let mut conn = PgConnection::connect_with(options).await?;
    conn.execute("SET synchronous_commit = off").await?;
    Ok(conn)
}
