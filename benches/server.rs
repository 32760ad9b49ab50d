//! End-to-end server benchmark: the real `norma serve` binary as a child process, driven over
//! loopback HTTP, with a fake Anthropic Messages server inside this process.
//! `cargo bench --bench server` (SQLite); `NORMA_BENCH_PG=1 cargo bench --bench server`
//! (a fresh Postgres database on 127.0.0.1:5432, dropped at the end).
//!
//! One run = `POST /v1/sessions/{id}/prompts` → 3 tool turns (the model calls `Read` of a small
//! file in the session workspace: read-only, so allowed without approval in the default mode)
//! → a final text turn: 4 model calls, 3 tool calls, streamed as Anthropic SSE. The fake model
//! answers from the request alone (it counts the assistant messages after the bench prompt), so
//! concurrent runs do not interfere. Every session has an SSE stream (`GET …/stream`) open
//! before its first prompt; a run's latency is from sending the prompt to receiving its
//! `terminal` event on that stream. Every run is checked: `terminal` reason `end_turn`, three
//! successful `tool_result` events carrying the file's text, and exactly 4 model requests.
//!
//! Phases:
//! 1. sequential: runs one at a time (latency at low load);
//! 2. throughput: `CONCURRENCY` workers, each following one session at a time and sending it
//!    `RUNS_PER_SESSION` prompts in a row, until `RUNS` runs are done (runs/s, latency under
//!    load);
//! 3. approvals: one at a time, the model calls `Bash` (needs approval in the default mode); the
//!    client answers `allow` as soon as `approval_requested` arrives on the stream and measures
//!    until `approval_decided`, the tool's `tool_result` and `terminal`.
//!
//! CPU: the server's user + system time from `/proc/<pid>/stat` (clock ticks), delta over each
//! phase, divided by the phase's runs (sandboxed `Bash` children of phase 3 are reported
//! separately, from `cutime + cstime`). The fake model runs on its own OS thread with a
//! current-thread runtime and is measured with `getrusage(RUSAGE_THREAD)`; the bench client is
//! `getrusage(RUSAGE_SELF)` minus the fake. Client, fake and server share the machine's cores,
//! and the machine's busy share over the phase (`/proc/stat`, includes other processes) is
//! printed next to them.
//!
//! Diagnostics printed with the latencies: the first run after a stream was opened versus the
//! later runs on it, the `terminal` event's `created_at` → received lag (delivery, not run
//! time; same clock), the events per run, and on Postgres the transactions per run
//! (`pg_stat_database`, read after the 10 s statistics flush of idle backends, with the idle
//! server's own rate subtracted) and the CPU of the bench database's backends.
//!
//! Memory: the server's `VmRSS` / `VmHWM` at rest after start-up, after the sequential phase,
//! right after the throughput phase and after 3 s idle.
//!
//! Settings (environment): `NORMA_BENCH_PG=1`, `NORMA_BENCH_SEQ_RUNS` (200),
//! `NORMA_BENCH_RUNS` (3000), `NORMA_BENCH_CONCURRENCY` (48; at most the server's per-tenant
//! limit of 64), `NORMA_BENCH_RUNS_PER_SESSION` (5), `NORMA_BENCH_APPROVALS` (100),
//! `NORMA_BENCH_LOG_FILTER` (the server's log filter, default `info` like a default server;
//! logs go to a file).

#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "support/model_thread.rs"]
mod model_thread;
#[path = "../tests/support/pg.rs"]
mod pg;
#[path = "../tests/support/server.rs"]
mod server;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::post;
use eventsource_stream::Eventsource;
use fake_llm::anthropic as an;
use futures::StreamExt;
use model_thread::{ModelThread, rusage_seconds};
use nix::sys::resource::UsageWho;
use serde_json::{Value, json};
use server::ServerProcess;
use tokio::sync::mpsc;

const TENANT: &str = "bench";
const TOOL_TURNS: usize = 3;
/// The prompt of a normal run: the fake answers with 3 `Read` turns and a text.
const RUN_PROMPT: &str = "bench run: read notes.txt three times, then answer";
/// The prompt of an approval run: the fake answers with one `Bash` turn and a text.
const APPROVAL_PROMPT: &str = "bench approval: append a line to marker";
/// A line of the file the `Read` calls return; every tool_result must carry it.
const NOTES_MARKER: &str = "norma-bench-notes-7f3a";
const WARMUP_RUNS: usize = 20;
/// Bound for one run (or one approval step) to finish.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound for waiting out a `409 SESSION_BUSY` after the previous run's `terminal`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// CPU and memory accounting
// ---------------------------------------------------------------------------------------------

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// `(utime + stime, cutime + cstime)` of `pid` in seconds, from `/proc/<pid>/stat`.
fn proc_cpu_seconds(pid: u32, ticks: f64) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<f64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime, cstime are fields 14..=17 → indexes 11..=14 here.
    (
        (fields[11] + fields[12]) / ticks,
        (fields[13] + fields[14]) / ticks,
    )
}

/// `(busy, total)` jiffies of the whole machine from the first line of `/proc/stat`.
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let values: Vec<u64> = stat
        .lines()
        .next()
        .expect("cpu line")
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let total: u64 = values.iter().take(8).sum();
    // idle + iowait
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// `(VmRSS, VmHWM)` of `pid` in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// A snapshot of every CPU counter, taken at the start and end of a phase.
struct CpuSnapshot {
    at: Instant,
    server: f64,
    server_children: f64,
    process: f64,
    fake: f64,
    machine: (u64, u64),
    /// CPU seconds of each Postgres backend serving the bench database, by pid.
    postgres: HashMap<u32, f64>,
}

/// Deltas of a phase, in seconds (machine as a busy fraction).
struct CpuDelta {
    wall: f64,
    server: f64,
    server_children: f64,
    client: f64,
    fake: f64,
    machine_busy: f64,
    /// Postgres backends of the bench database (a backend that exited meanwhile is missed).
    postgres: Option<f64>,
}

impl CpuSnapshot {
    fn until(&self, later: &CpuSnapshot) -> CpuDelta {
        let busy = later.machine.0.saturating_sub(self.machine.0) as f64;
        let total = later.machine.1.saturating_sub(self.machine.1).max(1) as f64;
        let fake = later.fake - self.fake;
        let postgres = (!later.postgres.is_empty()).then(|| {
            later
                .postgres
                .iter()
                .map(|(pid, cpu)| cpu - self.postgres.get(pid).copied().unwrap_or(0.0))
                .sum()
        });
        CpuDelta {
            postgres,
            wall: later.at.duration_since(self.at).as_secs_f64(),
            server: later.server - self.server,
            server_children: later.server_children - self.server_children,
            client: (later.process - self.process) - fake,
            fake,
            machine_busy: busy / total,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fake model (own OS thread, current-thread runtime)
// ---------------------------------------------------------------------------------------------

static TOOL_USE_IDS: AtomicU64 = AtomicU64::new(0);

fn texts(message: &Value) -> Vec<&str> {
    match &message["content"] {
        Value::String(text) => vec![text.as_str()],
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect(),
        _ => vec![],
    }
}

fn sse_response(frames: Vec<String>) -> Response {
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(Body::from(frames.concat()))
        .expect("response")
}

/// Answers from the request alone: finds the last bench prompt, counts the assistant
/// messages after it, and answers the next turn of that prompt's script.
async fn answer(body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = messages.iter().enumerate().rev().find_map(|(index, m)| {
        if m["role"] != "user" {
            return None;
        }
        texts(m).into_iter().find_map(|t| {
            if t.contains(APPROVAL_PROMPT) {
                Some((index, true))
            } else if t.contains(RUN_PROMPT) {
                Some((index, false))
            } else {
                None
            }
        })
    });
    let Some((index, approval)) = prompt else {
        return Response::builder()
            .status(400)
            .header("content-type", "application/json")
            .body(Body::from(
                json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": "fake model: no bench prompt in the request"}})
                .to_string(),
            ))
            .expect("response");
    };
    let turns = messages[index + 1..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    let id = format!(
        "toolu_bench_{}",
        TOOL_USE_IDS.fetch_add(1, Ordering::Relaxed)
    );
    let frames = match (approval, turns) {
        (false, t) if t < TOOL_TURNS => {
            an::tool_turn(&id, "Read", &json!({"file_path": "notes.txt"}), 2)
        }
        (true, 0) => an::tool_turn(
            &id,
            "Bash",
            &json!({"command": "echo approved >> marker"}),
            2,
        ),
        _ => an::text_turn("Done: the notes were read."),
    };
    sse_response(frames)
}

struct Fake {
    model: ModelThread,
    requests: Arc<AtomicUsize>,
}

impl Fake {
    fn start() -> Self {
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let model = ModelThread::start(
            move || {
                Router::new().route(
                    "/v1/messages",
                    post(move |body: Bytes| {
                        counter.fetch_add(1, Ordering::Relaxed);
                        answer(body)
                    }),
                )
            },
            true,
        );
        Self { model, requests }
    }

    async fn cpu_seconds(&self) -> f64 {
        self.model.cpu_seconds().await
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

// ---------------------------------------------------------------------------------------------
// The client side
// ---------------------------------------------------------------------------------------------

struct Bench {
    server: ServerProcess,
    fake: Fake,
    pid: u32,
    ticks: f64,
    token: String,
    client: reqwest::Client,
    busy_retries: AtomicUsize,
    postgres: Option<PgProbe>,
}

/// Looks at the bench database from the admin database: its backends and its transactions.
struct PgProbe {
    admin: tokio::sync::Mutex<sqlx::PgConnection>,
    database: String,
}

impl PgProbe {
    async fn connect(database: String) -> Self {
        use sqlx::Connection;
        let admin = sqlx::PgConnection::connect(&pg::pg_admin_url())
            .await
            .expect("admin connection");
        Self {
            admin: tokio::sync::Mutex::new(admin),
            database,
        }
    }

    /// Pids of the backends connected to the bench database.
    async fn backends(&self) -> Vec<u32> {
        let rows: Vec<(i32,)> =
            sqlx::query_as("SELECT pid FROM pg_stat_activity WHERE datname = $1")
                .bind(&self.database)
                .fetch_all(&mut *self.admin.lock().await)
                .await
                .expect("pg_stat_activity");
        rows.into_iter().map(|(pid,)| pid as u32).collect()
    }

    /// Committed + rolled back transactions of the bench database, after waiting out the
    /// statistics flush of idle backends (Postgres 15: at most 10 s).
    async fn settled_transactions(&self) -> (Instant, i64) {
        tokio::time::sleep(Duration::from_secs(11)).await;
        let (count,): (i64,) = sqlx::query_as(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1",
        )
        .bind(&self.database)
        .fetch_one(&mut *self.admin.lock().await)
        .await
        .expect("pg_stat_database");
        (Instant::now(), count)
    }
}

impl Bench {
    async fn snapshot(&self) -> CpuSnapshot {
        let mut postgres = HashMap::new();
        if let Some(probe) = &self.postgres {
            for pid in probe.backends().await {
                if std::path::Path::new(&format!("/proc/{pid}/stat")).exists() {
                    postgres.insert(pid, proc_cpu_seconds(pid, self.ticks).0);
                }
            }
        }
        let fake = self.fake.cpu_seconds().await;
        let (server, server_children) = proc_cpu_seconds(self.pid, self.ticks);
        CpuSnapshot {
            at: Instant::now(),
            server,
            server_children,
            process: rusage_seconds(UsageWho::RUSAGE_SELF),
            fake,
            machine: machine_jiffies(),
            postgres,
        }
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.server.url(path))
            .bearer_auth(&self.token)
            .json(body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.server.logs()));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A new session; with `notes`, its workspace gets the small file the `Read` calls return.
    async fn create_session(&self, notes: bool) -> String {
        let (status, body) = self
            .post("/v1/sessions", &json!({"title": "server bench"}))
            .await;
        assert_eq!(status, 201, "create session: {body}");
        let id = body["id"].as_str().expect("session id").to_owned();
        if notes {
            let dir = self.server.workspace(TENANT, &id);
            std::fs::create_dir_all(&dir).expect("workspace dir");
            let text: String = (1..=20)
                .map(|i| format!("line {i}: {NOTES_MARKER} some notes for the benchmark\n"))
                .collect();
            std::fs::write(dir.join("notes.txt"), text).expect("notes.txt");
        }
        id
    }

    /// Opens the session's SSE stream (subscribed once the response headers arrive).
    async fn open_stream(&self, session: &str) -> EventStream {
        let response = self
            .client
            .get(self.server.url(&format!("/v1/sessions/{session}/stream")))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("open stream");
        assert_eq!(response.status(), 200, "stream status");
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut events = response.bytes_stream().eventsource();
            while let Some(event) = events.next().await {
                let Ok(event) = event else { break };
                let received = Instant::now();
                let mut value = if event.event == "reconnect" {
                    json!({"type": "reconnect", "data": event.data})
                } else {
                    serde_json::from_str(&event.data).unwrap_or(Value::Null)
                };
                // Delivery lag: the event's server timestamp → received here (same clock).
                if let Some(created) = value["created_at"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                {
                    let lag = chrono::Utc::now().signed_duration_since(created);
                    value["bench_lag_us"] = json!(lag.num_microseconds());
                }
                if tx.send((received, value)).is_err() {
                    break;
                }
            }
        });
        EventStream { rx, task }
    }

    /// Sends a prompt, waiting out `409 SESSION_BUSY` (the previous run of the session has
    /// published `terminal` but is not released yet); returns the run id and when the
    /// accepted request was sent.
    async fn prompt(&self, session: &str, text: &str) -> (String, Instant) {
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            let sent = Instant::now();
            let (status, body) = self
                .post(
                    &format!("/v1/sessions/{session}/prompts"),
                    &json!({"text": text}),
                )
                .await;
            if status == 202 {
                let run = body["run_id"].as_str().expect("run id").to_owned();
                return (run, sent);
            }
            assert!(
                status == 409 && body["code"] == "SESSION_BUSY" && Instant::now() < deadline,
                "prompt: {status} {body}"
            );
            self.busy_retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// One normal run on `session`: prompt-sent → `terminal`-received, and the run's events.
    async fn run(&self, session: &str, stream: &mut EventStream, first: bool) -> RunSample {
        let (run, sent) = self.prompt(session, RUN_PROMPT).await;
        let mut results = 0;
        let mut events = 0;
        let mut kinds = Vec::new();
        let deadline = sent + RUN_TIMEOUT;
        loop {
            let (at, event) = stream.next_of_run(&run, deadline, &self.server).await;
            events += 1;
            kinds.push(event["type"].as_str().unwrap_or("?").to_owned());
            match event["type"].as_str() {
                Some("tool_result") => {
                    let result = &event["payload"]["result"];
                    assert!(
                        result["is_error"] != true && result.to_string().contains(NOTES_MARKER),
                        "tool_result of run {run}: {event}"
                    );
                    results += 1;
                }
                Some("terminal") => {
                    assert_eq!(
                        event["payload"]["reason"], "end_turn",
                        "terminal of run {run}: {event}"
                    );
                    assert_eq!(results, TOOL_TURNS, "tool results of run {run}");
                    let lag = event["bench_lag_us"].as_i64().unwrap_or(0).max(0);
                    return RunSample {
                        latency: at.duration_since(sent),
                        terminal_lag: Duration::from_micros(lag as u64),
                        events,
                        kinds,
                        first,
                    };
                }
                _ => {}
            }
        }
    }

    /// One approval run; returns the step times.
    async fn approval_run(
        &self,
        session: &str,
        stream: &mut EventStream,
        first: bool,
    ) -> ApprovalSample {
        let (run, sent) = self.prompt(session, APPROVAL_PROMPT).await;
        let deadline = sent + RUN_TIMEOUT;
        let (requested_at, approval) = loop {
            let (at, event) = stream.next_of_run(&run, deadline, &self.server).await;
            match event["type"].as_str() {
                Some("approval_requested") => {
                    break (at, event["payload"]["approval"]["id"].clone());
                }
                Some("terminal") => panic!("run {run} ended without an approval: {event}"),
                _ => {}
            }
        };
        let approval = approval.as_str().expect("approval id").to_owned();
        let (status, body) = self
            .post(
                &format!("/v1/sessions/{session}/approvals/{approval}"),
                &json!({"decision": "allow", "reason": "bench"}),
            )
            .await;
        assert_eq!(status, 200, "answer approval: {body}");
        let answered_at = Instant::now();
        let (mut decided_at, mut result_at) = (None, None);
        let terminal_at = loop {
            let (at, event) = stream.next_of_run(&run, deadline, &self.server).await;
            match event["type"].as_str() {
                Some("approval_decided") => {
                    assert_eq!(event["payload"]["approval"]["status"], "allowed", "{event}");
                    decided_at = Some(at);
                }
                Some("tool_result") => {
                    let result = &event["payload"]["result"];
                    assert!(
                        result["is_error"] != true,
                        "Bash result of run {run}: {event}"
                    );
                    result_at = Some(at);
                }
                Some("terminal") => {
                    assert_eq!(event["payload"]["reason"], "end_turn", "{event}");
                    break at;
                }
                _ => {}
            }
        };
        let since = |t: Instant| t.duration_since(requested_at);
        ApprovalSample {
            first,
            prompt_to_request: requested_at.duration_since(sent),
            answer_response: since(answered_at),
            decided: since(decided_at.expect("approval_decided event")),
            tool_result: since(result_at.expect("tool_result event")),
            terminal: since(terminal_at),
        }
    }

    /// `runs` normal runs by `concurrency` workers over `sessions`, `per_session` runs each.
    async fn run_phase(
        self: &Arc<Self>,
        sessions: Vec<String>,
        runs: usize,
        per_session: usize,
        concurrency: usize,
    ) -> Vec<RunSample> {
        let queue = Arc::new(Mutex::new(VecDeque::from(sessions)));
        let started = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..concurrency {
            let (bench, queue, started) = (self.clone(), queue.clone(), started.clone());
            workers.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                'sessions: loop {
                    let Some(session) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let mut stream = bench.open_stream(&session).await;
                    for index in 0..per_session {
                        if started.fetch_add(1, Ordering::Relaxed) >= runs {
                            break 'sessions;
                        }
                        latencies.push(bench.run(&session, &mut stream, index == 0).await);
                    }
                }
                latencies
            }));
        }
        let mut latencies = Vec::with_capacity(runs);
        for worker in workers {
            latencies.extend(worker.await.expect("worker"));
        }
        assert_eq!(latencies.len(), runs, "every run finished");
        latencies
    }
}

/// A session's SSE stream, read by its own task.
struct EventStream {
    rx: mpsc::UnboundedReceiver<(Instant, Value)>,
    task: tokio::task::JoinHandle<()>,
}

impl EventStream {
    /// The next event of `run` (events of other runs are skipped), bounded by `deadline`.
    async fn next_of_run(
        &mut self,
        run: &str,
        deadline: Instant,
        server: &ServerProcess,
    ) -> (Instant, Value) {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.rx.recv()).await;
            let Ok(Some((at, event))) = next else {
                panic!(
                    "no event of run {run} within the deadline (stream {})\n{}",
                    if next.is_ok() { "closed" } else { "silent" },
                    server.logs()
                );
            };
            assert_ne!(event["type"], "reconnect", "SSE subscriber lagged: {event}");
            if event["run_id"] == run {
                return (at, event);
            }
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct RunSample {
    latency: Duration,
    /// The `terminal` event's `created_at` → received on the stream (delivery, not the run).
    terminal_lag: Duration,
    /// The event types of the run, in order.
    kinds: Vec<String>,
    /// Events of the run received on the stream (`run_started` … `terminal`).
    events: usize,
    /// The first run after the session's stream was opened.
    first: bool,
}

struct ApprovalSample {
    first: bool,
    prompt_to_request: Duration,
    answer_response: Duration,
    decided: Duration,
    tool_result: Duration,
    terminal: Duration,
}

// ---------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len() as f64 * q).ceil() as usize).max(1) - 1;
    sorted[index.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `p50 / p90 / p99 / max` in ms, and how many samples took 40 ms or more.
fn summary(mut samples: Vec<Duration>) -> String {
    if samples.is_empty() {
        return "no samples".into();
    }
    samples.sort();
    let slow = samples
        .iter()
        .filter(|d| **d >= Duration::from_millis(40))
        .count();
    format!(
        "p50 {:>6.2}  p90 {:>6.2}  p99 {:>6.2}  max {:>7.2} ms  (≥ 40 ms: {slow}/{})",
        ms(quantile(&samples, 0.5)),
        ms(quantile(&samples, 0.9)),
        ms(quantile(&samples, 0.99)),
        ms(*samples.last().expect("samples")),
        samples.len()
    )
}

/// Latency of all runs, of the first runs on a new stream and of the later ones; events/run.
fn print_runs(label: &str, samples: &[RunSample], per_session: usize) {
    let pick = |keep: fn(&RunSample) -> bool| {
        samples
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.latency)
            .collect::<Vec<_>>()
    };
    let lag = |keep: fn(&RunSample) -> bool| {
        samples
            .iter()
            .filter(|s| keep(s))
            .map(|s| s.terminal_lag)
            .collect::<Vec<_>>()
    };
    println!("    {label}: {}", summary(pick(|_| true)));
    if per_session > 1 {
        println!(
            "      first run after opening the stream: {}",
            summary(pick(|s| s.first))
        );
        println!(
            "      later runs on the same stream:      {}",
            summary(pick(|s| !s.first))
        );
    }
    println!(
        "    terminal created_at → received (SSE delivery lag): {}",
        summary(lag(|_| true))
    );
    if per_session > 1 {
        println!(
            "      first run after opening the stream: {}",
            summary(lag(|s| s.first))
        );
    }
    let events: usize = samples.iter().map(|s| s.events).sum();
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for kind in &samples[0].kinds {
        match kinds.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind.clone(), 1)),
        }
    }
    println!(
        "    events per run on the stream: {:.1} (one run: {})",
        events as f64 / samples.len() as f64,
        kinds
            .iter()
            .map(|(k, n)| format!("{k}×{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

fn print_cpu(cpu: &CpuDelta, runs: usize) {
    let per = |s: f64| s / runs as f64 * 1e3;
    println!(
        "    CPU per run: server {:.3} ms | fake model {:.3} ms | bench client {:.3} ms \
         (wall {:.2} s, machine busy {:.0} % of all cores incl. other processes)",
        per(cpu.server),
        per(cpu.fake),
        per(cpu.client),
        cpu.wall,
        cpu.machine_busy * 100.0
    );
    println!(
        "    server CPU share of the phase: {:.2} cores",
        cpu.server / cpu.wall
    );
    if let Some(postgres) = cpu.postgres {
        println!(
            "    Postgres backends of the bench database: {:.3} ms CPU per run ({:.2} cores)",
            per(postgres),
            postgres / cpu.wall
        );
    }
}

fn print_rss(label: &str, pid: u32) {
    let (rss, hwm) = rss_kib(pid);
    println!(
        "memory {label:<28} RSS {:>6.1} MiB  (peak {:>6.1} MiB, {} threads)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
        thread_count(pid)
    );
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn main() {
    let seq_runs = env_usize("NORMA_BENCH_SEQ_RUNS", 200).max(1);
    let runs = env_usize("NORMA_BENCH_RUNS", 3000).max(1);
    let concurrency = env_usize("NORMA_BENCH_CONCURRENCY", 48).clamp(1, 64);
    let per_session = env_usize("NORMA_BENCH_RUNS_PER_SESSION", 5).max(1);
    let approvals = env_usize("NORMA_BENCH_APPROVALS", 100).max(1);
    let postgres = std::env::var("NORMA_BENCH_PG").is_ok_and(|v| v == "1");
    let log_filter = std::env::var("NORMA_BENCH_LOG_FILTER").unwrap_or_else(|_| "info".into());

    let fake = Fake::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let database_url = if postgres {
            Some(
                pg::fresh_pg_database()
                    .await
                    .expect("NORMA_BENCH_PG=1 but Postgres is unreachable (see the message above)"),
            )
        } else {
            None
        };
        let mut server = ServerProcess::new(database_url.clone())
            .env("NORMA_PROVIDER__KIND", "anthropic")
            .env(
                "NORMA_PROVIDER__BASE_URL",
                format!("http://{}", fake.model.addr),
            )
            .env("NORMA_PROVIDER__MODEL", "claude-bench")
            .env("NORMA_PROVIDER__API_KEY", "sk-bench-not-secret")
            .env("NORMA_LOG__FILTER", log_filter.clone());
        server.start().await;
        let pid = server.pid().expect("server pid");
        let token = server.token(TENANT);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        println!(
            "server benchmark: real `norma serve` (pid {pid}) on {}, log filter `{log_filter}`; \
             {cores} cores shared by server, bench client and fake model; load average at \
             start: {}",
            if postgres { "Postgres" } else { "SQLite" },
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        println!(
            "one run = prompt → {TOOL_TURNS} Read tool turns → final text (4 model calls over \
             loopback HTTP, Anthropic SSE)"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        print_rss("at rest after start-up", pid);

        let bench = Arc::new(Bench {
            server,
            fake,
            pid,
            ticks: clock_ticks_per_second(),
            token,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(256)
                .build()
                .expect("client"),
            busy_retries: AtomicUsize::new(0),
            postgres: match &database_url {
                Some(url) => Some(
                    PgProbe::connect(url.rsplit('/').next().expect("database name").to_owned())
                        .await,
                ),
                None => None,
            },
        });

        let sessions_for = |runs: usize| runs.div_ceil(per_session);

        // Warm-up.
        let mut sessions = Vec::new();
        for _ in 0..sessions_for(WARMUP_RUNS) {
            sessions.push(bench.create_session(true).await);
        }
        bench.run_phase(sessions, WARMUP_RUNS, per_session, 1).await;

        // 1. Sequential runs.
        let mut sessions = Vec::new();
        for _ in 0..sessions_for(seq_runs) {
            sessions.push(bench.create_session(true).await);
        }
        let transactions = match &bench.postgres {
            Some(probe) => Some(probe.settled_transactions().await),
            None => None,
        };
        let requests = bench.fake.requests();
        bench.busy_retries.store(0, Ordering::Relaxed);
        let before = bench.snapshot().await;
        let latencies = bench.run_phase(sessions, seq_runs, per_session, 1).await;
        let cpu = before.until(&bench.snapshot().await);
        // The server's own background work (lease heartbeat, takeover sweep) is measured over
        // one more idle window and subtracted pro rata.
        let transactions = match (&bench.postgres, transactions) {
            (Some(probe), Some((t0, before))) => {
                let (t1, after) = probe.settled_transactions().await;
                let (t2, idle) = probe.settled_transactions().await;
                let idle_rate = (idle - after) as f64 / t2.duration_since(t1).as_secs_f64();
                let background = idle_rate * t1.duration_since(t0).as_secs_f64();
                Some(((after - before) as f64 - background, idle_rate))
            }
            _ => None,
        };
        assert_eq!(
            bench.fake.requests() - requests,
            seq_runs * 4,
            "model calls"
        );
        println!(
            "\n1. sequential: {seq_runs} runs, one at a time ({per_session} runs per session, \
             SSE open before each prompt)"
        );
        print_runs("prompt → terminal", &latencies, per_session);
        println!(
            "    throughput {:.1} runs/s; 409 SESSION_BUSY retries (prompt right after the \
             previous terminal): {}",
            seq_runs as f64 / cpu.wall,
            bench.busy_retries.load(Ordering::Relaxed)
        );
        print_cpu(&cpu, seq_runs);
        if let Some((transactions, idle_rate)) = transactions {
            println!(
                "    Postgres transactions per run (pg_stat_database; prompt, stream and run): \
                 {:.1}  (idle server: {idle_rate:.2}/s, subtracted)",
                transactions / seq_runs as f64
            );
        }
        print_rss("after the sequential phase", pid);

        // 2. Throughput.
        let mut sessions = Vec::new();
        for _ in 0..sessions_for(runs) {
            sessions.push(bench.create_session(true).await);
        }
        let requests = bench.fake.requests();
        bench.busy_retries.store(0, Ordering::Relaxed);
        let before = bench.snapshot().await;
        let latencies = bench
            .run_phase(sessions, runs, per_session, concurrency)
            .await;
        let cpu = before.until(&bench.snapshot().await);
        assert_eq!(bench.fake.requests() - requests, runs * 4, "model calls");
        println!(
            "\n2. throughput: {runs} runs, {concurrency} in flight over {} sessions \
             ({per_session} runs per session)",
            sessions_for(runs)
        );
        println!(
            "    {:.1} runs/s; 409 SESSION_BUSY retries: {}",
            runs as f64 / cpu.wall,
            bench.busy_retries.load(Ordering::Relaxed)
        );
        print_runs("prompt → terminal under load", &latencies, per_session);
        print_cpu(&cpu, runs);
        print_rss("right after throughput", pid);
        tokio::time::sleep(Duration::from_secs(3)).await;
        print_rss("after 3 s idle", pid);

        // 3. Approvals.
        let mut sessions = Vec::new();
        for _ in 0..approvals.div_ceil(per_session) {
            sessions.push(bench.create_session(false).await);
        }
        let requests = bench.fake.requests();
        bench.busy_retries.store(0, Ordering::Relaxed);
        let before = bench.snapshot().await;
        let mut samples = Vec::new();
        'sessions: for session in &sessions {
            let mut stream = bench.open_stream(session).await;
            for index in 0..per_session {
                if samples.len() == approvals {
                    break 'sessions;
                }
                samples.push(bench.approval_run(session, &mut stream, index == 0).await);
            }
        }
        let cpu = before.until(&bench.snapshot().await);
        assert_eq!(
            bench.fake.requests() - requests,
            approvals * 2,
            "model calls"
        );
        println!(
            "\n3. approvals: {approvals} runs one at a time, each: Bash (default mode → \
             approval_requested) → client answers allow at once → sandboxed Bash → final text"
        );
        let pick = |f: fn(&ApprovalSample) -> Duration| samples.iter().map(f).collect::<Vec<_>>();
        println!(
            "    prompt → approval_requested:          {}",
            summary(pick(|s| s.prompt_to_request))
        );
        println!(
            "      of which first runs on a new stream: {}",
            summary(
                samples
                    .iter()
                    .filter(|s| s.first)
                    .map(|s| s.prompt_to_request)
                    .collect()
            )
        );
        if per_session > 1 {
            println!(
                "      of which later runs:               {}",
                summary(
                    samples
                        .iter()
                        .filter(|s| !s.first)
                        .map(|s| s.prompt_to_request)
                        .collect()
                )
            );
        }
        println!(
            "    approval_requested → answer POST 200: {}",
            summary(pick(|s| s.answer_response))
        );
        println!(
            "    approval_requested → approval_decided: {}",
            summary(pick(|s| s.decided))
        );
        println!(
            "    approval_requested → Bash tool_result: {}",
            summary(pick(|s| s.tool_result))
        );
        println!(
            "    approval_requested → terminal:        {}",
            summary(pick(|s| s.terminal))
        );
        print_cpu(&cpu, approvals);
        println!(
            "    sandboxed Bash children (reaped): {:.3} ms CPU per run",
            cpu.server_children / approvals as f64 * 1e3
        );
        print_rss("at the end", pid);
        let log = bench.server.data_dir().with_file_name("server-1.log");
        let log = std::fs::read_to_string(log).unwrap_or_default();
        println!(
            "server log (filter `{log_filter}`): {} lines, {} KiB in total",
            log.lines().count(),
            log.len() / 1024
        );

        // Shut down; drop the Postgres database.
        let Bench { mut server, .. } = Arc::into_inner(bench).expect("bench owner");
        server.kill();
        if let Some(url) = database_url {
            use sqlx::Connection;
            let name = url.rsplit('/').next().expect("database name").to_owned();
            let mut admin = sqlx::PgConnection::connect(&pg::pg_admin_url())
                .await
                .expect("admin connection");
            sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut admin)
                .await
                .expect("drop bench database");
        }
    });
}
