//! The SubagentStart hook through the real server: a remote hook (a local receiver, signed
//! like a webhook) sees each `Agent` call's agent type and description before the subagent
//! exists; its block fails the call with `HOOK_BLOCKED` and creates no subagent session, and
//! an allowing answer lets the subagent run. Closing the session then runs SessionEnd hooks
//! once, for the top-level session only.

use crate::helpers::{Backend, TestApp, count, serve_local, tool_results};
use crate::subagents::{of_kind, wait_terminal};
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const SECRET: &str = "whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0";

type Seen = Arc<Mutex<Vec<Value>>>;

crate::subagent_cases! {
    subagents_start_hook_sees_blocks_and_allows => start_hook;
}

/// Records each hook call (and whether its signature verifies); blocks a subagent whose
/// description mentions "forbidden".
async fn receiver(State(seen): State<Seen>, headers: HeaderMap, body: String) -> axum::Json<Value> {
    let secret = norma::signing::WebhookSecret::parse(SECRET).unwrap();
    let verified = norma::signing::verify(
        &secret,
        &headers,
        body.as_bytes(),
        chrono::Utc::now().timestamp(),
        norma::signing::DEFAULT_TOLERANCE,
    )
    .is_ok();
    let event: Value = serde_json::from_str(&body).unwrap();
    let block = event["hook_event_name"] == "SubagentStart"
        && event["description"]
            .as_str()
            .unwrap_or_default()
            .contains("forbidden");
    seen.lock()
        .unwrap()
        .push(json!({"event": event, "verified": verified}));
    axum::Json(if block {
        json!({"decision": "block", "reason": "no forbidden subagents"})
    } else {
        json!({})
    })
}

async fn start_hook(backend: Backend) {
    let seen: Seen = Arc::default();
    let router = axum::Router::new()
        .route("/hook", axum::routing::post(receiver))
        .with_state(seen.clone());
    let url = format!("{}/hook", serve_local(router).await);
    let Some(app) = TestApp::spawn_with(backend, |s| s.allow_private_webhooks = true).await else {
        return;
    };
    let token = app.token("acme");
    let hook = |name: &str, event: &str| {
        json!({"name": name, "event": event,
               "handler": {"type": "remote", "url": url, "secret": SECRET}})
    };
    let id = app
        .create_session(
            "acme",
            &json!({
                "tools": ["Read"],
                "hooks": [hook("gate", "SubagentStart"), hook("end", "SessionEnd")],
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "helper", "prompt": "no", "description": "forbidden work"}}]},
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "helper", "prompt": "yes", "description": "fine work"}}]},
                    {"text": "parent done"}
                ]}},
                "agents": {"helper": {
                    "description": "Helps",
                    "tools": ["Read"],
                    "model": {"script": {"turns": [{"text": "helped"}]}}
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

    // The hook saw both calls, signed, with the agent type and the description.
    let starts: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["hook_event_name"] == "SubagentStart")
        .cloned()
        .collect();
    assert_eq!(starts.len(), 2, "{starts:#?}");
    for (start, description) in starts.iter().zip(["forbidden work", "fine work"]) {
        assert_eq!(start["verified"], true, "{start}");
        assert_eq!(start["event"]["agent_type"], "helper", "{start}");
        assert_eq!(start["event"]["description"], description, "{start}");
        assert_eq!(start["event"]["session_id"], id.as_str(), "{start}");
    }

    // The blocked call failed with HOOK_BLOCKED and started nothing; the allowed one ran.
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results.len(), 2, "{results:#?}");
    assert_eq!(results[0]["is_error"], true, "{results:#?}");
    assert_eq!(results[0]["code"], "HOOK_BLOCKED", "{results:#?}");
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("no forbidden subagents"),
        "{results:#?}"
    );
    assert_eq!(results[1]["content"], "helped", "{results:#?}");
    let started = of_kind(&events, "subagent_started");
    assert_eq!(started.len(), 1, "{events:#?}");
    assert_eq!(
        started[0]["payload"]["tool_use_id"],
        results[1]["tool_use_id"]
    );
    let blocked_child = norma::runtime::subagent::child_session_id(
        &norma::ids::SessionId::from_string(id.clone()),
        &norma::ids::RunId::from_string(run),
        results[0]["tool_use_id"].as_str().unwrap(),
    );
    let missing = app
        .get(&format!("/v1/sessions/{blocked_child}"), &token)
        .await;
    assert_eq!(missing.status(), 404, "no session for the blocked call");
    let sessions: Value = app.get("/v1/sessions", &token).await.json().await.unwrap();
    assert_eq!(
        sessions["sessions"].as_array().unwrap().len(),
        2,
        "the parent and the one subagent: {sessions}"
    );

    // Closing the parent closes the subagent's session too; SessionEnd runs once, for the
    // parent.
    let child = started[0]["payload"]["session_id"].as_str().unwrap();
    assert_eq!(
        app.delete(&format!("/v1/sessions/{id}"), &token)
            .await
            .status(),
        200
    );
    let child_session: Value = app
        .get(&format!("/v1/sessions/{child}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(child_session["status"], "closed", "{child_session}");
    let ends: Vec<Value> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["event"]["hook_event_name"] == "SessionEnd")
        .cloned()
        .collect();
    assert_eq!(ends.len(), 1, "{ends:#?}");
    assert_eq!(ends[0]["event"]["session_id"], id.as_str());
    assert_eq!(count(&events, "subagent_finished"), 1);
}
