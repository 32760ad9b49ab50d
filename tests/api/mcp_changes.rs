//! MCP servers changing what a run has (issue 12): `tools/list_changed` taking effect
//! between the turns of a run, and sampling answered by the session's model within the
//! entry's bounds — end to end through the HTTP API with the scripted provider, against the
//! real stdio fixture server.

use crate::helpers::*;
use crate::mcp::{assert_still_serves_another_tenant, calls, fixture, run, session, spawn};
use serde_json::{Value, json};

fn contents(results: &[Value]) -> Vec<String> {
    results
        .iter()
        .map(|r| r["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn a_changed_tool_list_applies_to_the_next_turn(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__fx__grow", json!({})),
            ("mcp__fx__extra", json!({})),
            ("mcp__fx__shrink", json!({})),
            ("mcp__fx__extra", json!({})),
            // Hostile: thousands of notices cost one list per model request.
            ("mcp__fx__flood", json!({"count": 1500})),
            ("mcp__fx__extra", json!({})),
            ("mcp__fx__lists", json!({})),
        ])}
    });
    let (id, results) = run(&app, config).await;
    let texts = contents(&results);
    assert_eq!(texts[0], "grown", "{results:?}");
    // Added: usable at the next turn of the same run.
    assert_eq!(texts[1], "extra ran", "{results:?}");
    assert_eq!(texts[2], "shrunk", "{results:?}");
    // Removed: gone at the next turn.
    assert_eq!(results[3]["code"], "TOOL_NOT_FOUND", "{results:?}");
    assert!(texts[3].contains("mcp__fx__extra"), "{results:?}");
    assert_eq!(texts[4], "said it 1500 times", "{results:?}");
    assert_eq!(texts[5], "extra ran", "{results:?}");
    // The start, then one read after each change: grow, shrink, the flood (a notice whose
    // handler ran after the read may cost one more, never one per notice).
    let lists: u32 = texts[6]
        .strip_prefix("lists: ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{results:?}"));
    assert!((4..=5).contains(&lists), "{results:?}");
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    let server = &shown["mcp_servers"][0];
    assert_eq!(server["state"], "ready", "{shown}");
    assert!(
        server["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "mcp__fx__extra"),
        "{shown}"
    );
    assert_still_serves_another_tenant(&app).await;
}

#[tokio::test]
async fn a_changed_tool_list_applies_to_the_next_turn_sqlite() {
    a_changed_tool_list_applies_to_the_next_turn(Backend::Sqlite).await;
}

#[tokio::test]
async fn a_changed_tool_list_applies_to_the_next_turn_postgres() {
    a_changed_tool_list_applies_to_the_next_turn(Backend::Postgres).await;
}

/// A deferred server's new tool is found by `SearchExtraTools` in the same run.
#[tokio::test]
async fn a_deferred_servers_new_tool_is_searchable_in_the_same_run() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({"deferred": true}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("SearchExtraTools", json!({"query": "grow"})),
            ("ExecuteExtraTool", json!({"name": "mcp__fx__grow", "input": {}})),
            ("SearchExtraTools", json!({"query": "added"})),
            ("ExecuteExtraTool", json!({"name": "mcp__fx__extra", "input": {}})),
        ])}
    });
    let (_, results) = run(&app, config).await;
    let texts = contents(&results);
    assert_eq!(texts[1], "grown", "{results:?}");
    assert!(texts[2].contains("mcp__fx__extra"), "{results:?}");
    assert_eq!(texts[3], "extra ran", "{results:?}");
}

/// The scripted model's first turn: its text answers the sampling requests (the scripted
/// provider plays it for a request with no assistant turn yet), its call starts the run.
fn sampling_script(input: Value) -> Value {
    json!({"turns": [
        {"text": "model says {{last_user_text}}",
         "tool_calls": [{"name": "mcp__fx__sample", "input": input}]},
        {"text": "done"}
    ]})
}

async fn sampling_is_answered_by_the_sessions_model(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let token = app.token("acme");
    let config = json!({
        "mcp_servers": [fixture(json!({"sampling": {"max_tokens": 64, "max_requests_per_call": 2}}))],
        "permission": {"mode": "bypass"},
        "model": {"script": sampling_script(json!({"times": 3, "max_tokens": 32}))}
    });
    let (id, results) = run(&app, config).await;
    let lines: Vec<&str> = results[0]["content"].as_str().unwrap().lines().collect();
    assert_eq!(lines.len(), 3, "{results:?}");
    assert_eq!(lines[0], "sampled: model says hi (endTurn)", "{results:?}");
    assert_eq!(lines[1], "sampled: model says hi (endTurn)", "{results:?}");
    // The third request of the call is over `max_requests_per_call`.
    assert!(lines[2].starts_with("sampling refused"), "{results:?}");
    assert!(lines[2].contains("max_requests_per_call"), "{results:?}");
    let events = app.events(&token, &id).await;
    let sampled: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "mcp_sampling")
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(sampled.len(), 2, "{events:#?}");
    assert_eq!(sampled[0]["server"], "fx");
    assert_eq!(sampled[0]["tool_use_id"], results[0]["tool_use_id"]);
    assert!(sampled[0]["usage"]["output_tokens"].as_u64().unwrap() > 0);
    // Counted like any model call: two turns of the run and two sampling calls.
    let shown = session(&app, &token, &id).await;
    assert_eq!(shown["usage"]["model_calls"], 4, "{shown}");
    assert_still_serves_another_tenant(&app).await;
}

#[tokio::test]
async fn sampling_is_answered_by_the_sessions_model_sqlite() {
    sampling_is_answered_by_the_sessions_model(Backend::Sqlite).await;
}

#[tokio::test]
async fn sampling_is_answered_by_the_sessions_model_postgres() {
    sampling_is_answered_by_the_sessions_model(Backend::Postgres).await;
}

#[tokio::test]
async fn sampling_over_the_bounds_or_not_enabled_is_refused() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    // maxTokens over the entry's bound.
    let config = json!({
        "mcp_servers": [fixture(json!({"sampling": {"max_tokens": 64}}))],
        "permission": {"mode": "bypass"},
        "model": {"script": sampling_script(json!({"max_tokens": 5000}))}
    });
    let (id, results) = run(&app, config).await;
    let text = results[0]["content"].as_str().unwrap();
    assert!(text.starts_with("sampling refused"), "{text}");
    assert!(
        text.contains("maxTokens 5000 is outside this server's sampling bounds (1 to 64)"),
        "{text}"
    );
    let events = app.events(&token, &id).await;
    assert_eq!(count(&events, "mcp_sampling"), 0);
    // Not enabled: refused, and the session's model is never asked.
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": sampling_script(json!({"times": 2}))}
    });
    let (id, results) = run(&app, config).await;
    let text = results[0]["content"].as_str().unwrap();
    assert!(text.starts_with("sampling refused"), "{text}");
    assert!(
        text.contains("sampling is not enabled for the MCP server `fx`"),
        "{text}"
    );
    let shown = session(&app, &token, &id).await;
    assert_eq!(shown["usage"]["model_calls"], 2, "{shown}");
    // Bad bounds are a 422 naming the field.
    for (sampling, field) in [
        (
            json!({"max_tokens": 0}),
            "mcp_servers[0].sampling.max_tokens",
        ),
        (
            json!({"max_requests_per_call": 100}),
            "mcp_servers[0].sampling.max_requests_per_call",
        ),
    ] {
        let response = app
            .post_json(
                "/v1/sessions",
                &token,
                &json!({"mcp_servers": [fixture(json!({"sampling": sampling}))]}),
            )
            .await;
        assert_eq!(response.status(), 422, "{sampling}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["details"]["field"], field, "{error}");
    }
    assert_still_serves_another_tenant(&app).await;
}
