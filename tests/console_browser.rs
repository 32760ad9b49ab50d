//! The web console in a real headless Chromium (Debian's `chromium`, driven by Python
//! Playwright from PyPI; no browser download): `tests/console_browser/console.py` signs in,
//! creates a session, prompts the built-in demo agent (the real binary in development mode),
//! watches the text stream, approves a write, sees the run finish, survives a killed SSE
//! connection (the harness cuts it at a TCP proxy while an approval is answered elsewhere; the
//! console reconnects with `Last-Event-ID` and shows every event once) and denies a write with
//! a reason. Screenshots land in `$CARGO_TARGET_TMPDIR/console-screenshots/`.
//!
//! Without chromium or Playwright the test skips loudly; with `CI=true` it fails instead
//! (`.ci/run` installs both).

#[path = "support/proxy.rs"]
mod proxy;
#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const CHROMIUM: &str = "/usr/bin/chromium";
/// The whole browser scenario's bound.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(240);

/// Why the browser test cannot run here, if it cannot.
fn missing_tools() -> Option<String> {
    if !Path::new(CHROMIUM).exists() {
        return Some(format!("{CHROMIUM} is missing (apt-get install chromium)"));
    }
    let playwright = std::process::Command::new("python3")
        .args(["-c", "import playwright.sync_api"])
        .output();
    match playwright {
        Ok(output) if output.status.success() => None,
        _ => Some("Python Playwright is missing (pip install playwright)".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_drives_a_session_end_to_end_in_chromium() {
    if let Some(reason) = missing_tools() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("browser test cannot run under CI: {reason}");
        }
        eprintln!("SKIPPING BROWSER TEST: {reason}");
        return;
    }
    // Development mode: no key configured, so the offline provider plays the demo agent.
    let mut server = server::ServerProcess::new(None).without_env("NORMA_AUTH__HS256_SECRET");
    server.start().await;
    let key = std::fs::read_to_string(server.data_dir().join("dev-signing-key")).unwrap();
    server.use_signing_secret(key.trim());
    let token = server.token("dev");
    let proxy = proxy::FaultProxy::start(format!("127.0.0.1:{}", server.port())).await;

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console_browser/console.py");
    let mut child = tokio::process::Command::new("python3")
        .arg(&script)
        .env(
            "CONSOLE_URL",
            format!("http://127.0.0.1:{}/console/", proxy.port()),
        )
        .env("BEARER", &token)
        .env("SCREENSHOTS", &shots)
        .env("CHROMIUM", CHROMIUM)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let stderr_text = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });

    let scenario = async {
        let mut done = false;
        while let Some(line) = lines.next_line().await.expect("script output") {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["CMD", "cut-and-hold"] => {
                    proxy.refuse_new(true);
                    proxy.cut_all();
                }
                ["CMD", "restore"] => proxy.refuse_new(false),
                ["CMD", "approve-pending", session] => {
                    approve_pending(&server, &token, session).await;
                }
                ["DONE"] => {
                    done = true;
                    continue;
                }
                _ => {
                    println!("script: {line}");
                    continue;
                }
            }
            stdin.write_all(b"OK\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
        done
    };
    let done = tokio::time::timeout(SCENARIO_TIMEOUT, scenario)
        .await
        .unwrap_or(false);
    let _ = child.kill().await;
    let status = child.wait().await.unwrap();
    let stderr = stderr_text.await.unwrap_or_default();
    assert!(
        done,
        "the browser scenario failed ({status}); screenshots in {}\n{stderr}\n{}",
        shots.display(),
        server.logs()
    );
    for name in ["01-sign-in", "02-approval", "04-reconnected", "06-narrow"] {
        assert!(shots.join(format!("{name}.png")).exists(), "{name}.png");
    }
}

/// Answers the session's pending approval directly on the server (another operator), while
/// the browser's connections are cut.
async fn approve_pending(server: &server::ServerProcess, token: &str, session: &str) {
    let (status, page) = server
        .get(
            &format!("/v1/sessions/{session}/approvals?status=pending"),
            token,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let id = page["approvals"][0]["id"]
        .as_str()
        .expect("pending")
        .to_owned();
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/approvals/{id}"),
            token,
            &json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Wait until the run has finished, so the console has something to catch up on.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, events) = server
            .get(&format!("/v1/sessions/{session}/events?limit=1000"), token)
            .await;
        let terminals = events["events"]
            .as_array()
            .map(|e| e.iter().filter(|e| e["type"] == "terminal").count())
            .unwrap_or(0);
        if terminals == 2 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{events:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
