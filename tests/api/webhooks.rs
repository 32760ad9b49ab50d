//! Approval webhooks to a policy service: signed, answered synchronously or over REST,
//! refused for non-public addresses unless allowed, and never losing the request.

use crate::helpers::{Backend, TestApp, count, error_code, serve_local};
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const SECRET: &str = "whsec_cG9saWN5LXNlcnZpY2Utc2VjcmV0LWtleQ==";

type Seen = Arc<Mutex<Vec<(bool, Value)>>>;

async fn policy(State(seen): State<Seen>, headers: HeaderMap, body: String) -> axum::Json<Value> {
    let secret = norma::signing::WebhookSecret::parse(SECRET).unwrap();
    let now = chrono::Utc::now().timestamp();
    let verified = norma::signing::verify(
        &secret,
        &headers,
        body.as_bytes(),
        now,
        norma::signing::DEFAULT_TOLERANCE,
    )
    .is_ok();
    // A replay of the same delivery an hour later is refused by the same check.
    let stale = norma::signing::verify(
        &secret,
        &headers,
        body.as_bytes(),
        now + 3600,
        norma::signing::DEFAULT_TOLERANCE,
    )
    .is_err();
    let event: Value = serde_json::from_str(&body).unwrap();
    seen.lock().unwrap().push((verified && stale, event));
    axum::Json(json!({"decision": "allow", "reason": "policy ok"}))
}

fn echo_session(webhook_url: &str) -> Value {
    json!({
        "approvals": {"webhook": {"url": webhook_url, "secret": SECRET}},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {"command": "echo approved-by-policy"}}]},
            {"text": "{{last_tool_result}}"}
        ]}}
    })
}

#[tokio::test]
async fn the_policy_service_answers_synchronously_in_its_response() {
    let seen: Seen = Arc::default();
    let router = axum::Router::new()
        .route("/approvals", axum::routing::post(policy))
        .with_state(seen.clone());
    let url = format!("{}/approvals", serve_local(router).await);
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.allow_private_webhooks = true)
        .await
        .unwrap();
    let token = app.token("acme");
    let id = app.create_session("acme", &echo_session(&url)).await;
    let session: Value = app
        .get(&format!("/v1/sessions/{id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        session["config"]["approvals"]["webhook"]["secret"],
        "<redacted>"
    );
    app.prompt(&token, &id, "go").await;
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let decided = events
        .iter()
        .find(|e| e["type"] == "approval_decided")
        .unwrap();
    assert_eq!(decided["payload"]["approval"]["decided_by"], "webhook");
    assert_eq!(decided["payload"]["approval"]["status"], "allowed");
    // The delivery is an `egress` event of the run (infrastructure traffic).
    let egress = events
        .iter()
        .find(|e| e["type"] == "egress" && e["payload"]["purpose"] == "approval_webhook")
        .expect("the webhook's egress event");
    assert_eq!(egress["payload"]["decision"], "allowed", "{egress}");
    assert_eq!(egress["payload"]["status"], 200, "{egress}");
    assert_eq!(egress["payload"]["host"], "127.0.0.1", "{egress}");
    assert!(
        egress["payload"]["bytes_out"].as_u64().unwrap() > 0,
        "{egress}"
    );
    let answer = events
        .iter()
        .rfind(|e| e["type"] == "assistant_message")
        .unwrap();
    assert!(
        answer["payload"]["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("approved-by-policy")
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].0, "signature verified, stale replay refused");
    assert_eq!(seen[0].1["type"], "approval.requested");
    assert_eq!(seen[0].1["approval"]["tool_name"], "Bash");
}

#[tokio::test]
async fn a_dead_policy_service_does_not_lose_the_request() {
    // A port nobody listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/approvals", closed.local_addr().unwrap());
    drop(closed);
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.allow_private_webhooks = true)
        .await
        .unwrap();
    let token = app.token("acme");
    let id = app.create_session("acme", &echo_session(&url)).await;
    app.prompt(&token, &id, "go").await;
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    // The delivery fails after its bounded retries; the request stays answerable over REST.
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "approval_webhook_failed") == 1)
        .await;
    let failed = events
        .iter()
        .find(|e| e["type"] == "approval_webhook_failed")
        .unwrap();
    // The tenant learns that delivery failed, not why (no status, address or error text).
    let payload = failed["payload"].as_object().unwrap();
    assert_eq!(payload["code"], "WEBHOOK_FAILED");
    assert_eq!(
        payload.keys().collect::<Vec<_>>(),
        ["approval_id", "code"],
        "{payload:?}"
    );
    // Each attempt is an `egress` event that says as little: `failed`, no reason or status.
    let attempts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "egress" && e["payload"]["purpose"] == "approval_webhook")
        .map(|e| &e["payload"])
        .collect();
    assert!(!attempts.is_empty(), "{events:?}");
    for attempt in attempts {
        assert_eq!(attempt["decision"], "failed", "{attempt}");
        assert!(
            attempt.get("reason").is_none() && attempt.get("status").is_none(),
            "{attempt}"
        );
    }
    let approval = app.first_pending_approval(&token, &id).await;
    let answer = app
        .answer(&token, &id, &approval, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answer.status(), 200);
    app.wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
}

#[tokio::test]
async fn webhooks_to_private_addresses_are_refused_by_default() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://169.254.169.254/latest",
        "http://[::ffff:10.0.0.1]/x",
        "http://10.1.2.3/",
    ] {
        let response = app
            .post_json("/v1/sessions", &token, &echo_session(url))
            .await;
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_REQUEST", "{url}");
        assert_eq!(body["details"]["field"], "approvals.webhook", "{url}");
    }
    let bad_secret = app.post_json("/v1/sessions", &token, &json!({"approvals": {"webhook": {"url": "https://policy.example/", "secret": "whsec_!!!"}}})).await;
    assert_eq!(error_code(bad_secret).await.0, 422);
}

#[tokio::test]
async fn a_webhook_name_resolving_to_loopback_is_refused_at_delivery() {
    let seen: Seen = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(
        axum::serve(
            listener,
            axum::Router::new()
                .route("/approvals", axum::routing::post(policy))
                .with_state(seen.clone()),
        )
        .into_future(),
    );
    // A host name passes creation; it is checked when resolved, and refused (loopback).
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let url = format!("http://localhost:{port}/approvals");
    let id = app.create_session("acme", &echo_session(&url)).await;
    app.prompt(&token, &id, "go").await;
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "approval_webhook_failed") == 1)
        .await;
    let failed = events
        .iter()
        .find(|e| e["type"] == "approval_webhook_failed")
        .unwrap();
    assert_eq!(failed["payload"]["code"], "WEBHOOK_FAILED");
    let text = failed.to_string();
    for leak in ["localhost", "127.0.0.1", "loopback", &port.to_string()] {
        assert!(!text.contains(leak), "{text} leaks {leak}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "the policy service was never reached"
    );
    // The request stays answerable over REST.
    let approval = app.first_pending_approval(&token, &id).await;
    let answer = app
        .answer(&token, &id, &approval, &json!({"decision": "deny"}))
        .await;
    assert_eq!(answer.status(), 200);
    app.wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
}
