//! Nesting and closing through the real server: with `agent_max_depth: 2` a subagent starts
//! its own subagent, whose events reach the top session's stream (nested twice), which works
//! in the top session's workspace, whose answer propagates up, and which is not offered
//! `Agent` at the bound (`TOOL_NOT_FOUND`); closing a session closes its subagent sessions,
//! recursively — a running one's run cancelled — and frees their `sessions` slots.

use crate::helpers::{Backend, TestApp, count, error_code, tool_results};
use crate::subagents::{of_kind, wait_terminal};
use serde_json::{Value, json};
use std::time::Duration;

crate::on_both_backends! {
    subagents_nest_to_depth_two_and_close_recursively => depth_two;
}

crate::subagent_cases! {
    subagents_close_with_their_parent_and_free_their_slots => closed_with_parent;
}

async fn session(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(&format!("/v1/sessions/{id}"), token)
        .await
        .json()
        .await
        .unwrap()
}

async fn depth_two(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "tools": ["Read", "Bash"],
                "permission": {"mode": "bypass"},
                "agent_max_depth": 2,
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "manager", "prompt": "get it done"}}]},
                    {"tool_calls": [{"name": "Read", "input": {"file_path": "deep.txt"}}]},
                    {"text": "top done"}
                ]}},
                "agents": {
                    "manager": {
                        "description": "Delegates the work",
                        "tools": ["Agent", "Read", "Bash"],
                        "model": {"script": {"turns": [
                            {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "worker", "prompt": "write it", "description": "the work"}}]},
                            {"text": "manager relays: {{last_tool_result}}"}
                        ]}}
                    },
                    "worker": {
                        "description": "Does the work",
                        "tools": ["Bash", "Agent"],
                        "model": {"script": {"turns": [
                            {"tool_calls": [
                                {"name": "Bash", "input": {"command": "echo deep-content > deep.txt"}},
                                {"name": "Agent", "input": {"subagent_type": "worker", "prompt": "deeper"}}
                            ]},
                            {"text": "deep answer"}
                        ]}}
                    }
                }
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

    // The worker's answer propagates up through the manager.
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(
        results[0]["content"], "manager relays: deep answer",
        "{results:#?}"
    );
    // The worker wrote into the top session's workspace.
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("deep-content"),
        "{results:#?}"
    );

    // The top stream shows the manager's start of the worker and the worker's own events,
    // nested twice.
    let manager = of_kind(&events, "subagent_started")[0]["payload"].clone();
    assert_eq!(manager["depth"], 1);
    let twice: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["type"] == "subagent_event"
                && e["payload"]["agent"] == "manager"
                && e["payload"]["kind"] == "subagent_event"
        })
        .map(|e| &e["payload"]["payload"])
        .collect();
    assert!(
        twice.iter().all(|inner| inner["agent"] == "worker"),
        "{twice:#?}"
    );
    assert!(
        twice.iter().any(|inner| inner["kind"] == "tool_result"
            && inner["payload"]["result"]["code"] == "TOOL_NOT_FOUND"),
        "the worker's Agent call at the bound, in the top stream: {twice:#?}"
    );
    let worker_start = events
        .iter()
        .find(|e| e["type"] == "subagent_event" && e["payload"]["kind"] == "subagent_started")
        .map(|e| e["payload"]["payload"].clone())
        .expect("the manager's subagent_started, nested");
    assert_eq!(worker_start["depth"], 2, "{worker_start}");
    assert_eq!(worker_start["agent"], "worker");

    // The worker's own session: linked to the manager, working in the top workspace, and
    // not offered `Agent` at depth 2.
    let worker = worker_start["session_id"].as_str().unwrap().to_owned();
    let link = session(&app, &token, &worker).await["config"]["subagent"].clone();
    assert_eq!(link["parent_session_id"], manager["session_id"], "{link}");
    assert_eq!(link["workspace_session_id"], id.as_str(), "{link}");
    assert_eq!(link["depth"], 2, "{link}");
    let own = tool_results(&app.messages(&token, &worker).await);
    let codes: Vec<&Value> = own.iter().map(|r| &r["code"]).collect();
    assert_eq!(codes, [&Value::Null, &json!("TOOL_NOT_FOUND")], "{own:#?}");

    // The top run's usage counts both levels: 3 own calls, 2 of the manager, 2 of the worker.
    let record: Value = app
        .get(&format!("/v1/sessions/{id}/runs/{run}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["usage"]["model_calls"], 7, "{record}");
    assert_eq!(record["usage"]["subagents"]["runs"], 2, "{record}");
    assert_eq!(record["usage"]["subagents"]["model_calls"], 4, "{record}");
    let usage = &of_kind(&events, "usage")[0]["payload"];
    assert_eq!(usage["model_calls"], 7, "{usage}");
    assert_eq!(usage["subagents"]["runs"], 2, "{usage}");

    // Closing the top session closes both subagent sessions.
    assert_eq!(
        app.delete(&format!("/v1/sessions/{id}"), &token)
            .await
            .status(),
        200
    );
    for child in [manager["session_id"].as_str().unwrap(), worker.as_str()] {
        assert_eq!(
            session(&app, &token, child).await["status"],
            "closed",
            "{child}"
        );
    }
}

async fn closed_with_parent(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| s.limits.sessions = 3).await else {
        return;
    };
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "permission": {"mode": "bypass"},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "quick", "prompt": "answer"}}]},
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "slow", "prompt": "wait"}}]},
                    {"text": "never"}
                ]}},
                "agents": {
                    "quick": {"description": "Answers at once", "tools": ["Read"],
                              "model": {"script": {"turns": [{"text": "quick answer"}]}}},
                    "slow": {"description": "Takes its time", "tools": ["Bash"],
                             "model": {"script": {"turns": [
                                 {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}]},
                                 {"text": "late"}
                             ]}}}
                }
            }),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let events = app
        .wait_for_events(&token, &id, |e| {
            e.iter().any(|e| {
                e["type"] == "subagent_event"
                    && e["payload"]["agent"] == "slow"
                    && e["payload"]["kind"] == "tool_executing"
            })
        })
        .await;
    let children: Vec<String> = of_kind(&events, "subagent_started")
        .iter()
        .map(|e| e["payload"]["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(children.len(), 2);
    // The parent and its two subagents hold the tenant's three session slots.
    let full = app.post_json("/v1/sessions", &token, &json!({})).await;
    assert_eq!(error_code(full).await, (429, "TENANT_LIMIT".into()));

    assert_eq!(
        app.delete(&format!("/v1/sessions/{id}"), &token)
            .await
            .status(),
        200
    );
    for child in &children {
        let record = session(&app, &token, child).await;
        assert_eq!(record["status"], "closed", "{record}");
        assert!(record["closed_at"].is_string(), "{record}");
    }
    // The slow subagent's run was cancelled, well before its command would have ended.
    let slow = tokio::time::timeout(
        Duration::from_secs(15),
        app.wait_for_events(&token, &children[1], |e| count(e, "terminal") == 1),
    )
    .await
    .expect("the subagent run ended");
    assert_eq!(
        of_kind(&slow, "terminal")[0]["payload"]["reason"],
        "cancelled",
        "{slow:#?}"
    );
    // Writes to a closed subagent session are refused like any closed session's.
    let refused = app.prompt(&token, &children[0], "more").await;
    assert_eq!(error_code(refused).await, (409, "SESSION_CLOSED".into()));
    // Their slots are free: three new sessions fit.
    for _ in 0..3 {
        let created = app.post_json("/v1/sessions", &token, &json!({})).await;
        assert_eq!(created.status(), 201);
    }
}
