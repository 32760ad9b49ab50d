//! Session-level hooks over real HTTP: SessionStart, UserPromptSubmit (can block), Stop and
//! SessionEnd reach a remote hook signed like a webhook; the status report names every hook.

use crate::helpers::{Backend, TestApp, count, error_code, serve_local};
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SECRET: &str = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";

type Seen = Arc<Mutex<Vec<Value>>>;

async fn hook(State(seen): State<Seen>, headers: HeaderMap, body: String) -> axum::Json<Value> {
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
    let event: Value = serde_json::from_str(&body).unwrap();
    seen.lock()
        .unwrap()
        .push(json!({"event": event, "verified": verified}));
    let blocked = event["hook_event_name"] == "UserPromptSubmit"
        && event["prompt"]
            .as_str()
            .unwrap_or_default()
            .contains("forbidden");
    axum::Json(if blocked {
        json!({"decision": "block", "reason": "no forbidden prompts"})
    } else {
        json!({})
    })
}

#[tokio::test]
async fn session_hooks_run_signed_and_can_block_prompts() {
    let seen: Seen = Arc::default();
    let router = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(seen.clone());
    let url = format!("{}/hook", serve_local(router).await);

    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.allow_private_webhooks = true)
        .await
        .unwrap();
    let token = app.token("acme");
    let remote = |name: &str, event: &str| json!({"name": name, "event": event, "handler": {"type": "remote", "url": url, "secret": SECRET}});
    let id = app
        .create_session("acme", &json!({
            "hooks": [remote("start", "SessionStart"), remote("prompt", "UserPromptSubmit"), remote("stop", "Stop"), remote("end", "SessionEnd"),
                      {"name": "missing", "event": "PreToolUse", "handler": {"type": "in_process", "hook": "not-registered"}},
                      {"name": "off", "event": "PreToolUse", "enabled": false, "handler": {"type": "in_process", "hook": "x"}}],
            "model": {"script": {"turns": [{"text": "hi"}]}}
        }))
        .await;
    let session: Value = app
        .get(&format!("/v1/sessions/{id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        session["config"]["hooks"][0]["handler"]["secret"], "<redacted>",
        "secrets are never returned"
    );

    let status: Value = app
        .get(&format!("/v1/sessions/{id}/hooks"), &token)
        .await
        .json()
        .await
        .unwrap();
    let tokens: Vec<(&str, &str)> = status["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap(),
                h["status_token"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tokens,
        [
            ("start", "HOOK_INSTALLED_OK"),
            ("prompt", "HOOK_INSTALLED_OK"),
            ("stop", "HOOK_INSTALLED_OK"),
            ("end", "HOOK_INSTALLED_OK"),
            ("missing", "HOOK_MISSING"),
            ("off", "HOOK_CONFIG_DISABLED")
        ]
    );
    assert_eq!(status["hooks"][4]["missing_reason"], "not_registered");

    let blocked = app.prompt(&token, &id, "something forbidden").await;
    assert_eq!(error_code(blocked).await, (422, "HOOK_BLOCKED".into()));
    let messages = app.messages(&token, &id).await;
    assert_eq!(
        messages["messages"],
        json!([]),
        "a blocked prompt never reaches history"
    );

    let ok = app.prompt(&token, &id, "hello").await;
    assert_eq!(ok.status(), 202);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen
        .lock()
        .unwrap()
        .iter()
        .any(|e| e["event"]["hook_event_name"] == "Stop")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Stop hook never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The run's Stop hook is an `egress` event of the run (infrastructure traffic).
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    let hook = events
        .iter()
        .find(|e| e["type"] == "egress" && e["payload"]["purpose"] == "remote_hook")
        .expect("the Stop hook's egress event");
    assert_eq!(hook["payload"]["decision"], "allowed", "{hook}");
    assert_eq!(hook["payload"]["status"], 200, "{hook}");
    app.delete(&format!("/v1/sessions/{id}"), &token).await;
    app.delete(&format!("/v1/sessions/{id}"), &token).await;
    let seen = seen.lock().unwrap().clone();
    let names: Vec<&str> = seen
        .iter()
        .map(|e| e["event"]["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "SessionStart",
            "UserPromptSubmit",
            "UserPromptSubmit",
            "Stop",
            "SessionEnd"
        ],
        "SessionEnd once"
    );
    assert!(
        seen.iter().all(|e| e["verified"] == true),
        "every hook call is signed"
    );
    assert!(seen.iter().all(|e| e["event"]["session_id"] == id.as_str()));
}

#[tokio::test]
async fn session_end_hooks_run_on_idle_expiry() {
    let seen: Seen = Arc::default();
    let router = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(seen.clone());
    let url = format!("{}/hook", serve_local(router).await);
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.session_idle_expiry_seconds = 1;
        s.allow_private_webhooks = true;
    })
    .await
    .unwrap();
    app.create_session("acme", &json!({"hooks": [{"name": "end", "event": "SessionEnd", "handler": {"type": "remote", "url": url, "secret": SECRET}}]})).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(event) = seen.lock().unwrap().first().cloned() {
            assert_eq!(event["event"]["hook_event_name"], "SessionEnd");
            assert_eq!(event["event"]["reason"], "expired");
            assert_eq!(event["verified"], true);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "SessionEnd never ran on expiry"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A SessionEnd hook that never answers (up to its 10-minute timeout) holds up only its own
/// session's hook: the idle sweep goes on and expires another tenant's session at once.
#[tokio::test]
async fn a_session_end_hook_that_never_answers_holds_up_no_other_expiry() {
    let called: Seen = Arc::default();
    let router = axum::Router::new()
        .route(
            "/hang",
            axum::routing::post(|State(called): State<Seen>, body: String| async move {
                called.lock().unwrap().push(json!(body));
                std::future::pending::<()>().await;
            }),
        )
        .with_state(called.clone());
    let url = format!("{}/hang", serve_local(router).await);
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.session_idle_expiry_seconds = 1;
        s.allow_private_webhooks = true;
    })
    .await
    .unwrap();
    let hooks = json!({"hooks": [{"name": "end", "event": "SessionEnd", "timeout_ms": 600000,
        "handler": {"type": "remote", "url": url, "secret": SECRET}}]});
    app.create_session("hostile", &hooks).await;
    // The hostile session goes idle first, so a sweep meets it first.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let token = app.token("bystander");
    let id = app.create_session("bystander", &json!({})).await;
    app.wait_until_closed(
        &token,
        &id,
        "the bystander's idle session never expired behind the hanging hook",
    )
    .await;
    assert_eq!(
        called.lock().unwrap().len(),
        1,
        "the hanging hook was called once"
    );
}

#[tokio::test]
async fn a_prompt_hook_on_a_private_address_fails_closed_with_only_hook_failed() {
    let seen: Seen = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(
        axum::serve(
            listener,
            axum::Router::new()
                .route("/hook", axum::routing::post(hook))
                .with_state(seen.clone()),
        )
        .into_future(),
    );
    // Private addresses are not allowed (the default): `localhost` resolves to loopback.
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let url = format!("http://localhost:{port}/hook");
    let id = app
        .create_session(
            "acme",
            &json!({"hooks": [{"name": "gate", "event": "UserPromptSubmit",
                "handler": {"type": "remote", "url": url, "secret": SECRET}}],
                "model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    let response = app.prompt(&token, &id, "hello").await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "HOOK_BLOCKED");
    assert_eq!(
        body["details"],
        json!({"hook": "gate", "hook_code": "HOOK_FAILED"})
    );
    let text = body.to_string();
    for leak in [
        "localhost",
        "127.0.0.1",
        "loopback",
        "refused",
        &port.to_string(),
    ] {
        assert!(!text.contains(leak), "{text} leaks {leak}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the loopback server"
    );
}

/// What the closing hook needs: where the server is and who the session belongs to.
#[derive(Clone)]
struct Closer {
    client: reqwest::Client,
    session_url: Arc<Mutex<String>>,
    token: String,
}

/// A `UserPromptSubmit` hook that closes the session (through the API) before it answers.
async fn close_then_allow(State(closer): State<Closer>) -> axum::Json<Value> {
    let url = closer.session_url.lock().unwrap().clone();
    let closed = closer
        .client
        .delete(url)
        .bearer_auth(&closer.token)
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    axum::Json(json!({}))
}

/// A session closed while its prompt's `UserPromptSubmit` hook runs (after the prompt read
/// the session as active) gets no run: the admission itself refuses a closed session, and
/// the prompt answers `409 SESSION_CLOSED`.
async fn a_session_closed_during_the_prompt_hook_gets_no_run(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| s.allow_private_webhooks = true).await else {
        return;
    };
    let token = app.token("acme");
    let closer = Closer {
        client: reqwest::Client::new(),
        session_url: Arc::default(),
        token: token.clone(),
    };
    let router = axum::Router::new()
        .route("/hook", axum::routing::post(close_then_allow))
        .with_state(closer.clone());
    let url = format!("{}/hook", serve_local(router).await);
    let id = app
        .create_session(
            "acme",
            &json!({
                "hooks": [{"name": "closer", "event": "UserPromptSubmit",
                           "handler": {"type": "remote", "url": url, "secret": SECRET}}],
                "model": {"script": {"turns": [{"text": "hi"}]}}
            }),
        )
        .await;
    *closer.session_url.lock().unwrap() = app.url(&format!("/v1/sessions/{id}"));
    let prompt = app.prompt(&token, &id, "go").await;
    assert_eq!(error_code(prompt).await, (409, "SESSION_CLOSED".into()));
    let runs: Value = app
        .get(&format!("/v1/sessions/{id}/runs"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(runs["runs"], json!([]), "no run for the closed session");
    // The server goes on serving: another session of the tenant runs its prompt.
    let other = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    assert_eq!(app.prompt(&token, &other, "go").await.status(), 202);
    app.wait_for_events(&token, &other, |e| count(e, "terminal") == 1)
        .await;
}

#[tokio::test]
async fn a_session_closed_during_the_prompt_hook_gets_no_run_on_sqlite() {
    a_session_closed_during_the_prompt_hook_gets_no_run(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_session_closed_during_the_prompt_hook_gets_no_run_on_postgres() {
    a_session_closed_during_the_prompt_hook_gets_no_run(Backend::Postgres).await;
}
