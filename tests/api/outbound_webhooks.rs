//! Outbound event webhooks through the real server: subscriptions over REST, notifications
//! written to the outbox with the events they report, delivered to a receiver on loopback and
//! verified with the PyPI `standardwebhooks` library, retried with the same `webhook-id`,
//! refused for addresses the server does not allow, and bounded per tenant.

use crate::helpers::{Backend, TestApp, count, error_code};
use crate::webhook_receiver::{Receiver, tampered_is_refused, types, verify_with_standardwebhooks};
use serde_json::{Value, json};
use std::time::Duration;

const ALL_EVENTS: [&str; 5] = [
    "run.completed",
    "run.failed",
    "run.parked",
    "approval.requested",
    "session.closed",
];
const WITHIN: Duration = Duration::from_secs(30);

/// Both backends, with a configured app.
macro_rules! on_both {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            use super::*;
            #[tokio::test]
            async fn sqlite() {
                $case(Backend::Sqlite).await;
            }
            #[tokio::test]
            async fn postgres() {
                $case(Backend::Postgres).await;
            }
        }
    )*};
}

on_both! {
    notifications_are_signed_and_cover_runs_approvals_parking_and_close => signed_notifications;
    a_failing_receiver_is_retried_with_the_same_id => retried_with_the_same_id;
    hostile_subscriptions_are_refused_and_another_tenant_is_still_served => hostile_subscriptions;
    a_tenants_stalled_receiver_keeps_no_other_tenant_waiting => stalled_receiver;
}

/// A server that may reach loopback (`egress.allow_private_cidrs`), parks fast and retries
/// fast; `None` when Postgres is skipped outside CI.
async fn app_on(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.approval_park_after_ms = 200;
        s.webhooks.retry_base_ms = 100;
        s.webhooks.retry_max_ms = 400;
        s.webhooks.max_per_tenant = 3;
        s.webhooks.max_per_session = 1;
    })
    .await
}

fn admin(app: &TestApp, tenant: &str) -> String {
    app.token_with_scopes(
        tenant,
        &[
            "sessions:read",
            "sessions:write",
            "approvals:write",
            "tenant:admin",
        ],
    )
}

async fn subscribe(app: &TestApp, token: &str, body: &Value) -> Value {
    let response = app.post_json("/v1/webhooks", token, body).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

async fn deliveries(app: &TestApp, token: &str, webhook: &str) -> Vec<Value> {
    let page: Value = app
        .get(&format!("/v1/webhooks/{webhook}/deliveries"), token)
        .await
        .json()
        .await
        .unwrap();
    page["deliveries"].as_array().unwrap().clone()
}

fn payloads_of(verified: &[Value], kind: &str) -> Vec<Value> {
    verified
        .iter()
        .filter(|p| p["type"] == kind)
        .cloned()
        .collect()
}

async fn signed_notifications(backend: Backend) {
    let Some(app) = app_on(backend).await else {
        return;
    };
    let receiver = Receiver::start().await;
    let token = admin(&app, "acme");
    let created = subscribe(
        &app,
        &token,
        &json!({"url": receiver.url, "events": ALL_EVENTS}),
    )
    .await;
    let webhook = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{created}");
    assert_eq!(created["events"], json!(ALL_EVENTS));
    // The secret is shown once: never by a read.
    let read: Value = app
        .get(&format!("/v1/webhooks/{webhook}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert!(read.get("secret").is_none(), "{read}");
    assert!(!read.to_string().contains(&secret));
    let listed: Value = app.get("/v1/webhooks", &token).await.json().await.unwrap();
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains(&secret));

    // A run that asks for approval, parks, is approved and completes; then the session closes.
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "echo notified"}}]},
                {"text": "done"}
            ]}}}),
        )
        .await;
    let accepted: Value = app.prompt(&token, &id, "go").await.json().await.unwrap();
    let run_id = accepted["run_id"].as_str().unwrap().to_owned();
    app.wait_for_events(&token, &id, |e| count(e, "run_parked") == 1)
        .await;
    let approval = app.first_pending_approval(&token, &id).await;
    receiver
        .wait_for(WITHIN, |r| {
            let kinds = types(r);
            kinds.iter().any(|k| k == "approval.requested")
                && kinds.iter().any(|k| k == "run.parked")
        })
        .await;
    let answered = app
        .answer(&token, &id, &approval, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answered.status(), 200);
    app.wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    assert_eq!(
        app.delete(&format!("/v1/sessions/{id}"), &token)
            .await
            .status(),
        200
    );
    let received = receiver.wait_for(WITHIN, |r| types(r).len() >= 4).await;
    // Nothing more than one of each (a second close notifies nobody).
    assert_eq!(
        app.delete(&format!("/v1/sessions/{id}"), &token)
            .await
            .status(),
        200
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received_after = receiver.received();
    assert_eq!(received_after.len(), 4, "{:?}", types(&received_after));

    let verified = verify_with_standardwebhooks(&secret, &received);
    assert!(tampered_is_refused(&secret, &received[0]));
    let mut kinds: Vec<String> = verified
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "run.completed",
            "run.parked",
            "session.closed"
        ]
    );
    for payload in &verified {
        assert_eq!(payload["data"]["session_id"], id.as_str(), "{payload}");
        assert!(payload["timestamp"].is_string(), "{payload}");
    }
    let completed = &payloads_of(&verified, "run.completed")[0];
    assert_eq!(completed["data"]["run_id"], run_id.as_str());
    assert_eq!(completed["data"]["status"], "completed");
    assert_eq!(completed["data"]["terminal"]["reason"], "end_turn");
    let requested = &payloads_of(&verified, "approval.requested")[0];
    assert_eq!(requested["data"]["approval"]["id"], approval.as_str());
    assert_eq!(requested["data"]["approval"]["tool_name"], "Bash");
    let parked = &payloads_of(&verified, "run.parked")[0];
    assert_eq!(parked["data"]["approval_ids"], json!([approval]));
    // Each notification has its own id; the log shows each delivered at the first attempt.
    let mut ids: Vec<&str> = received.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    let log = deliveries(&app, &token, &webhook).await;
    assert_eq!(log.len(), 4);
    for delivery in &log {
        assert_eq!(delivery["status"], "delivered", "{delivery}");
        assert_eq!(delivery["attempts"], 1, "{delivery}");
        assert_eq!(delivery["attempt_log"][0]["status_code"], 200, "{delivery}");
        assert!(
            ids.contains(&delivery["id"].as_str().unwrap()),
            "{delivery}"
        );
    }

    // Another tenant sees none of it.
    let other = admin(&app, "globex");
    let (status, code) =
        error_code(app.get(&format!("/v1/webhooks/{webhook}"), &other).await).await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
    let (status, _) = error_code(
        app.get(&format!("/v1/webhooks/{webhook}/deliveries"), &other)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    let listed: Value = app.get("/v1/webhooks", &other).await.json().await.unwrap();
    assert_eq!(listed["webhooks"], json!([]));

    // Deleting the subscription stops its notifications.
    assert_eq!(
        app.delete(&format!("/v1/webhooks/{webhook}"), &token)
            .await
            .status(),
        204
    );
    let again = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "quiet"}]}}}),
        )
        .await;
    app.prompt(&token, &again, "go").await;
    app.wait_for_events(&token, &again, |e| count(e, "terminal") == 1)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 4);
}

async fn retried_with_the_same_id(backend: Backend) {
    let Some(app) = app_on(backend).await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.fail_next(&[500, 503]);
    let token = app.token("acme");
    // A session's own subscription (no `tenant:admin` needed), to its session's events only.
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "hello"}]}}}),
        )
        .await;
    let quiet = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "other"}]}}}),
        )
        .await;
    let created = subscribe(
        &app,
        &token,
        &json!({"url": receiver.url, "events": ["run.completed"], "session_id": id}),
    )
    .await;
    assert_eq!(created["session_id"], id.as_str());
    let webhook = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    app.prompt(&token, &quiet, "go").await;
    app.wait_for_events(&token, &quiet, |e| count(e, "terminal") == 1)
        .await;
    app.prompt(&token, &id, "go").await;
    let received = receiver.wait_for(WITHIN, |r| r.len() >= 3).await;
    assert_eq!(
        received.iter().map(|r| r.answered).collect::<Vec<_>>(),
        [500, 503, 200]
    );
    assert!(
        received.iter().all(|r| r.id == received[0].id),
        "one webhook-id"
    );
    let verified = verify_with_standardwebhooks(&secret, &received);
    assert!(
        verified.iter().all(|p| p == &verified[0]),
        "the same body each time"
    );
    assert_eq!(verified[0]["data"]["session_id"], id.as_str());

    // The receiver has answered 200; the worker records the outcome just after.
    let started = std::time::Instant::now();
    let log = loop {
        let log = deliveries(&app, &token, &webhook).await;
        if log.iter().all(|d| d["status"] != "pending") || started.elapsed() > WITHIN {
            break log;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(log.len(), 1, "the other session notified nobody: {log:#?}");
    let delivery = &log[0];
    assert_eq!(delivery["id"], received[0].id.as_str());
    assert_eq!(delivery["status"], "delivered");
    assert_eq!(delivery["attempts"], 3);
    let attempts = delivery["attempt_log"].as_array().unwrap();
    assert_eq!(
        attempts
            .iter()
            .map(|a| (
                a["attempt"].clone(),
                a["status_code"].clone(),
                a["error"].clone()
            ))
            .collect::<Vec<_>>(),
        [
            (json!(1), json!(500), json!("WEBHOOK_HTTP_STATUS")),
            (json!(2), json!(503), json!("WEBHOOK_HTTP_STATUS")),
            (json!(3), json!(200), Value::Null),
        ]
    );
    assert!(delivery["delivered_at"].is_string());
}

async fn hostile_subscriptions(backend: Backend) {
    let Some(app) = app_on(backend).await else {
        return;
    };
    let token = admin(&app, "acme");
    let refused = |body: Value| {
        let app = &app;
        let token = token.clone();
        async move {
            let response = app.post_json("/v1/webhooks", &token, &body).await;
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap();
            (
                status,
                body["code"].as_str().unwrap().to_owned(),
                body["details"]["field"].clone(),
            )
        }
    };
    let url = "https://hooks.example/in";
    for (body, field) in [
        (
            json!({"url": "not a url", "events": ["run.completed"]}),
            "url",
        ),
        (
            json!({"url": "ftp://hooks.example/", "events": ["run.completed"]}),
            "url",
        ),
        (
            json!({"url": "https://u:p@hooks.example/", "events": ["run.completed"]}),
            "url",
        ),
        (
            json!({"url": format!("{url}/{}", "a".repeat(3000)), "events": ["run.completed"]}),
            "url",
        ),
        (
            json!({"url": "http://169.254.169.254/latest", "events": ["run.completed"]}),
            "url",
        ),
        (json!({"url": url, "events": []}), "events"),
        (json!({"url": url, "events": ["run.exploded"]}), "events"),
        (
            json!({"url": url, "events": ["run.failed", "run.failed"]}),
            "events",
        ),
    ] {
        assert_eq!(
            refused(body.clone()).await,
            (422, "INVALID_REQUEST".to_owned(), json!(field)),
            "{body}"
        );
    }
    // Unknown fields and wrong types are refused too.
    let (status, _, _) =
        refused(json!({"url": url, "events": ["run.completed"], "extra": 1})).await;
    assert_eq!(status, 422);
    // Tenant-wide needs tenant:admin.
    let plain = app.token("acme");
    let (status, code) = error_code(
        app.post_json(
            "/v1/webhooks",
            &plain,
            &json!({"url": url, "events": ["run.completed"]}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (403, "FORBIDDEN_SCOPE"));
    // At most `max_per_tenant` (3 here).
    for _ in 0..3 {
        subscribe(
            &app,
            &token,
            &json!({"url": url, "events": ["run.completed"]}),
        )
        .await;
    }
    let (status, code, _) = refused(json!({"url": url, "events": ["run.completed"]})).await;
    assert_eq!((status, code.as_str()), (422, "WEBHOOK_LIMIT"));
    // At most `max_per_session` (1) per session; another tenant's session is not found.
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "x"}]}}}),
        )
        .await;
    subscribe(
        &app,
        &plain,
        &json!({"url": url, "events": ["session.closed"], "session_id": id}),
    )
    .await;
    let (status, code) = error_code(
        app.post_json(
            "/v1/webhooks",
            &plain,
            &json!({"url": url, "events": ["session.closed"], "session_id": id}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (422, "WEBHOOK_LIMIT"));
    let intruder = admin(&app, "intruder");
    let (status, code) = error_code(
        app.post_json(
            "/v1/webhooks",
            &intruder,
            &json!({"url": url, "events": ["run.completed"], "session_id": id}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (404, "NOT_FOUND"));
    let (status, _) = error_code(
        app.get("/v1/webhooks/wh_0/deliveries?limit=1000", &token)
            .await,
    )
    .await;
    assert!(status == 404 || status == 422);

    // Another tenant is still served: it subscribes and gets its run's notification.
    let receiver = Receiver::start().await;
    let other = admin(&app, "globex");
    let created = subscribe(
        &app,
        &other,
        &json!({"url": receiver.url, "events": ["run.completed"]}),
    )
    .await;
    let session = app
        .create_session(
            "globex",
            &json!({"model": {"script": {"turns": [{"text": "served"}]}}}),
        )
        .await;
    app.prompt(&other, &session, "go").await;
    let received = receiver.wait_for(WITHIN, |r| !r.is_empty()).await;
    let verified = verify_with_standardwebhooks(created["secret"].as_str().unwrap(), &received);
    assert_eq!(verified[0]["data"]["session_id"], session.as_str());
}

/// A tenant whose receiver never answers, with a backlog of notifications older than anyone
/// else's, holds its share of the outbox worker's slots (half of `webhooks.concurrency`) and
/// no more; another tenant's notification is delivered at once, not after the stalled
/// attempts time out (10 s) — claimed oldest-first, the backlog took every slot.
async fn stalled_receiver(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
        s.webhooks.concurrency = 4;
    })
    .await
    else {
        return;
    };
    let stalled = Receiver::stalling().await;
    let noisy = admin(&app, "noisy");
    subscribe(
        &app,
        &noisy,
        &json!({"url": stalled.url, "events": ["session.closed"]}),
    )
    .await;
    for _ in 0..6 {
        let id = app.create_session("noisy", &json!({})).await;
        assert_eq!(
            app.delete(&format!("/v1/sessions/{id}"), &noisy)
                .await
                .status(),
            200
        );
    }
    stalled.wait_for(WITHIN, |r| r.len() >= 2).await;

    let receiver = Receiver::start().await;
    let quiet = admin(&app, "quiet");
    let created = subscribe(
        &app,
        &quiet,
        &json!({"url": receiver.url, "events": ["session.closed"]}),
    )
    .await;
    let id = app.create_session("quiet", &json!({})).await;
    assert_eq!(
        app.delete(&format!("/v1/sessions/{id}"), &quiet)
            .await
            .status(),
        200
    );
    let received = receiver.wait_for(WITHIN, |r| !r.is_empty()).await;
    let verified = verify_with_standardwebhooks(created["secret"].as_str().unwrap(), &received);
    assert_eq!(verified[0]["data"]["session_id"], id.as_str());
    // Still only the noisy tenant's share in flight: none of its attempts had timed out (a
    // timed-out slot would have gone to its next delivery).
    let stuck = stalled.received();
    assert_eq!(stuck.len(), 2, "{stuck:#?}");
    assert!(stuck.iter().all(|r| r.answered == 0));
}

/// A host name resolving to loopback passes creation (names are checked when resolved) but
/// is refused at delivery when the server does not allow private addresses: the delivery
/// fails at once with `WEBHOOK_FAILED`, and the receiver gets nothing.
#[tokio::test]
async fn a_name_resolving_to_a_private_address_is_refused_at_delivery() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let receiver = Receiver::start().await;
    let token = admin(&app, "acme");
    let port = receiver
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/hook");
    // An IP literal is refused at creation.
    let (status, code) = error_code(
        app.post_json(
            "/v1/webhooks",
            &token,
            &json!({"url": receiver.url, "events": ["run.completed"]}),
        )
        .await,
    )
    .await;
    assert_eq!((status, code.as_str()), (422, "INVALID_REQUEST"));
    let created = subscribe(
        &app,
        &token,
        &json!({"url": format!("http://localhost:{port}/hook"), "events": ["run.completed"]}),
    )
    .await;
    let webhook = created["id"].as_str().unwrap();
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "x"}]}}}),
        )
        .await;
    app.prompt(&token, &id, "go").await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    let delivery = loop {
        let log = deliveries(&app, &token, webhook).await;
        if let Some(done) = log.into_iter().find(|d| d["status"] != "pending") {
            break done;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no attempt recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(delivery["status"], "failed", "{delivery}");
    assert_eq!(delivery["attempts"], 1, "{delivery}");
    assert_eq!(
        delivery["attempt_log"][0]["error"], "WEBHOOK_FAILED",
        "{delivery}"
    );
    assert!(
        delivery["attempt_log"][0].get("status_code").is_none(),
        "{delivery}"
    );
    assert!(receiver.received().is_empty());
}
