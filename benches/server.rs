//! End-to-end server benchmark, shaped like a client: the real `norma serve` release binary
//! as a child process, driven over loopback HTTP, with a fake Anthropic Messages server inside
//! this process on its own OS thread.
//!
//! ```sh
//! cargo build --release && cargo bench --bench server      # SQLite (the default store)
//! NORMA_BENCH_PG=1 cargo bench --bench server               # a fresh Postgres database
//! ```
//!
//! One run is what a client does for one task: `POST /v1/sessions` (a new session), open its
//! SSE stream (`GET …/stream`), `POST …/prompts`, read the stream until the run's `terminal`.
//! The model answers 3 tool turns (`Read` of a small file in the session workspace: read-only,
//! so allowed without approval in the default mode) and a final text: 4 streamed model calls.
//! The fake answers from the request alone (it counts the assistant messages after the bench
//! prompt), so concurrent runs do not interfere. Every run is checked: `terminal` reason
//! `end_turn`, three successful `tool_result` events carrying the file's text, 4 model calls.
//! The file is put into the workspace directory by the bench (the client has no upload API;
//! this is the only file-system shortcut).
//!
//! Phases: 20 warm-up runs, then for each in-flight count (1, 16, 64) `NORMA_BENCH_RUNS` (400)
//! measured runs with that many client tasks each doing one run after the other. Latency
//! `e2e` is session POST sent → `terminal` received; `prompt` is prompt POST sent → `terminal`.
//! Then approvals at 1 and 16 in flight: the model calls `Write` (a file edit: asks in the
//! default mode); the client answers `allow` as soon as `approval_requested` arrives; the
//! approval round trip is from sending `POST …/approvals/{id}` to the next
//! `approval_requested` or `terminal` event of that run on its stream.
//!
//! CPU: the server's utime + stime (`/proc/<pid>/stat`) over a phase divided by its runs; on
//! Postgres, the same for the backends of the bench database (`pg_stat_activity`), reported
//! separately. The fake model's CPU (`getrusage(RUSAGE_THREAD)` on its thread) and the bench
//! client's (`RUSAGE_SELF` minus the fake) are printed beside, with the machine's load average:
//! client, fake, server (and Postgres) share the machine's cores with whatever else runs.
//! The server's CPU is also split into user and system (kernel) time, beside its threads'
//! context switches per run (`/proc/<pid>/task/*/status`): where a lone run's CPU goes that
//! callgrind cannot see (system calls, thread wake-ups).
//! Memory: the server's `VmRSS` at rest after start-up and after the phases, split into
//! anonymous memory (what the server allocated) and file-backed pages (its code, shared with
//! the page cache).
//!
//! Settings (environment): `NORMA_BENCH_PG=1`, `NORMA_BENCH_RUNS` (400 per phase),
//! `NORMA_BENCH_INFLIGHT` (`1,16,64`), `NORMA_BENCH_APPROVALS` (100 per phase, 0 skips),
//! `NORMA_BENCH_APPROVAL_INFLIGHT` (`1,16`), `NORMA_BENCH_WARMUP` (20),
//! `NORMA_BENCH_LOG_FILTER` (the server's log filter, default `info` like a default server;
//! logs go to a file), `NORMA_BENCH_SERVER_PRELOAD` (an `LD_PRELOAD` for the server only: an
//! allocator trial such as `/usr/lib/x86_64-linux-gnu/libmimalloc.so.2` without a rebuild),
//! `NORMA_BENCH_CALLGRIND=1` (the server under Valgrind's callgrind: its instructions per run
//! in each phase, a count that does not drift with the machine; see `support/callgrind.rs`).
//! `NORMA_BENCH_RUNS=100 NORMA_BENCH_INFLIGHT=16 NORMA_BENCH_APPROVALS=0` is a quick check.

#[path = "support/callgrind.rs"]
mod callgrind;
#[path = "../tests/support/fake_llm.rs"]
mod fake_llm;
#[path = "support/model_thread.rs"]
mod model_thread;
#[path = "../tests/support/pg.rs"]
mod pg;
#[path = "../tests/support/server.rs"]
mod server;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::Response;
use axum::routing::post;
use callgrind::Callgrind;
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
/// The prompt of an approval run: the fake answers with one `Write` turn (a file edit: needs
/// approval in the default mode) and a text.
const APPROVAL_PROMPT: &str = "bench approval: write answer.txt";
/// A line of the file the `Read` calls return; every tool_result must carry it.
const NOTES_MARKER: &str = "norma-bench-notes-7f3a";
/// Bound for one run (or one approval step) to finish.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound for waiting out `429 TENANT_LIMIT` (runs in flight: a finished run is released just
/// after its `terminal`).
const LIMIT_TIMEOUT: Duration = Duration::from_secs(5);

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of in-flight counts (each 1..=64, the default per-tenant limit of
/// runs in flight).
fn env_list(key: &str, default: &str) -> Vec<usize> {
    std::env::var(key)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .map(|n: usize| n.clamp(1, 64))
        .collect()
}

/// The 1, 5 and 15 minute load averages of the machine.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
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

/// A process's CPU in seconds, from `/proc/<pid>/stat`.
struct ProcCpu {
    /// utime + stime.
    total: f64,
    /// stime: the kernel's part of `total`.
    system: f64,
    /// cutime + cstime (reaped children).
    children: f64,
}

fn proc_cpu_seconds(pid: u32, ticks: f64) -> ProcCpu {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the command name (which may contain spaces) start at field 3 (state).
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<f64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // utime, stime, cutime, cstime are fields 14..=17 → indexes 11..=14 here.
    ProcCpu {
        total: (fields[11] + fields[12]) / ticks,
        system: fields[12] / ticks,
        children: (fields[13] + fields[14]) / ticks,
    }
}

/// Context switches (voluntary and not) of `pid`'s threads alive now, summed from
/// `/proc/<pid>/task/*/status`: each one a thread put to sleep and woken again.
fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
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

/// `(VmRSS, VmHWM, RssAnon, RssFile)` of `pid` in KiB. `RssFile` is mostly the binary's own
/// code pages, shared with the page cache (and mapped in read-ahead chunks); `RssAnon` is the
/// memory the server allocated.
fn rss_kib(pid: u32) -> (u64, u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (
        field("VmRSS:"),
        field("VmHWM:"),
        field("RssAnon:"),
        field("RssFile:"),
    )
}

fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// A snapshot of every CPU counter, taken at the start and end of a phase.
struct CpuSnapshot {
    at: Instant,
    server: f64,
    /// The kernel's part of `server`.
    server_system: f64,
    /// Context switches of the server's threads.
    server_switches: u64,
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
    server_system: f64,
    /// Threads that exit during the phase are missed (the server's threads live as long).
    server_switches: u64,
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
            server_system: later.server_system - self.server_system,
            server_switches: later.server_switches.saturating_sub(self.server_switches),
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
            "Write",
            &json!({"file_path": "answer.txt", "content": "approved\n"}),
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
    limit_retries: AtomicUsize,
    postgres: Option<PgProbe>,
}

/// Looks at the bench database from the admin database: the pids of its backends.
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

    async fn backends(&self) -> Vec<u32> {
        let rows: Vec<(i32,)> =
            sqlx::query_as("SELECT pid FROM pg_stat_activity WHERE datname = $1")
                .bind(&self.database)
                .fetch_all(&mut *self.admin.lock().await)
                .await
                .expect("pg_stat_activity");
        rows.into_iter().map(|(pid,)| pid as u32).collect()
    }
}

/// A run's outcome as the client saw it.
struct RunSample {
    /// Session POST sent → `terminal` received.
    e2e: Duration,
    /// Prompt POST sent → `terminal` received.
    prompt: Duration,
    /// Events of the run received on the stream (`run_started` … `terminal`).
    events: usize,
}

/// An approval run as the client saw it.
struct ApprovalSample {
    /// Prompt POST sent → `approval_requested` received.
    prompt_to_request: Duration,
    /// Approval POST sent → the run's next `approval_requested` or `terminal` received.
    round_trip: Duration,
}

impl Bench {
    async fn snapshot(&self) -> CpuSnapshot {
        let mut postgres = HashMap::new();
        if let Some(probe) = &self.postgres {
            for pid in probe.backends().await {
                if std::path::Path::new(&format!("/proc/{pid}/stat")).exists() {
                    postgres.insert(pid, proc_cpu_seconds(pid, self.ticks).total);
                }
            }
        }
        let fake = self.fake.cpu_seconds().await;
        let server = proc_cpu_seconds(self.pid, self.ticks);
        CpuSnapshot {
            at: Instant::now(),
            server: server.total,
            server_system: server.system,
            server_switches: context_switches(self.pid),
            server_children: server.children,
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
                let value = if event.event == "reconnect" {
                    json!({"type": "reconnect", "data": event.data})
                } else {
                    serde_json::from_str(&event.data).unwrap_or(Value::Null)
                };
                if tx.send((received, value)).is_err() {
                    break;
                }
            }
        });
        EventStream { rx, task }
    }

    /// Sends a prompt, waiting out `429 TENANT_LIMIT` (runs in flight: at 64 in flight a run
    /// that has published `terminal` may not be released yet); returns the run id and when
    /// the accepted request was sent.
    async fn prompt(&self, session: &str, text: &str) -> (String, Instant) {
        let deadline = Instant::now() + LIMIT_TIMEOUT;
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
                status == 429 && body["code"] == "TENANT_LIMIT" && Instant::now() < deadline,
                "prompt: {status} {body}"
            );
            self.limit_retries.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// One client run: new session, its stream, the prompt, events until `terminal`.
    async fn client_run(&self) -> RunSample {
        let started = Instant::now();
        let session = self.create_session(true).await;
        let mut stream = self.open_stream(&session).await;
        let (run, sent) = self.prompt(&session, RUN_PROMPT).await;
        let mut results = 0;
        let mut events = 0;
        let deadline = sent + RUN_TIMEOUT;
        loop {
            let (at, event) = stream.next_of_run(&run, deadline, &self.server).await;
            events += 1;
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
                    return RunSample {
                        e2e: at.duration_since(started),
                        prompt: at.duration_since(sent),
                        events,
                    };
                }
                _ => {}
            }
        }
    }

    /// One approval run: new session, its stream, the prompt; `allow` on `approval_requested`.
    async fn approval_run(&self) -> ApprovalSample {
        let session = self.create_session(false).await;
        let mut stream = self.open_stream(&session).await;
        let (run, sent) = self.prompt(&session, APPROVAL_PROMPT).await;
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
        let answered = Instant::now();
        let (status, body) = self
            .post(
                &format!("/v1/sessions/{session}/approvals/{approval}"),
                &json!({"decision": "allow", "reason": "bench"}),
            )
            .await;
        assert_eq!(status, 200, "answer approval: {body}");
        let mut result = false;
        let next_at = loop {
            let (at, event) = stream.next_of_run(&run, deadline, &self.server).await;
            match event["type"].as_str() {
                Some("tool_result") => {
                    assert!(
                        event["payload"]["result"]["is_error"] != true,
                        "Write result of run {run}: {event}"
                    );
                    result = true;
                }
                Some("terminal") => {
                    assert_eq!(event["payload"]["reason"], "end_turn", "{event}");
                    assert!(result, "run {run} ended without the Write result");
                    break at;
                }
                Some("approval_requested") => break at,
                _ => {}
            }
        };
        ApprovalSample {
            prompt_to_request: requested_at.duration_since(sent),
            round_trip: next_at.duration_since(answered),
        }
    }

    /// `runs` jobs by `in_flight` client tasks, each doing one job after the other.
    async fn phase<T, F, Fut>(self: &Arc<Self>, runs: usize, in_flight: usize, job: F) -> Vec<T>
    where
        T: Send + 'static,
        F: Fn(Arc<Self>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = T> + Send,
    {
        let started = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for _ in 0..in_flight {
            let (bench, started, job) = (self.clone(), started.clone(), job.clone());
            workers.push(tokio::spawn(async move {
                let mut samples = Vec::new();
                while started.fetch_add(1, Ordering::Relaxed) < runs {
                    samples.push(job(bench.clone()).await);
                }
                samples
            }));
        }
        let mut samples = Vec::with_capacity(runs);
        for worker in workers {
            samples.extend(worker.await.expect("worker"));
        }
        assert_eq!(samples.len(), runs, "every run finished");
        samples
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

/// `p50 / p90 / p99 / max` in ms.
fn summary(mut samples: Vec<Duration>) -> String {
    if samples.is_empty() {
        return "no samples".into();
    }
    samples.sort();
    format!(
        "p50 {:>6.2}  p90 {:>6.2}  p99 {:>6.2}  max {:>7.2} ms",
        ms(quantile(&samples, 0.5)),
        ms(quantile(&samples, 0.9)),
        ms(quantile(&samples, 0.99)),
        ms(*samples.last().expect("samples")),
    )
}

/// A table row of the server's instructions per run in a phase (`NORMA_BENCH_CALLGRIND`).
fn instructions_line(phase: &str, instructions: u64, runs: usize) -> String {
    let per_run = instructions / runs as u64;
    println!("    server instructions per run (callgrind): {per_run}");
    format!("| {phase} | {per_run} |")
}

fn print_cpu(cpu: &CpuDelta, runs: usize) {
    let per = |s: f64| s / runs as f64 * 1e3;
    println!(
        "    CPU per run: server {:.3} ms | fake model {:.3} ms | bench client {:.3} ms \
         (machine busy {:.0} % of all cores incl. other processes)",
        per(cpu.server),
        per(cpu.fake),
        per(cpu.client),
        cpu.machine_busy * 100.0
    );
    println!(
        "    server per run: user {:.3} ms + system {:.3} ms, {:.1} context switches",
        per(cpu.server - cpu.server_system),
        per(cpu.server_system),
        cpu.server_switches as f64 / runs as f64
    );
    if let Some(postgres) = cpu.postgres {
        println!(
            "    Postgres' own CPU per run (backends of the bench database): {:.3} ms",
            per(postgres)
        );
    }
    if cpu.server_children > 0.0 {
        println!(
            "    server children (reaped): {:.3} ms CPU per run",
            per(cpu.server_children)
        );
    }
}

fn print_rss(label: &str, pid: u32) {
    let (rss, hwm, anon, file) = rss_kib(pid);
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "memory {label:<28} RSS {:>6.1} MiB = anonymous {:>6.1} + file-backed {:>6.1}  (peak {:>6.1} MiB, {} threads)",
        mib(rss),
        mib(anon),
        mib(file),
        mib(hwm),
        thread_count(pid)
    );
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn main() {
    let runs = env_usize("NORMA_BENCH_RUNS", 400).max(1);
    let in_flight = env_list("NORMA_BENCH_INFLIGHT", "1,16,64");
    let approvals = env_usize("NORMA_BENCH_APPROVALS", 100);
    let approval_in_flight = env_list("NORMA_BENCH_APPROVAL_INFLIGHT", "1,16");
    let warmup = env_usize("NORMA_BENCH_WARMUP", 20);
    let postgres = std::env::var("NORMA_BENCH_PG").is_ok_and(|v| v == "1");
    let log_filter = std::env::var("NORMA_BENCH_LOG_FILTER").unwrap_or_else(|_| "info".into());
    let callgrind = std::env::var("NORMA_BENCH_CALLGRIND")
        .is_ok_and(|v| v == "1")
        .then(Callgrind::new);

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
            .env("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS", "[\"127.0.0.0/8\"]")
            .env("NORMA_LOG__FILTER", log_filter.clone());
        if let Ok(preload) = std::env::var("NORMA_BENCH_SERVER_PRELOAD") {
            // An allocator trial without a rebuild (e.g. Debian's libmimalloc.so.2).
            server = server.env("LD_PRELOAD", preload);
        }
        if let Some(callgrind) = &callgrind {
            let wrapper = callgrind.wrapper();
            server = server.wrapped(&wrapper.iter().map(String::as_str).collect::<Vec<_>>());
        }
        server.start().await;
        let pid = server.pid().expect("server pid");
        let token = server.token(TENANT);
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        println!(
            "server benchmark: `norma serve` (pid {pid}) on {}, log filter `{log_filter}`; \
             {cores} cores shared by server, bench client, fake model and other processes; \
             load average at start: {}",
            if postgres { "Postgres" } else { "SQLite" },
            load_average()
        );
        println!(
            "one run = POST session → open its SSE stream → POST prompt → {TOOL_TURNS} Read \
             tool turns → final text → terminal (4 model calls over loopback HTTP)"
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
                .tcp_nodelay(true)
                .build()
                .expect("client"),
            limit_retries: AtomicUsize::new(0),
            postgres: match &database_url {
                Some(url) => Some(
                    PgProbe::connect(url.rsplit('/').next().expect("database name").to_owned())
                        .await,
                ),
                None => None,
            },
        });

        if warmup > 0 {
            bench
                .phase(warmup, 1, |bench| async move { bench.client_run().await })
                .await;
        }

        let mut table = Vec::new();
        let mut instructions = Vec::new();
        for &n in &in_flight {
            let requests = bench.fake.requests();
            bench.limit_retries.store(0, Ordering::Relaxed);
            let load = load_average();
            let before = bench.snapshot().await;
            callgrind.as_ref().inspect(|cg| cg.zero(pid));
            let samples = bench
                .phase(runs, n, |bench| async move { bench.client_run().await })
                .await;
            let cpu = before.until(&bench.snapshot().await);
            if let Some(cg) = &callgrind {
                instructions.push(instructions_line(&format!("runs, {n} in flight"), cg.dump(pid), runs));
            }
            assert_eq!(bench.fake.requests() - requests, runs * 4, "model calls");
            let e2e: Vec<Duration> = samples.iter().map(|s| s.e2e).collect();
            let prompt: Vec<Duration> = samples.iter().map(|s| s.prompt).collect();
            println!(
                "\nruns, {n} in flight: {runs} runs in {:.2} s = {:.1} runs/s \
                 (load average before: {load}; 429 TENANT_LIMIT retries: {})",
                cpu.wall,
                runs as f64 / cpu.wall,
                bench.limit_retries.load(Ordering::Relaxed)
            );
            println!("    e2e (session POST → terminal): {}", summary(e2e.clone()));
            println!("    prompt POST → terminal:        {}", summary(prompt));
            println!(
                "    events per run on the stream: {:.1}",
                samples.iter().map(|s| s.events).sum::<usize>() as f64 / runs as f64
            );
            print_cpu(&cpu, runs);
            let mut sorted = e2e;
            sorted.sort();
            table.push(format!(
                "| {n} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {load} |",
                runs as f64 / cpu.wall,
                cpu.server / runs as f64 * 1e3,
                ms(quantile(&sorted, 0.5)),
                ms(quantile(&sorted, 0.99)),
                cpu.postgres
                    .map_or("–".into(), |p| format!("{:.2}", p / runs as f64 * 1e3)),
            ));
        }

        for &n in approval_in_flight.iter().filter(|_| approvals > 0) {
            let requests = bench.fake.requests();
            let load = load_average();
            let before = bench.snapshot().await;
            callgrind.as_ref().inspect(|cg| cg.zero(pid));
            let samples = bench
                .phase(approvals, n, |bench| async move { bench.approval_run().await })
                .await;
            let cpu = before.until(&bench.snapshot().await);
            if let Some(cg) = &callgrind {
                let label = format!("approvals, {n} in flight");
                instructions.push(instructions_line(&label, cg.dump(pid), approvals));
            }
            assert_eq!(bench.fake.requests() - requests, approvals * 2, "model calls");
            println!(
                "\napprovals, {n} in flight: {approvals} runs (Write asks → client allows at \
                 once → Write → final text) in {:.2} s (load average before: {load})",
                cpu.wall
            );
            println!(
                "    approval round trip (approval POST → next approval_requested/terminal): {}",
                summary(samples.iter().map(|s| s.round_trip).collect())
            );
            println!(
                "    prompt POST → approval_requested: {}",
                summary(samples.iter().map(|s| s.prompt_to_request).collect())
            );
            print_cpu(&cpu, approvals);
            let mut sorted: Vec<Duration> = samples.iter().map(|s| s.round_trip).collect();
            sorted.sort();
            table.push(format!(
                "| approvals, {n} in flight | RTT p50 {:.2} ms, p99 {:.2} ms | {:.2} | | | | {load} |",
                ms(quantile(&sorted, 0.5)),
                ms(quantile(&sorted, 0.99)),
                cpu.server / approvals as f64 * 1e3,
            ));
        }

        tokio::time::sleep(Duration::from_secs(3)).await;
        print_rss("at rest after the phases", pid);
        println!(
            "\n| in flight | runs/s | server CPU/run ms | e2e p50 ms | e2e p99 ms | Postgres CPU/run ms | load average |"
        );
        println!("|---|---|---|---|---|---|---|");
        for row in table {
            println!("{row}");
        }
        if !instructions.is_empty() {
            println!("\n| phase | server instructions per run (callgrind) |\n|---|---|");
            for row in instructions {
                println!("{row}");
            }
        }

        // Shut down; drop the Postgres database.
        let Bench { mut server, .. } = Arc::into_inner(bench).expect("bench owner");
        if callgrind.is_some() {
            // Valgrind writes its last dump as the server exits: stop it, not kill it.
            server.terminate(Duration::from_secs(300)).await;
        } else {
            server.kill();
        }
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
