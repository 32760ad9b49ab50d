//! Browser access over real HTTP: CORS preflights from an allowed and a refused origin, and
//! stream tickets (`?ticket=` on `/stream`, no `Authorization`), on both stores. The test in a
//! real Chromium is `tests/api/browser_chromium.rs`.

use crate::helpers::{Backend, TestApp, error_code};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

pub const PAGE_ORIGIN: &str = "http://127.0.0.1:18300";

async fn app_allowing(backend: Backend, origin: &str) -> Option<TestApp> {
    let origin = origin.to_owned();
    TestApp::spawn_with(backend, move |settings| {
        settings.browser.allowed_origins = vec![origin];
    })
    .await
}

async fn preflight(app: &TestApp, origin: &str, method: &str, headers: &str) -> reqwest::Response {
    app.client
        .request(reqwest::Method::OPTIONS, app.url("/v1/sessions"))
        .header("origin", origin)
        .header("access-control-request-method", method)
        .header("access-control-request-headers", headers)
        .send()
        .await
        .expect("preflight")
}

#[tokio::test]
async fn preflight_from_an_allowed_origin_is_answered() {
    let app = app_allowing(Backend::Sqlite, PAGE_ORIGIN).await.unwrap();
    let response = preflight(
        &app,
        PAGE_ORIGIN,
        "POST",
        "authorization,content-type,idempotency-key,last-event-id",
    )
    .await;
    assert!(response.status().is_success(), "{}", response.status());
    let headers = response.headers();
    assert_eq!(headers["access-control-allow-origin"], PAGE_ORIGIN);
    let allowed = headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for header in [
        "authorization",
        "content-type",
        "idempotency-key",
        "last-event-id",
    ] {
        assert!(allowed.contains(header), "{header} in {allowed}");
    }
    let methods = headers["access-control-allow-methods"].to_str().unwrap();
    for method in ["GET", "POST", "DELETE"] {
        assert!(methods.contains(method), "{method} in {methods}");
    }
    assert!(
        headers["vary"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase()
            .contains("origin")
    );

    // The actual request: the page may read our headers.
    let response = app
        .client
        .get(app.url("/v1/sessions"))
        .bearer_auth(app.token("acme"))
        .header("origin", PAGE_ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        PAGE_ORIGIN
    );
    let exposed = response.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for header in ["x-request-id", "idempotency-replayed", "retry-after"] {
        assert!(exposed.contains(header), "{header} in {exposed}");
    }
    // An error answer carries the CORS headers too (the page can read its code).
    let response = app
        .client
        .get(app.url("/v1/sessions"))
        .header("origin", PAGE_ORIGIN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()["access-control-allow-origin"],
        PAGE_ORIGIN
    );
}

#[tokio::test]
async fn a_refused_origin_gets_no_cors_headers() {
    let app = app_allowing(Backend::Sqlite, PAGE_ORIGIN).await.unwrap();
    for origin in [
        "http://127.0.0.1:18301",
        "https://127.0.0.1:18300",
        "http://evil.example",
        "null",
    ] {
        let response = preflight(&app, origin, "GET", "authorization").await;
        assert!(
            !response
                .headers()
                .contains_key("access-control-allow-origin"),
            "{origin}: {:?}",
            response.headers()
        );
        let response = app
            .client
            .get(app.url("/v1/sessions"))
            .bearer_auth(app.token("acme"))
            .header("origin", origin)
            .send()
            .await
            .unwrap();
        assert!(
            !response
                .headers()
                .contains_key("access-control-allow-origin")
        );
    }
    // No origin configured (the default): even the page's origin is refused.
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let response = preflight(&app, PAGE_ORIGIN, "GET", "authorization").await;
    assert!(
        !response
            .headers()
            .contains_key("access-control-allow-origin")
    );
}

#[tokio::test]
async fn a_malformed_origin_setting_stops_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("norma.toml");
    std::fs::write(
        &file,
        "[browser]\nallowed_origins = [\"https://app.example.com/console\"]\n",
    )
    .unwrap();
    let error = norma::config::Settings::load(Some(&file), &Default::default()).unwrap_err();
    assert!(
        error.to_string().contains("browser.allowed_origins"),
        "{error}"
    );
}

/// Asks for a stream ticket.
pub async fn ticket(app: &TestApp, token: &str, id: &str) -> Value {
    let response = app
        .post_json(
            &format!("/v1/sessions/{id}/stream-tickets"),
            token,
            &json!({}),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Reads `?ticket=` stream events (no `Authorization`) until `terminal`; returns their ids.
async fn follow_with_ticket(app: &TestApp, path: &str, last_event_id: Option<i64>) -> Vec<i64> {
    let mut request = app.client.get(app.url(path));
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream().eventsource();
    let mut ids = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("an event within 20 s")
            .expect("stream open")
            .expect("event");
        ids.push(event.id.parse().unwrap());
        if event.event == "terminal" {
            return ids;
        }
    }
}

async fn a_ticket_follows_the_stream_until_it_expires(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "hello from the model"}]}}}),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "hi").await.status(), 202);
    // A read-only token may ask for one.
    let reader = app.token_with_scopes("acme", &["sessions:read"]);
    let issued = ticket(&app, &reader, &id).await;
    let path = issued["stream_path"].as_str().unwrap().to_owned();
    let raw = issued["ticket"].as_str().unwrap().to_owned();
    assert_eq!(
        path,
        format!("/v1/sessions/{id}/stream?ticket={raw}"),
        "the ticket is URL-safe as is"
    );
    assert!(issued["expires_at"].is_string());
    let all = follow_with_ticket(&app, &path, None).await;
    assert!(all.len() >= 3, "{all:?}");
    // Reusable: the EventSource reconnect with Last-Event-ID gets the rest, no duplicate.
    let rest = follow_with_ticket(&app, &path, Some(all[1])).await;
    assert_eq!(rest, all[2..].to_vec());

    // Another session of the same tenant: refused.
    let other = app.create_session("acme", &json!({})).await;
    let response = app
        .client
        .get(app.url(&format!("/v1/sessions/{other}/stream?ticket={raw}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(response).await,
        (401, "TICKET_WRONG_SESSION".into())
    );
    // Tampered (one signature character changed), garbage, or too long: invalid.
    let mut tampered = raw.clone().into_bytes();
    let last = tampered.len() - 2;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for bad in [tampered, "nst1.e30.AAAA".into(), "x".repeat(5000)] {
        let response = app
            .client
            .get(app.url(&format!("/v1/sessions/{id}/stream")))
            .query(&[("ticket", bad.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(error_code(response).await, (401, "TICKET_INVALID".into()));
    }
    // Only the stream accepts it: elsewhere it is no credential at all.
    for path in [
        format!("/v1/sessions/{id}/events?ticket={raw}"),
        format!("/v1/sessions/{id}?ticket={raw}"),
    ] {
        let response = app.client.get(app.url(&path)).send().await.unwrap();
        assert_eq!(error_code(response).await, (401, "UNAUTHENTICATED".into()));
    }
    // Another tenant cannot get one for this session.
    let response = app
        .post_json(
            &format!("/v1/sessions/{id}/stream-tickets"),
            &app.token("globex"),
            &json!({}),
        )
        .await;
    assert_eq!(error_code(response).await, (404, "NOT_FOUND".into()));
    // A token without the read scope cannot either.
    let response = app
        .post_json(
            &format!("/v1/sessions/{id}/stream-tickets"),
            &app.token_with_scopes("acme", &["approvals:write"]),
            &json!({}),
        )
        .await;
    assert_eq!(error_code(response).await, (403, "FORBIDDEN_SCOPE".into()));
}

crate::on_both_backends! {
    a_ticket_follows_the_stream => a_ticket_follows_the_stream_until_it_expires;
}

#[tokio::test]
async fn replicas_sharing_the_key_accept_each_others_tickets_and_expiry_holds() {
    let secret = "shared-ticket-key-0123456789abcdef";
    let configure = |settings: &mut norma::config::Settings| {
        settings.browser.stream_ticket_secret = Some(secret.into());
        settings.browser.stream_ticket_ttl_seconds = 10;
    };
    let first = TestApp::spawn_with(Backend::Sqlite, configure)
        .await
        .unwrap();
    let id = first.create_session("acme", &json!({})).await;
    let issued = ticket(&first, &first.token("acme"), &id).await;
    let raw = issued["ticket"].as_str().unwrap();
    // Another server with the same key (its own store: the session is unknown there, so the
    // ticket is accepted and the lookup answers 404, not 401).
    let second = TestApp::spawn_with(Backend::Sqlite, configure)
        .await
        .unwrap();
    let response = second
        .client
        .get(second.url(&format!("/v1/sessions/{id}/stream?ticket={raw}")))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(response).await, (404, "NOT_FOUND".into()));
    // A server with another key refuses it.
    let third = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let response = third
        .client
        .get(third.url(&format!("/v1/sessions/{id}/stream?ticket={raw}")))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(response).await, (401, "TICKET_INVALID".into()));
    // Past its 10 s lifetime, refused with its own code.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let response = first
        .client
        .get(first.url(&format!("/v1/sessions/{id}/stream?ticket={raw}")))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(response).await, (401, "TICKET_EXPIRED".into()));
}
