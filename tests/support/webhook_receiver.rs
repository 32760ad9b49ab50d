//! A webhook receiver on loopback for tests: records every request (Standard Webhooks headers
//! and body), answers 200 unless told to fail the next requests, and verifies what it got
//! with the PyPI `standardwebhooks` library (a real Standard Webhooks implementation).

#![allow(dead_code)]

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub body: String,
    /// The status it was answered with (0: not answered, the receiver stalls).
    pub answered: u16,
}

#[derive(Default)]
struct Inner {
    seen: Mutex<Vec<Received>>,
    fail: Mutex<VecDeque<u16>>,
    /// Never answer: every request is recorded and then held open.
    stall: bool,
}

/// The receiver (stops with the test's runtime).
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    inner: Arc<Inner>,
}

async fn receive(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let status = match inner.stall {
        true => 0,
        false => inner.fail.lock().unwrap().pop_front().unwrap_or(200),
    };
    inner.seen.lock().unwrap().push(Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
        answered: status,
    });
    if inner.stall {
        std::future::pending::<()>().await;
    }
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    /// Listens on 127.0.0.1 (a fixed `port`, or any with 0) at `/hook`.
    pub async fn start_on(port: u16) -> Self {
        Self::listen(port, false).await
    }

    /// A receiver that records each request and never answers it (the sender times out).
    pub async fn stalling() -> Self {
        Self::listen(0, true).await
    }

    async fn listen(port: u16, stall: bool) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let inner = Arc::new(Inner {
            stall,
            ..Inner::default()
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(inner.clone());
        tokio::spawn(axum::serve(listener, app).into_future());
        Self { url, inner }
    }

    pub async fn start() -> Self {
        Self::start_on(0).await
    }

    /// Answers the next requests with these statuses (then 200 again).
    pub fn fail_next(&self, statuses: &[u16]) {
        self.inner.fail.lock().unwrap().extend(statuses);
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.seen.lock().unwrap().clone()
    }

    /// Waits (at most `within`) until `done` holds for what was received, and returns it.
    pub async fn wait_for(
        &self,
        within: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let seen = self.received();
            if done(&seen) {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "webhook condition not reached; received: {seen:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The event types of received requests, in order.
pub fn types(received: &[Received]) -> Vec<String> {
    received
        .iter()
        .map(|r| {
            serde_json::from_str::<Value>(&r.body).unwrap()["type"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

const VERIFY: &str = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
request = json.load(sys.stdin)
hook = Webhook(request["secret"])
out = []
for r in request["received"]:
    headers = {"webhook-id": r["id"], "webhook-timestamp": r["timestamp"], "webhook-signature": r["signature"]}
    out.append(hook.verify(r["body"], headers))
json.dump(out, sys.stdout)
"#;

/// Verifies every received request with `standardwebhooks` under `secret` (panics when one
/// fails) and returns the payloads the library parsed.
pub fn verify_with_standardwebhooks(secret: &str, received: &[Received]) -> Vec<Value> {
    use std::io::Write;
    let input = json!({
        "secret": secret,
        "received": received.iter().map(|r| json!({
            "id": r.id, "timestamp": r.timestamp, "signature": r.signature, "body": r.body,
        })).collect::<Vec<_>>(),
    });
    let mut child = std::process::Command::new("python3")
        .args(["-c", VERIFY])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs (pip install standardwebhooks)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "standardwebhooks refused a delivery: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `standardwebhooks` refuses a tampered body (the check above is not vacuous).
pub fn tampered_is_refused(secret: &str, received: &Received) -> bool {
    let mut tampered = received.clone();
    tampered.body = tampered.body.replacen('{', "{ ", 1);
    std::panic::catch_unwind(|| verify_with_standardwebhooks(secret, &[tampered])).is_err()
}
