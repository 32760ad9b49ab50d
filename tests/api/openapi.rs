//! The committed OpenAPI document must match the one generated from the code.

#[tokio::test]
async fn committed_openapi_document_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = norma::api::openapi_json();
    assert!(
        committed == generated,
        "openapi/openapi.json is stale: run `cargo run -- openapi > openapi/openapi.json` and commit it"
    );
}

#[tokio::test]
async fn served_document_lists_every_route() {
    let app = crate::helpers::TestApp::spawn(crate::helpers::Backend::Sqlite)
        .await
        .unwrap();
    let doc: serde_json::Value = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/healthz",
        "/readyz",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/outputs/{output_id}",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the served document"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
}
