//! Outbound requests (hooks and webhooks): a tenant's remote hook cannot reach loopback or
//! private addresses unless the operator allows them, cannot be turned into a port scanner
//! (an open and a closed port look the same to the tenant), and the server ignores proxy
//! settings of its environment.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::server::ServerProcess;
use crate::support::{self, assert_still_serves, create_session, prompt_and_wait};

const SECRET: &str = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";
const TENANT: &str = "scanner";
const WITHIN: Duration = Duration::from_secs(60);

/// A TCP listener on loopback that counts connections; each one gets `reply` (raw bytes)
/// after the request head arrives, then is closed.
async fn counting_listener(reply: &'static [u8]) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(reply).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, connections)
}

/// A loopback port nobody listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A session whose fail-closed PreToolUse hook posts to `url`, and whose model calls `LS` and
/// then repeats the tool result.
fn probing_session(url: &str) -> Value {
    json!({
        "hooks": [{"name": "probe", "event": "PreToolUse", "failure": "fail_closed",
                   "handler": {"type": "remote", "url": url, "secret": SECRET}}],
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "LS", "input": {"path": "."}}]},
            {"text": "{{last_tool_result}}"}
        ]}}
    })
}

/// What the tenant learns of one probe: the tool_result blocks (without their ids) and the
/// run's terminal reason.
async fn probe(server: &ServerProcess, url: &str) -> (Vec<Value>, Value) {
    let session = create_session(server, TENANT, &probing_session(url)).await;
    let events = prompt_and_wait(server, TENANT, &session, "probe", WITHIN).await;
    let terminal = events
        .iter()
        .rev()
        .find(|e| e["type"] == "terminal")
        .map(|e| e["payload"]["reason"].clone())
        .unwrap_or_default();
    let messages = server.all_messages(&server.token(TENANT), &session).await;
    let results = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|block| block["type"] == "tool_result")
        .map(|mut block| {
            block.as_object_mut().unwrap().remove("tool_use_id");
            block
        })
        .collect();
    (results, terminal)
}

fn assert_generic_hook_failure(results: &[Value], leaks: &[&str]) {
    assert_eq!(results.len(), 1, "{results:?}");
    let result = &results[0];
    assert_eq!(result["code"], "HOOK_FAILED", "{result}");
    let text = result.to_string();
    for leak in leaks {
        assert!(!text.contains(leak), "{text} leaks {leak}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_to_loopback_are_refused_by_default_and_reveal_nothing() {
    let (open, connections) =
        counting_listener(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await;
    let closed = closed_port();
    let server = support::start_server(&[]).await;
    let mut seen = Vec::new();
    for url in [
        format!("http://127.0.0.1:{open}/"),
        format!("http://127.0.0.1:{closed}/"),
        format!("http://localhost:{open}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://[::ffff:127.0.0.1]:{open}/"),
    ] {
        let (results, terminal) = probe(&server, &url).await;
        assert_generic_hook_failure(
            &results,
            &[
                &open.to_string(),
                &closed.to_string(),
                "127.0.0.1",
                "localhost",
                "169.254",
            ],
        );
        assert_eq!(terminal, "end_turn");
        seen.push(results);
    }
    assert!(
        seen.iter().all(|r| r == &seen[0]),
        "identical results: {seen:?}"
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no probe reached the loopback listener"
    );
    let logs = server.logs();
    assert!(
        logs.contains("is refused"),
        "the reason is in the server log"
    );
    assert!(!logs.contains(SECRET), "the hook secret is never logged");
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_private_allowed_an_open_and_a_closed_port_look_the_same() {
    // The open port answers like a service that is not a hook (405), the other is closed.
    let (open, connections) = counting_listener(
        b"HTTP/1.1 405 Method Not Allowed\r\nserver: internal-admin\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    let closed = closed_port();
    let server = support::start_server(&[("NORMA_ALLOW_PRIVATE_WEBHOOKS", "true")]).await;
    let (open_results, open_terminal) = probe(&server, &format!("http://127.0.0.1:{open}/")).await;
    let (closed_results, closed_terminal) =
        probe(&server, &format!("http://127.0.0.1:{closed}/")).await;
    assert!(
        connections.load(Ordering::SeqCst) >= 1,
        "the open port was reached"
    );
    let leaks = [
        "405",
        "Method Not Allowed",
        "internal-admin",
        "refused",
        "connect",
        &open.to_string(),
        &closed.to_string(),
    ];
    assert_generic_hook_failure(&open_results, &leaks);
    assert_generic_hook_failure(&closed_results, &leaks);
    assert_eq!(open_results, closed_results);
    assert_eq!(open_terminal, closed_terminal);
    // The operator still gets the detail.
    assert!(server.logs().contains("405"), "{}", server.logs());
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_variables_of_the_environment_are_ignored() {
    let (proxy, proxied) =
        counting_listener(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n").await;
    let (hook, hooked) = counting_listener(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await;
    let proxy_url = format!("http://127.0.0.1:{proxy}");
    let server = support::start_server(&[
        ("NORMA_ALLOW_PRIVATE_WEBHOOKS", "true"),
        ("HTTP_PROXY", &proxy_url),
        ("HTTPS_PROXY", &proxy_url),
        ("ALL_PROXY", &proxy_url),
        ("http_proxy", &proxy_url),
        ("https_proxy", &proxy_url),
        ("all_proxy", &proxy_url),
    ])
    .await;
    // A hook on loopback is reached directly (the tool runs) ...
    let (results, terminal) = probe(&server, &format!("http://127.0.0.1:{hook}/hook")).await;
    assert_eq!(terminal, "end_turn");
    assert_eq!(results.len(), 1);
    assert_ne!(results[0]["code"], "HOOK_FAILED", "{results:?}");
    assert!(hooked.load(Ordering::SeqCst) >= 1);
    // ... and a name that does not resolve fails instead of being handed to the proxy.
    let (results, _) = probe(&server, "http://hook.invalid/hook").await;
    assert_generic_hook_failure(&results, &["hook.invalid"]);
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "the proxy saw no connection"
    );
    assert_still_serves(&server).await;
}
