//! WebSearch end to end through the server: a SearXNG-shaped stub and a Brave-shaped stub on
//! loopback (the operator lists 127.0.0.0/8), results filtered by the session's egress deny
//! rules and the call's domains, `egress` events, the absent tool with its reason, start-up
//! refusal of a misconfigured backend, and hostile inputs and backends.

use crate::helpers::{Backend, TestApp, count, tool_results};
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use norma::search::{SearchBackendKind, SearchBackendSettings};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

const BRAVE_KEY: &str = "brave-test-key-not-secret";

/// Results of every shape the filters care about.
fn hits() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        (
            "Axum docs",
            "https://docs.rs/axum",
            "A <b>web</b> framework &amp; more",
        ),
        (
            "Blocked",
            "https://blocked.example/x",
            "blocked by the call",
        ),
        (
            "Denied",
            "https://www.denied.example/y",
            "denied by the session",
        ),
        ("FTP", "ftp://files.example/z", "not http"),
        ("Tokio", "https://www.tokio.rs/b", "An async runtime"),
    ]
}

/// A loopback search service: SearXNG's `/search?format=json` and Brave's
/// `/res/v1/web/search` (which wants the key), plus misbehaving variants.
async fn search_stub() -> String {
    let router = axum::Router::new()
        .route(
            "/search",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                if q.get("format").map(String::as_str) != Some("json") {
                    return (StatusCode::FORBIDDEN, "json format off").into_response();
                }
                let results: Vec<Value> = hits()
                    .into_iter()
                    .map(|(title, url, content)| json!({"title": title, "url": url, "content": content}))
                    .collect();
                axum::Json(json!({"query": q.get("q"), "results": results})).into_response()
            }),
        )
        .route(
            "/res/v1/web/search",
            get(|headers: HeaderMap, Query(q): Query<HashMap<String, String>>| async move {
                if headers.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some(BRAVE_KEY) {
                    return (StatusCode::UNAUTHORIZED, "bad token").into_response();
                }
                let count: usize = q.get("count").and_then(|c| c.parse().ok()).unwrap_or(20);
                let results: Vec<Value> = hits()
                    .into_iter()
                    .take(count)
                    .map(|(title, url, description)| json!({"title": title, "url": url, "description": description}))
                    .collect();
                axum::Json(json!({"type": "search", "web": {"results": results}})).into_response()
            }),
        )
        .route("/garbage/search", get(|| async { "<html>not json</html>" }))
        .route(
            "/slow/search",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        )
        .route(
            "/huge/search",
            get(|| async { ([("content-type", "application/json")], "[".repeat(300_000)) }),
        );
    crate::helpers::serve_local(router).await
}

fn searching(inputs: &[Value], egress: Value) -> Value {
    let calls: Vec<Value> = inputs
        .iter()
        .map(|input| json!({"name": "WebSearch", "input": input}))
        .collect();
    json!({
        "egress": egress,
        "permission": {"mode": "dontAsk", "allow": ["WebSearch"]},
        "model": {"script": {"turns": [{"tool_calls": calls}, {"text": "done"}]}}
    })
}

/// Runs one prompt of `tenant` and returns the session id, the tool results and the
/// `egress` events.
async fn run(app: &TestApp, tenant: &str, config: &Value) -> (String, Vec<Value>, Vec<Value>) {
    let token = app.token(tenant);
    let id = app.create_session(tenant, config).await;
    let response = app.prompt(&token, &id, "search it").await;
    assert!(response.status().is_success(), "{}", response.status());
    let events = app
        .wait_for_events(&token, &id, |events| count(events, "terminal") >= 1)
        .await;
    let egress = events
        .iter()
        .filter(|e| e["type"] == "egress")
        .map(|e| e["payload"].clone())
        .collect();
    (
        id.clone(),
        tool_results(&app.messages(&token, &id).await),
        egress,
    )
}

async fn session_view(app: &TestApp, tenant: &str, id: &str) -> Value {
    app.get(&format!("/v1/sessions/{id}"), &app.token(tenant))
        .await
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn searxng_results_are_filtered_bounded_and_recorded() {
    let stub = search_stub().await;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.search.backend = Some(SearchBackendKind::Searxng);
        s.search.endpoint = Some(stub.clone());
    })
    .await
    .unwrap();
    let config = searching(
        &[
            json!({"query": "rust web framework", "count": 5, "blocked_domains": ["blocked.example"]}),
        ],
        json!({"deny": ["domain:*.denied.example"]}),
    );
    let (id, results, events) = run(&app, "acme", &config).await;
    let text = results[0]["content"].as_str().unwrap();
    assert_eq!(results[0]["is_error"], false, "{text}");
    assert!(
        text.contains("1. Axum docs\n   https://docs.rs/axum"),
        "{text}"
    );
    assert!(text.contains("A web framework & more"), "{text}");
    assert!(
        text.contains("2. Tokio\n   https://www.tokio.rs/b"),
        "{text}"
    );
    for absent in ["blocked.example", "denied.example", "ftp://"] {
        assert!(!text.contains(absent), "{absent}: {text}");
    }
    assert!(text.contains("3 more results left out"), "{text}");
    let event = events
        .iter()
        .find(|e| e["purpose"] == "web_search")
        .expect("the search's egress event");
    assert_eq!(event["decision"], "allowed", "{event}");
    assert_eq!(event["host"], "127.0.0.1");
    assert_eq!(event["status"], 200);
    assert!(event["bytes"].as_u64().unwrap() > 0);
    assert!(event["tool_use_id"].is_string());
    let view = session_view(&app, "acme", &id).await;
    assert_eq!(view["absent_tools"], json!([]), "{view}");
}

#[tokio::test]
async fn a_tenants_brave_backend_sends_its_key_and_others_have_no_websearch() {
    let stub = search_stub().await;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.search.tenants.insert(
            "acme".into(),
            SearchBackendSettings {
                backend: Some(SearchBackendKind::Brave),
                endpoint: Some(format!("{stub}/res/v1/web/search")),
                api_key: Some(secrecy::SecretString::from(BRAVE_KEY)),
            },
        );
    })
    .await
    .unwrap();
    let config = searching(&[json!({"query": "tokio", "count": 2})], json!({}));
    let (id, results, _) = run(&app, "acme", &config).await;
    let text = results[0]["content"].as_str().unwrap();
    assert_eq!(results[0]["is_error"], false, "{text}");
    // count=2 reached Brave: only its first two results came back, one of them blocked by
    // nothing here.
    assert!(text.contains("https://docs.rs/axum"), "{text}");
    assert!(!text.contains("tokio.rs"), "{text}");
    let view = session_view(&app, "acme", &id).await;
    assert_eq!(view["absent_tools"], json!([]), "{view}");
    assert!(
        !view.to_string().contains(BRAVE_KEY),
        "the key is never shown"
    );

    // Another tenant has no backend: no WebSearch tool, and the session says why.
    let (id, results, events) = run(&app, "globex", &config).await;
    assert_eq!(results[0]["is_error"], true, "{}", results[0]);
    assert!(events.is_empty(), "nothing went out: {events:?}");
    let view = session_view(&app, "globex", &id).await;
    assert_eq!(view["absent_tools"][0]["name"], "WebSearch", "{view}");
    assert!(
        view["absent_tools"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("no search backend"),
        "{view}"
    );
}

#[tokio::test]
async fn hostile_queries_and_backends_end_in_codes_and_others_are_still_served() {
    let stub = search_stub().await;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.search.backend = Some(SearchBackendKind::Searxng);
        s.search.endpoint = Some(stub.clone());
        s.search.timeout_seconds = 1;
        s.search.max_response_bytes = 64 * 1024;
        for (tenant, path) in [
            ("garbage", "/garbage"),
            ("slow", "/slow"),
            ("huge", "/huge"),
        ] {
            s.search.tenants.insert(
                tenant.into(),
                SearchBackendSettings {
                    backend: Some(SearchBackendKind::Searxng),
                    endpoint: Some(format!("{stub}{path}")),
                    api_key: None,
                },
            );
        }
    })
    .await
    .unwrap();
    let inputs = [
        json!({"query": "x".repeat(401)}),
        json!({"query": "ok", "count": 50}),
        json!({"query": "ok", "allowed_domains": vec!["a.example"; 21]}),
        json!({"query": "ok", "blocked_domains": ["https://not a domain"]}),
        json!({"query": "   "}),
    ];
    let (_, results, events) = run(&app, "mallory", &searching(&inputs, json!({}))).await;
    for result in &results {
        assert_eq!(result["is_error"], true, "{result}");
        assert_eq!(result["code"], "INPUT_SCHEMA_INVALID", "{result}");
    }
    assert!(events.is_empty(), "nothing went out: {events:?}");

    let one = searching(&[json!({"query": "ok"})], json!({}));
    let (_, results, _) = run(&app, "garbage", &one).await;
    assert_eq!(results[0]["code"], "SEARCH_FAILED", "{}", results[0]);
    let (_, results, events) = run(&app, "slow", &one).await;
    assert_eq!(results[0]["code"], "EGRESS_DENIED", "{}", results[0]);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("reason timeout")
    );
    assert!(
        events.iter().any(|e| e["reason"] == "timeout"),
        "{events:?}"
    );
    let (_, results, _) = run(&app, "huge", &one).await;
    assert_eq!(results[0]["code"], "EGRESS_DENIED", "{}", results[0]);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("reason too_large")
    );

    // The server's backend still answers another tenant.
    let (_, results, _) = run(&app, "acme", &one).await;
    assert_eq!(results[0]["is_error"], false, "{}", results[0]);
}

#[tokio::test]
async fn misconfigured_backends_are_start_up_errors() {
    type Configure = Box<dyn Fn(&mut norma::config::Settings)>;
    let cases: Vec<(Configure, &str)> = vec![
        (
            Box::new(|s| s.search.backend = Some(SearchBackendKind::Searxng)),
            "needs `endpoint`",
        ),
        (
            Box::new(|s| s.search.backend = Some(SearchBackendKind::Brave)),
            "needs `api_key`",
        ),
        (
            Box::new(|s| s.search.endpoint = Some("http://searx.internal/".into())),
            "`backend` is not",
        ),
        (
            // A literal address outside the operator's allow-list.
            Box::new(|s| {
                s.search.backend = Some(SearchBackendKind::Searxng);
                s.search.endpoint = Some("http://169.254.169.254/".into());
            }),
            "egress.allow_private_cidrs",
        ),
    ];
    for (configure, expected) in cases {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let mut settings = crate::helpers::test_settings(data_dir.path());
        configure(&mut settings);
        let error = match norma::app::App::build(settings).await {
            Ok(_) => panic!("{expected}: the server must refuse to start"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains(expected), "{error} (wanted {expected})");
    }
}
