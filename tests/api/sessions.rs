//! The sessions API on both backends, including tenant isolation of every route.

use crate::helpers::{TestApp, error_code};
use crate::on_both_backends;
use serde_json::{Value, json};

on_both_backends! {
    create_get_list_close => create_get_list_close;
    pagination_is_newest_first_and_complete => pagination_is_newest_first_and_complete;
    tenant_isolation_on_every_route => tenant_isolation_on_every_route;
    invalid_configs_are_refused_and_nothing_is_stored => invalid_configs_are_refused;
    scopes_are_enforced => scopes_are_enforced;
}

async fn create_get_list_close(app: TestApp) {
    let token = app.token("acme");
    let config = json!({
        "title": "demo",
        "system_prompt": "be brief",
        "permission": {"mode": "acceptEdits", "allow": ["Read"], "deny": ["Bash"]},
        "budgets": {"max_turns": 7},
        "metadata": {"ticket": 42}
    });
    let response = app.post_json("/v1/sessions", &token, &config).await;
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ses_") && id.len() == 36, "{id}");
    assert_eq!(created["status"], "active");
    assert_eq!(created["config"]["title"], "demo");
    assert_eq!(created["config"]["permission"]["mode"], "acceptEdits");
    assert_eq!(created["config"]["budgets"]["max_turns"], 7);
    assert_eq!(created["config"]["metadata"]["ticket"], 42);
    assert_eq!(created["last_event_seq"], 0);

    let mut fetched: Value = app
        .get(&format!("/v1/sessions/{id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    // GET of one session adds its usage totals (none yet).
    let usage = fetched.as_object_mut().unwrap().remove("usage").unwrap();
    assert_eq!(usage["model_calls"], 0);
    assert_eq!(usage["cost_micros"], 0);
    assert_eq!(fetched, created);

    let list: Value = app.get("/v1/sessions", &token).await.json().await.unwrap();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(list["sessions"][0]["id"], id.as_str());
    assert!(list.get("next_cursor").is_none());

    let closed = app.delete(&format!("/v1/sessions/{id}"), &token).await;
    assert_eq!(closed.status(), 200);
    let closed: Value = closed.json().await.unwrap();
    assert_eq!(closed["status"], "closed");
    assert!(closed["closed_at"].is_string());
    // Closing again is idempotent and keeps the first close time.
    let again: Value = app
        .delete(&format!("/v1/sessions/{id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["closed_at"], closed["closed_at"]);

    let missing = app
        .get("/v1/sessions/ses_00000000000000000000000000000000", &token)
        .await;
    assert_eq!(error_code(missing).await, (404, "NOT_FOUND".into()));
}

async fn pagination_is_newest_first_and_complete(app: TestApp) {
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(
            app.create_session("pager", &json!({"title": format!("s{i}")}))
                .await,
        );
    }
    let token = app.token("pager");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sessions?limit=3&cursor={c}"),
            None => "/v1/sessions?limit=3".to_owned(),
        };
        let page: Value = app.get(&path, &token).await.json().await.unwrap();
        let ids: Vec<String> = page["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_owned())
            .collect();
        assert!(ids.len() <= 3);
        seen.extend(ids);
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    created.reverse();
    assert_eq!(seen, created, "every session once, newest first");

    for bad in [
        "/v1/sessions?limit=0",
        "/v1/sessions?limit=101",
        "/v1/sessions?cursor=%%%",
        "/v1/sessions?limit=x",
        "/v1/sessions?bogus=1",
    ] {
        assert_eq!(
            error_code(app.get(bad, &token).await).await,
            (422, "INVALID_REQUEST".into()),
            "{bad}"
        );
    }
}

async fn tenant_isolation_on_every_route(app: TestApp) {
    let id = app
        .create_session("tenant-a", &json!({"title": "secret"}))
        .await;
    let a = app.token("tenant-a");
    let b = app.token("tenant-b");
    let missing = "ses_ffffffffffffffffffffffffffffffff";

    // Read: B gets exactly what a missing session gets.
    let foreign = error_code(app.get(&format!("/v1/sessions/{id}"), &b).await).await;
    let absent = error_code(app.get(&format!("/v1/sessions/{missing}"), &b).await).await;
    assert_eq!(foreign, (404, "NOT_FOUND".into()));
    assert_eq!(foreign, absent);

    // List: B sees nothing of A.
    let list: Value = app.get("/v1/sessions", &b).await.json().await.unwrap();
    assert_eq!(list["sessions"], json!([]));

    // Close: B cannot close it, and it stays active for A.
    let close = error_code(app.delete(&format!("/v1/sessions/{id}"), &b).await).await;
    assert_eq!(close, (404, "NOT_FOUND".into()));
    let still: Value = app
        .get(&format!("/v1/sessions/{id}"), &a)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(still["status"], "active");

    // Outputs: B cannot probe outputs under A's session either.
    let output = error_code(
        app.get(
            &format!("/v1/sessions/{id}/outputs/out_00000000000000000000000000000000"),
            &b,
        )
        .await,
    )
    .await;
    assert_eq!(output, (404, "NOT_FOUND".into()));
}

async fn invalid_configs_are_refused(app: TestApp) {
    let token = app.token("strict");
    let cases = [
        (json!({"unknown": 1}), "unknown"),
        (json!({"title": 5}), "title"),
        (
            json!({"budgets": {"max_turns": 100000}}),
            "budgets.max_turns",
        ),
        (json!({"permission": {"mode": "sudo"}}), "permission.mode"),
        (json!({"permission": {"allow": "Read"}}), "permission.allow"),
        (
            json!({"permission": {"deny": ["Bash(rm:*"]}}),
            "permission.deny[0]",
        ),
    ];
    for (body, field) in cases {
        let response = app.post_json("/v1/sessions", &token, &body).await;
        assert_eq!(response.status(), 422, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["code"], "INVALID_REQUEST");
        assert_eq!(error["details"]["field"], field, "{body}: {error}");
    }
    let list: Value = app.get("/v1/sessions", &token).await.json().await.unwrap();
    assert_eq!(list["sessions"], json!([]), "nothing stored by bad input");
}

async fn scopes_are_enforced(app: TestApp) {
    let reader = app.token_with_scopes("scoped", &["sessions:read"]);
    let denied = app.post_json("/v1/sessions", &reader, &json!({})).await;
    assert_eq!(error_code(denied).await, (403, "FORBIDDEN_SCOPE".into()));
    let listed = app.get("/v1/sessions", &reader).await;
    assert_eq!(listed.status(), 200);
    let none = app.token_with_scopes("scoped", &[]);
    assert_eq!(
        error_code(app.get("/v1/sessions", &none).await).await,
        (403, "FORBIDDEN_SCOPE".into())
    );
}
