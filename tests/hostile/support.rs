//! Shared helpers of the attack corpus: a started server and the "another tenant is still
//! served" check every case ends with.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::ServerProcess;

/// The tenant every case uses to check that the server still serves others.
pub const BYSTANDER: &str = "bystander";

/// How long the bystander's one-turn run may take.
const BYSTANDER_WITHIN: Duration = Duration::from_secs(30);

/// A started server on SQLite (the default store) with `env` applied.
pub async fn start_server(env: &[(&str, &str)]) -> ServerProcess {
    let mut server = ServerProcess::new(None);
    for (key, value) in env {
        server = server.env(key, *value);
    }
    server.start().await;
    server
}

/// A started server whose provider is the fake Anthropic model at `url` (on loopback, which
/// outbound requests may reach).
pub async fn start_server_with_model(url: &str) -> ServerProcess {
    start_server(&[
        ("NORMA_PROVIDER__KIND", "anthropic"),
        ("NORMA_PROVIDER__BASE_URL", url),
        ("NORMA_PROVIDER__MODEL", "claude-test"),
        ("NORMA_PROVIDER__API_KEY", "test-key-not-secret"),
        ("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS", "[\"127.0.0.0/8\"]"),
    ])
    .await
}

/// Creates a session for `tenant` with `config`; returns its id (asserts `201`).
pub async fn create_session(server: &ServerProcess, tenant: &str, config: &Value) -> String {
    let token = server.token(tenant);
    let (status, body) = server.post("/v1/sessions", &token, config).await;
    assert_eq!(status, 201, "create session: {body}");
    body["id"].as_str().expect("session id").to_owned()
}

/// Sends `text` as a prompt and waits until the run's `terminal` event; returns the events.
pub async fn prompt_and_wait(
    server: &ServerProcess,
    tenant: &str,
    session: &str,
    text: &str,
    within: Duration,
) -> Vec<Value> {
    let token = server.token(tenant);
    let before = server
        .all_events(&token, session)
        .await
        .iter()
        .filter(|e| e["type"] == "terminal")
        .count();
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/prompts"),
            &token,
            &json!({ "text": text }),
        )
        .await;
    assert_eq!(status, 202, "prompt: {body}");
    server
        .wait_for_events(
            &token,
            session,
            within,
            "the run's terminal event",
            |events| events.iter().filter(|e| e["type"] == "terminal").count() > before,
        )
        .await
}

/// The `code` of an error body.
pub fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or("<no code>")
}

/// The server still answers `/healthz` and another tenant's one-turn scripted run finishes
/// normally (`end_turn`) within a bound.
pub async fn assert_still_serves(server: &ServerProcess) {
    let config = json!({
        "model": {"script": {"turns": [{"text": "still here"}]}},
    });
    assert_still_serves_with(server, &config).await;
}

/// The check of [`assert_still_serves`] with the bystander's session created from `config`
/// (a server that refuses session scripts needs a config without one).
pub async fn assert_still_serves_with(server: &ServerProcess, config: &Value) {
    let health = server
        .client
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("healthz after the attack");
    assert_eq!(health.status(), 200, "healthz\n{}", server.logs());
    let session = create_session(server, BYSTANDER, config).await;
    let events = prompt_and_wait(server, BYSTANDER, &session, "hello", BYSTANDER_WITHIN).await;
    let terminal = events
        .iter()
        .rev()
        .find(|e| e["type"] == "terminal")
        .expect("terminal");
    assert_eq!(
        terminal["payload"]["reason"],
        "end_turn",
        "bystander run: {}",
        crate::server::summarize(&events)
    );
}

/// The first `tool_result` event's result.
pub fn first_tool_result(events: &[Value]) -> &Value {
    &events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool_result event")["payload"]["result"]
}

/// A smoke case: the check itself works on a fresh server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_server_serves_the_bystander() {
    let server = start_server(&[]).await;
    assert_still_serves(&server).await;
}
