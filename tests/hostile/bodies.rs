//! Request bodies: JSON nested past the parser's depth limit, bodies over the size limit and
//! deeply nested but valid JSON inside a session config end in a clear error, never a crash.

use serde_json::Value;

use crate::support::{assert_still_serves, start_server};

/// POSTs raw `body` as JSON to `path`; returns the status and the error body.
async fn post_raw(server: &crate::server::ServerProcess, path: &str, body: String) -> (u16, Value) {
    let (status, _, body) = post_raw_with_headers(server, path, body).await;
    (status, body)
}

/// [`post_raw`] that also returns the response headers.
async fn post_raw_with_headers(
    server: &crate::server::ServerProcess,
    path: &str,
    body: String,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let token = server.token("attacker");
    let response = server
        .client
        .post(server.url(path))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (
        status,
        headers,
        response.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_json_bodies_are_refused_with_a_code() {
    let server = start_server(&[]).await;
    // 200,000 levels of arrays: well under the 1 MiB body limit.
    let depth = 200_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let (status, body) = post_raw(&server, "/v1/sessions", nested).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "INVALID_JSON", "{body}");

    // The same depth inside an otherwise valid session config (metadata is free-form).
    let inner = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let (status, body) = post_raw(
        &server,
        "/v1/sessions",
        format!("{{\"metadata\": {{\"x\": {inner}}}}}"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "INVALID_JSON", "{body}");
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_refused_before_parsing() {
    let server = start_server(&[("NORMA_MAX_BODY_BYTES", "65536")]).await;
    let big = format!("{{\"title\": \"{}\"}}", "a".repeat(200_000));
    // The refused body is left unread, so the answer closes the connection; the same pooled
    // client then asks again on a fresh connection instead of a reset one.
    for _ in 0..3 {
        let (status, headers, body) =
            post_raw_with_headers(&server, "/v1/sessions", big.clone()).await;
        assert_eq!(status, 413, "{body}");
        assert_eq!(body["code"], "PAYLOAD_TOO_LARGE", "{body}");
        assert_eq!(headers["connection"], "close", "{headers:?}");
    }
    assert_still_serves(&server).await;
}
