//! Postgres going away while the server runs: requests and `/readyz` answer 503
//! `STORE_UNAVAILABLE`, and the service recovers by itself when Postgres is back.
//!
//! The outage is simulated by a TCP proxy between the server and Postgres that drops every
//! connection and refuses new ones, so the shared local Postgres keeps serving other tests.

use crate::helpers::{Backend, TestApp, error_code, fresh_pg_database, test_settings};
use secrecy::SecretString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

pub(crate) struct FlakyProxy {
    pub(crate) port: u16,
    down: Arc<AtomicBool>,
    cut: Arc<Notify>,
}

impl FlakyProxy {
    /// A proxy in front of the Postgres of `url`, and `url` rewritten to go through it.
    pub(crate) async fn in_front_of(url: &str) -> (Self, String) {
        let parsed = url::Url::parse(url).unwrap();
        let upstream = format!(
            "{}:{}",
            parsed.host_str().unwrap(),
            parsed.port().unwrap_or(5432)
        );
        let proxy = Self::start(upstream).await;
        let mut proxied = parsed.clone();
        proxied.set_host(Some("127.0.0.1")).unwrap();
        proxied.set_port(Some(proxy.port)).unwrap();
        (proxy, proxied.to_string())
    }

    pub(crate) async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(Notify::new());
        let (down2, cut2) = (down.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if down2.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let cut = cut2.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = cut.notified() => {}
                    }
                });
            }
        });
        Self { port, down, cut }
    }

    /// Cuts every connection and refuses new ones.
    pub(crate) fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.notify_waiters();
    }

    /// Accepts connections again.
    pub(crate) fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

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
    let proxy = FlakyProxy::start(upstream).await;
    let mut proxied = parsed.clone();
    proxied.set_host(Some("127.0.0.1")).unwrap();
    proxied.set_port(Some(proxy.port)).unwrap();

    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(data_dir.path());
    settings.database_url = Some(SecretString::from(proxied.to_string()));
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
        assert_eq!(
            read.headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
            Some("2"),
            "every 503 says when to retry"
        );
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
