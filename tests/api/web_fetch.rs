//! WebFetch through the egress broker, end to end: the scripted model fetches from a loopback
//! "public" site (the operator lists 127.0.0.0/8), and every refusal is an `EGRESS_DENIED`
//! tool result with its reason plus an `egress` event in the transcript.

use crate::helpers::{Backend, TestApp, count, error_code, tool_results};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::time::Duration;

const PAGE: &str = "<html><head><style>p{color:red}</style></head><body><nav>Menu</nav>\
    <h1>Egress docs</h1><p>See <a href=\"https://docs.rs/\">docs.rs</a>.</p>\
    <script>alert(1)</script></body></html>";

fn redirect(to: &'static str) -> Response {
    (
        axum::http::StatusCode::FOUND,
        [(axum::http::header::LOCATION, to)],
    )
        .into_response()
}

/// A loopback site: HTML, JSON, redirects (same site, to private and metadata addresses, a
/// loop, anywhere with `/away?to=URL`), a slow drip, an oversized body and a binary.
async fn site() -> String {
    site_on("127.0.0.1").await
}

/// [`site`] listening on `ip` (another loopback address is another host).
async fn site_on(ip: &str) -> String {
    let router = axum::Router::new()
        .route(
            "/away",
            get(
                |axum::extract::Query(q): axum::extract::Query<
                    std::collections::HashMap<String, String>,
                >| async move {
                    (
                        axum::http::StatusCode::FOUND,
                        [(
                            axum::http::header::LOCATION,
                            q.get("to").cloned().unwrap_or_default(),
                        )],
                    )
                        .into_response()
                },
            ),
        )
        .route(
            "/page",
            get(|| async { ([("content-type", "text/html; charset=utf-8")], PAGE) }),
        )
        .route(
            "/data.json",
            get(|| async { axum::Json(json!({"answer": 42})) }),
        )
        .route("/moved", get(|| async { redirect("/page") }))
        .route(
            "/to-private",
            get(|| async { redirect("http://10.0.0.1/") }),
        )
        .route(
            "/to-metadata",
            get(|| async { redirect("http://169.254.169.254/latest/meta-data/") }),
        )
        .route("/loop", get(|| async { redirect("/loop") }))
        .route(
            "/slow",
            get(|| async {
                let drip = futures::stream::unfold(0u32, |n| async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Some((
                        Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"x")),
                        n + 1,
                    ))
                });
                (
                    [("content-type", "text/plain")],
                    axum::body::Body::from_stream(drip),
                )
            }),
        )
        .route(
            "/big",
            get(|| async { ([("content-type", "text/plain")], "y".repeat(200_000)) }),
        )
        .route(
            "/blob",
            get(|| async {
                (
                    [("content-type", "application/octet-stream")],
                    vec![0u8, 1, 2, 3],
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(axum::serve(listener, router).into_future());
    base
}

/// A server whose operator lists loopback as reachable, with small WebFetch bounds.
async fn server() -> TestApp {
    TestApp::spawn_with(Backend::Sqlite, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.egress.fetch_timeout_seconds = 2;
        s.egress.fetch_max_bytes = 64 * 1024;
        s.egress.max_redirects = 3;
    })
    .await
    .unwrap()
}

/// A session whose model fetches each URL in turn, then says "done".
pub(crate) fn fetching(urls: &[String], egress: Value, permission: Value) -> Value {
    let calls: Vec<Value> = urls
        .iter()
        .map(|url| json!({"name": "WebFetch", "input": {"url": url}}))
        .collect();
    json!({
        "egress": egress,
        "permission": permission,
        "model": {"script": {"turns": [{"tool_calls": calls}, {"text": "done"}]}}
    })
}

/// Runs one prompt naming `urls` and returns the tool results and the `egress` events.
pub(crate) async fn run(app: &TestApp, config: &Value, prompt: &str) -> (Vec<Value>, Vec<Value>) {
    let token = app.token("acme");
    let id = app.create_session("acme", config).await;
    let response = app.prompt(&token, &id, prompt).await;
    assert!(response.status().is_success(), "{}", response.status());
    let events = app
        .wait_for_events(&token, &id, |events| count(events, "terminal") >= 1)
        .await;
    let egress = events
        .iter()
        .filter(|e| e["type"] == "egress")
        .map(|e| e["payload"].clone())
        .collect();
    (tool_results(&app.messages(&token, &id).await), egress)
}

pub(crate) fn reason(result: &Value) -> String {
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["code"], "EGRESS_DENIED", "{result}");
    let text = result["content"].as_str().unwrap();
    text.strip_prefix("reason ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn webfetch_reads_html_as_markdown_and_json_as_is_and_records_egress_events() {
    let base = site().await;
    let app = server().await;
    let urls = [
        format!("{base}/page"),
        format!("{base}/data.json"),
        format!("{base}/moved"),
    ];
    let config = fetching(&urls, json!({"allow": ["domain:127.0.0.1"]}), json!({}));
    let (results, events) = run(&app, &config, &format!("Read {}", urls.join(" "))).await;
    assert_eq!(results.len(), 3);
    let page = results[0]["content"].as_str().unwrap();
    assert_eq!(results[0]["is_error"], false, "{page}");
    assert!(page.contains("# Egress docs"), "{page}");
    assert!(page.contains("[docs.rs](https://docs.rs/)"), "{page}");
    assert!(
        !page.contains("alert(1)") && !page.contains("Menu"),
        "{page}"
    );
    let data = results[1]["content"].as_str().unwrap();
    assert!(data.contains(r#"{"answer":42}"#), "{data}");
    // A same-site redirect is followed (and re-checked).
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .contains("# Egress docs")
    );
    let allowed: Vec<&Value> = events
        .iter()
        .filter(|e| e["decision"] == "allowed")
        .collect();
    assert_eq!(allowed.len(), 4, "{events:#?}");
    // The page's own fetch (events of the three calls are not ordered among themselves).
    let first = allowed
        .iter()
        .find(|e| e["bytes"] == PAGE.len() && e["hop"] == 0 && e["status"] == 200)
        .expect("the page's egress event");
    assert_eq!(first["host"], "127.0.0.1");
    assert_eq!(first["purpose"], "web_fetch");
    assert_eq!(first["status"], 200);
    assert_eq!(first["rule"], "domain:127.0.0.1");
    assert_eq!(first["bytes"], PAGE.len());
    assert!(first["tool_use_id"].is_string());
    assert!(events.iter().any(|e| e["status"] == 302 && e["hop"] == 0));
}

#[tokio::test]
async fn hostile_fetches_end_in_egress_denied_with_a_reason() {
    let base = site().await;
    let app = server().await;
    let urls = [
        format!("{base}/to-private"),
        format!("{base}/to-metadata"),
        format!("{base}/loop"),
        format!("{base}/slow"),
        format!("{base}/big"),
        format!("{base}/blob"),
        "http://10.0.0.1/".to_owned(),
        "http://[::1]/".to_owned(),
        "ftp://127.0.0.1/".to_owned(),
    ];
    // Listing a host never lifts the address check.
    let listed = json!({"allow": ["domain:127.0.0.1", "domain:10.0.0.1", "domain:[::1]"]});
    let config = fetching(&urls, listed, json!({}));
    let (results, events) = run(&app, &config, &format!("Read {}", urls.join(" "))).await;
    let reasons: Vec<String> = results.iter().map(reason).collect();
    assert_eq!(
        reasons,
        [
            "redirect_denied",
            "redirect_denied",
            "redirect_denied",
            "timeout",
            "too_large",
            "unsupported_content",
            "private_address",
            "private_address",
            "invalid_url",
        ]
    );
    for text in results.iter().map(|r| r["content"].as_str().unwrap()) {
        assert!(
            !text.contains("is loopback") && !text.contains("link-local"),
            "{text}"
        );
    }
    for wanted in ["redirect_denied", "timeout", "too_large", "private_address"] {
        assert!(
            events
                .iter()
                .any(|e| e["decision"] == "denied" && e["reason"] == wanted),
            "no denied egress event with reason {wanted}: {events:#?}"
        );
    }
}

#[tokio::test]
async fn only_urls_from_the_conversation_are_fetched_unless_the_session_relaxes_it() {
    let base = site().await;
    let app = server().await;
    let invented = [format!("{base}/data.json?secret=hunter2")];
    let strict = fetching(&invented, json!({"allow": ["domain:127.0.0.1"]}), json!({}));
    let (results, events) = run(&app, &strict, "Summarize the project").await;
    assert_eq!(reason(&results[0]), "url_not_in_context");
    assert!(events.is_empty(), "nothing went out: {events:#?}");

    let relaxed = fetching(
        &invented,
        json!({"allow": ["domain:127.0.0.1"], "fetch_any_url": true}),
        json!({}),
    );
    let (results, _) = run(&app, &relaxed, "Summarize the project").await;
    assert_eq!(results[0]["is_error"], false, "{}", results[0]);
}

#[tokio::test]
async fn deny_wins_and_unlisted_hosts_go_up_the_permission_ladder() {
    let base = site().await;
    let app = server().await;
    let url = [format!("{base}/page")];
    let prompt = format!("Read {}", url[0]);

    // A session deny rule beats its own allow rule.
    let denied = fetching(
        &url,
        json!({"allow": ["domain:127.0.0.1"], "deny": ["domain:127.0.0.1"]}),
        json!({}),
    );
    let (results, _) = run(&app, &denied, &prompt).await;
    assert_eq!(reason(&results[0]), "not_allowed");

    // Unlisted: the ladder decides. dontAsk refuses it ...
    let unlisted = fetching(&url, json!({}), json!({"mode": "dontAsk"}));
    let (results, events) = run(&app, &unlisted, &prompt).await;
    assert_eq!(results[0]["code"], "PERMISSION_DENIED", "{}", results[0]);
    assert!(events.is_empty());

    // ... and a `WebFetch(domain:…)` allow rule lets it through.
    let ruled = fetching(
        &url,
        json!({}),
        json!({"mode": "dontAsk", "allow": ["WebFetch(domain:127.0.0.1)"]}),
    );
    let (results, _) = run(&app, &ruled, &prompt).await;
    assert_eq!(results[0]["is_error"], false, "{}", results[0]);
}

#[tokio::test]
async fn malformed_egress_rules_are_refused_at_creation() {
    let app = server().await;
    let token = app.token("acme");
    for bad in [
        json!({"egress": {"allow": ["docs.rs"]}}),
        json!({"egress": {"deny": ["domain:*"]}}),
        json!({"egress": {"allow": ["domain:docs.rs:0"]}}),
        json!({"egress": {"unknown": true}}),
    ] {
        let response = app.post_json("/v1/sessions", &token, &bad).await;
        let (status, code) = error_code(response).await;
        assert_eq!((status, code.as_str()), (422, "INVALID_REQUEST"), "{bad}");
    }
}

/// A redirect to a host no egress rule lists goes up the permission ladder: refused (naming
/// the target) while nothing allows it; fetching the target directly asks for an approval;
/// the approval's session grant for the domain then lets later redirects there through.
#[tokio::test]
async fn redirects_to_unlisted_hosts_follow_the_sessions_grants_after_an_approval() {
    let here = site().await;
    let there = site_on("127.0.0.2").await;
    let app = server().await;
    let token = app.token("acme");
    let first = format!("{here}/away?to={there}/page");
    let direct = format!("{there}/page");
    let later = format!("{here}/away?to={there}/data.json");
    let call = |url: &str| json!({"tool_calls": [{"name": "WebFetch", "input": {"url": url}}]});
    let config = json!({
        "egress": {"allow": ["domain:127.0.0.1"]},
        "model": {"script": {"turns": [call(&first), call(&direct), call(&later), {"text": "done"}]}}
    });
    let id = app.create_session("acme", &config).await;
    let response = app
        .prompt(&token, &id, &format!("Read {first} and then {later}"))
        .await;
    assert!(response.status().is_success(), "{}", response.status());
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let pending: Value = app
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    let approval = &pending["approvals"][0];
    assert_eq!(approval["tool_name"], "WebFetch", "{pending}");
    assert_eq!(approval["input"]["url"], direct.as_str(), "{pending}");
    let answer = app
        .post_json(
            &format!(
                "/v1/sessions/{id}/approvals/{}",
                approval["id"].as_str().unwrap()
            ),
            &token,
            &json!({"decision": "allow",
                    "grant": {"scope": "session", "rule": "WebFetch(domain:127.0.0.2)"}}),
        )
        .await;
    assert!(answer.status().is_success(), "{}", answer.status());
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") >= 1)
        .await;
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(reason(&results[0]), "redirect_denied");
    assert!(
        results[0]["content"].as_str().unwrap().contains(&direct),
        "the refusal names the target: {}",
        results[0]
    );
    assert_eq!(results[1]["is_error"], false, "{}", results[1]);
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("# Egress docs")
    );
    assert_eq!(results[2]["is_error"], false, "{}", results[2]);
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .contains(r#"{"answer":42}"#),
        "{}",
        results[2]
    );
    assert_eq!(
        count(&events, "approval_requested"),
        1,
        "the grant answered the hop"
    );
    let hop = events
        .iter()
        .filter(|e| e["type"] == "egress")
        .map(|e| &e["payload"])
        .find(|p| p["host"] == "127.0.0.2" && p["hop"] == 1 && p["decision"] == "allowed")
        .expect("the followed hop's egress event");
    assert_eq!(
        hop["rule"], "WebFetch(domain:127.0.0.2)",
        "the grant's rule: {hop}"
    );
}
