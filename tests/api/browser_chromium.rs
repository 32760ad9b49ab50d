//! A real headless Chromium (Debian's `chromium`, driven by Python Playwright; `.ci/run`
//! installs both when missing) on a page served from another origin than the server: it lists
//! sessions with `fetch` + bearer (CORS), follows the stream with a plain `EventSource` and a
//! stream ticket, and reconnects with `Last-Event-ID` after the test cuts the connection,
//! without a gap or a duplicate. Outside CI a missing browser skips the test with a message.

use crate::helpers::{Backend, TestApp};
use crate::proxy::FaultProxy;
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PAGE: &str = include_str!("../browser/stream_page.html");
const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/stream_page.py");

/// Whether Chromium and Playwright are here; in CI their absence fails the test.
fn browser_available() -> bool {
    let chromium = std::env::var("NORMA_TEST_CHROMIUM").unwrap_or("/usr/bin/chromium".into());
    let playwright = std::process::Command::new("python3")
        .args(["-c", "import playwright"])
        .status()
        .is_ok_and(|status| status.success());
    let available = std::path::Path::new(&chromium).exists() && playwright;
    if !available {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: Chromium ({chromium}) and Python Playwright are required"
        );
        eprintln!("skipped: Chromium ({chromium}) or Python Playwright is missing");
    }
    available
}

/// Serves the test page on its own loopback port; returns its origin.
async fn serve_page() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let router = axum::Router::new().route(
        "/",
        axum::routing::get(|| async { axum::response::Html(PAGE) }),
    );
    tokio::spawn(async move { axum::serve(listener, router).await });
    origin
}

async fn a_page_on_another_origin_follows_a_stream_with_reconnect(backend: Backend) {
    if !browser_available() {
        return;
    }
    let origin = serve_page().await;
    let allowed = origin.clone();
    let Some(app) = TestApp::spawn_with(backend, move |settings| {
        settings.browser.allowed_origins = vec![allowed];
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    let script = json!({"model": {"script": {"turns": [
        {"text": "first answer"},
        {"text": "second answer"}
    ]}}});
    let id = app.create_session("acme", &script).await;
    assert_eq!(app.prompt(&token, &id, "one").await.status(), 202);
    // The EventSource goes through a proxy the test can cut (a network drop).
    let proxy = FaultProxy::start(app.addr.to_string()).await;
    let api = app.url("");
    let sse = format!("http://127.0.0.1:{}", proxy.port());
    let page_url = format!(
        "{origin}/?api={api}&sse={sse}&token={token}&session={id}",
        api = urlencode(&api),
        sse = urlencode(&sse),
    );
    let mut driver = tokio::process::Command::new("python3")
        .arg(DRIVER)
        .arg(&page_url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");
    let mut stdin = driver.stdin.take().unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let first = next_line(&mut lines).await;
    assert!(first.starts_with("FIRST "), "{first}");
    // Drop the stream's connection, then make more events: the EventSource must come back
    // with the same ticket URL and Last-Event-ID, and miss nothing.
    proxy.cut_all();
    assert_eq!(app.prompt(&token, &id, "two").await.status(), 202);
    stdin.write_all(b"GO\n").await.unwrap();
    stdin.flush().await.unwrap();
    let last = next_line(&mut lines).await;
    let state: Value =
        serde_json::from_str(last.strip_prefix("STATE ").expect("STATE line")).unwrap();
    assert!(state["failure"].is_null(), "{state:#}");
    assert_eq!(
        state["sessions"],
        json!([id]),
        "fetch with a bearer token from another origin"
    );
    assert!(
        state["requestId"].is_string(),
        "x-request-id is exposed: {state:#}"
    );
    assert!(
        state["opens"].as_u64().unwrap() >= 2,
        "the EventSource reconnected: {state:#}"
    );
    let seen: Vec<i64> = state["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    let stored: Vec<i64> = app
        .events(&token, &id)
        .await
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        seen, stored,
        "every event once, in order, across the reconnect: {state:#}"
    );
    let _ = driver.wait().await;
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(90), lines.next_line())
        .await
        .expect("the browser driver answers within 90 s")
        .expect("driver output")
        .expect("a line")
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

#[tokio::test]
async fn chromium_follows_a_stream_from_another_origin_sqlite() {
    a_page_on_another_origin_follows_a_stream_with_reconnect(Backend::Sqlite).await;
}

#[tokio::test]
async fn chromium_follows_a_stream_from_another_origin_postgres() {
    a_page_on_another_origin_follows_a_stream_with_reconnect(Backend::Postgres).await;
}
