//! A run's usage counts its subagents': the `usage` event and `GET …/runs/{id}` (and the
//! session's `usage`) add the subagents' model calls, tokens and cost to the run's own and
//! say which part came from them, while the tenant's ledger (`GET /v1/usage`) keeps each
//! subagent's rows under its own session, so summing it counts nothing twice.

use crate::helpers::{Backend, TestApp};
use crate::subagents::{of_kind, wait_terminal};
use serde_json::{Value, json};

crate::subagent_cases! {
    subagents_usage_counts_into_the_parents_run_and_session => counted_into_parent;
}

/// `priced` of the scripted provider costs one unit (10^6 micro-units) per token; the
/// scripted default model is not priced.
async fn app(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |settings| {
        settings.prices = vec![norma::usage::Price {
            provider: "scripted".into(),
            model: "priced".into(),
            input: 1_000_000_000_000,
            output: 1_000_000_000_000,
            cache_read: 0,
            cache_write: 0,
        }];
    })
    .await
}

async fn get(app: &TestApp, token: &str, path: &str) -> Value {
    let response = app.get(path, token).await;
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

fn n(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

async fn counted_into_parent(backend: Backend) {
    let Some(app) = app(backend).await else {
        return;
    };
    let token = app.token("acme");
    let before = chrono::Utc::now() - chrono::Duration::minutes(1);
    let id = app
        .create_session(
            "acme",
            &json!({
                "tools": ["Read", "Glob"],
                "model": {"script": {"turns": [
                    {"tool_calls": [
                        {"name": "Agent", "input": {"subagent_type": "finder", "prompt": "find a"}},
                        {"name": "Agent", "input": {"subagent_type": "finder", "prompt": "find b"}}
                    ]},
                    {"text": "both found"}
                ]}},
                "agents": {"finder": {
                    "description": "Finds files",
                    "tools": ["Glob"],
                    "model": {"name": "priced", "script": {"turns": [
                        {"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]},
                        {"text": "found"}
                    ]}}
                }}
            }),
        )
        .await;
    let accepted: Value = app.prompt(&token, &id, "go").await.json().await.unwrap();
    let run = accepted["run_id"].as_str().unwrap().to_owned();
    let events = wait_terminal(&app, &token, &id).await;
    assert_eq!(
        of_kind(&events, "terminal")[0]["payload"]["reason"],
        "end_turn",
        "{events:#?}"
    );

    // Each subagent reports its own usage, priced.
    let finished = of_kind(&events, "subagent_finished");
    assert_eq!(finished.len(), 2);
    let children: Vec<&Value> = finished.iter().map(|e| &e["payload"]["usage"]).collect();
    let child_cost: u64 = children.iter().map(|u| n(&u["cost_micros"])).sum();
    let child_input: u64 = children.iter().map(|u| n(&u["input_tokens"])).sum();
    let child_output: u64 = children.iter().map(|u| n(&u["output_tokens"])).sum();
    for usage in &children {
        assert_eq!(usage["model_calls"], 2, "{usage}");
        assert!(n(&usage["cost_micros"]) > 0, "{usage}");
        assert!(usage.get("subagents").is_none(), "{usage}");
    }

    // The run's `usage` event: totals are its own plus its subagents', the part apart.
    let usage = &of_kind(&events, "usage")[0]["payload"];
    assert_eq!(usage["model_calls"], 6, "{usage}");
    assert_eq!(usage["subagents"]["runs"], 2, "{usage}");
    assert_eq!(usage["subagents"]["model_calls"], 4, "{usage}");
    assert_eq!(n(&usage["subagents"]["input_tokens"]), child_input);
    assert_eq!(n(&usage["subagents"]["output_tokens"]), child_output);
    assert!(n(&usage["input_tokens"]) > child_input, "{usage}");
    assert_eq!(usage["tool_calls"], 2, "its own tool calls only: {usage}");

    // The run record: the same, with cost (the parent's own calls are not priced).
    let record = get(&app, &token, &format!("/v1/sessions/{id}/runs/{run}")).await;
    let totals = &record["usage"];
    assert_eq!(totals["model_calls"], 6, "{record}");
    assert_eq!(totals["unpriced_model_calls"], 2, "{record}");
    assert_eq!(n(&totals["cost_micros"]), child_cost, "{record}");
    let part = &totals["subagents"];
    assert_eq!(part["runs"], 2, "{record}");
    assert_eq!(part["model_calls"], 4, "{record}");
    assert_eq!(n(&part["cost_micros"]), child_cost, "{record}");
    assert_eq!(n(&part["input_tokens"]), child_input, "{record}");
    assert_eq!(part["unpriced_model_calls"], 0, "{record}");
    let own_input = n(&totals["input_tokens"]) - child_input;
    assert!(own_input > 0, "{record}");

    // The session's usage is the sum of its runs', subagents included.
    let session = get(&app, &token, &format!("/v1/sessions/{id}")).await;
    assert_eq!(session["usage"], *totals, "{session}");
    // A subagent's session shows its own usage, and started no subagent.
    let child = finished[0]["payload"]["session_id"].as_str().unwrap();
    let child_session = get(&app, &token, &format!("/v1/sessions/{child}")).await;
    assert_eq!(child_session["usage"]["model_calls"], 2, "{child_session}");
    assert!(child_session["usage"].get("subagents").is_none());

    // The tenant's ledger keeps every row under its own session: per session, the parent
    // has its own two calls and each subagent its two; the sum is the run's total.
    let after = chrono::Utc::now() + chrono::Duration::minutes(1);
    let secs = chrono::SecondsFormat::Secs;
    let report = get(
        &app,
        &token,
        &format!(
            "/v1/usage?from={}&to={}&group_by=session",
            before.to_rfc3339_opts(secs, true),
            after.to_rfc3339_opts(secs, true)
        ),
    )
    .await;
    let groups = report["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 3, "{report}");
    let parent = groups.iter().find(|g| g["key"] == id.as_str()).unwrap();
    assert_eq!(parent["model_calls"], 2, "{report}");
    assert_eq!(parent["cost_micros"], 0, "{report}");
    let calls: u64 = groups.iter().map(|g| n(&g["model_calls"])).sum();
    let cost: u64 = groups.iter().map(|g| n(&g["cost_micros"])).sum();
    assert_eq!((calls, cost), (6, child_cost), "{report}");
}
