//! A prompt still in flight when the server starts shutting down (here: held in its
//! UserPromptSubmit hook) is refused with `503 SHUTTING_DOWN` and starts nothing.

use crate::helpers::{Backend, TestApp, error_code, serve_local};
use axum::extract::State;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

const SECRET: &str = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";

/// Tells the test the hook was reached, then holds the prompt until released.
#[derive(Clone, Default)]
struct Gate {
    reached: Arc<Mutex<Option<oneshot::Sender<()>>>>,
    release: Arc<Notify>,
}

async fn held_hook(State(gate): State<Gate>) -> axum::Json<Value> {
    if let Some(reached) = gate.reached.lock().unwrap().take() {
        let _ = reached.send(());
    }
    gate.release.notified().await;
    axum::Json(json!({}))
}

#[tokio::test]
async fn prompt_in_flight_when_shutdown_begins_is_refused() {
    let (reached, hook_reached) = oneshot::channel();
    let gate = Gate {
        reached: Arc::new(Mutex::new(Some(reached))),
        release: Arc::default(),
    };
    let router = axum::Router::new()
        .route("/hook", axum::routing::post(held_hook))
        .with_state(gate.clone());
    let url = format!("{}/hook", serve_local(router).await);

    // The hook listens on loopback: private addresses are allowed for it.
    let mut app = TestApp::spawn_with(Backend::Sqlite, |s| s.allow_private_webhooks = true)
        .await
        .unwrap();
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "hooks": [{"name": "hold", "event": "UserPromptSubmit",
                           "handler": {"type": "remote", "url": url, "secret": SECRET}}],
                "model": {"script": {"turns": [{"text": "hi"}]}}
            }),
        )
        .await;
    let prompt = tokio::spawn(
        app.client
            .post(app.url(&format!("/v1/sessions/{id}/prompts")))
            .bearer_auth(&token)
            .json(&json!({"text": "hello"}))
            .send(),
    );
    tokio::time::timeout(Duration::from_secs(10), hook_reached)
        .await
        .expect("the prompt reached its hook")
        .unwrap();

    app.begin_shutdown();
    // The listener closes once the shutdown has begun.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(app.addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still listening after the shutdown began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gate.release.notify_one();

    let response = prompt
        .await
        .unwrap()
        .expect("the in-flight prompt is answered");
    assert_eq!(
        error_code(response).await,
        (503, "SHUTTING_DOWN".to_owned())
    );
}
