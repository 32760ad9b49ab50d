//! Scheduler tests on paused tokio time: every tool sleeps a controlled number of milliseconds
//! (its input's `ms`), so start and finish instants are exact.

use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::time::{Duration, Instant, sleep};
use tokio_stream::wrappers::UnboundedReceiverStream;

fn safe(id: &str, ms: u64) -> PendingCall {
    call(id, true, ms)
}

fn exclusive(id: &str, ms: u64) -> PendingCall {
    call(id, false, ms)
}

fn call(id: &str, concurrency_safe: bool, ms: u64) -> PendingCall {
    PendingCall {
        tool_use_id: id.into(),
        name: if concurrency_safe { "Read" } else { "Write" }.into(),
        input: json!({ "ms": ms }),
        concurrency_safe,
    }
}

/// Observes a batch: start instants, in-flight counts and emitted events (ms since creation).
struct Probe {
    t0: Instant,
    starts: Mutex<Vec<(String, u64)>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    events: Mutex<Vec<(u64, SchedulerEvent)>>,
}

impl Probe {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            t0: Instant::now(),
            starts: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            events: Mutex::new(Vec::new()),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_millis()).unwrap()
    }

    /// The tool: records its start, sleeps `input.ms`, answers `"<id> done"`.
    async fn exec(self: Arc<Self>, call: PendingCall) -> ToolResultBlock {
        self.starts
            .lock()
            .unwrap()
            .push((call.tool_use_id.clone(), self.now_ms()));
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        sleep(Duration::from_millis(call.input["ms"].as_u64().unwrap())).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        ToolResultBlock::ok(&call.tool_use_id, format!("{} done", call.tool_use_id))
    }

    fn starts(&self) -> Vec<(String, u64)> {
        self.starts.lock().unwrap().clone()
    }

    fn start_of(&self, id: &str) -> Option<u64> {
        self.starts()
            .into_iter()
            .find(|(started, _)| started == id)
            .map(|(_, at)| at)
    }

    /// `("start"|"finish", id, ms)` for every event, in emission order.
    fn event_log(&self) -> Vec<(&'static str, String, u64)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|(at, event)| match event {
                SchedulerEvent::Started { tool_use_id } => ("start", tool_use_id.clone(), *at),
                SchedulerEvent::Finished { tool_use_id, .. } => {
                    ("finish", tool_use_id.clone(), *at)
                }
            })
            .collect()
    }

    async fn run_with(
        self: &Arc<Self>,
        scheduler: Scheduler,
        calls: impl Stream<Item = PendingCall> + Send,
        cancel: CancellationToken,
    ) -> Vec<ToolResultBlock> {
        let probe = Arc::clone(self);
        let sink = Arc::clone(self);
        scheduler
            .run(
                calls,
                move |call| Arc::clone(&probe).exec(call),
                move |event| {
                    let at = sink.now_ms();
                    sink.events.lock().unwrap().push((at, event));
                },
                cancel,
            )
            .await
    }

    async fn run(
        self: &Arc<Self>,
        scheduler: Scheduler,
        calls: Vec<PendingCall>,
    ) -> Vec<ToolResultBlock> {
        self.run_with(
            scheduler,
            futures::stream::iter(calls),
            CancellationToken::new(),
        )
        .await
    }
}

fn ids(results: &[ToolResultBlock]) -> Vec<&str> {
    results.iter().map(|r| r.tool_use_id.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn safe_calls_start_together_and_an_exclusive_call_waits_then_runs_alone() {
    let probe = Probe::new();
    let calls = vec![
        safe("a", 100),
        safe("b", 50),
        exclusive("c", 30),
        safe("d", 10),
        safe("e", 10),
    ];

    let results = probe.run(Scheduler::default(), calls).await;

    assert_eq!(
        probe.starts(),
        vec![
            ("a".to_string(), 0),
            ("b".to_string(), 0),
            // c waits for a (the slowest call before it), not just for b.
            ("c".to_string(), 100),
            // d and e wait for c to finish, then run together.
            ("d".to_string(), 130),
            ("e".to_string(), 130),
        ]
    );
    assert_eq!(ids(&results), vec!["a", "b", "c", "d", "e"]);
    assert!(results.iter().all(|r| !r.is_error));
    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_safe_call_behind_an_exclusive_head_does_not_overtake_it() {
    let probe = Probe::new();
    // s runs; x (exclusive) is at the head waiting for s; y is safe and could run now, but
    // must not overtake x.
    let calls = vec![safe("s", 100), exclusive("x", 20), safe("y", 5)];

    probe.run(Scheduler::default(), calls).await;

    assert_eq!(probe.start_of("x"), Some(100));
    assert_eq!(probe.start_of("y"), Some(120));
    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_exclusive_first_call_holds_back_every_later_call() {
    let probe = Probe::new();
    let calls = vec![exclusive("x", 40), safe("y", 5), exclusive("z", 5)];

    probe.run(Scheduler::default(), calls).await;

    assert_eq!(
        probe.starts(),
        vec![
            ("x".to_string(), 0),
            ("y".to_string(), 40),
            ("z".to_string(), 45),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_semaphore_bounds_safe_calls_in_flight_and_is_reached() {
    let probe = Probe::new();
    let calls: Vec<_> = (0..25).map(|i| safe(&format!("c{i}"), 10)).collect();

    let results = probe.run(Scheduler::new(4), calls).await;

    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 4);
    // 25 calls, 4 at a time, 10 ms each: seven waves, the last one starting at 60 ms.
    assert_eq!(probe.start_of("c24"), Some(60));
    assert_eq!(probe.now_ms(), 70);
    assert_eq!(results.len(), 25);
}

#[tokio::test(start_paused = true)]
async fn the_default_bound_is_ten() {
    let probe = Probe::new();
    let calls: Vec<_> = (0..15).map(|i| safe(&format!("c{i}"), 10)).collect();

    probe.run(Scheduler::default(), calls).await;

    assert_eq!(
        Scheduler::default().max_concurrency(),
        DEFAULT_MAX_CONCURRENCY
    );
    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 10);
}

#[tokio::test(start_paused = true)]
async fn a_zero_bound_still_runs_calls_one_at_a_time() {
    let probe = Probe::new();

    let results = probe
        .run(Scheduler::new(0), vec![safe("a", 10), safe("b", 10)])
        .await;

    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(ids(&results), vec!["a", "b"]);
}

#[tokio::test(start_paused = true)]
async fn results_are_in_arrival_order_while_events_follow_completion() {
    let probe = Probe::new();
    let calls = vec![safe("a", 300), safe("b", 100), safe("c", 200)];

    let results = probe.run(Scheduler::default(), calls).await;

    assert_eq!(ids(&results), vec!["a", "b", "c"]);
    assert_eq!(
        results
            .iter()
            .map(|r| r.content.as_str())
            .collect::<Vec<_>>(),
        vec!["a done", "b done", "c done"]
    );
    assert_eq!(
        probe.event_log(),
        vec![
            ("start", "a".to_string(), 0),
            ("start", "b".to_string(), 0),
            ("start", "c".to_string(), 0),
            ("finish", "b".to_string(), 100),
            ("finish", "c".to_string(), 200),
            ("finish", "a".to_string(), 300),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn calls_arriving_while_others_run_are_scheduled_as_they_arrive() {
    let probe = Probe::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    // The model's stream: a at 0, b at 50 (a still running), x (exclusive) at 60, y at 70,
    // then the stream ends at 80.
    tokio::spawn(async move {
        tx.send(safe("a", 100)).unwrap();
        sleep(Duration::from_millis(50)).await;
        tx.send(safe("b", 100)).unwrap();
        sleep(Duration::from_millis(10)).await;
        tx.send(exclusive("x", 10)).unwrap();
        sleep(Duration::from_millis(10)).await;
        tx.send(safe("y", 10)).unwrap();
        sleep(Duration::from_millis(10)).await;
    });

    let results = probe
        .run_with(
            Scheduler::default(),
            UnboundedReceiverStream::new(rx),
            CancellationToken::new(),
        )
        .await;

    assert_eq!(
        probe.starts(),
        vec![
            ("a".to_string(), 0),
            ("b".to_string(), 50),
            ("x".to_string(), 150),
            ("y".to_string(), 160),
        ]
    );
    assert_eq!(ids(&results), vec!["a", "b", "x", "y"]);
}

#[tokio::test(start_paused = true)]
async fn run_waits_for_the_stream_to_end_even_when_every_call_is_done() {
    let probe = Probe::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        tx.send(safe("a", 10)).unwrap();
        sleep(Duration::from_millis(200)).await;
        tx.send(safe("late", 10)).unwrap();
    });

    let results = probe
        .run_with(
            Scheduler::default(),
            UnboundedReceiverStream::new(rx),
            CancellationToken::new(),
        )
        .await;

    assert_eq!(ids(&results), vec!["a", "late"]);
    assert_eq!(probe.start_of("late"), Some(200));
}

#[tokio::test(start_paused = true)]
async fn an_empty_response_has_no_results() {
    let probe = Probe::new();

    let results = probe.run(Scheduler::default(), Vec::new()).await;

    assert!(results.is_empty());
    assert!(probe.event_log().is_empty());
}

#[tokio::test(start_paused = true)]
async fn cancellation_mid_batch_pairs_every_unfinished_call_with_cancelled() {
    let probe = Probe::new();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for c in [
        safe("done", 50),
        safe("running", 500),
        exclusive("queued_exclusive", 10),
        safe("queued_safe", 10),
    ] {
        tx.send(c).unwrap();
    }
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let sender = tokio::spawn(async move {
        sleep(Duration::from_millis(100)).await;
        // Arrives in the same instant the run is cancelled: still paired.
        tx.send(safe("just_arrived", 10)).unwrap();
        trigger.cancel();
        // The model stream stays open; the scheduler must not wait for it.
        sleep(Duration::from_secs(3600)).await;
        drop(tx);
    });

    let results = probe
        .run_with(
            Scheduler::default(),
            UnboundedReceiverStream::new(rx),
            cancel,
        )
        .await;

    assert_eq!(probe.now_ms(), 100);
    assert_eq!(
        ids(&results),
        vec![
            "done",
            "running",
            "queued_exclusive",
            "queued_safe",
            "just_arrived"
        ]
    );
    assert_eq!(results[0], ToolResultBlock::ok("done", "done done"));
    for result in &results[1..] {
        assert!(result.is_error, "{result:?}");
        assert_eq!(result.code.as_deref(), Some(codes::CANCELLED));
    }
    assert!(
        results[1]
            .content
            .contains("while this tool call was running")
    );
    assert!(results[2].content.contains("before this tool call started"));
    // Queued calls never started.
    assert_eq!(probe.start_of("queued_exclusive"), None);
    assert_eq!(probe.start_of("queued_safe"), None);
    // The running call was dropped, not left behind.
    assert_eq!(probe.in_flight.load(Ordering::SeqCst), 1);
    // Every call got exactly one Finished event, the synthetic ones in arrival order.
    let finishes: Vec<_> = probe
        .event_log()
        .into_iter()
        .filter(|(kind, _, _)| *kind == "finish")
        .map(|(_, id, _)| id)
        .collect();
    assert_eq!(
        finishes,
        vec![
            "done",
            "running",
            "queued_exclusive",
            "queued_safe",
            "just_arrived"
        ]
    );
    sender.abort();
}

#[tokio::test(start_paused = true)]
async fn cancellation_drops_the_running_future() {
    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        sleep(Duration::from_millis(10)).await;
        trigger.cancel();
    });
    let flag = Arc::clone(&dropped);

    let results = Scheduler::default()
        .run(
            futures::stream::iter(vec![exclusive("slow", 10_000)]),
            move |call| {
                let guard = DropFlag(Arc::clone(&flag));
                async move {
                    let _guard = guard;
                    sleep(Duration::from_secs(10)).await;
                    ToolResultBlock::ok(call.tool_use_id, "finished")
                }
            },
            |_| {},
            cancel,
        )
        .await;

    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].code.as_deref(), Some(codes::CANCELLED));
}

#[tokio::test(start_paused = true)]
async fn an_already_cancelled_run_starts_nothing_and_pairs_everything() {
    let probe = Probe::new();
    let cancel = CancellationToken::new();
    cancel.cancel();

    let results = probe
        .run_with(
            Scheduler::default(),
            futures::stream::iter(vec![safe("a", 10), exclusive("b", 10)]),
            cancel,
        )
        .await;

    assert!(probe.starts().is_empty());
    // The calls were already delivered by the stream, so they are paired.
    assert_eq!(ids(&results), vec!["a", "b"]);
    assert!(
        results
            .iter()
            .all(|r| r.code.as_deref() == Some(codes::CANCELLED))
    );
}

#[tokio::test(start_paused = true)]
async fn results_are_paired_with_the_call_id_whatever_exec_returns() {
    let results = Scheduler::default()
        .run(
            futures::stream::iter(vec![safe("toolu_1", 1)]),
            |_call| async { ToolResultBlock::ok("wrong_id", "text") },
            |_| {},
            CancellationToken::new(),
        )
        .await;

    assert_eq!(results, vec![ToolResultBlock::ok("toolu_1", "text")]);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_tool_becomes_a_failed_result_and_the_batch_goes_on() {
    let results = Scheduler::default()
        .run(
            futures::stream::iter(vec![safe("boom", 1), exclusive("after", 1)]),
            |call| async move {
                if call.tool_use_id == "boom" {
                    panic!("tool exploded");
                }
                ToolResultBlock::ok(call.tool_use_id, "fine")
            },
            |_| {},
            CancellationToken::new(),
        )
        .await;

    assert_eq!(ids(&results), vec!["boom", "after"]);
    assert!(results[0].is_error);
    assert_eq!(results[0].code.as_deref(), Some(codes::TOOL_FAILED));
    assert!(results[0].content.contains("tool exploded"));
    assert_eq!(results[1], ToolResultBlock::ok("after", "fine"));
}

#[tokio::test(start_paused = true)]
async fn each_run_has_its_own_bound() {
    // Two runs on the same scheduler value at once: the bound is per run, not shared.
    let probe = Probe::new();
    let scheduler = Scheduler::new(2);
    let first: Vec<_> = (0..2).map(|i| safe(&format!("p{i}"), 10)).collect();
    let second: Vec<_> = (0..2).map(|i| safe(&format!("q{i}"), 10)).collect();

    let (a, b) = tokio::join!(probe.run(scheduler, first), probe.run(scheduler, second));

    assert_eq!(a.len() + b.len(), 4);
    assert_eq!(probe.max_in_flight.load(Ordering::SeqCst), 4);
    assert_eq!(probe.now_ms(), 10);
}
