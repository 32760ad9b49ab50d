//! Noa per-turn policy cost: the six pipeline steps (assign refs → sync blocks → prune → hide
//! consumed calls → emergency truncate → nudge) and the view they build, over a history of
//! 10,000 messages. `cargo bench --bench noa`. Target: at most 1 ms per model request.
//!
//! Three histories: everything live (no compression yet, the worst case for the view copy),
//! 90% compressed in ranges of 40 messages (a long session that compresses as nudged), and
//! the same with one new message rendered per turn (the steady state: one snapshot added).
//!
//! Settings: `NOA_BENCH_MESSAGES` (default 10,000), `NOA_BENCH_ITERATIONS` (default 200).

use norma::message::{ContentBlock, Message, Role, ToolResultBlock};
use norma::noa::compress::{self, RangeRequest};
use norma::noa::pipeline::{STEPS, Turn};
use norma::noa::{NoaSettings, NoaState};
use serde_json::json;
use std::collections::HashSet;
use std::time::{Duration, Instant};

fn history(messages: usize) -> Vec<Message> {
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
    history
}

fn settings() -> NoaSettings {
    NoaSettings {
        soft_limit_tokens: 60_000,
        hard_limit_tokens: 100_000,
        ..NoaSettings::default()
    }
}

fn one_turn(
    settings: &NoaSettings,
    read_only: &HashSet<String>,
    history: &[Message],
    state: &mut NoaState,
) -> usize {
    let mut turn = Turn::new(settings, read_only, history, state);
    turn.run(&STEPS);
    turn.messages().len()
}

/// A state with every range of 40 messages compressed but the last 10% of history.
fn compressed(
    settings: &NoaSettings,
    read_only: &HashSet<String>,
    history: &[Message],
) -> NoaState {
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

fn measure(name: &str, iterations: usize, mut f: impl FnMut() -> usize) {
    let mut times: Vec<Duration> = Vec::with_capacity(iterations);
    let mut view = 0;
    for _ in 0..iterations {
        let started = Instant::now();
        view = std::hint::black_box(f());
        times.push(started.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    let p99 = times[(times.len() * 99 / 100).min(times.len() - 1)];
    println!(
        "{name:<44} view {view:>6} messages  median {:>8.1} µs  p99 {:>8.1} µs",
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
    let read_only: HashSet<String> = ["Read".to_owned()].into();
    let history = history(messages);
    println!(
        "Noa per-turn policy cost, {} messages, {iterations} iterations",
        history.len()
    );

    let mut live = NoaState::default();
    one_turn(&settings, &read_only, &history, &mut live);
    measure("all live (truncated to the hard limit)", iterations, || {
        one_turn(&settings, &read_only, &history, &mut live)
    });

    let state = compressed(&settings, &read_only, &history);
    println!("  {} compressions", state.compressions.len());
    let mut steady = state.clone();
    measure("90% compressed", iterations, || {
        one_turn(&settings, &read_only, &history, &mut steady)
    });

    let base = history.len() - iterations.min(history.len() / 10);
    let mut growing = state.clone();
    growing.snapshots.truncate(base);
    let mut next = base;
    measure(
        "90% compressed, one new message per turn",
        iterations,
        || {
            next = (next + 1).min(history.len());
            one_turn(&settings, &read_only, &history[..next], &mut growing)
        },
    );
}
