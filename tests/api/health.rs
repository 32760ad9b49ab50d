//! Liveness and readiness on both backends.

use crate::helpers::TestApp;
use crate::on_both_backends;
use serde_json::{Value, json};

on_both_backends! {
    health_and_readiness => health_and_readiness;
}

async fn health_and_readiness(app: TestApp) {
    let health: Value = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    let ready = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let ready: Value = ready.json().await.unwrap();
    let backend = match app.backend {
        crate::helpers::Backend::Sqlite => "sqlite",
        crate::helpers::Backend::Postgres => "postgres",
    };
    assert_eq!(ready, json!({"status": "ready", "store": backend}));
}
