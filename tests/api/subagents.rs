//! Subagents through the real server with the scripted provider: delegation (two in
//! parallel), narrowed policy (tools outside the set, the parent's deny rule, the depth
//! bound), an approval inside a subagent answered over REST, cancel with the parent, and
//! configurations that would widen policy refused at creation.

use crate::helpers::{TestApp, count, error_code, tool_results};
use crate::on_both_backends;
use serde_json::{Value, json};
use std::time::Duration;

on_both_backends! {
    subagents_parent_delegates_to_two_subagents_in_parallel => two_in_parallel;
    subagents_policy_only_narrows_at_run_time => narrowed_at_run_time;
    subagents_approval_inside_a_subagent_is_answered_over_rest => approval_in_subagent;
    subagents_are_cancelled_with_the_parent => cancelled_with_parent;
    subagents_widening_configs_are_refused => widening_refused;
    subagents_tokens_count_into_the_parents_budget => tokens_into_parent_budget;
}

/// Declares `mod $name { sqlite(); postgres(); }` running `$case(backend)` on each store (for
/// cases that start their server with their own settings).
#[macro_export]
macro_rules! subagent_cases {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            use super::*;
            #[tokio::test]
            async fn sqlite() {
                $case($crate::helpers::Backend::Sqlite).await;
            }
            #[tokio::test]
            async fn postgres() {
                $case($crate::helpers::Backend::Postgres).await;
            }
        }
    )*};
}

/// The nested events of one `Agent` call in the parent's transcript.
pub fn nested<'a>(events: &'a [Value], tool_use_id: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "subagent_event" && e["payload"]["tool_use_id"] == tool_use_id)
        .collect()
}

pub fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

pub async fn wait_terminal(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    app.wait_for_events(token, id, |e| count(e, "terminal") == 1)
        .await
}

async fn two_in_parallel(app: TestApp) {
    let token = app.token("acme");
    // The first turn takes a second (a slow model), so that the two running side by side
    // overlap whatever the machine's load: the second starts long before the first can end.
    let explorer_script = json!({"turns": [
        {"tool_calls": [{"name": "Glob", "input": {"pattern": "*.txt"}}], "delay_ms": 1000},
        {"text": "explored"}
    ]});
    let id = app
        .create_session(
            "acme",
            &json!({
                "tools": ["Read", "Glob", "Grep", "Bash"],
                "permission": {"mode": "default"},
                "budgets": {"max_turns": 10},
                "model": {"script": {"turns": [
                    {"tool_calls": [
                        {"name": "Agent", "input": {"subagent_type": "explorer", "prompt": "look at a", "description": "a"}},
                        {"name": "Agent", "input": {"subagent_type": "explorer", "prompt": "look at b", "description": "b"}}
                    ]},
                    {"text": "both done"}
                ]}},
                "agents": {"explorer": {
                    "description": "Reads and searches files",
                    "tools": ["Read", "Glob", "Grep"],
                    "model": {"script": explorer_script},
                    "budgets": {"max_turns": 4}
                }}
            }),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "explore").await.status(), 202);
    let events = wait_terminal(&app, &token, &id).await;
    let terminal = of_kind(&events, "terminal");
    assert_eq!(terminal[0]["payload"]["reason"], "end_turn", "{events:#?}");

    // Both calls' results are the subagents' final answers.
    let messages = app.messages(&token, &id).await;
    let results = tool_results(&messages);
    assert_eq!(results.len(), 2, "{messages}");
    for result in &results {
        assert_eq!(result["is_error"], false, "{result}");
        assert_eq!(result["content"], "explored", "{result}");
    }

    // They ran concurrently: the second started before the first finished.
    let started = of_kind(&events, "subagent_started");
    let finished = of_kind(&events, "subagent_finished");
    assert_eq!((started.len(), finished.len()), (2, 2), "{events:#?}");
    let first_finish = finished.iter().map(|e| e["seq"].as_i64().unwrap()).min();
    assert!(
        started
            .iter()
            .all(|e| Some(e["seq"].as_i64().unwrap()) < first_finish),
        "not concurrent: {events:#?}"
    );

    for start in &started {
        let payload = &start["payload"];
        assert_eq!(payload["agent"], "explorer");
        assert_eq!(payload["depth"], 1);
        let tool_use_id = payload["tool_use_id"].as_str().unwrap();
        let child = payload["session_id"].as_str().unwrap();
        assert_ne!(child, id);
        // The child's events are nested in the parent's stream, tagged with the call...
        let nested = nested(&events, tool_use_id);
        assert!(
            nested.iter().any(|e| e["payload"]["kind"] == "tool_call"
                && e["payload"]["payload"]["name"] == "Glob"),
            "{nested:#?}"
        );
        assert!(
            nested
                .iter()
                .all(|e| e["payload"]["agent"] == "explorer" && e["payload"]["session_id"] == child)
        );
        // ...and readable on their own, with its own history.
        let own = app.events(&token, child).await;
        assert_eq!(count(&own, "terminal"), 1, "{own:#?}");
        assert_eq!(
            nested.len(),
            own.iter()
                .filter(|e| e["type"] != "assistant_delta")
                .count()
        );
        let session: Value = app
            .get(&format!("/v1/sessions/{child}"), &token)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(
            session["config"]["subagent"]["parent_session_id"],
            id.as_str()
        );
        assert_eq!(session["config"]["subagent"]["tool_use_id"], tool_use_id);
        assert_eq!(session["config"]["tools"], json!(["Read", "Glob", "Grep"]));
        // Its usage is reported to the parent.
        let done = finished
            .iter()
            .find(|e| e["payload"]["tool_use_id"] == tool_use_id)
            .unwrap();
        assert_eq!(done["payload"]["terminal"]["reason"], "end_turn");
        assert_eq!(done["payload"]["usage"]["model_calls"], 2, "{done}");
        assert!(done["payload"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    }
}

async fn narrowed_at_run_time(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "permission": {"mode": "bypass", "deny": ["Bash(rm:*)"]},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "restricted", "prompt": "try things"}}]},
                    {"text": "parent done"}
                ]}},
                "agents": {"restricted": {
                    "description": "May only read and run commands",
                    "tools": ["Read", "Bash"],
                    "model": {"script": {"turns": [
                        {"tool_calls": [
                            {"name": "Write", "input": {"file_path": "x.txt", "content": "x"}},
                            {"name": "Bash", "input": {"command": "rm -rf notes"}},
                            {"name": "Agent", "input": {"subagent_type": "restricted", "prompt": "deeper"}},
                            {"name": "Bash", "input": {"command": "echo allowed"}}
                        ]},
                        {"text": "tried"}
                    ]}}
                }}
            }),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let events = wait_terminal(&app, &token, &id).await;
    assert_eq!(
        of_kind(&events, "terminal")[0]["payload"]["reason"],
        "end_turn"
    );
    let started = of_kind(&events, "subagent_started");
    let child = started[0]["payload"]["session_id"].as_str().unwrap();
    let results = tool_results(&app.messages(&token, child).await);
    let codes: Vec<&Value> = results.iter().map(|r| &r["code"]).collect();
    assert_eq!(
        codes,
        vec![
            &json!("TOOL_NOT_FOUND"),    // Write is not in its set
            &json!("PERMISSION_DENIED"), // the parent's deny rule, even in bypass
            &json!("TOOL_NOT_FOUND"),    // Agent beyond the depth bound (1)
            &Value::Null,
        ],
        "{results:#?}"
    );
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("Bash(rm:*)"),
        "{results:#?}"
    );
    assert!(results[3]["content"].as_str().unwrap().contains("allowed"));
    // The denial is visible in the parent's stream, naming the subagent.
    let tool_use_id = started[0]["payload"]["tool_use_id"].as_str().unwrap();
    assert!(
        nested(&events, tool_use_id)
            .iter()
            .any(|e| e["payload"]["kind"] == "tool_result"
                && e["payload"]["payload"]["result"]["code"] == "PERMISSION_DENIED"
                && e["payload"]["agent"] == "restricted"),
        "{events:#?}"
    );
    // The parent's answer is the subagent's final text.
    let parent = tool_results(&app.messages(&token, &id).await);
    assert_eq!(parent[0]["content"], "tried");
}

async fn approval_in_subagent(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "writer", "prompt": "write it"}}]},
                    {"tool_calls": [{"name": "Read", "input": {"file_path": "out.txt"}}]},
                    {"text": "parent done"}
                ]}},
                "agents": {"writer": {
                    "description": "Writes files",
                    "tools": ["Bash"],
                    "model": {"script": {"turns": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": "echo from-the-subagent > out.txt"}}]},
                        {"text": "written"}
                    ]}}
                }}
            }),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    // The request shows in the parent's stream, naming the subagent that asks.
    let events = app
        .wait_for_events(&token, &id, |e| {
            e.iter().any(|e| {
                e["type"] == "subagent_event" && e["payload"]["kind"] == "approval_requested"
            })
        })
        .await;
    let asked = events
        .iter()
        .find(|e| e["type"] == "subagent_event" && e["payload"]["kind"] == "approval_requested")
        .unwrap();
    assert_eq!(asked["payload"]["agent"], "writer");
    let child = asked["payload"]["session_id"].as_str().unwrap().to_owned();
    let approval = asked["payload"]["payload"]["approval"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.first_pending_approval(&token, &child).await, approval);
    let answered = app
        .answer(&token, &child, &approval, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answered.status(), 200);
    let events = wait_terminal(&app, &token, &id).await;
    assert_eq!(
        of_kind(&events, "terminal")[0]["payload"]["reason"],
        "end_turn",
        "{events:#?}"
    );
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results[0]["content"], "written");
    // The subagent wrote into the parent's workspace.
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("from-the-subagent"),
        "{results:#?}"
    );
}

async fn cancelled_with_parent(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "permission": {"mode": "bypass"},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "slow", "prompt": "wait"}}]},
                    {"text": "never"}
                ]}},
                "agents": {"slow": {
                    "description": "Takes its time",
                    "model": {"script": {"turns": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}]},
                        {"text": "late"}
                    ]}}
                }}
            }),
        )
        .await;
    let accepted: Value = app.prompt(&token, &id, "go").await.json().await.unwrap();
    let run = accepted["run_id"].as_str().unwrap();
    let events = app
        .wait_for_events(&token, &id, |e| {
            e.iter()
                .any(|e| e["type"] == "subagent_event" && e["payload"]["kind"] == "tool_executing")
        })
        .await;
    let child = of_kind(&events, "subagent_started")[0]["payload"]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancelled = app
        .post_json(
            &format!("/v1/sessions/{id}/runs/{run}/cancel"),
            &token,
            &json!({}),
        )
        .await;
    assert!(cancelled.status().is_success(), "{}", cancelled.status());
    let events = wait_terminal(&app, &token, &id).await;
    assert_eq!(
        of_kind(&events, "terminal")[0]["payload"]["reason"],
        "cancelled"
    );
    // The subagent's run is cancelled too, well before its command would have ended.
    let own = tokio::time::timeout(
        Duration::from_secs(15),
        app.wait_for_events(&token, &child, |e| count(e, "terminal") == 1),
    )
    .await
    .expect("the subagent run ended");
    assert_eq!(
        of_kind(&own, "terminal")[0]["payload"]["reason"],
        "cancelled",
        "{own:#?}"
    );
}

async fn widening_refused(app: TestApp) {
    let token = app.token("acme");
    let cases = [
        (
            json!({"tools": ["Read"], "agents": {"a": {"description": "d", "tools": ["Read", "Bash"]}}}),
            "agents.a.tools[1]",
            "SUBAGENT_TOOL_NOT_IN_PARENT",
        ),
        (
            json!({"permission": {"mode": "plan"}, "agents": {"a": {"description": "d", "permission": {"mode": "bypass"}}}}),
            "agents.a.permission.mode",
            "SUBAGENT_MODE_LOOSER",
        ),
        (
            json!({"permission": {"allow": ["Read"]}, "agents": {"a": {"description": "d", "permission": {"allow": ["Bash"]}}}}),
            "agents.a.permission.allow[0]",
            "SUBAGENT_ALLOW_NOT_IN_PARENT",
        ),
        (
            json!({"budgets": {"max_turns": 3}, "agents": {"a": {"description": "d", "budgets": {"max_turns": 4}}}}),
            "agents.a.budgets.max_turns",
            "SUBAGENT_BUDGET_EXCEEDS_PARENT",
        ),
        (
            json!({"agent_max_depth": 9, "agents": {"a": {"description": "d"}}}),
            "agent_max_depth",
            "SUBAGENT_DEPTH_INVALID",
        ),
        (
            json!({"subagent": {"parent_session_id": "ses_x", "parent_run_id": "run_x",
                                "tool_use_id": "t", "agent": "a", "depth": 0,
                                "workspace_session_id": "ses_victim"}}),
            "subagent",
            "SUBAGENT_LINK_RESERVED",
        ),
    ];
    for (body, field, reason) in cases {
        let response = app.post_json("/v1/sessions", &token, &body).await;
        assert_eq!(response.status().as_u16(), 422, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["code"], "INVALID_REQUEST", "{error}");
        assert_eq!(error["details"]["field"], field, "{error}");
        assert_eq!(error["details"]["reason"], reason, "{error}");
    }
    // The server still serves the tenant (and another one).
    let ok = app
        .post_json(
            "/v1/sessions",
            &app.token("other"),
            &json!({"agents": {"a": {"description": "d"}}}),
        )
        .await;
    assert_eq!(ok.status().as_u16(), 201);
    let (status, _) = error_code(app.get("/v1/sessions/ses_nope", &token).await).await;
    assert_eq!(status, 404);
}

async fn tokens_into_parent_budget(app: TestApp) {
    let token = app.token("acme");
    // Each subagent call costs about 2,000 tokens (its system prompt); the parent's own calls
    // a few hundred. Two of them cross the parent's 4,000-token budget.
    let id = app
        .create_session(
            "acme",
            &json!({
                "tools": ["Read"],
                "budgets": {"max_turns": 10, "max_tokens": 4000},
                "model": {"script": {"turns": [
                    {"tool_calls": [
                        {"name": "Agent", "input": {"subagent_type": "big", "prompt": "one"}},
                        {"name": "Agent", "input": {"subagent_type": "big", "prompt": "two"}}
                    ]},
                    {"text": "first answer"},
                    {"text": "second answer"},
                    {"text": "third answer"}
                ]}},
                "agents": {"big": {
                    "description": "Costly",
                    "tools": [],
                    "system_prompt": "x".repeat(8000),
                    "model": {"script": {"turns": [{"text": "small answer"}]}}
                }}
            }),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let events = wait_terminal(&app, &token, &id).await;
    let delegated: u64 = of_kind(&events, "subagent_finished")
        .iter()
        .map(|e| e["payload"]["usage"]["input_tokens"].as_u64().unwrap())
        .sum();
    assert!(delegated >= 4000, "{delegated}");
    // The run's `usage` counts its subagents' tokens into its totals and says which part.
    let usage = &of_kind(&events, "usage")[0]["payload"];
    let tokens =
        |u: &Value| u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap();
    assert_eq!(usage["subagents"]["runs"], 2, "{usage}");
    assert_eq!(usage["subagents"]["input_tokens"], delegated, "{usage}");
    let own = tokens(usage) - tokens(&usage["subagents"]);
    assert!(own < 4000, "the parent alone stays under its budget: {own}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "continue"
                && e["payload"]["reason"] == "token_budget_continuation"),
        "{events:#?}"
    );
    assert_eq!(
        of_kind(&events, "terminal")[0]["payload"]["reason"],
        "budget_exhausted",
        "{events:#?}"
    );
}
