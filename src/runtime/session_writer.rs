//! A session's ordered writer: persist-then-publish with group commit.
//!
//! Transient events (text deltas, tool progress) are buffered and written by a flusher task;
//! while one write is in flight the next ones accumulate, so a burst of deltas costs one
//! transaction, not one per delta. `write` drains the buffer first, so order is kept.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long buffered events (text deltas, tool progress) wait for more before the flusher
/// writes them: they reach SSE clients at most this much later, and a run's burst of events
/// costs one transaction (or none of its own, when a durable write of the run comes first).
pub const FLUSH_LINGER: Duration = Duration::from_millis(10);

#[derive(Default)]
struct Pending {
    events: Vec<RunEvent>,
    outputs: Vec<NewOutput>,
    /// The session's latest workspace measurement not yet written.
    workspace_bytes: Option<u64>,
    /// When the oldest of what is buffered was pushed (`None`: nothing is): the flusher
    /// writes it [`FLUSH_LINGER`] after that.
    since: Option<tokio::time::Instant>,
}

impl Pending {
    /// Marks the buffer as holding something from now on, unless it already did.
    fn started(&mut self) {
        self.since.get_or_insert_with(tokio::time::Instant::now);
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
    wake: Notify,
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
            wake: Notify::new(),
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
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.events.push(event);
        pending.started();
        drop(pending);
        self.wake.notify_one();
    }

    /// The session's workspace bytes measured after a mutating call: written with the next
    /// write (the turn's commit, as a rule; the flusher's within [`FLUSH_LINGER`] otherwise),
    /// the latest measurement winning.
    pub(super) fn push_workspace_bytes(&self, bytes: u64) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.workspace_bytes = Some(bytes);
        pending.started();
        drop(pending);
        self.wake.notify_one();
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
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
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
        let (stored, payloads) = batch.stored(written);
        self.bus
            .publish_stored(&self.session, stored.events, &payloads);
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

    /// Flushes buffered events until `stop` is cancelled (then flushes once more).
    pub async fn run_flusher(self: Arc<Self>, stop: CancellationToken) {
        self.flush_lingering(stop, FLUSH_LINGER).await;
    }

    async fn flush_lingering(self: Arc<Self>, stop: CancellationToken, linger: Duration) {
        loop {
            tokio::select! {
                () = self.wake.notified() => {}
                () = stop.cancelled() => {
                    let _ = self.write(vec![], vec![]).await;
                    return;
                }
            }
            // Let the emitting task run on for a moment: the events it pushes meanwhile (the
            // rest of a model stream's deltas, a tool's progress) join this transaction, and a
            // durable write of the run (a tool's journal, the turn's commit) takes them with it
            // first, so most lingering flushes find nothing left to write. The linger counts
            // from the oldest event still buffered: when a durable write took the buffer, the
            // events pushed after it get their own full linger (counted from the wake-up, a
            // `model_request` pushed just after a turn's commit was written alone by the
            // flusher before the next model response could take it — one transaction in
            // every other turn).
            while let Some(since) = self.pending_since() {
                let due = since + linger;
                if tokio::time::Instant::now() >= due {
                    if let Err(error) = self.write(vec![], vec![]).await {
                        tracing::warn!(%error, "event flush failed");
                    }
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = stop.cancelled() => {
                        let _ = self.write(vec![], vec![]).await;
                        return;
                    }
                }
            }
        }
    }

    /// When the oldest buffered event was pushed, if any is.
    fn pending_since(&self) -> Option<tokio::time::Instant> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).since
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
mod tests {
    use super::*;
    use crate::run_event::AssistantDelta;
    use crate::store::NewSession;

    fn delta(text: &str) -> RunEvent {
        RunEvent::AssistantDelta(AssistantDelta { text: text.into() })
    }

    /// Events pushed after a durable write took the buffer wait a whole linger of their own,
    /// so the run's next durable write takes them (one transaction), and what nobody takes is
    /// written by the flusher one linger after it was pushed.
    #[tokio::test]
    async fn the_linger_counts_from_the_oldest_buffered_event() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        let store = crate::store::connect(&url, &crate::store::ConnectOptions::default())
            .await
            .unwrap();
        let (tenant, session) = (TenantId::new("acme"), SessionId::generate());
        store
            .create_session(NewSession {
                id: session.clone(),
                tenant: tenant.clone(),
                config: serde_json::json!({}),
            })
            .await
            .unwrap();
        let writer = SessionWriter::new(
            store.clone(),
            Arc::new(EventBus::default()),
            tenant.clone(),
            session.clone(),
        );
        let stop = CancellationToken::new();
        let linger = Duration::from_millis(300);
        let flusher = tokio::spawn(writer.clone().flush_lingering(stop.clone(), linger));
        let started = tokio::time::Instant::now();
        writer.push_event(delta("a"));
        tokio::time::sleep(linger / 2).await;
        writer.write(vec![], vec![delta("w1")]).await.unwrap();
        writer.push_event(delta("b"));
        // Past the first event's linger: the flusher must not have written `b` alone.
        tokio::time::sleep_until(started + linger * 5 / 4).await;
        writer.write(vec![], vec![delta("w2")]).await.unwrap();
        writer.push_event(delta("c"));
        tokio::time::sleep(linger * 2).await;
        let events = store.list_events(&tenant, &session, 0, 100).await.unwrap();
        let texts: Vec<&str> = events
            .iter()
            .map(|e| e.payload["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["a", "w1", "b", "w2", "c"]);
        // One transaction writes one `created_at`.
        let at = |i: usize| events[i].created_at;
        assert_eq!(at(0), at(1), "`a` went with the first write");
        assert_eq!(at(2), at(3), "`b` went with the second write, not alone");
        assert_ne!(at(1), at(2));
        assert_ne!(at(3), at(4), "`c` was written by the flusher");
        stop.cancel();
        flusher.await.unwrap();
    }
}
