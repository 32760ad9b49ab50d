//! Noa per-turn policy cost: what the runtime calls before every model request
//! (`NoaSession::build_view`: the six pipeline steps assign refs → sync blocks → prune → hide
//! consumed calls → emergency truncate → nudge, and the view they build) over a history of
//! 10,000 messages. `cargo bench --bench noa`. Target: at most 1 ms per model request.
//!
//! Three histories: everything live (no compression yet, truncated to the hard limit), 90%
//! compressed in ranges of 40 messages (a long session that compresses as nudged), and the
//! same with one new message rendered per turn (the steady state: one snapshot added). Each is
//! measured as the requests of one run go (the session keeps its blocks and the messages it
//! sent between requests; one request before the measure warms them), as the first request
//! of a later run (the cache the last run kept, adopted by a history read anew), and as the
//! first request after the process started (a session just loaded, nothing kept yet).
//!
//! Settings: `NOA_BENCH_MESSAGES` (default 10,000), `NOA_BENCH_ITERATIONS` (default 200),
//! `NOA_BENCH_ROWS` (measure only the rows whose name contains it).

use async_trait::async_trait;
use norma::ids::SessionId;
use norma::message::{ContentBlock, Message, Role, ToolResultBlock};
use norma::noa::compress::{self, RangeRequest};
use norma::noa::kept::KeptViews;
use norma::noa::pipeline::{STEPS, Turn};
use norma::noa::session::Keep;
use norma::noa::session::NoaBackend;
use norma::noa::{NoaSession, NoaSettings, NoaState, ToolNames};
use norma::store::{NewNoaArchive, NoaArchiveRecord, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's allocator (see `src/main.rs`): the policy is measured as it runs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A store holding one state, taking every write.
struct Stored(Option<Value>);

#[async_trait]
impl NoaBackend for Stored {
    async fn load(&self) -> Result<Option<(i64, Value)>, StoreError> {
        Ok(self.0.clone().map(|state| (1, state)))
    }

    async fn commit(
        &self,
        _archives: &[NewNoaArchive],
        _state: &Value,
        expected: i64,
    ) -> Result<i64, StoreError> {
        Ok(expected + 1)
    }

    async fn messages(&self, _first: u32, _count: u32) -> Result<Vec<Message>, StoreError> {
        Ok(Vec::new())
    }

    async fn archive(&self, _ordinal: u32) -> Result<Option<NoaArchiveRecord>, StoreError> {
        Ok(None)
    }
}

/// A session loaded with `state`, as a run starts.
fn session(settings: &NoaSettings, read_only: &ToolNames, state: &NoaState) -> Arc<NoaSession> {
    session_kept(settings, read_only, state, None)
}

/// A session loaded with `state`, taking the view cache its last run kept in `views`.
fn session_kept(
    settings: &NoaSettings,
    read_only: &ToolNames,
    state: &NoaState,
    views: Option<&Arc<KeptViews>>,
) -> Arc<NoaSession> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let backend = Arc::new(Stored(Some(serde_json::to_value(state).expect("state"))));
    let keep = views.map(|views| Keep {
        views: views.clone(),
        session: SessionId::from_string("ses_bench"),
    });
    runtime
        .block_on(NoaSession::load_kept(
            settings.clone(),
            read_only.clone(),
            backend,
            keep,
        ))
        .expect("load")
}

/// The first request of each of `iterations` runs of one session whose view cache is kept
/// between runs; every run reads its history again (the two copies alternate, so each run's
/// messages are other allocations than the last run's, as when read from the store).
fn measure_later_runs(
    name: &str,
    iterations: usize,
    settings: &NoaSettings,
    read_only: &ToolNames,
    state: &NoaState,
    history: &[Arc<Message>],
) {
    if !wanted(name) {
        return;
    }
    let copy = || -> Vec<Arc<Message>> {
        history
            .iter()
            .map(|message| Arc::new(Message::clone(message)))
            .collect()
    };
    let copies = [copy(), copy()];
    let views = Arc::new(KeptViews::default());
    session_kept(settings, read_only, state, Some(&views)).build_view(&copies[1], None);
    let mut times = Vec::with_capacity(iterations);
    let mut view = 0;
    for iteration in 0..iterations {
        let session = session_kept(settings, read_only, state, Some(&views));
        let started = Instant::now();
        view = std::hint::black_box(session.build_view(&copies[iteration % 2], None).len());
        times.push(started.elapsed());
        assert_eq!(session.cache_rebuilds(), 1, "the kept cache is adopted");
    }
    report(name, times, view);
}

/// The first request of each of `iterations` sessions loaded with `state` and nothing kept,
/// as after the process started (the sessions are loaded before the measure).
fn measure_after_start(
    name: &str,
    iterations: usize,
    settings: &NoaSettings,
    read_only: &ToolNames,
    state: &NoaState,
    history: &[Arc<Message>],
) {
    if !wanted(name) {
        return;
    }
    let mut fresh: Vec<_> = (0..iterations)
        .map(|_| session(settings, read_only, state))
        .collect();
    measure_dropping(name, iterations, || {
        let session = fresh.pop().expect("one per iteration");
        let view = session.build_view(history, None);
        (view.len(), (session, view))
    });
}

fn history(messages: usize) -> Vec<Arc<Message>> {
    let mut history = vec![Message::user_text("start the long task")];
    while history.len() < messages {
        let id = format!("toolu_{}", history.len());
        history.push(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Text {
                    text: "Looking at the next file.".repeat(4),
                },
                ContentBlock::ToolUse {
                    id: id.clone(),
                    name: "Read".into(),
                    input: json!({"file_path": format!("src/file_{}.rs", history.len())}),
                },
            ],
        });
        history.push(Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(
                id,
                "fn main() { println!(\"hello\"); }\n".repeat(12),
            ))],
        });
    }
    history.into_iter().map(Arc::new).collect()
}

fn settings() -> NoaSettings {
    NoaSettings {
        soft_limit_tokens: 60_000,
        hard_limit_tokens: 100_000,
        ..NoaSettings::default()
    }
}

/// A state with every range of 40 messages compressed but the last 10% of history.
fn compressed(settings: &NoaSettings, read_only: &ToolNames, history: &[Arc<Message>]) -> NoaState {
    let mut state = NoaState::default();
    let mut turn = Turn::new(settings, read_only, history, &mut state);
    turn.run(&STEPS);
    let blocks = std::mem::take(&mut turn.blocks);
    let limit = history.len() * 9 / 10;
    let mut batch = Vec::new();
    let mut from = 0usize;
    for block in &blocks {
        if block.end as usize >= limit {
            break;
        }
        if block.end as usize - from >= 39 {
            batch.push(RangeRequest {
                from_ref: format!("m{from}"),
                to_ref: format!("m{}", block.end),
                summary: "Read forty files; they print hello.".into(),
            });
            from = block.end as usize + 1;
        }
    }
    let mut state_now = state.clone();
    for chunk in batch.chunks(compress::MAX_RANGES) {
        let mut turn = Turn::new(settings, read_only, history, &mut state_now);
        turn.run(&STEPS);
        let plan = compress::validate(&turn.blocks, &turn.state.compressions, settings, chunk)
            .expect("valid batch");
        state_now = compress::apply(&state_now, &plan);
    }
    state_now
}

/// Whether row `name` is measured (`NOA_BENCH_ROWS`: a part of the names to measure).
fn wanted(name: &str) -> bool {
    std::env::var("NOA_BENCH_ROWS").map_or(true, |part| name.contains(&part))
}

fn measure(name: &str, iterations: usize, mut f: impl FnMut() -> usize) {
    measure_dropping(name, iterations, || (f(), ()));
}

/// [`measure`] of an `f` that also returns what it used, dropped after the time is taken
/// (so that freeing it is not measured, and the next iteration reuses its memory as a
/// running process would, instead of growing the heap by one session per iteration).
fn measure_dropping<T>(name: &str, iterations: usize, mut f: impl FnMut() -> (usize, T)) {
    if !wanted(name) {
        return;
    }
    let mut times: Vec<Duration> = Vec::with_capacity(iterations);
    let mut view = 0;
    for _ in 0..iterations {
        let started = Instant::now();
        let (len, used) = std::hint::black_box(f());
        times.push(started.elapsed());
        view = len;
        drop(used);
    }
    report(name, times, view);
}

fn report(name: &str, mut times: Vec<Duration>, view: usize) {
    times.sort();
    let median = times[times.len() / 2];
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    println!(
        "{name:<58} view {view:>6} messages  median {:>8.1} µs  p99 {:>8.1} µs",
        median.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
}

fn main() {
    let messages: usize = std::env::var("NOA_BENCH_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let iterations: usize = std::env::var("NOA_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let settings = settings();
    let read_only: ToolNames = ["Read".to_owned()].into_iter().collect();
    let history = history(messages);
    println!(
        "Noa per-turn policy cost, {} messages, {iterations} iterations",
        history.len()
    );

    let live = session(&settings, &read_only, &NoaState::default());
    live.build_view(&history, None);
    measure("all live (truncated to the hard limit)", iterations, || {
        live.build_view(&history, None).len()
    });
    let first = live.state();
    measure_after_start(
        "all live, first request after the process started",
        iterations,
        &settings,
        &read_only,
        &first,
        &history,
    );

    measure_later_runs(
        "all live, first request of a later run",
        iterations,
        &settings,
        &read_only,
        &first,
        &history,
    );

    let state = compressed(&settings, &read_only, &history);
    println!("  {} compressions", state.compressions.len());
    let steady = session(&settings, &read_only, &state);
    steady.build_view(&history, None);
    measure("90% compressed", iterations, || {
        steady.build_view(&history, None).len()
    });
    measure_after_start(
        "90% compressed, first request after the process started",
        iterations,
        &settings,
        &read_only,
        &state,
        &history,
    );

    measure_later_runs(
        "90% compressed, first request of a later run",
        iterations,
        &settings,
        &read_only,
        &state,
        &history,
    );

    let base = history.len() - iterations.min(history.len() / 10);
    let mut growing = state.clone();
    growing.snapshots.truncate(base - 1);
    let growing = session(&settings, &read_only, &growing);
    growing.build_view(&history[..base], None);
    let mut next = base;
    measure(
        "90% compressed, one new message per turn",
        iterations,
        || {
            next = (next + 1).min(history.len());
            growing.build_view(&history[..next], None).len()
        },
    );
}
