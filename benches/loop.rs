//! Loop benchmark: one run = a prompt, 3 tool turns calling a no-op read-only tool, and a final
//! text answer, against a fake Anthropic Messages server over loopback HTTP (real reqwest
//! client, real SSE parsing, real scheduler). `cargo bench --bench loop`.
//!
//! Prints, for N sequential runs and for N runs at concurrency 8: median and p99 end-to-end
//! wall time per run, throughput, and CPU time per run.
//!
//! CPU accounting: the fake server runs on its own OS thread (a current-thread tokio runtime),
//! so its CPU time is measured exactly with `getrusage(RUSAGE_THREAD)` on that thread. The
//! loop's CPU per run is `(process CPU − fake thread CPU) / N` over a phase, with process CPU
//! from `getrusage(RUSAGE_SELF)` (user + system). It therefore includes the HTTP client, TLS-free
//! loopback sockets, the tokio workers and the engine, but not the fake. It is an average over
//! the phase: per-run CPU is not attributable to single runs under concurrency.
//!
//! Settings: `LOOP_BENCH_RUNS` (default 300).

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "support/model_thread.rs"]
mod model_thread;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::post;
use fake_llm::anthropic as an;
use model_thread::{ModelThread, rusage_seconds};
use nix::sys::resource::UsageWho;
use norma::harness::engine::{
    Engine, EngineConfig, HistoryAppend, HostError, LoopHost, RunHistory,
};
use norma::harness::ledger::RunLedger;
use norma::harness::scheduler::PendingCall;
use norma::harness::turn::TerminalReason;
use norma::ids::{RunId, SessionId, TenantId};
use norma::llm::{Provider, ProviderConfig, ProviderKind, ToolSpec, build_provider};
use norma::message::{Message, ToolResultBlock};
use norma::run_event::RunEvent;
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOOL_TURNS: usize = 3;
const CONCURRENCY: usize = 8;
const WARMUP: usize = 20;

/// The fake answers from the request alone (so concurrent runs do not interfere): while fewer
/// than [`TOOL_TURNS`] tool results are in the conversation it calls `Lookup`, then it answers.
async fn answer(body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let results = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|block| block["type"] == "tool_result")
        .count();
    let frames = if results < TOOL_TURNS {
        an::tool_turn(
            &format!("toolu_{results}"),
            "Lookup",
            &json!({ "key": format!("k{results}") }),
            3,
        )
    } else {
        an::text_turn("All three keys were looked up.")
    };
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(frames.concat()))
        .expect("response")
}

/// A host that keeps history in memory and has one no-op read-only tool.
#[derive(Default)]
struct Host {
    committed: std::sync::Mutex<Vec<HistoryAppend>>,
}

#[async_trait]
impl LoopHost for Host {
    fn emit(&self, _event: RunEvent) {}

    async fn commit(
        &self,
        messages: Vec<HistoryAppend>,
        _events: Vec<RunEvent>,
    ) -> Result<(), HostError> {
        self.committed
            .lock()
            .map_err(|_| HostError("poisoned".into()))?
            .extend(messages);
        Ok(())
    }

    fn tool_specs(&self) -> std::sync::Arc<[ToolSpec]> {
        vec![ToolSpec {
            name: "Lookup".into(),
            description: "Looks a key up (no-op).".into(),
            input_schema: json!({"type": "object", "properties": {"key": {"type": "string"}}})
                .into(),
        }]
        .into()
    }

    fn is_concurrency_safe(&self, _name: &str, _input: &Value) -> bool {
        true
    }

    async fn execute_tool(&self, call: PendingCall, _cancel: CancellationToken) -> ToolResultBlock {
        ToolResultBlock::ok(call.tool_use_id, "value")
    }
}

/// One run; returns its wall time.
async fn one_run(provider: Arc<dyn Provider>) -> Duration {
    let started = Instant::now();
    let host = Arc::new(Host::default());
    let engine = Engine {
        provider,
        host: host.clone(),
        config: EngineConfig {
            model: "bench-model".into(),
            system: Some("You are a benchmark.".into()),
            ..EngineConfig::default()
        },
        policy: None,
    };
    let mut ledger = RunLedger::new(
        TenantId::new("bench"),
        SessionId::generate(),
        RunId::generate(),
    );
    let history = RunHistory::new(vec![Message::user_text("Look up three keys.")], 0);
    let outcome = engine
        .run(history, &mut ledger, CancellationToken::new())
        .await
        .expect("in-memory host");
    let elapsed = started.elapsed();
    assert_eq!(outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(outcome.usage.model_calls, TOOL_TURNS as u64 + 1);
    assert_eq!(outcome.usage.tool_calls, TOOL_TURNS as u64);
    elapsed
}

struct Phase {
    name: String,
    runs: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    process_cpu: f64,
    fake_cpu: f64,
}

impl Phase {
    fn print(&mut self) {
        self.latencies.sort();
        let at = |q: f64| {
            let index = ((self.latencies.len() as f64 * q).ceil() as usize).max(1) - 1;
            self.latencies[index.min(self.latencies.len() - 1)]
        };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let per_run_us = |seconds: f64| seconds / self.runs as f64 * 1e6;
        println!(
            "{:<16} runs {:>4}  median {:>7.3} ms  p99 {:>7.3} ms  throughput {:>7.1} runs/s  \
             CPU/run: loop {:>7.1} µs (process {:>7.1} µs − fake {:>6.1} µs)",
            self.name,
            self.runs,
            ms(at(0.5)),
            ms(at(0.99)),
            self.runs as f64 / self.wall.as_secs_f64(),
            per_run_us(self.process_cpu - self.fake_cpu),
            per_run_us(self.process_cpu),
            per_run_us(self.fake_cpu),
        );
    }
}

async fn phase(
    name: &str,
    fake: &ModelThread,
    provider: &Arc<dyn Provider>,
    runs: usize,
    concurrency: usize,
) -> Phase {
    let fake_before = fake.cpu_seconds().await;
    let process_before = rusage_seconds(UsageWho::RUSAGE_SELF);
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let next = next.clone();
        let provider = provider.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < runs {
                latencies.push(one_run(provider.clone()).await);
            }
            latencies
        }));
    }
    let mut latencies = Vec::with_capacity(runs);
    for worker in workers {
        latencies.extend(worker.await.expect("worker"));
    }
    let wall = started.elapsed();
    let process_cpu = rusage_seconds(UsageWho::RUSAGE_SELF) - process_before;
    let fake_cpu = fake.cpu_seconds().await - fake_before;
    Phase {
        name: name.to_owned(),
        runs,
        wall,
        latencies,
        process_cpu,
        fake_cpu,
    }
}

fn main() {
    let runs: usize = std::env::var("LOOP_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let fake = ModelThread::start(|| Router::new().route("/v1/messages", post(answer)), false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut config = ProviderConfig::new(ProviderKind::Anthropic);
        config.base_url = Some(format!("http://{}", fake.addr));
        config.model = "bench-model".into();
        config.api_key = Some(SecretString::from("sk-bench"));
        config.retries = -1;
        let provider = build_provider(&config, reqwest::Client::new()).expect("provider");

        let workers = std::thread::available_parallelism().map_or(1, usize::from);
        println!(
            "loop benchmark: {TOOL_TURNS} tool turns + final answer per run (4 model calls, \
             3 tool calls), fake Anthropic server over loopback HTTP on its own thread; \
             {workers} tokio worker threads"
        );
        phase("warmup", &fake, &provider, WARMUP, 1).await;
        phase("sequential", &fake, &provider, runs, 1).await.print();
        phase(
            &format!("concurrency {CONCURRENCY}"),
            &fake,
            &provider,
            runs,
            CONCURRENCY,
        )
        .await
        .print();
    });
}
