//! Bad input gets a 4xx with a code, never a 5xx, and stores nothing.

use crate::helpers::{Backend, TestApp, error_code};
use serde_json::{Value, json};

#[tokio::test]
async fn malformed_requests_get_codes() {
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| settings.max_body_bytes = 4096)
        .await
        .unwrap();
    let token = app.token("acme");
    let post = |body: &'static str, content_type: &'static str| {
        app.client
            .post(app.url("/v1/sessions"))
            .bearer_auth(&token)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    assert_eq!(
        error_code(post("{not json", "application/json").await.unwrap()).await,
        (400, "INVALID_JSON".into())
    );
    assert_eq!(
        error_code(post("", "application/json").await.unwrap()).await,
        (400, "INVALID_JSON".into())
    );
    assert_eq!(
        error_code(post("{}", "text/plain").await.unwrap()).await,
        (415, "UNSUPPORTED_MEDIA_TYPE".into())
    );
    let no_type = app
        .client
        .post(app.url("/v1/sessions"))
        .bearer_auth(&token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(no_type).await,
        (415, "UNSUPPORTED_MEDIA_TYPE".into())
    );

    let huge = json!({"title": "x", "metadata": {"blob": "y".repeat(10_000)}});
    let response = app.post_json("/v1/sessions", &token, &huge).await;
    assert_eq!(
        error_code(response).await,
        (413, "PAYLOAD_TOO_LARGE".into())
    );

    let unknown = app.get("/v1/nope", &token).await;
    assert_eq!(error_code(unknown).await, (404, "NOT_FOUND".into()));
    let wrong_method = app
        .client
        .put(app.url("/v1/sessions"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(wrong_method).await,
        (405, "METHOD_NOT_ALLOWED".into())
    );

    let list: Value = app.get("/v1/sessions", &token).await.json().await.unwrap();
    assert_eq!(list["sessions"], json!([]), "nothing stored");
}

#[tokio::test]
async fn responses_carry_a_request_id() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let response = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert!(response.headers().get("x-request-id").is_some());
    let response = app
        .client
        .get(app.url("/healthz"))
        .header("x-request-id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "abc-123");
}
