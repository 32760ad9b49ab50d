//! `Idempotency-Key` on `POST /v1/sessions` and `POST /v1/sessions/{id}/prompts`, on both
//! stores: a retry answers the first outcome (also after a cut connection, and when the
//! retries race), the same key with another body is refused, keys are bounded and counted
//! against the tenant's limit, and the server keeps serving other tenants.

use crate::helpers::{Backend, TestApp, error_code};
use crate::on_both_backends;
use crate::proxy::FaultProxy;
use reqwest::Response;
use serde_json::{Value, json};
use std::time::Duration;

on_both_backends!(
    a_retried_session_creation_returns_the_first_session => retried_session_creation;
    a_retried_prompt_returns_the_first_run => retried_prompt;
    a_key_reused_with_another_body_is_refused => reused_key_refused;
    malformed_keys_are_refused => malformed_keys;
    concurrent_requests_with_one_key_create_once => concurrent_requests_create_once;
    a_retry_after_a_cut_connection_returns_the_committed_session => retry_after_cut_connection;
);

mod keys_count_against_the_tenant_limit {
    #[tokio::test]
    async fn sqlite() {
        super::keys_limited(crate::helpers::Backend::Sqlite).await;
    }
    #[tokio::test]
    async fn postgres() {
        super::keys_limited(crate::helpers::Backend::Postgres).await;
    }
}

fn script() -> Value {
    json!({"model": {"script": {"turns": [{"text": "hello"}]}}})
}

async fn post_keyed(app: &TestApp, path: &str, token: &str, key: &str, body: &Value) -> Response {
    app.client
        .post(app.url(path))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("request")
}

async fn sessions_of(app: &TestApp, token: &str) -> Vec<Value> {
    let page: Value = app
        .get("/v1/sessions?limit=100", token)
        .await
        .json()
        .await
        .unwrap();
    page["sessions"].as_array().unwrap().clone()
}

async fn runs_of(app: &TestApp, token: &str, session: &str) -> Vec<Value> {
    let page: Value = app
        .get(&format!("/v1/sessions/{session}/runs"), token)
        .await
        .json()
        .await
        .unwrap();
    page["runs"].as_array().unwrap().clone()
}

fn replayed(response: &Response) -> bool {
    response
        .headers()
        .get("idempotency-replayed")
        .is_some_and(|v| v == "true")
}

async fn retried_session_creation(app: TestApp) {
    let token = app.token("acme");
    let first = post_keyed(&app, "/v1/sessions", &token, "create-1", &script()).await;
    assert_eq!(first.status(), 201);
    assert!(!replayed(&first));
    let first: Value = first.json().await.unwrap();
    for _ in 0..2 {
        let again = post_keyed(&app, "/v1/sessions", &token, "create-1", &script()).await;
        assert_eq!(again.status(), 201);
        assert!(replayed(&again));
        assert_eq!(again.json::<Value>().await.unwrap(), first, "the same body");
    }
    assert_eq!(sessions_of(&app, &token).await.len(), 1, "one session");
    // Another key creates another session; the same key of another tenant is that tenant's.
    let other = post_keyed(&app, "/v1/sessions", &token, "create-2", &script()).await;
    assert_eq!(other.status(), 201);
    let other: Value = other.json().await.unwrap();
    assert_ne!(other["id"], first["id"]);
    let globex = app.token("globex");
    let theirs = post_keyed(&app, "/v1/sessions", &globex, "create-1", &script()).await;
    assert_eq!(theirs.status(), 201);
    assert!(!replayed(&theirs));
    let theirs: Value = theirs.json().await.unwrap();
    assert_ne!(theirs["id"], first["id"]);
    assert_eq!(sessions_of(&app, &globex).await.len(), 1);
}

async fn retried_prompt(app: TestApp) {
    let token = app.token("acme");
    let session = app.create_session("acme", &script()).await;
    let path = format!("/v1/sessions/{session}/prompts");
    let first = post_keyed(&app, &path, &token, "prompt-1", &json!({"text": "hi"})).await;
    assert_eq!(first.status(), 202);
    let first: Value = first.json().await.unwrap();
    // The run may have ended meanwhile: the retry still answers the first outcome.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = post_keyed(&app, &path, &token, "prompt-1", &json!({"text": "hi"})).await;
    assert_eq!(again.status(), 202);
    assert!(replayed(&again));
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    assert_eq!(runs_of(&app, &token, &session).await.len(), 1, "one run");
    // Keys are per session: the same key on another session is a new prompt there.
    let other = app.create_session("acme", &script()).await;
    let there = post_keyed(
        &app,
        &format!("/v1/sessions/{other}/prompts"),
        &token,
        "prompt-1",
        &json!({"text": "hi"}),
    )
    .await;
    assert_eq!(there.status(), 202);
    assert!(!replayed(&there));
    assert_ne!(
        there.json::<Value>().await.unwrap()["run_id"],
        first["run_id"]
    );
    // Another tenant cannot reach the session, key or not.
    let globex = app.token("globex");
    let foreign = post_keyed(&app, &path, &globex, "prompt-1", &json!({"text": "hi"})).await;
    assert_eq!(error_code(foreign).await, (404, "NOT_FOUND".into()));
}

async fn reused_key_refused(app: TestApp) {
    let token = app.token("acme");
    assert_eq!(
        post_keyed(&app, "/v1/sessions", &token, "k", &script())
            .await
            .status(),
        201
    );
    let other_body = json!({"model": {"script": {"turns": [{"text": "other"}]}}});
    let refused = post_keyed(&app, "/v1/sessions", &token, "k", &other_body).await;
    assert_eq!(
        error_code(refused).await,
        (422, "IDEMPOTENCY_KEY_REUSED".into())
    );
    let session = sessions_of(&app, &token).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/sessions/{session}/prompts");
    assert_eq!(
        post_keyed(&app, &path, &token, "p", &json!({"text": "one"}))
            .await
            .status(),
        202
    );
    let refused = post_keyed(&app, &path, &token, "p", &json!({"text": "two"})).await;
    assert_eq!(
        error_code(refused).await,
        (422, "IDEMPOTENCY_KEY_REUSED".into())
    );
    assert_eq!(sessions_of(&app, &token).await.len(), 1);
    assert_eq!(runs_of(&app, &token, &session).await.len(), 1);
}

async fn malformed_keys(app: TestApp) {
    let token = app.token("acme");
    let too_long = "k".repeat(256);
    for key in [too_long.as_str(), "", "tab\there"] {
        let response = app
            .client
            .post(app.url("/v1/sessions"))
            .bearer_auth(&token)
            .header("Idempotency-Key", key)
            .json(&script())
            .send()
            .await
            .unwrap();
        assert_eq!(error_code(response).await, (422, "INVALID_REQUEST".into()));
    }
    let non_ascii = app
        .client
        .post(app.url("/v1/sessions"))
        .bearer_auth(&token)
        .header(
            "Idempotency-Key",
            reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        )
        .json(&script())
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(non_ascii).await, (422, "INVALID_REQUEST".into()));
    let twice = app
        .client
        .post(app.url("/v1/sessions"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "a")
        .header("Idempotency-Key", "b")
        .json(&script())
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(twice).await, (422, "INVALID_REQUEST".into()));
    // The longest key is fine; nothing was created by the refused ones.
    let longest = "k".repeat(255);
    assert_eq!(
        post_keyed(&app, "/v1/sessions", &token, &longest, &script())
            .await
            .status(),
        201
    );
    assert_eq!(sessions_of(&app, &token).await.len(), 1);
}

async fn concurrent_requests_create_once(app: TestApp) {
    let token = app.token("acme");
    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (app, token) = (app.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let response = post_keyed(&app, "/v1/sessions", &token, "race", &script()).await;
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 201, "{body}");
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids.len(), 1, "every racer got the one session");
    assert_eq!(sessions_of(&app, &token).await.len(), 1);

    // The same for prompts: one run.
    let session = ids.into_iter().next().unwrap();
    let path = format!("/v1/sessions/{session}/prompts");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (app, token, path) = (app.clone(), token.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            let response = post_keyed(&app, &path, &token, "race", &json!({"text": "once"})).await;
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }));
    }
    let mut runs = std::collections::BTreeSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 202, "{body}");
        runs.insert(body["run_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(runs.len(), 1, "every racer got the one run");
    assert_eq!(runs_of(&app, &token, &session).await.len(), 1);
}

/// The client's connection is cut after the server committed the session but before the
/// answer arrived (a TCP proxy between client and server holds the answer, then cuts): the
/// client retries with its key and gets that session, not a second one.
async fn retry_after_cut_connection(app: TestApp) {
    let token = app.token("acme");
    let proxy = FaultProxy::start(app.addr.to_string()).await;
    proxy.set_latency(Duration::from_millis(1500));
    let through_proxy = format!("http://127.0.0.1:{}/v1/sessions", proxy.port());
    let client = reqwest::Client::new();
    let request = {
        let (client, token) = (client.clone(), token.clone());
        tokio::spawn(async move {
            client
                .post(through_proxy)
                .bearer_auth(token)
                .header("Idempotency-Key", "cut-1")
                .json(&script())
                .send()
                .await
        })
    };
    // The server commits the session (seen directly, not through the proxy) ...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while sessions_of(&app, &token).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session was never created"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ... and the answer, still in the proxy, is lost with the connection.
    proxy.cut_all();
    let cut = request.await.unwrap();
    assert!(cut.is_err(), "the client saw the cut: {cut:?}");
    let committed = sessions_of(&app, &token).await;
    assert_eq!(committed.len(), 1);

    let retry = post_keyed(&app, "/v1/sessions", &token, "cut-1", &script()).await;
    assert_eq!(retry.status(), 201);
    assert!(replayed(&retry));
    let retry: Value = retry.json().await.unwrap();
    assert_eq!(retry["id"], committed[0]["id"], "the committed session");
    assert_eq!(
        sessions_of(&app, &token).await.len(),
        1,
        "no second session"
    );
}

async fn keys_limited(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        settings.limits.idempotency_keys = 2;
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    for key in ["a", "b"] {
        assert_eq!(
            post_keyed(&app, "/v1/sessions", &token, key, &script())
                .await
                .status(),
            201
        );
    }
    let over = post_keyed(&app, "/v1/sessions", &token, "c", &script()).await;
    let status = over.status().as_u16();
    let body: Value = over.json().await.unwrap();
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("TENANT_LIMIT")),
        "{body}"
    );
    assert_eq!(
        body["details"],
        json!({"limit": "idempotency_keys", "max": 2})
    );
    // Nothing was created by the refused request; known keys still replay, unkeyed requests
    // still work, and another tenant has its own count.
    assert_eq!(sessions_of(&app, &token).await.len(), 2);
    let replay = post_keyed(&app, "/v1/sessions", &token, "a", &script()).await;
    assert_eq!(replay.status(), 201);
    assert!(replayed(&replay));
    app.create_session("acme", &script()).await;
    let globex = app.token("globex");
    assert_eq!(
        post_keyed(&app, "/v1/sessions", &globex, "c", &script())
            .await
            .status(),
        201
    );
}
