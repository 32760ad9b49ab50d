//! Postgres going away while the server runs: requests and `/readyz` answer 503
//! `STORE_UNAVAILABLE`, and the service recovers by itself when Postgres is back.
//!
//! The outage is simulated by the TCP fault proxy (`tests/support/proxy.rs`) between the server
//! and Postgres, which drops every connection and refuses new ones, so the shared local Postgres
//! keeps serving other tests.

use crate::helpers::{Backend, TestApp, error_code, fresh_pg_database, test_settings};
use secrecy::SecretString;
use std::time::Duration;

use crate::proxy::FaultProxy;

#[tokio::test]
async fn postgres_outage_answers_503_and_recovers_without_restart() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let parsed = url::Url::parse(&url).unwrap();
    let upstream = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    );
    let proxy = FaultProxy::start(upstream).await;
    let proxied = proxy.proxied_url(&url);

    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(data_dir.path());
    settings.database_url = Some(SecretString::from(proxied));
    settings.database_acquire_timeout_ms = 1_000;
    let app = TestApp::start(settings, Backend::Postgres, data_dir).await;
    let token = app.token("acme");
    let id = app
        .create_session("acme", &serde_json::json!({"title": "before"}))
        .await;

    proxy.go_down();
    for _ in 0..3 {
        let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
        assert_eq!(error_code(ready).await, (503, "STORE_UNAVAILABLE".into()));
        let read = app.get(&format!("/v1/sessions/{id}"), &token).await;
        assert_eq!(error_code(read).await, (503, "STORE_UNAVAILABLE".into()));
        let write = app
            .post_json("/v1/sessions", &token, &serde_json::json!({}))
            .await;
        assert_eq!(error_code(write).await, (503, "STORE_UNAVAILABLE".into()));
    }

    proxy.come_back();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
        if ready.status() == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "did not recover within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let read = app.get(&format!("/v1/sessions/{id}"), &token).await;
    assert_eq!(
        read.status(),
        200,
        "data written before the outage is intact"
    );
    let created = app
        .post_json("/v1/sessions", &token, &serde_json::json!({}))
        .await;
    assert_eq!(created.status(), 201);
}
