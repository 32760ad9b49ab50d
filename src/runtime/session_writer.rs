//! A session's ordered writer: persist-then-publish with group commit.
//!
//! Transient events (text deltas, tool progress) are buffered and written [`FLUSH_LINGER`]
//! after the oldest of them by the run's own task ([`SessionWriter::lingering`] wraps the run's
//! loop: no flusher task, no wake-up per buffered event); while one write is in flight the
//! next ones accumulate, so a burst of deltas costs one transaction, not one per delta.
//! `write` drains the buffer first, so order is kept.
//! Spilled outputs are written in the transaction that carries the first event pointing at them,
//! and the session's workspace measurement after a mutating call with the next write.

use super::bus::EventBus;
use crate::harness::engine::HostError;
use crate::ids::{SessionId, TenantId};
use crate::run_event::{RunEvent, TerminalReason};
use crate::store::{
    AppendBatch, MessageRecord, NewEvent, NewMessage, NewOutput, RunEnd, RunLease, RunStatus,
    StorableBatch, Store, TRANSIENT_RETRY_WINDOW,
};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// How long buffered events (text deltas, tool progress) wait for more before the run's task
/// writes them ([`SessionWriter::lingering`]): they reach SSE clients at most this much later, and a run's burst of events
/// costs one transaction (or none of its own, when a durable write of the run comes first).
pub const FLUSH_LINGER: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Pending {
    events: Vec<RunEvent>,
    outputs: Vec<NewOutput>,
    /// The session's latest workspace measurement not yet written.
    workspace_bytes: Option<u64>,
    /// When the oldest of what is buffered was pushed (`None`: nothing is): the run's task
    /// writes it [`FLUSH_LINGER`] after that.
    since: Option<tokio::time::Instant>,
    /// Set while [`Lingering`] polls the run's loop: what is pushed meanwhile is seen when
    /// that poll returns, without a wake-up.
    polling: bool,
    /// The task of the [`Lingering`] that writes this buffer, woken when something is pushed
    /// into an empty buffer from elsewhere.
    waker: Option<Waker>,
}

impl Pending {
    /// Adds to the buffer (`add`); the waker to wake when the run's task must learn of it
    /// (the buffer was empty and its loop is not being polled).
    fn buffer(&mut self, add: impl FnOnce(&mut Self)) -> Option<Waker> {
        let was_empty = self.since.is_none();
        add(self);
        self.since.get_or_insert_with(tokio::time::Instant::now);
        if was_empty && !self.polling {
            self.waker.clone()
        } else {
            None
        }
    }
}

/// Writes one session's events and history in order.
pub struct SessionWriter {
    store: Arc<dyn Store>,
    bus: Arc<EventBus>,
    tenant: TenantId,
    session: SessionId,
    /// Set for a run's writer: every write checks the run's lease.
    lease: Option<RunLease>,
    /// Set once the run's end is committed (before it is published).
    ended: Arc<std::sync::atomic::AtomicBool>,
    pending: Mutex<Pending>,
    /// Serialises writes so sequence order equals emit order.
    write_lock: tokio::sync::Mutex<()>,
    /// Set when the last write failed on a transient store error (after its retries).
    store_unavailable: std::sync::atomic::AtomicBool,
    /// Set for a run's writer once its model is known: every `assistant_message` (and
    /// compaction summary) it writes gets a usage ledger row in the same transaction.
    meter: std::sync::OnceLock<crate::usage::UsageMeter>,
    /// Set for a run's writer: counts the run's end (status, reason, time since it started
    /// here) and times its store transactions.
    metrics: std::sync::OnceLock<(Arc<crate::metrics::Metrics>, std::time::Instant)>,
}

impl SessionWriter {
    pub fn new(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        tenant: TenantId,
        session: SessionId,
    ) -> Arc<Self> {
        Self::build(store, bus, tenant, session, None)
    }

    /// The writer of one run: writes only while the run's lease is held.
    pub fn for_run(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        tenant: TenantId,
        session: SessionId,
        lease: RunLease,
    ) -> Arc<Self> {
        Self::build(store, bus, tenant, session, Some(lease))
    }

    fn build(
        store: Arc<dyn Store>,
        bus: Arc<EventBus>,
        tenant: TenantId,
        session: SessionId,
        lease: Option<RunLease>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            bus,
            tenant,
            session,
            lease,
            ended: Arc::default(),
            pending: Mutex::new(Pending::default()),
            write_lock: tokio::sync::Mutex::new(()),
            store_unavailable: std::sync::atomic::AtomicBool::new(false),
            meter: std::sync::OnceLock::new(),
            metrics: std::sync::OnceLock::new(),
        })
    }

    /// Counts the run's end in `metrics` when this writer commits it (its duration from
    /// `started`), and times its store transactions (the first call stays).
    pub fn count_run_end(
        &self,
        metrics: Arc<crate::metrics::Metrics>,
        started: std::time::Instant,
    ) {
        let _ = self.metrics.set((metrics, started));
    }

    /// Records the usage of the model calls this (run) writer commits with `meter` (the first
    /// meter set stays).
    pub fn meter_usage(&self, meter: crate::usage::UsageMeter) {
        let _ = self.meter.set(meter);
    }

    /// What the model calls among `events` add to the tenant's spend (as their ledger rows
    /// will), before they are committed.
    pub fn pending_spend(&self, events: &[RunEvent]) -> crate::budgets::Spend {
        crate::budgets::spend_of_records(&self.usage_rows(events))
    }

    /// The usage ledger rows of the model calls among `events`.
    fn usage_rows(&self, events: &[RunEvent]) -> Vec<crate::usage::NewUsageRecord> {
        let (Some(meter), Some(lease)) = (self.meter.get(), &self.lease) else {
            return Vec::new();
        };
        events
            .iter()
            .filter_map(|event| match event {
                RunEvent::AssistantMessage(message) => Some(message.usage),
                RunEvent::Compaction(compaction) => compaction.usage,
                RunEvent::McpSampling(sampling) => Some(sampling.usage),
                _ => None,
            })
            .map(|usage| meter.record(lease.run_id.as_str(), usage.into()))
            .collect()
    }

    pub(super) fn push_event(&self, event: RunEvent) {
        self.buffer(|pending| pending.events.push(event));
    }

    /// Adds to the buffer, waking the run's task when it must learn of it.
    fn buffer(&self, add: impl FnOnce(&mut Pending)) {
        let waker = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .buffer(add);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The session's workspace bytes measured after a mutating call: written with the next
    /// write (the turn's commit, as a rule; the lingering write within [`FLUSH_LINGER`] otherwise),
    /// the latest measurement winning.
    pub(super) fn push_workspace_bytes(&self, bytes: u64) {
        self.buffer(|pending| pending.workspace_bytes = Some(bytes));
    }

    /// Whether a workspace measurement waits for the next write.
    pub(super) fn workspace_bytes_pending(&self) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .workspace_bytes
            .is_some()
    }

    pub(super) fn push_output(&self, output: NewOutput) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .outputs
            .push(output);
    }

    /// Whether the last write failed because the store was unavailable (transient), after
    /// retrying for [`TRANSIENT_RETRY_WINDOW`].
    pub fn store_unavailable(&self) -> bool {
        self.store_unavailable
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Set once this writer committed its run's end.
    pub fn ended(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.ended.clone()
    }

    /// Writes everything pending plus `messages` and `events` in one transaction, then publishes.
    /// For a run's writer, a [`RunEvent::Terminal`] among `events` also ends the run (its
    /// status follows the terminal reason) in the same transaction. Events are stored with the
    /// run's id (none for a session writer).
    pub async fn write(
        &self,
        messages: Vec<NewMessage>,
        events: Vec<RunEvent>,
    ) -> Result<(), HostError> {
        self.write_returning(messages, events).await.map(drop)
    }

    /// [`SessionWriter::write`], answering the history records it stored (with the `seq`s
    /// they were committed under).
    pub async fn write_returning(
        &self,
        messages: Vec<NewMessage>,
        events: Vec<RunEvent>,
    ) -> Result<Vec<MessageRecord>, HostError> {
        let _guard = self.write_lock.lock().await;
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let terminal = self.lease.as_ref().and_then(|_| {
            events.iter().find_map(|e| match e {
                RunEvent::Terminal(reason) => Some(reason.clone()),
                _ => None,
            })
        });
        let run_end = terminal.as_ref().map(run_end_of);
        let run_id = self.lease.as_ref().map(|lease| lease.run_id.to_string());
        let events: Vec<RunEvent> = pending.events.into_iter().chain(events).collect();
        // The newest snapshot a result of this batch carries becomes the head, atomically.
        let workspace_snapshot = events.iter().rev().find_map(|event| match event {
            RunEvent::ToolResult(result) => result.workspace_snapshot.clone(),
            _ => None,
        });
        let usage = self.usage_rows(&events);
        let events: Vec<NewEvent> = events
            .into_iter()
            .map(|event| event.into_row(run_id.clone()))
            .collect();
        let batch = AppendBatch {
            messages,
            events,
            outputs: pending.outputs,
            lease: self.lease.clone(),
            run_end,
            id: Some(uuid::Uuid::new_v4().to_string()),
            retry: false,
            workspace_snapshot,
            usage,
            workspace_bytes: pending.workspace_bytes,
        };
        if batch.events.is_empty()
            && batch.messages.is_empty()
            && batch.outputs.is_empty()
            && batch.workspace_bytes.is_none()
        {
            return Ok(Vec::new());
        }
        let ends_run = batch.run_end.is_some();
        let began = std::time::Instant::now();
        let batch = StorableBatch::new(batch);
        let written = self.append_retrying(&batch).await;
        if let Some((metrics, started)) = self.metrics.get() {
            metrics.store_transaction(crate::metrics::StoreOp::append, began.elapsed());
            if let (Ok(_), Some(terminal)) = (&written, &terminal) {
                metrics.run_ended(terminal, started.elapsed());
            }
        }
        let written = written.map_err(|error| {
            self.store_unavailable
                .store(error.is_transient(), std::sync::atomic::Ordering::SeqCst);
            HostError(error.to_string())
        })?;
        self.store_unavailable
            .store(false, std::sync::atomic::Ordering::SeqCst);
        if ends_run {
            // A client that sees `terminal` may prompt at once: the session is free by then.
            self.ended.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let stored = batch.stored(written);
        self.bus.publish(&self.session, stored.events);
        Ok(stored.messages)
    }

    /// Appends `batch`, retrying a transient store error with backoff for up to
    /// [`TRANSIENT_RETRY_WINDOW`]; a permanent error (or a lost lease) returns at once. A retry
    /// is marked as one: when the first attempt committed but its answer was lost, the store
    /// answers with what it committed instead of storing the batch twice.
    async fn append_retrying(
        &self,
        batch: &StorableBatch,
    ) -> Result<crate::store::Appended, crate::store::StoreError> {
        let mut attempts = 0u32;
        crate::store::retry_transient(TRANSIENT_RETRY_WINDOW, || {
            attempts += 1;
            let attempt = if attempts > 1 {
                batch.retried()
            } else {
                batch.clone()
            };
            self.store
                .append_storable(&self.tenant, &self.session, attempt)
        })
        .await
    }

    /// Runs `work` (a run's loop) on the caller's task, writing what it buffers
    /// [`FLUSH_LINGER`] after the oldest of it unless a durable write takes it first, and
    /// what is left once `work` is done.
    pub async fn lingering<T: Unpin>(self: &Arc<Self>, work: impl Future<Output = T>) -> T {
        self.linger_for(FLUSH_LINGER, work).await
    }

    async fn linger_for<T: Unpin>(
        self: &Arc<Self>,
        linger: Duration,
        work: impl Future<Output = T>,
    ) -> T {
        let output = Lingering {
            writer: self.clone(),
            linger,
            work: std::pin::pin!(work),
            output: None,
            timer: None,
            flush: None,
        }
        .await;
        if let Err(error) = self.write(vec![], vec![]).await {
            tracing::warn!(%error, "event flush failed");
        }
        output
    }

    /// When the oldest buffered event was pushed, if any is.
    fn pending_since(&self) -> Option<tokio::time::Instant> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).since
    }

    /// Marks the run's loop as being polled by the task `waker` wakes.
    fn polling(&self, waker: &Waker) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.polling = true;
        if !pending.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            pending.waker = Some(waker.clone());
        }
    }

    /// Marks the run's loop as polled; answers when the oldest buffered event was pushed.
    fn polled(&self) -> Option<tokio::time::Instant> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.polling = false;
        pending.since
    }
}

impl Pending {
    /// What is buffered, leaving the buffer empty (the task's registration stays).
    fn take(&mut self) -> Self {
        Self {
            events: std::mem::take(&mut self.events),
            outputs: std::mem::take(&mut self.outputs),
            workspace_bytes: self.workspace_bytes.take(),
            since: self.since.take(),
            polling: false,
            waker: None,
        }
    }
}

/// A run's loop (`work`) polled together with the writing of what it buffers: when the
/// oldest buffered event is [`FLUSH_LINGER`] old, a write takes the buffer (polled here too).
/// The timer is armed only while something is buffered and dropped as soon as a durable
/// write of the run takes it, so a run whose turns commit in time never wakes up for it.
struct Lingering<'a, T, F: Future<Output = T>> {
    writer: Arc<SessionWriter>,
    linger: Duration,
    work: Pin<&'a mut F>,
    /// `work`'s output, kept while a write started before it finished is still going on.
    output: Option<T>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    flush: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<T, F: Future<Output = T>> Drop for Lingering<'_, T, F> {
    fn drop(&mut self) {
        // Done with this writer, which may outlive the run (a session's environment keeps
        // it): a later push wakes nobody, and no finished task is kept alive by its waker.
        let mut pending = self
            .writer
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        pending.waker = None;
        pending.polling = false;
    }
}

impl<T: Unpin, F: Future<Output = T>> Future for Lingering<'_, T, F> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let mut since = if this.output.is_none() {
            this.writer.polling(cx.waker());
            let polled = this.work.as_mut().poll(cx);
            let since = this.writer.polled();
            if let Poll::Ready(output) = polled {
                this.output = Some(output);
            }
            since
        } else {
            this.writer.pending_since()
        };
        loop {
            if let Some(flush) = this.flush.as_mut() {
                if flush.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.flush = None;
                since = this.writer.pending_since();
            }
            if let Some(output) = this.output.take() {
                return Poll::Ready(output);
            }
            let Some(since) = since else {
                // Nothing buffered (a durable write took it): no timer left armed.
                this.timer = None;
                return Poll::Pending;
            };
            let due = since + this.linger;
            let fire = tokio::time::Instant::now() >= due || {
                let timer = match this.timer.as_mut() {
                    Some(timer) => {
                        if timer.deadline() != due {
                            timer.as_mut().reset(due);
                        }
                        timer
                    }
                    None => this.timer.insert(Box::pin(tokio::time::sleep_until(due))),
                };
                timer.as_mut().poll(cx).is_ready()
            };
            if !fire {
                return Poll::Pending;
            }
            this.timer = None;
            let writer = this.writer.clone();
            this.flush = Some(Box::pin(async move {
                if let Err(error) = writer.write(vec![], vec![]).await {
                    tracing::warn!(%error, "event flush failed");
                }
            }));
        }
    }
}

/// How a run ends, from its terminal reason.
fn run_end_of(terminal: &TerminalReason) -> RunEnd {
    let status = match terminal {
        TerminalReason::Cancelled => RunStatus::Cancelled,
        TerminalReason::Error { .. } => RunStatus::Failed,
        _ => RunStatus::Completed,
    };
    RunEnd {
        status,
        terminal: serde_json::to_value(terminal).unwrap_or(Value::Null),
    }
}

#[cfg(test)]
#[path = "session_writer_tests.rs"]
mod tests;
