//! What an MCP server asks of the client during a session (issue 12), end to end through the
//! HTTP API with the scripted provider against the real stdio fixture server: elicitation
//! over the durable approval channel, sampling refused, progress as `tool_progress` events,
//! a list read again after `tools/list_changed` kept for the next run, the idle stop and lazy restart,
//! and the session's command network.

use crate::helpers::*;
use crate::mcp::{
    assert_still_serves_another_tenant, calls, fixture, run, session, spawn, wait_idle,
};
use serde_json::{Value, json};

async fn pending_approval(app: &TestApp, token: &str, id: &str, nth: usize) -> Value {
    app.wait_for_events(token, id, |e| count(e, "approval_requested") >= nth)
        .await;
    let page: Value = app
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            token,
        )
        .await
        .json()
        .await
        .unwrap();
    page["approvals"][0].clone()
}

async fn elicitation_goes_through_the_approval_channel(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let token = app.token("acme");
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"allow": ["mcp__fx__*"]},
        "approvals": {"timeout_seconds": 6},
        "model": {"script": calls(&[
            ("mcp__fx__ask", json!({})),
            ("mcp__fx__ask", json!({})),
            ("mcp__fx__ask", json!({})),
        ])}
    });
    let id = app.create_session("acme", &config).await;
    app.prompt(&token, &id, "go").await;

    // The server's request is an approval of the running call that says what it is.
    let approval = pending_approval(&app, &token, &id, 1).await;
    assert_eq!(approval["tool_name"], "mcp__fx__ask", "{approval}");
    assert_eq!(approval["input"]["kind"], "mcp_elicitation");
    assert_eq!(approval["input"]["server"], "fx");
    assert_eq!(approval["input"]["message"], "What is your name?");
    assert_eq!(
        approval["input"]["requested_schema"]["required"],
        json!(["name"])
    );
    let approval_id = approval["id"].as_str().unwrap();
    // Values that do not fit the requested schema, or a grant, are refused; the request
    // stays pending.
    for (body, field) in [
        (
            json!({"decision": "allow", "updated_input": {"content": {"name": 5}}}),
            "updated_input.content",
        ),
        (
            json!({"decision": "allow", "updated_input": {"content": {"name": "x".repeat(21)}}}),
            "updated_input.content",
        ),
        (
            json!({"decision": "allow", "updated_input": {}}),
            "updated_input.content",
        ),
        (
            json!({"decision": "allow", "updated_input": {"content": {"name": "Ada"}},
                   "grant": {"scope": "session"}}),
            "grant",
        ),
    ] {
        let refused = app.answer(&token, &id, approval_id, &body).await;
        assert_eq!(refused.status(), 422, "{body}");
        let error: Value = refused.json().await.unwrap();
        assert_eq!(error["details"]["field"], field, "{error}");
    }
    let allowed = app
        .answer(
            &token,
            &id,
            approval_id,
            &json!({"decision": "allow", "updated_input": {"content": {"name": "Ada"}}}),
        )
        .await;
    assert_eq!(allowed.status(), 200);

    // A deny is `decline`.
    let second = pending_approval(&app, &token, &id, 2).await;
    let denied = app
        .answer(
            &token,
            &id,
            second["id"].as_str().unwrap(),
            &json!({"decision": "deny", "reason": "not telling"}),
        )
        .await;
    assert_eq!(denied.status(), 200);

    // The third is left to expire: `cancel`.
    wait_idle(&app, &token, &id).await;
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(
        results[0]["content"], "accepted: {\"name\":\"Ada\"}",
        "{results:?}"
    );
    assert_eq!(results[1]["content"], "declined", "{results:?}");
    assert_eq!(results[2]["content"], "cancelled", "{results:?}");
    let expired: Value = app
        .get(
            &format!("/v1/sessions/{id}/approvals?status=expired"),
            &token,
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        expired["approvals"].as_array().unwrap().len(),
        1,
        "{expired}"
    );
    assert_still_serves_another_tenant(&app).await;
}

#[tokio::test]
async fn elicitation_goes_through_the_approval_channel_sqlite() {
    elicitation_goes_through_the_approval_channel(Backend::Sqlite).await;
}

#[tokio::test]
async fn elicitation_goes_through_the_approval_channel_postgres() {
    elicitation_goes_through_the_approval_channel(Backend::Postgres).await;
}

#[tokio::test]
async fn sampling_is_refused_with_a_clear_error() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__fx__sample", json!({})), ("mcp__fx__echo", json!({"text": "after"}))])}
    });
    let (_, results) = run(&app, config).await;
    let text = results[0]["content"].as_str().unwrap();
    assert!(text.starts_with("sampling refused"), "{text}");
    assert!(text.contains("sampling is not enabled"), "{text}");
    assert_eq!(results[1]["is_error"], false, "{:?}", results[1]);
}

#[tokio::test]
async fn progress_notifications_become_bounded_tool_progress_events() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__fx__progress", json!({"count": 300}))])}
    });
    let (id, results) = run(&app, config).await;
    assert_eq!(results[0]["content"], "made 300 steps", "{results:?}");
    let events = app.events(&token, &id).await;
    let progress: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_progress")
        .map(|e| &e["payload"])
        .collect();
    assert!(!progress.is_empty(), "{events:#?}");
    // At most 200 per call, at most one per 100 ms: a burst of 300 is thinned.
    assert!(progress.len() < 300, "{}", progress.len());
    let first = progress[0];
    assert_eq!(first["tool_use_id"], results[0]["tool_use_id"]);
    assert_eq!(first["data"]["kind"], "mcp_progress");
    assert_eq!(first["data"]["server"], "fx");
    assert_eq!(first["data"]["progress"], 1.0);
    assert_eq!(first["data"]["total"], 300.0);
    assert_eq!(first["data"]["message"], "step 1");
}

/// The list read again within a run stays for the next run (see `mcp_changes.rs` for the
/// change between the turns of one run).
#[tokio::test]
async fn a_changed_tool_list_is_read_again_for_the_next_run() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "mcp__fx__grow", "input": {}}]},
            {"tool_calls": [{"name": "mcp__fx__extra", "input": {}}]},
            {"text": "first run done"},
            {"tool_calls": [{"name": "mcp__fx__extra", "input": {}}]},
            {"text": "second run done"}
        ]}}
    });
    let id = app.create_session("acme", &config).await;
    app.prompt(&token, &id, "go").await;
    wait_idle(&app, &token, &id).await;
    // Within the run the new tool is there from the next turn on.
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results[1]["content"], "extra ran", "{results:?}");
    app.prompt(&token, &id, "again").await;
    app.wait_for_events(&token, &id, |e| count(e, "terminal") >= 2)
        .await;
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results[2]["content"], "extra ran", "{results:?}");
    let shown = session(&app, &token, &id).await;
    assert!(
        shown["mcp_servers"][0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "mcp__fx__extra"),
        "{shown}"
    );
}

#[tokio::test]
async fn an_idle_server_is_stopped_and_started_again_by_the_next_call() {
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| {
        let dir = std::path::Path::new(crate::mcp::FIXTURE)
            .parent()
            .unwrap()
            .to_owned();
        settings.sandbox.extra_read = vec![dir];
        settings.mcp.idle_stop_seconds = 1;
    })
    .await
    .unwrap();
    let token = app.token("acme");
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "mcp__fx__pid", "input": {}}]},
            {"text": "first"},
            {"tool_calls": [{"name": "mcp__fx__pid", "input": {}}]},
            {"text": "second"}
        ]}}
    });
    let id = app.create_session("acme", &config).await;
    app.prompt(&token, &id, "go").await;
    wait_idle(&app, &token, &id).await;
    // Unused, the server is stopped while the session lives; its tools stay offered.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let shown = session(&app, &token, &id).await;
        if shown["mcp_servers"][0]["state"] == "idle" {
            assert_eq!(
                shown["mcp_servers"][0]["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|t| *t == "mcp__fx__pid")
                    .count(),
                1,
                "{shown}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{shown}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    app.prompt(&token, &id, "again").await;
    app.wait_for_events(&token, &id, |e| count(e, "terminal") >= 2)
        .await;
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[1]["is_error"], false, "{results:?}");
    assert_ne!(
        results[0]["content"], results[1]["content"],
        "a new process answered"
    );
    let shown = session(&app, &token, &id).await;
    // An idle stop is not a crash.
    assert_eq!(shown["mcp_servers"][0]["restarts"], 0, "{shown}");
}

#[tokio::test]
async fn a_server_gets_the_sessions_egress_proxy_and_nothing_else() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "network": "egress",
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__fx__env", json!({}))])}
    });
    let (id, results) = run(&app, config).await;
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    let server = &shown["mcp_servers"][0];
    let env: Value = serde_json::from_str(results[0]["content"].as_str().unwrap())
        .unwrap_or_else(|_| panic!("{results:?} {server}"));
    assert_eq!(env["HTTPS_PROXY"], "http://127.0.0.1:3128", "{env}");
    assert_eq!(env["NO_PROXY"], "", "{env}");
    // Still no server secret in its environment.
    assert!(
        env.as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("NORMA")),
        "{env}"
    );
}

#[tokio::test]
async fn images_reach_an_anthropic_model_as_image_blocks() {
    use crate::tenant_providers::fake_llm::{self, anthropic};
    let fake = fake_llm::FakeLlm::start().await;
    fake.push(fake_llm::Reply::sse(anthropic::tool_turn(
        "toolu_media",
        "mcp__fx__media",
        &json!({}),
        1,
    )));
    fake.set_fallback(fake_llm::Reply::sse(anthropic::text_turn("seen")));
    let url = fake.url();
    let app = TestApp::spawn_with(Backend::Sqlite, move |settings| {
        let dir = std::path::Path::new(crate::mcp::FIXTURE)
            .parent()
            .unwrap()
            .to_owned();
        settings.sandbox.extra_read = vec![dir];
        let mut acme = norma::llm::ProviderConfig::new(norma::llm::ProviderKind::Anthropic);
        acme.base_url = Some(url);
        acme.model = "acme-model".into();
        acme.api_key = Some(secrecy::SecretString::from("sk-test"));
        settings.tenant_providers.insert("acme".into(), acme);
        settings.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    })
    .await
    .unwrap();
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({"mcp_servers": [fixture(json!({}))], "permission": {"mode": "bypass"}}),
        )
        .await;
    app.prompt(&token, &id, "show me").await;
    wait_idle(&app, &token, &id).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{:?}", requests.len());
    let messages = requests[1].body["messages"].as_array().unwrap();
    let result = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|block| block["type"] == "tool_result")
        .expect("the tool result is sent");
    assert_eq!(
        result["content"][0]["text"],
        "a picture:\n[image 1: image/png]\n[resource file:///notes.txt]\nthe notes"
    );
    assert_eq!(
        result["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="}})
    );
}

#[tokio::test]
async fn a_server_cannot_read_the_servers_own_files() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let database = app.data_dir().join("norma.db");
    assert!(database.exists(), "the test server's store is {database:?}");
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__fx__write_file", json!({"path": "mine.txt", "text": "ok"})),
            ("mcp__fx__read_file", json!({"path": "mine.txt"})),
            ("mcp__fx__read_file", json!({"path": database.to_str().unwrap()})),
        ])}
    });
    let (_, results) = run(&app, config).await;
    assert_eq!(results[1]["content"], "read 2 bytes", "{results:?}");
    assert_eq!(results[2]["code"], "TOOL_FAILED", "{results:?}");
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("cannot read"),
        "{results:?}"
    );
    assert_still_serves_another_tenant(&app).await;
}
