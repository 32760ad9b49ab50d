//! The terminal client (`norma sessions|prompt|events|approve|deny|chat`) run as the real
//! binary against a real server (the binary too), with the token from `NORMA_TOKEN` or
//! `--token`: scripted sessions whose every prompt writes a file (asking for approval), and
//! `norma chat` in a real pseudo-terminal, where Ctrl-C cancels a slow run of a fake model.

#[path = "support/fake_llm.rs"]
mod fake_llm;
#[path = "support/server.rs"]
mod server;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// Every prompt: Write (asks for approval), then a closing text; a denial has its own text.
fn script() -> Value {
    json!({"per_prompt": true, "turns": [
        {"text": "Writing it down.", "tool_calls": [
            {"name": "Write", "input": {"file_path": "note.txt", "content": "{{last_user_text}}"}}]},
        {"when_last_tool_result_contains": "permission denied", "text": "Denied: {{last_tool_result}}"},
        {"text": "Saved your words: {{last_user_text}}"}
    ]})
}

struct Cli<'a> {
    server: &'a server::ServerProcess,
    token: String,
}

impl Cli<'_> {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_norma"));
        command
            .args(args)
            .env("NORMA_URL", self.server.url(""))
            .env("NORMA_TOKEN", &self.token)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("norma runs")
    }

    /// Runs and expects success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "norma {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(self.ok(&all).trim()).expect("one JSON value")
    }
}

async fn wait_for(server: &server::ServerProcess, token: &str, id: &str, kind: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, page) = server
            .get(&format!("/v1/sessions/{id}/events?limit=1000"), token)
            .await;
        let found = page["events"]
            .as_array()
            .map(|e| e.iter().filter(|e| e["type"] == kind).count())
            .unwrap_or(0);
        if found >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {kind} #{n}: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scriptable_commands_create_prompt_approve_deny_and_print_events() {
    let mut server = server::ServerProcess::new(None);
    server.start().await;
    let token = server.token("acme");
    let cli = Cli {
        server: &server,
        token: token.clone(),
    };

    let body = json!({"title": "from the cli", "model": {"script": script()}}).to_string();
    let session = cli.json(&["sessions", "create", "--body", &body]);
    let id = session["id"].as_str().unwrap().to_owned();
    let plain_id = cli.ok(&["sessions", "create", "--title", "second", "--mode", "plan"]);
    assert!(plain_id.trim().starts_with("ses_") || !plain_id.trim().is_empty());

    let list = cli.json(&["sessions", "list", "--limit", "10"]);
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id.as_str())
    );
    let text = cli.ok(&["sessions", "list"]);
    assert!(
        text.contains(&id) && text.contains("from the cli"),
        "{text}"
    );
    let shown = cli.ok(&["sessions", "show", &id]);
    assert!(shown.contains("title:   from the cli"), "{shown}");

    // Prompt, approve from the CLI (the only pending approval), see the run end.
    let run = cli.json(&["prompt", &id, "first words"]);
    assert!(run["run_id"].is_string(), "{run}");
    wait_for(&server, &token, &id, "approval_requested", 1).await;
    let decided = cli.json(&["approve", &id, "--reason", "fine"]);
    assert_eq!(decided["status"], "allowed", "{decided}");
    wait_for(&server, &token, &id, "terminal", 1).await;
    assert_eq!(
        std::fs::read_to_string(server.workspace("acme", &id).join("note.txt")).unwrap(),
        "first words"
    );

    // Deny with a reason, by approval id.
    cli.ok(&["prompt", &id, "second words"]);
    wait_for(&server, &token, &id, "approval_requested", 2).await;
    let (_, pending) = server
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await;
    let approval = pending["approvals"][0]["id"].as_str().unwrap().to_owned();
    let denied = cli.ok(&["deny", &id, &approval, "--reason", "not today"]);
    assert_eq!(denied.trim(), format!("{approval} denied"));
    wait_for(&server, &token, &id, "terminal", 2).await;

    // Events: JSON lines, and text.
    let lines = cli.ok(&["events", &id, "--json"]);
    let events: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let text = cli.ok(&["events", &id]);
    assert!(text.contains("⚙ Write"), "{text}");
    assert!(text.contains("Saved your words: first words"), "{text}");
    assert!(
        text.contains("approval denied by user-of-acme — not today"),
        "{text}"
    );
    assert!(text.contains("Denied: permission denied"), "{text}");
    assert_eq!(text.matches("■ run ended: end_turn").count(), 2, "{text}");

    // A prompt followed to its end (approved from another CLI call meanwhile).
    let follower = cli
        .command(&["prompt", &id, "third words", "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&server, &token, &id, "approval_requested", 3).await;
    cli.ok(&["approve", &id]);
    let output = tokio::task::spawn_blocking(move || follower.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(output.status.success());
    let followed: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(followed.last().unwrap()["type"], "terminal");
    assert_eq!(followed.first().unwrap()["type"], "run_started");

    // Errors: stable codes, exit status 1, the token never printed.
    let output = cli.run(&["approve", &id]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no pending approval"));
    let output = cli
        .command(&["sessions", "list"])
        .env("NORMA_TOKEN", "bogus")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("TOKEN_") || stderr.contains("UNAUTHENTICATED"),
        "{stderr}"
    );
    let output = cli
        .command(&["sessions", "show", "ses_nope"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("NOT_FOUND"));
    let output = cli
        .command(&["sessions", "list"])
        .env_remove("NORMA_TOKEN")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no token"));
    // --token and --url flags work without the environment.
    let output = Command::new(env!("CARGO_BIN_EXE_norma"))
        .args([
            "sessions",
            "show",
            &id,
            "--url",
            &server.url(""),
            "--token",
            &token,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_streams_asks_for_approvals_and_follows_events() {
    let mut server = server::ServerProcess::new(None);
    server.start().await;
    let token = server.token("acme");
    let cli = Cli {
        server: &server,
        token: token.clone(),
    };
    let body = json!({"model": {"script": script()}}).to_string();
    let id = cli.json(&["sessions", "create", "--body", &body])["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // `events --follow` streams live until killed.
    let mut follower = cli
        .command(&["events", &id, "--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    // Two prompts: the first approved with "y", the second denied with a reason; then EOF.
    let mut chat = cli
        .command(&["chat", "--session", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    chat.stdin
        .take()
        .unwrap()
        .write_all(b"hello chat\ny\nsecond\nn\nnot now\n")
        .unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || chat.wait_with_output().unwrap()),
    )
    .await
    .expect("chat ends at end of input")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Writing it down."), "{stdout}");
    assert!(stderr.contains("Allow Write"), "{stderr}");
    assert!(
        stdout.contains("approval allowed by user-of-acme"),
        "{stdout}"
    );
    assert!(stdout.contains("Saved your words: hello chat"), "{stdout}");
    assert!(
        stdout.contains("approval denied by user-of-acme — not now"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("■ run ended: end_turn").count(),
        2,
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(server.workspace("acme", &id).join("note.txt")).unwrap(),
        "hello chat"
    );

    wait_for(&server, &token, &id, "terminal", 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    follower.kill().unwrap();
    let output = follower.wait_with_output().unwrap();
    let followed: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let seqs: Vec<i64> = followed
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    assert_eq!(
        followed.iter().filter(|e| e["type"] == "terminal").count(),
        2
    );
}

/// Output of a child on a pseudo-terminal, collected by a reader thread.
#[derive(Clone, Default)]
struct Screen(std::sync::Arc<std::sync::Mutex<String>>);

impl Screen {
    fn follow(&self, mut reader: Box<dyn std::io::Read + Send>) {
        let screen = self.clone();
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                screen.0.lock().unwrap().push_str(&text);
            }
        });
    }

    fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// Waits (bounded) until the screen shows `needle` after what it showed at `from` bytes.
    async fn wait_for(&self, needle: &str, from: usize) -> usize {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|rest| rest.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the terminal never showed {needle:?}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_in_chat_cancels_the_running_run() {
    use fake_llm::{FakeLlm, Reply};
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};

    // A model that streams for a minute unless the run is cancelled.
    let fake = FakeLlm::start().await;
    fake.set_fallback(Reply::slow_text_stream(600, Duration::from_millis(100)));
    let mut server = server::ServerProcess::new(None)
        .env("NORMA_PROVIDER__KIND", "anthropic")
        .env("NORMA_PROVIDER__BASE_URL", fake.url())
        .env("NORMA_PROVIDER__MODEL", "claude-test")
        .env("NORMA_PROVIDER__API_KEY", "test-key-not-secret")
        .env("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS", "[\"127.0.0.0/8\"]");
    server.start().await;
    let token = server.token("acme");
    let (status, session) = server
        .post("/v1/sessions", &token, &json!({"title": "ctrl-c"}))
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();

    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 40,
            cols: 120,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_norma"));
    command.args(["chat", "--session", &id]);
    command.env("NORMA_URL", server.url(""));
    command.env("NORMA_TOKEN", &token);
    command.env("NO_COLOR", "1");
    let mut chat = pty.slave.spawn_command(command).unwrap();
    drop(pty.slave);
    let screen = Screen::default();
    screen.follow(pty.master.try_clone_reader().unwrap());
    let mut keyboard = pty.master.take_writer().unwrap();

    let seen = screen.wait_for("Ctrl-C cancels a run", 0).await;
    keyboard.write_all(b"tell me a long story\r").unwrap();
    keyboard.flush().unwrap();
    // The run streams: the model's deltas reach the terminal.
    let seen = screen.wait_for("tick2", seen).await;
    let (_, runs) = server.get(&format!("/v1/sessions/{id}/runs"), &token).await;
    let run = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(runs["runs"][0]["status"], "running", "{runs}");

    // Ctrl-C as the keyboard sends it: the terminal turns it into SIGINT for the chat.
    keyboard.write_all(&[0x03]).unwrap();
    keyboard.flush().unwrap();
    let seen = screen.wait_for("cancelling the run", seen).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, record) = server
            .get(&format!("/v1/sessions/{id}/runs/{run}"), &token)
            .await;
        if record["status"] == "cancelled" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run was not cancelled: {record}\n{}",
            screen.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The chat shows the run's end and is back at its prompt; Ctrl-D quits it.
    screen.wait_for("run ended", seen).await;
    assert!(
        chat.try_wait().unwrap().is_none(),
        "chat quit on the first Ctrl-C"
    );
    keyboard.write_all(&[0x04]).unwrap();
    keyboard.flush().unwrap();
    let status = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || chat.wait().unwrap()),
    )
    .await
    .expect("chat ends at Ctrl-D")
    .unwrap();
    assert!(status.success(), "{status:?}\n{}", screen.text());
    // The server still serves the session after the cancel.
    let (status, _) = server.get(&format!("/v1/sessions/{id}"), &token).await;
    assert_eq!(status, 200);
}
