//! The real `norma serve` binary as a child process: started on a fixed loopback port with its
//! own data directory, killed with SIGKILL, restarted on the same port, data dir and database.
//!
//! ```ignore
//! let mut server = ServerProcess::new(Some(pg_url)).env("NORMA_REPLICA_ID", "replica-a");
//! server.start().await;
//! server.kill(); // SIGKILL, like a crash
//! server.start().await; // same port, same data dir, same database
//! server.terminate(Duration::from_secs(20)).await; // SIGTERM, bounded wait for the exit
//! ```
//!
//! The child is killed when the [`ServerProcess`] is dropped, so a failing test leaves nothing
//! behind. Its stdout and stderr go to `server-<n>.log` files next to (not inside) the data dir;
//! [`ServerProcess::logs`] returns them for failure messages.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use norma::auth::{JwtVerifier, TokenRequest};
use norma::config::AuthSettings;
use secrecy::SecretString;
use serde_json::Value;
use tokio::time::Instant;

/// The HS256 secret, issuer and audience the child trusts.
pub const SECRET: &str = "crash-test-secret-0123456789abcdef0123456789abcdef";
pub const ISSUER: &str = "norma-crash-test";
pub const AUDIENCE: &str = "norma-crash-api";

/// How long a start may take until `/readyz` answers 200.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One `norma serve` child process and everything that survives its restarts.
pub struct ServerProcess {
    /// Holds the data dir (`data/`) and the logs.
    root: tempfile::TempDir,
    port: u16,
    env: Vec<(String, String)>,
    /// A command the binary runs under (e.g. `unshare … sh -c '…; exec "$@"' sh`), if any.
    wrapper: Vec<String>,
    child: Option<Child>,
    starts: usize,
    verifier: JwtVerifier,
    pub client: reqwest::Client,
}

impl ServerProcess {
    /// A server (not yet started) with a fresh data dir and a free loopback port; on
    /// `database_url` when given, else on the default SQLite file in the data dir.
    pub fn new(database_url: Option<String>) -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(root.path().join("data")).expect("data dir");
        let port = free_port();
        let mut auth = AuthSettings {
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            ..AuthSettings::default()
        };
        auth.hs256_secret = Some(SecretString::from(SECRET));
        let verifier = JwtVerifier::from_settings(&auth, root.path()).expect("verifier");
        let mut env = vec![
            ("NORMA_BIND".into(), format!("127.0.0.1:{port}")),
            (
                "NORMA_DATA_DIR".into(),
                root.path().join("data").display().to_string(),
            ),
            ("NORMA_AUTH__HS256_SECRET".into(), SECRET.into()),
            ("NORMA_AUTH__ISSUER".into(), ISSUER.into()),
            ("NORMA_AUTH__AUDIENCE".into(), AUDIENCE.into()),
            ("NORMA_LOG__FILTER".into(), "info".into()),
            // Tests drive the model with session scripts; a server with a key configured
            // refuses them unless told otherwise (override with "false" to test that).
            ("NORMA_ALLOW_SESSION_SCRIPTS".into(), "true".into()),
            // Plain logs for failure messages.
            ("NO_COLOR".into(), "1".into()),
        ];
        if let Some(url) = database_url {
            env.push(("NORMA_DATABASE_URL".into(), url));
        }
        Self {
            root,
            port,
            env,
            wrapper: Vec::new(),
            child: None,
            starts: 0,
            verifier,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
        }
    }

    /// Sets (or replaces) an environment variable of every later start.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Runs every later start under `wrapper` (program and arguments, followed by the binary
    /// and `serve`); the wrapper must `exec` the binary so the child's pid stays the server's.
    pub fn wrapped(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Removes an environment variable from every later start (e.g. the HS256 secret, for
    /// development mode).
    pub fn without_env(mut self, key: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self
    }

    /// Trusts tokens signed with `secret` from now on ([`Self::token`] mints with it), e.g.
    /// the development key the server generated in its data dir.
    pub fn use_signing_secret(&mut self, secret: &str) {
        let mut auth = AuthSettings {
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            ..AuthSettings::default()
        };
        auth.hs256_secret = Some(SecretString::from(secret.to_owned()));
        self.verifier = JwtVerifier::from_settings(&auth, self.root.path()).expect("verifier");
    }

    /// Spawns `norma serve` and waits (bounded) until `/readyz` answers 200.
    pub async fn start(&mut self) {
        assert!(self.child.is_none(), "server already running");
        self.child = Some(self.spawn());
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .unwrap()
                .try_wait()
                .expect("child status")
            {
                self.child = None;
                panic!(
                    "norma serve exited with {status} during start-up\n{}",
                    self.logs()
                );
            }
            if let Ok(response) = self.client.get(self.url("/readyz")).send().await
                && response.status() == 200
            {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "norma serve not ready within {START_TIMEOUT:?}\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Spawns `norma serve` expecting it to refuse to start: waits (bounded) for it to exit
    /// and returns its exit status and its output. Panics if it is still running (or ready).
    pub async fn start_expecting_refusal(&mut self) -> (std::process::ExitStatus, String) {
        assert!(self.child.is_none(), "server already running");
        let mut child = self.spawn();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().expect("child status") {
                let log = std::fs::read_to_string(self.log_path(self.starts)).unwrap_or_default();
                return (status, log);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "norma serve did not exit within {START_TIMEOUT:?}\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Spawns `norma serve` with this server's environment, output to the next log file.
    fn spawn(&mut self) -> Child {
        self.starts += 1;
        let log_path = self.log_path(self.starts);
        let log = std::fs::File::create(&log_path).expect("log file");
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(env!("CARGO_BIN_EXE_norma"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_norma")),
        };
        command
            .arg("serve")
            .current_dir(self.root.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log);
        // Nothing from the test's own environment configures the child.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("NORMA_") || key == "RUST_LOG" {
                command.env_remove(key);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command.spawn().expect("spawn norma serve")
    }

    /// Kills the child with SIGKILL (no shutdown code runs) and reaps it.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("server running");
        child.kill().expect("SIGKILL norma serve");
        child.wait().expect("reap norma serve");
    }

    /// Sends `signal` to the child without waiting for it.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.pid().expect("server running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
            .expect("signal norma serve");
    }

    /// Sends SIGTERM (a graceful shutdown) and waits until the child exits, at most `within`
    /// (panics with the logs past it). Returns its exit status.
    pub async fn terminate(&mut self, within: Duration) -> std::process::ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait_exit(within).await
    }

    /// Waits until the child exits, at most `within` (panics with the logs past it), and
    /// reaps it.
    pub async fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            let child = self.child.as_mut().expect("server running");
            if let Some(status) = child.try_wait().expect("child status") {
                self.child = None;
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "norma serve still running {within:?} after SIGTERM\n{}",
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Whether a child is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The child's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    /// The workspace directory of a session (`<data>/workspaces/<tenant>/<session>`), for a
    /// tenant id that is a short `[A-Za-z0-9_-]` token.
    pub fn workspace(&self, tenant: &str, session: &str) -> PathBuf {
        self.data_dir()
            .join("workspaces")
            .join(tenant)
            .join(session)
    }

    fn log_path(&self, start: usize) -> PathBuf {
        self.root.path().join(format!("server-{start}.log"))
    }

    /// Every start's log (the last 8 KiB of each), for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for start in 1..=self.starts {
            let text = std::fs::read_to_string(self.log_path(start)).unwrap_or_default();
            let tail = tail_chars(&text, 8 * 1024);
            out.push_str(&format!(
                "----- norma serve log, start {start} -----\n{tail}\n"
            ));
        }
        out
    }

    /// A token for `tenant` with every scope.
    pub fn token(&self, tenant: &str) -> String {
        self.token_with_scopes(
            tenant,
            &["sessions:read", "sessions:write", "approvals:write"],
        )
    }

    /// A token for `tenant` (subject `user-of-<tenant>`) with exactly `scopes`, valid 1 h.
    pub fn token_with_scopes(&self, tenant: &str, scopes: &[&str]) -> String {
        self.verifier
            .mint(&TokenRequest {
                tenant: tenant.into(),
                subject: format!("user-of-{tenant}"),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                ttl: Duration::from_secs(3600),
            })
            .expect("mint")
    }

    /// GET `path`; `(status, JSON body or Null)`.
    pub async fn get(&self, path: &str, token: &str) -> (u16, Value) {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.logs()));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `GET /v1/sessions/{session}/stream`: the response, its headers read and its body left
    /// open (the stream stays open, and counts against the tenant's `sse_streams`, until the
    /// response is dropped).
    pub async fn open_stream(&self, token: &str, session: &str) -> reqwest::Response {
        self.client
            .get(self.url(&format!("/v1/sessions/{session}/stream")))
            .bearer_auth(token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET stream: {e}\n{}", self.logs()))
    }

    /// POST a JSON body to `path`; `(status, JSON body or Null)`.
    pub async fn post(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.logs()));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Creates a session with `config` and sends it `prompt`; returns `(session id, run id)`,
    /// asserting `201` and `202`.
    pub async fn session_with_prompt(
        &self,
        token: &str,
        config: &Value,
        prompt: &str,
    ) -> (String, String) {
        let (status, session) = self.post("/v1/sessions", token, config).await;
        assert_eq!(status, 201, "create session: {session}");
        let id = session["id"].as_str().expect("session id").to_owned();
        let (status, accepted) = self
            .post(
                &format!("/v1/sessions/{id}/prompts"),
                token,
                &serde_json::json!({ "text": prompt }),
            )
            .await;
        assert_eq!(status, 202, "prompt: {accepted}");
        let run = accepted["run_id"].as_str().expect("run id").to_owned();
        (id, run)
    }

    /// Every event of a session, paged through `GET /events` (`after`, 1,000 per page).
    pub async fn all_events(&self, token: &str, session: &str) -> Vec<Value> {
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let (status, page) = self
                .get(
                    &format!("/v1/sessions/{session}/events?after={after}&limit=1000"),
                    token,
                )
                .await;
            assert_eq!(status, 200, "events page: {page}");
            let batch = page["events"].as_array().cloned().unwrap_or_default();
            if batch.is_empty() {
                return events;
            }
            after = batch.last().unwrap()["seq"].as_i64().expect("seq");
            events.extend(batch);
        }
    }

    /// Every history message of a session, paged through `GET /messages`.
    pub async fn all_messages(&self, token: &str, session: &str) -> Vec<Value> {
        let mut messages = Vec::new();
        let mut after = 0;
        loop {
            let (status, page) = self
                .get(
                    &format!("/v1/sessions/{session}/messages?after={after}&limit=1000"),
                    token,
                )
                .await;
            assert_eq!(status, 200, "messages page: {page}");
            let batch = page["messages"].as_array().cloned().unwrap_or_default();
            if batch.is_empty() {
                return messages;
            }
            after = batch.last().unwrap()["seq"].as_i64().expect("seq");
            messages.extend(batch);
        }
    }

    /// Polls the session's events until `done` holds, at most `within`; returns them.
    pub async fn wait_for_events(
        &self,
        token: &str,
        session: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + within;
        loop {
            let events = self.all_events(token, session).await;
            if done(&events) {
                return events;
            }
            if Instant::now() >= deadline {
                panic!(
                    "not reached within {within:?}: {what}\nevents: {}\n{}",
                    summarize(&events),
                    self.logs()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}

/// One line per event: `seq type payload` (payload cut at 200 characters).
pub fn summarize(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| {
            let payload = e["payload"].to_string();
            format!(
                "{} {} {}",
                e["seq"],
                e["type"].as_str().unwrap_or("?"),
                head_chars(&payload, 200)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail_chars(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn head_chars(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Reads a file's lines, or none when it does not exist.
pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The events of one type.
pub fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// How many events of one type.
pub fn count(events: &[Value], kind: &str) -> usize {
    of_kind(events, kind).len()
}

/// The transcript's seqs are exactly 1..=N: no gap, no duplicate.
pub fn assert_contiguous(events: &[Value]) {
    let seqs: Vec<i64> = events
        .iter()
        .map(|e| e["seq"].as_i64().expect("seq"))
        .collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(
        seqs,
        expected,
        "event seqs are not 1..=N\n{}",
        summarize(events)
    );
}

/// The reason of the transcript's one `terminal` event (asserts there is exactly one).
pub fn single_terminal_reason(events: &[Value]) -> String {
    let terminals = of_kind(events, "terminal");
    assert_eq!(
        terminals.len(),
        1,
        "exactly one terminal event\n{}",
        summarize(events)
    );
    terminals[0]["payload"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// True when a process whose command line contains `needle` is running on this machine.
pub fn processes_running(needle: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .any(|cmdline| {
            String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains(needle)
        })
}
