//! The built-in demo agent: in development mode the offline provider lists the workspace,
//! writes a file (asking for approval), streams a closing answer — for every prompt.

use crate::helpers::{Backend, TestApp, count};
use serde_json::{Value, json};

async fn development_app(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |settings| {
        // No verification key: development mode.
        settings.auth.hs256_secret = None;
        settings.allow_session_scripts = false;
    })
    .await
}

fn texts_of(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .map(|e| e["payload"].clone())
        .collect()
}

async fn demo_lists_writes_with_approval_and_streams(app: TestApp) {
    let token = app.token("dev");
    let id = app.create_session("dev", &json!({})).await;
    assert_eq!(app.prompt(&token, &id, "plan my week").await.status(), 202);
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let calls = texts_of(&events, "tool_call");
    assert_eq!(calls[0]["name"], "LS", "{calls:?}");
    assert_eq!(calls[1]["name"], "Write", "{calls:?}");
    assert_eq!(calls[1]["input"]["file_path"], "demo-notes.md");
    let approval = texts_of(&events, "approval_requested")[0]["approval"].clone();
    assert_eq!(approval["tool_name"], "Write");
    let approval_id = approval["id"].as_str().unwrap();
    let answered = app
        .answer(&token, &id, approval_id, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answered.status(), 200);
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    assert_eq!(texts_of(&events, "terminal")[0]["reason"], "end_turn");
    // The closing answer streams in several deltas.
    let deltas = texts_of(&events, "assistant_delta");
    assert!(deltas.len() > 5, "streamed in pieces: {}", deltas.len());
    let streamed: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
    assert!(streamed.contains("You said: plan my week"), "{streamed}");
    let written = app
        .data_dir()
        .join("workspaces")
        .join("dev")
        .join(&id)
        .join("demo-notes.md");
    let content = std::fs::read_to_string(&written).expect("the demo wrote its file");
    assert!(content.contains("You asked: plan my week"), "{content}");

    // A second prompt plays the demo again; denying the write ends it with the denial.
    assert_eq!(app.prompt(&token, &id, "again").await.status(), 202);
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "approval_requested") == 2)
        .await;
    let approval = texts_of(&events, "approval_requested")[1]["approval"].clone();
    let answered = app
        .answer(
            &token,
            &id,
            approval["id"].as_str().unwrap(),
            &json!({"decision": "deny", "reason": "not now"}),
        )
        .await;
    assert_eq!(answered.status(), 200);
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 2)
        .await;
    let last = texts_of(&events, "assistant_message")
        .last()
        .cloned()
        .unwrap();
    let text = last["message"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("I did not write the file"), "{text}");
    assert!(text.contains("not now"), "{text}");
}

#[tokio::test]
async fn demo_agent_runs_in_development_mode_sqlite() {
    let app = development_app(Backend::Sqlite).await.expect("sqlite app");
    demo_lists_writes_with_approval_and_streams(app).await;
}

#[tokio::test]
async fn demo_agent_runs_in_development_mode_postgres() {
    if let Some(app) = development_app(Backend::Postgres).await {
        demo_lists_writes_with_approval_and_streams(app).await;
    }
}

#[tokio::test]
async fn with_a_key_configured_the_offline_provider_echoes() {
    let app = TestApp::spawn(Backend::Sqlite).await.expect("sqlite app");
    let token = app.token("acme");
    let id = app.create_session("acme", &json!({})).await;
    app.prompt(&token, &id, "echo this").await;
    let events = app
        .wait_for_events(&token, &id, |e| count(e, "terminal") == 1)
        .await;
    assert_eq!(count(&events, "tool_call"), 0);
    let message = texts_of(&events, "assistant_message")[0].clone();
    assert_eq!(message["message"]["content"][0]["text"], "echo this");
}
