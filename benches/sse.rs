//! SSE over HTTP against the real server binary (`norma serve`, release build): delivery latency
//! to 1,000 concurrent subscribers of one session, and the server's resident memory at rest, per
//! idle session and per idle SSE connection. SQLite store by default; also Postgres with
//! `NORMA_BENCH_PG=1` (127.0.0.1:5432 or NORMA_TEST_PG_URL). Run: `cargo bench --bench sse`.
//!
//! The subscribers run in this process, on the same cores as the server, so the latencies
//! include the clients' own scheduling. Latency of an event = the client's receive time minus
//! the event's `created_at` (stamped by the server when it appends the event, before commit);
//! `run_started` is also reported against the time the prompt was POSTed.

use futures::StreamExt;
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_norma");
const SECRET: &str = "bench-secret-0123456789abcdef0123456789abcdef";
const TENANT: &str = "bench";

/// Concurrent subscribers of the measured session.
const SUBSCRIBERS: usize = 1_000;
/// Text deltas per run, per scenario (the scripted provider streams 12 characters per delta,
/// all at once: every run is a burst of about `deltas + 5` events).
const RUN_SIZES: [usize; 2] = [5, 50];
/// Runs (prompts) measured per scenario, one after the other.
const RUNS_PER_SIZE: usize = 5;
/// Idle sessions created for the memory figure.
const IDLE_SESSIONS: usize = 10_000;
/// Sessions created before the memory baseline (warms pools, caches and allocator arenas).
const WARM_UP_SESSIONS: usize = 200;
/// Idle SSE connections opened for the memory figure (one per idle session).
const IDLE_STREAMS: usize = 1_000;
/// Requests in flight while creating sessions or opening streams.
const CONCURRENCY: usize = 16;

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

/// The running server process and how to talk to it.
struct Server {
    child: Child,
    base: String,
    token: String,
    client: reqwest::Client,
    _data_dir: tempfile::TempDir,
}

impl Server {
    fn configure(command: &mut Command, data_dir: &std::path::Path, database_url: Option<&str>) {
        // Only the settings below: the server refuses unknown `NORMA_*` keys, and this bench's
        // own variables (NORMA_BENCH_PG, NORMA_TEST_PG_URL) are not server settings.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("NORMA_") {
                command.env_remove(key);
            }
        }
        command
            .env_remove("RUST_LOG")
            .env("NORMA_DATA_DIR", data_dir)
            .env("NORMA_AUTH__HS256_SECRET", SECRET)
            // The scenarios drive the model with session scripts.
            .env("NORMA_ALLOW_SESSION_SCRIPTS", "true")
            .env("NORMA_LOG__FILTER", "warn")
            .env("NORMA_LIMITS__SESSIONS", "100000")
            // Every stream of the bench is one tenant's.
            .env("NORMA_LIMITS__SSE_STREAMS", "100000");
        if let Some(url) = database_url {
            command.env("NORMA_DATABASE_URL", url);
        }
    }

    async fn start(database_url: Option<&str>) -> Self {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let log = std::fs::File::create(data_dir.path().join("server.log")).expect("log file");
        let mut command = Command::new(BIN);
        Self::configure(&mut command, data_dir.path(), database_url);
        let child = command
            .arg("serve")
            .env("NORMA_BIND", format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn norma serve");
        // A token from the CLI, signed with the same configured secret.
        let mut command = Command::new(BIN);
        Self::configure(&mut command, data_dir.path(), database_url);
        let output = command
            .args(["token", "--tenant", TENANT, "--ttl", "2h"])
            .output()
            .expect("norma token");
        assert!(output.status.success(), "norma token failed: {output:?}");
        let token = String::from_utf8(output.stdout)
            .expect("token is UTF-8")
            .trim()
            .to_owned();
        let server = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            token,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(CONCURRENCY)
                .build()
                .expect("client"),
            _data_dir: data_dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = server
                .client
                .get(format!("{}/readyz", server.base))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server was not ready within 60 s; see {}",
                server._data_dir.path().join("server.log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    /// The server's resident set size in KiB (`VmRSS`), after letting it settle.
    async fn rss_kib(&self) -> u64 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS line")
    }

    async fn create_session(&self, config: &Value) -> String {
        let response = self
            .client
            .post(format!("{}/v1/sessions", self.base))
            .bearer_auth(&self.token)
            .json(config)
            .send()
            .await
            .expect("create session");
        assert_eq!(response.status(), 201, "create session");
        let body: Value = response.json().await.expect("session JSON");
        body["id"].as_str().expect("id").to_owned()
    }

    async fn create_sessions(&self, count: usize) -> Vec<String> {
        let empty = json!({});
        futures::stream::iter(0..count)
            .map(|_| self.create_session(&empty))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }

    /// Opens an SSE stream and waits for its response head.
    async fn open_stream(&self, session: &str) -> reqwest::Response {
        let response = self
            .client
            .get(format!("{}/v1/sessions/{session}/stream", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("open stream");
        assert_eq!(response.status(), 200, "open stream");
        response
    }

    async fn open_streams(&self, sessions: &[String]) -> Vec<reqwest::Response> {
        futures::stream::iter(sessions)
            .map(|session| self.open_stream(session))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one subscriber saw.
#[derive(Default)]
struct Seen {
    /// Run index (0-based) and receive time minus `created_at`, per event.
    latencies_ns: Vec<(usize, i128)>,
    /// Receive time of `run_started`, per run.
    run_started_at_ns: Vec<i128>,
    reconnects: usize,
}

/// Reads one SSE stream until `runs` terminal events (or a `reconnect`), recording latencies.
async fn follow(response: reqwest::Response, runs: usize, terminals: Arc<AtomicUsize>) -> Seen {
    let mut seen = Seen::default();
    let mut body = response.bytes_stream();
    let mut buffer: Vec<u8> = Vec::new();
    let mut finished = 0;
    while finished < runs {
        let Some(chunk) = body.next().await else {
            break;
        };
        let Ok(chunk) = chunk else { break };
        let received = now_ns();
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = buffer.drain(..end + 2).collect();
            let block = String::from_utf8_lossy(&block);
            let mut kind = "";
            let mut data = "";
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    kind = value;
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = value;
                }
            }
            match kind {
                "" => continue, // keep-alive comment
                "reconnect" => {
                    seen.reconnects += 1;
                    terminals.fetch_add(runs - finished, Ordering::SeqCst);
                    return seen;
                }
                _ => {}
            }
            let created = data
                .split_once("\"created_at\":\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .and_then(|(stamp, _)| chrono::DateTime::parse_from_rfc3339(stamp).ok())
                .and_then(|stamp| stamp.timestamp_nanos_opt())
                .expect("event has created_at");
            seen.latencies_ns
                .push((finished, received - i128::from(created)));
            if kind == "run_started" {
                seen.run_started_at_ns.push(received);
            }
            if kind == "terminal" {
                finished += 1;
                terminals.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    seen
}

fn percentile(sorted: &[i128], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    Duration::from_nanos(sorted[index].max(0) as u64)
}

fn row(label: &str, value: impl std::fmt::Display) {
    println!("    {label:<40} {value}");
}

fn kib(value: f64) -> String {
    if value.abs() >= 1024.0 * 10.0 {
        format!("{:.1} MiB", value / 1024.0)
    } else {
        format!("{value:.1} KiB")
    }
}

async fn bench(label: &str, database_url: Option<&str>) {
    println!("{label}:");
    let server = Server::start(database_url).await;

    // Memory: at rest, per idle session, per idle SSE connection.
    let at_rest = server.rss_kib().await;
    server.create_sessions(WARM_UP_SESSIONS).await;
    let baseline = server.rss_kib().await;
    let started = Instant::now();
    let sessions = server.create_sessions(IDLE_SESSIONS).await;
    let created_in = started.elapsed();
    let with_sessions = server.rss_kib().await;
    let streams = server.open_streams(&sessions[..IDLE_STREAMS]).await;
    let with_streams = server.rss_kib().await;
    drop(streams);
    let per_session = (with_sessions as f64 - baseline as f64) / IDLE_SESSIONS as f64;
    let per_stream = (with_streams as f64 - with_sessions as f64) / IDLE_STREAMS as f64;
    println!("  memory (VmRSS of the server process)");
    row("at rest after start-up", kib(at_rest as f64));
    row(
        &format!("after {WARM_UP_SESSIONS} warm-up sessions"),
        kib(baseline as f64),
    );
    row(
        &format!("after {IDLE_SESSIONS} more idle sessions"),
        format!(
            "{} = {} per session (created in {:.1} s, {:.0}/s)",
            kib(with_sessions as f64),
            kib(per_session),
            created_in.as_secs_f64(),
            IDLE_SESSIONS as f64 / created_in.as_secs_f64()
        ),
    );
    row(
        &format!("+ {IDLE_STREAMS} idle SSE streams, 1 per session"),
        format!(
            "{} = {} per stream",
            kib(with_streams as f64),
            kib(per_stream)
        ),
    );

    // Latency: SUBSCRIBERS streams of one session; RUNS_PER_SIZE runs per size in RUN_SIZES.
    let sizes: Vec<usize> = RUN_SIZES
        .iter()
        .flat_map(|size| std::iter::repeat_n(*size, RUNS_PER_SIZE))
        .collect();
    let turns: Vec<Value> = sizes
        .iter()
        .map(|deltas| json!({ "text": "0123456789ab".repeat(*deltas) }))
        .collect();
    let runs = sizes.len();
    let session = server
        .create_session(&json!({ "model": { "script": { "turns": turns } } }))
        .await;
    let before_subscribers = server.rss_kib().await;
    let ids = vec![session.clone(); SUBSCRIBERS];
    let responses = server.open_streams(&ids).await;
    let with_subscribers = server.rss_kib().await;
    row(
        &format!("+ {SUBSCRIBERS} SSE streams of one session"),
        format!(
            "+{} = {} per stream",
            kib(with_subscribers as f64 - before_subscribers as f64),
            kib((with_subscribers as f64 - before_subscribers as f64) / SUBSCRIBERS as f64)
        ),
    );
    let terminals = Arc::new(AtomicUsize::new(0));
    let followers: Vec<_> = responses
        .into_iter()
        .map(|response| tokio::spawn(follow(response, runs, terminals.clone())))
        .collect();
    let mut posted_at = Vec::new();
    let mut took = Vec::new();
    let cpu_before = (cpu_ticks(&server.child.id().to_string()), cpu_ticks("self"));
    for run in 1..=runs {
        posted_at.push(now_ns());
        let started = Instant::now();
        let response = server
            .client
            .post(format!("{}/v1/sessions/{session}/prompts", server.base))
            .bearer_auth(&server.token)
            .json(&json!({ "text": format!("run {run}") }))
            .send()
            .await
            .expect("prompt");
        assert_eq!(response.status(), 202, "prompt accepted");
        let deadline = Instant::now() + Duration::from_secs(60);
        while terminals.load(Ordering::SeqCst) < run * SUBSCRIBERS {
            assert!(
                Instant::now() < deadline,
                "run {run} did not reach every subscriber within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        took.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu_after = (cpu_ticks(&server.child.id().to_string()), cpu_ticks("self"));
    let mut latencies = vec![Vec::new(); runs];
    let mut run_started = vec![Vec::new(); runs];
    let mut reconnects = 0;
    for follower in followers {
        let seen = follower.await.expect("subscriber task");
        for (run, latency) in seen.latencies_ns {
            latencies[run].push(latency);
        }
        reconnects += seen.reconnects;
        for (run, received) in seen.run_started_at_ns.iter().enumerate() {
            run_started[run].push(received - posted_at[run]);
        }
    }
    println!(
        "  SSE delivery to {SUBSCRIBERS} subscribers of one session (event created_at → received by the client)"
    );
    for (group, deltas) in RUN_SIZES.iter().enumerate() {
        let group_runs = group * RUNS_PER_SIZE..(group + 1) * RUNS_PER_SIZE;
        let mut all: Vec<i128> = group_runs
            .clone()
            .flat_map(|run| latencies[run].clone())
            .collect();
        all.sort_unstable();
        let mut first: Vec<i128> = group_runs
            .clone()
            .flat_map(|run| run_started[run].clone())
            .collect();
        first.sort_unstable();
        let per_run: Vec<String> = group_runs
            .clone()
            .map(|run| {
                let mut one = latencies[run].clone();
                one.sort_unstable();
                format!("{:.0?}", percentile(&one, 0.99))
            })
            .collect();
        let last_delivered: Vec<String> =
            group_runs.map(|run| format!("{:.0?}", took[run])).collect();
        println!(
            "    runs of {deltas} deltas (~{} events) x{RUNS_PER_SIZE}: {} deliveries, p50 {:.1?}, p99 {:.1?}, max {:.1?}",
            all.len() / (SUBSCRIBERS * RUNS_PER_SIZE),
            all.len(),
            percentile(&all, 0.5),
            percentile(&all, 0.99),
            percentile(&all, 1.0),
        );
        println!("      p99 per run: {}", per_run.join(", "));
        println!(
            "      prompt POSTed → every subscriber got terminal: {}",
            last_delivered.join(", ")
        );
        println!(
            "      prompt POSTed → run_started received: p50 {:.1?}, p99 {:.1?}",
            percentile(&first, 0.5),
            percentile(&first, 0.99),
        );
    }
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    println!(
        "    reconnects: {reconnects}; CPU during the runs: server {:.2} s, subscribers (this process) {:.2} s",
        (cpu_after.0 - cpu_before.0) as f64 / ticks,
        (cpu_after.1 - cpu_before.1) as f64 / ticks,
    );
}

/// utime + stime of a process (`self` or a pid), in clock ticks.
fn cpu_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the command name (which may contain spaces) start at field 3.
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .expect("stat format")
        .1
        .split(' ')
        .collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// A fresh Postgres database `(admin url, name, url)`, or `None` when Postgres is unreachable.
async fn fresh_pg_database() -> Option<(String, String, String)> {
    use sqlx::Connection;
    let admin = std::env::var("NORMA_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
    let name = format!("norma_bench_sse_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .ok()?;
    let base = admin
        .rsplit_once('/')
        .map_or(admin.as_str(), |(base, _)| base);
    let url = format!("{base}/{name}");
    Some((admin, name, url))
}

/// Drops the bench database (the server using it has exited).
async fn drop_pg_database(admin: &str, name: &str) {
    use sqlx::Connection;
    if let Ok(mut conn) = sqlx::PgConnection::connect(admin).await
        && let Err(error) = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&mut conn)
            .await
    {
        println!("  (could not drop {name}: {error})");
    }
}

/// Lets this process (and the server it spawns) hold thousands of sockets.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    let needed = (2 * (SUBSCRIBERS + IDLE_STREAMS) + 512) as u64;
    if soft < needed {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("setrlimit");
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    assert!(
        soft >= needed,
        "RLIMIT_NOFILE {soft} < {needed}; raise the hard limit"
    );
}

fn main() {
    raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        println!("SSE over HTTP against `norma serve` ({BIN})");
        bench("sqlite (default store)", None).await;
        if std::env::var("NORMA_BENCH_PG").is_ok_and(|v| v == "1") {
            match fresh_pg_database().await {
                Some((admin, name, url)) => {
                    bench("postgres", Some(&url)).await;
                    drop_pg_database(&admin, &name).await;
                }
                None => println!("postgres: skipped, unreachable"),
            }
        } else {
            println!("postgres: not run (set NORMA_BENCH_PG=1)");
        }
    });
}
