//! Spawning the application and talking to it.

use norma::app::App;
use norma::auth::{JwtVerifier, TokenRequest};
use norma::config::Settings;
use reqwest::{Client, Response};
use secrecy::SecretString;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::oneshot;

/// The HS256 secret every test server trusts.
pub const TEST_SECRET: &str = "test-secret-0123456789abcdef0123456789abcdef";
pub const ISSUER: &str = "norma-test";
pub const AUDIENCE: &str = "norma-api";

/// Which store a test server runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[path = "../support/pg.rs"]
mod pg;
pub use pg::fresh_pg_database;

/// Settings for a test server on `backend`, with a private data dir.
pub fn test_settings(data_dir: &std::path::Path) -> Settings {
    let mut settings = Settings {
        bind: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: data_dir.to_owned(),
        database_acquire_timeout_ms: 1_500,
        ..Settings::default()
    };
    settings.auth.issuer = ISSUER.into();
    settings.auth.audience = AUDIENCE.into();
    settings.auth.hs256_secret = Some(SecretString::from(TEST_SECRET));
    settings.sandbox_launcher = Some(std::path::PathBuf::from(env!("CARGO_BIN_EXE_norma")));
    // Tests drive the model with session scripts (refused by default once a key is set).
    settings.allow_session_scripts = true;
    settings
}

/// A running test server.
pub struct TestApp {
    pub addr: SocketAddr,
    pub client: Client,
    pub backend: Backend,
    /// The configured store URL (`None`: the SQLite file in the data dir).
    pub database_url: Option<String>,
    verifier: JwtVerifier,
    shutdown: Option<oneshot::Sender<()>>,
    _data_dir: tempfile::TempDir,
}

impl TestApp {
    /// Starts a server on `backend`; `None` only when Postgres is skipped outside CI.
    pub async fn spawn(backend: Backend) -> Option<Self> {
        Self::spawn_with(backend, |_| {}).await
    }

    pub async fn spawn_with(
        backend: Backend,
        configure: impl FnOnce(&mut Settings),
    ) -> Option<Self> {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let mut settings = test_settings(data_dir.path());
        if backend == Backend::Postgres {
            settings.database_url = Some(SecretString::from(fresh_pg_database().await?));
        }
        configure(&mut settings);
        Some(Self::start(settings, backend, data_dir).await)
    }

    pub async fn start(settings: Settings, backend: Backend, data_dir: tempfile::TempDir) -> Self {
        let verifier =
            JwtVerifier::from_settings(&settings.auth, &settings.data_dir).expect("verifier");
        let database_url = settings
            .database_url
            .as_ref()
            .map(|url| secrecy::ExposeSecret::expose_secret(url).to_owned());
        let app = App::build(settings).await.expect("app builds");
        let addr = app.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(app.run_until(async {
            let _ = rx.await;
        }));
        Self {
            addr,
            client: Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client"),
            backend,
            database_url,
            verifier,
            shutdown: Some(tx),
            _data_dir: data_dir,
        }
    }

    /// The server's data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        self._data_dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A valid token for `tenant` with every scope.
    pub fn token(&self, tenant: &str) -> String {
        self.token_with_scopes(
            tenant,
            &["sessions:read", "sessions:write", "approvals:write"],
        )
    }

    pub fn token_with_scopes(&self, tenant: &str, scopes: &[&str]) -> String {
        self.verifier
            .mint(&TokenRequest {
                tenant: tenant.into(),
                subject: format!("user-of-{tenant}"),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                ttl: Duration::from_secs(600),
            })
            .expect("mint")
    }

    pub async fn get(&self, path: &str, token: &str) -> Response {
        self.client
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("request")
    }

    pub async fn post_json(&self, path: &str, token: &str, body: &Value) -> Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("request")
    }

    pub async fn delete(&self, path: &str, token: &str) -> Response {
        self.client
            .delete(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .expect("request")
    }

    /// Creates a session for `tenant` and returns its id.
    pub async fn create_session(&self, tenant: &str, config: &Value) -> String {
        let response = self
            .post_json("/v1/sessions", &self.token(tenant), config)
            .await;
        assert_eq!(response.status(), 201, "create session");
        let body: Value = response.json().await.expect("json");
        body["id"].as_str().expect("id").to_owned()
    }
}

impl TestApp {
    /// Triggers the server's graceful shutdown (as SIGTERM does for the binary).
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl TestApp {
    /// The session's events (first 1,000).
    pub async fn events(&self, token: &str, id: &str) -> Vec<serde_json::Value> {
        let mut events = Vec::new();
        loop {
            let after = events
                .last()
                .map_or(0, |e: &Value| e["seq"].as_i64().unwrap());
            let page: serde_json::Value = self
                .get(
                    &format!("/v1/sessions/{id}/events?after={after}&limit=1000"),
                    token,
                )
                .await
                .json()
                .await
                .expect("events page");
            let page = page["events"].as_array().cloned().unwrap_or_default();
            if page.is_empty() {
                return events;
            }
            events.extend(page);
        }
    }

    /// Sends a prompt to a session.
    pub async fn prompt(&self, token: &str, id: &str, text: &str) -> Response {
        self.post_json(
            &format!("/v1/sessions/{id}/prompts"),
            token,
            &serde_json::json!({ "text": text }),
        )
        .await
    }

    /// The session's history page (first 100 messages).
    pub async fn messages(&self, token: &str, id: &str) -> serde_json::Value {
        self.get(&format!("/v1/sessions/{id}/messages"), token)
            .await
            .json()
            .await
            .expect("messages page")
    }

    /// The id of the oldest pending approval of the session.
    pub async fn first_pending_approval(&self, token: &str, id: &str) -> String {
        let pending: serde_json::Value = self
            .get(
                &format!("/v1/sessions/{id}/approvals?status=pending"),
                token,
            )
            .await
            .json()
            .await
            .expect("approvals page");
        pending["approvals"][0]["id"]
            .as_str()
            .expect("a pending approval")
            .to_owned()
    }

    /// Answers an approval.
    pub async fn answer(
        &self,
        token: &str,
        id: &str,
        approval: &str,
        body: &serde_json::Value,
    ) -> Response {
        self.post_json(
            &format!("/v1/sessions/{id}/approvals/{approval}"),
            token,
            body,
        )
        .await
    }

    /// Polls the session until its status is `closed` (at most 15 s); `what` says, on
    /// failure, what should have closed it.
    pub async fn wait_until_closed(&self, token: &str, id: &str, what: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            let session: serde_json::Value = self
                .get(&format!("/v1/sessions/{id}"), token)
                .await
                .json()
                .await
                .unwrap();
            if session["status"] == "closed" {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Polls the session's events until `done` holds (at most 30 s), and returns them.
    pub async fn wait_for_events(
        &self,
        token: &str,
        id: &str,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let events = self.events(token, id).await;
            if done(&events) {
                return events;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition not reached: {events:#?}"
            );
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }
}

/// Serves `router` on a fresh loopback port in a background task (a hook, a policy service,
/// a page the test stands up); its base URL (`http://127.0.0.1:<port>`).
pub async fn serve_local(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(axum::serve(listener, router).into_future());
    base
}

/// The tool_result blocks of a messages page, in order.
pub fn tool_results(messages: &Value) -> Vec<Value> {
    messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .filter(|b| b["type"] == "tool_result")
        .collect()
}

/// How many events of `kind` there are.
pub fn count(events: &[serde_json::Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// Reads an error response and returns `(status, code)`, asserting the error body shape.
pub async fn error_code(response: Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("error body is JSON");
    assert!(
        body["message"].is_string(),
        "error body has a message: {body}"
    );
    (
        status,
        body["code"]
            .as_str()
            .expect("error body has a code")
            .to_owned(),
    )
}

/// Declares `mod $name { sqlite(); postgres(); }` running `$case(app)` on each backend.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            use super::*;
            #[tokio::test]
            async fn sqlite() {
                let app = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Sqlite)
                    .await
                    .expect("sqlite app");
                $case(app).await;
            }
            #[tokio::test]
            async fn postgres() {
                if let Some(app) = $crate::helpers::TestApp::spawn($crate::helpers::Backend::Postgres).await {
                    $case(app).await;
                }
            }
        }
    )*};
}
