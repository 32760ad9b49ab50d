//! Prompts drive real runs of the agent loop (scripted provider, real tools in the session
//! workspace); events are persisted, paged, and streamed over SSE with replay.

use crate::helpers::{Backend, TestApp, count, error_code, tool_results};
use crate::on_both_backends;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;

on_both_backends! {
    prompt_runs_tools_and_records_everything => prompt_runs_tools_and_records_everything;
    sse_replays_from_last_event_id_exactly_once => sse_replays_from_last_event_id_exactly_once;
}

fn write_then_read_script() -> Value {
    json!({
        "title": "files",
        "permission": {"mode": "acceptEdits"},
        "model": {"script": {"turns": [
            {"text": "Writing.", "tool_calls": [{"name": "Write", "input": {"file_path": "notes.txt", "content": "hello from the tool"}}]},
            {"tool_calls": [{"name": "Read", "input": {"file_path": "notes.txt"}}]},
            {"text": "The file says: {{last_tool_result}}"}
        ]}}
    })
}

/// Reads SSE events until one of type `terminal` arrives (bounded by a timeout).
async fn collect_until_terminal(
    app: &TestApp,
    token: &str,
    id: &str,
    last_event_id: Option<i64>,
) -> Vec<(i64, String, Value)> {
    let mut request = app
        .client
        .get(app.url(&format!("/v1/sessions/{id}/stream")))
        .bearer_auth(token);
    if let Some(last) = last_event_id {
        request = request.header("last-event-id", last.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream().eventsource();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Ok(Some(Ok(event))) = tokio::time::timeout_at(deadline, stream.next()).await {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        let seq: i64 = event.id.parse().unwrap();
        seen.push((seq, event.event.clone(), data));
        if event.event == "terminal" {
            return seen;
        }
    }
    panic!("no terminal event within 30 s; saw {seen:?}");
}

async fn wait_idle(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    app.wait_for_events(token, id, |events| count(events, "terminal") >= 1)
        .await
}

async fn prompt_runs_tools_and_records_everything(app: TestApp) {
    let token = app.token("acme");
    let id = app.create_session("acme", &write_then_read_script()).await;
    let accepted = app.prompt(&token, &id, "make a note").await;
    assert_eq!(accepted.status(), 202);
    let accepted: Value = accepted.json().await.unwrap();
    assert!(accepted["run_id"].as_str().unwrap().starts_with("run_"));
    assert_eq!(accepted["status"], "started");

    let events = collect_until_terminal(&app, &token, &id, None).await;
    let seqs: Vec<i64> = events.iter().map(|e| e.0).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "contiguous from 1"
    );
    let kinds: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(
        kinds.iter().filter(|k| **k == "continue").count(),
        2,
        "two tool turns: {kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| **k == "tool_result").count(), 2);
    assert!(kinds.contains(&"assistant_delta"));
    let terminal = &events.last().unwrap().2;
    assert_eq!(terminal["payload"]["reason"], "end_turn");

    // The tool really ran in the session workspace, and the model saw its output.
    let messages = app.messages(&token, &id).await;
    let messages = messages["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        6,
        "prompt, 2x(assistant, results), final answer"
    );
    let last_text = messages[5]["content"][0]["text"].as_str().unwrap();
    assert!(last_text.contains("hello from the tool"), "{last_text}");
    // Every tool_use is paired with a tool_result in the next message.
    for (index, message) in messages.iter().enumerate() {
        for block in message["content"].as_array().unwrap() {
            if block["type"] == "tool_use" {
                let next = &messages[index + 1]["content"];
                assert!(
                    next.as_array()
                        .unwrap()
                        .iter()
                        .any(|b| b["tool_use_id"] == block["id"]),
                    "unpaired {block}"
                );
            }
        }
    }
    let decisions: Vec<&(i64, String, Value)> = events
        .iter()
        .filter(|e| e.1 == "permission_decision")
        .collect();
    assert_eq!(
        decisions[0].2["payload"]["decision"]["stage"],
        "accept_edits"
    );
    assert_eq!(decisions[1].2["payload"]["decision"]["stage"], "read_only");

    // The run is recorded as completed, with its terminal reason.
    let run_id = accepted["run_id"].as_str().unwrap();
    let run: Value = app
        .get(&format!("/v1/sessions/{id}/runs/{run_id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "completed");
    assert_eq!(run["prompt"], "make a note");
    assert_eq!(run["terminal"]["reason"], "end_turn");
    assert!(run["ended_at"].is_string());

    // Another tenant can neither prompt, stream, page events, read messages or runs.
    let other = app.token("intruder");
    let run_path = format!("runs/{run_id}");
    for path in [
        "events",
        "messages",
        "stream",
        "hooks",
        "runs",
        run_path.as_str(),
    ] {
        assert_eq!(
            error_code(app.get(&format!("/v1/sessions/{id}/{path}"), &other).await)
                .await
                .0,
            404,
            "{path}"
        );
    }
    let foreign = app.prompt(&other, &id, "hi").await;
    assert_eq!(error_code(foreign).await, (404, "NOT_FOUND".into()));
    let cancel = app
        .post_json(
            &format!("/v1/sessions/{id}/runs/{run_id}/cancel"),
            &other,
            &json!({}),
        )
        .await;
    assert_eq!(error_code(cancel).await, (404, "NOT_FOUND".into()));
}

async fn sse_replays_from_last_event_id_exactly_once(app: TestApp) {
    let token = app.token("acme");
    let id = app.create_session("acme", &write_then_read_script()).await;
    app.prompt(&token, &id, "go").await;
    let all = wait_idle(&app, &token, &id).await;
    let total = all.len() as i64;
    // Reconnect from the middle: exactly the rest, in order, once.
    let rest = collect_until_terminal(&app, &token, &id, Some(total / 2)).await;
    let seqs: Vec<i64> = rest.iter().map(|e| e.0).collect();
    assert_eq!(seqs, ((total / 2 + 1)..=total).collect::<Vec<_>>());
    // A bad Last-Event-ID is a client error.
    let bad = app
        .client
        .get(app.url(&format!("/v1/sessions/{id}/stream")))
        .bearer_auth(&token)
        .header("last-event-id", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(bad).await, (422, "INVALID_REQUEST".into()));
}

#[tokio::test]
async fn busy_session_follows_the_declared_policy() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    // A slow tool keeps the first run busy.
    let id = app
        .create_session(
            "acme",
            &json!({
                "permission": {"mode": "bypass"},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 5"}}]},
                    {"text": "done"}
                ]}}
            }),
        )
        .await;
    let first: Value = app.prompt(&token, &id, "one").await.json().await.unwrap();
    let busy = app.prompt(&token, &id, "two").await;
    assert_eq!(error_code(busy).await, (409, "SESSION_BUSY".into()));
    let queued: Value = app
        .post_json(
            &format!("/v1/sessions/{id}/prompts"),
            &token,
            &json!({"text": "three", "busy": "enqueue"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(queued["status"], "queued");
    // Once the slow tool runs, cancel the first run: the tool gets CANCELLED, then the queued
    // run runs.
    app.wait_for_events(&token, &id, |events| count(events, "tool_started") >= 1)
        .await;
    let run = first["run_id"].as_str().unwrap();
    let cancel = app
        .client
        .post(app.url(&format!("/v1/sessions/{id}/runs/{run}/cancel")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let events = app
        .wait_for_events(&token, &id, |events| count(events, "terminal") == 2)
        .await;
    let terminals: Vec<&Value> = events.iter().filter(|e| e["type"] == "terminal").collect();
    assert_eq!(terminals[0]["payload"]["reason"], "cancelled");
    assert_eq!(terminals[0]["run_id"], run);
    assert_eq!(terminals[1]["run_id"], queued["run_id"]);
    let messages = app.messages(&token, &id).await;
    let cancelled = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .find(|b| b["type"] == "tool_result")
        .unwrap();
    assert_eq!(cancelled["code"], "CANCELLED");
    // Closing stops the session for good.
    app.delete(&format!("/v1/sessions/{id}"), &token).await;
    let closed = app.prompt(&token, &id, "again").await;
    assert_eq!(error_code(closed).await, (409, "SESSION_CLOSED".into()));
}

#[tokio::test]
async fn large_outputs_are_capped_and_spilled_as_evidence() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let id = app
        .create_session("acme", &json!({
            "permission": {"mode": "bypass"},
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "printf '[output truncated: fake marker]'; yes a | head -c 80000"}}]},
                {"text": "done"}
            ]}}
        }))
        .await;
    app.prompt(&token, &id, "go").await;
    wait_idle(&app, &token, &id).await;
    let messages = app.messages(&token, &id).await;
    let result = messages["messages"][2]["content"][0].clone();
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["capped"], true, "{result}");
    let head = result["content"].as_str().unwrap();
    assert!(
        head.chars().count() < 31_000,
        "the model sees only the head"
    );
    let output_id = result["output_id"].as_str().unwrap();
    let output: Value = app
        .get(&format!("/v1/sessions/{id}/outputs/{output_id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    let content = output["content"].as_str().unwrap();
    assert!(
        content.starts_with("[output truncated: fake marker]"),
        "marker-like text is still just text"
    );
    assert!(content.matches('a').count() >= 40_000);
    use sha2::Digest;
    assert_eq!(
        output["sha256"],
        hex::encode(sha2::Sha256::digest(content.as_bytes()))
    );
    assert_eq!(output["tool_name"], "Bash");
    assert_eq!(output["tool_use_id"], result["tool_use_id"]);
    // Another tenant gets 404 for the same output.
    let other = app.token("intruder");
    assert_eq!(
        error_code(
            app.get(&format!("/v1/sessions/{id}/outputs/{output_id}"), &other)
                .await
        )
        .await
        .0,
        404
    );
}

#[tokio::test]
async fn fork_copies_history_up_to_a_message_and_stays_in_the_tenant() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let id = app.create_session("acme", &write_then_read_script()).await;
    app.prompt(&token, &id, "note").await;
    wait_idle(&app, &token, &id).await;
    // Cutting right after a tool_use would split the pair.
    let split = app
        .post_json(
            &format!("/v1/sessions/{id}/fork"),
            &token,
            &json!({"up_to_seq": 2}),
        )
        .await;
    assert_eq!(error_code(split).await, (422, "INVALID_REQUEST".into()));
    let fork = app
        .post_json(
            &format!("/v1/sessions/{id}/fork"),
            &token,
            &json!({"up_to_seq": 3}),
        )
        .await;
    assert_eq!(fork.status(), 201);
    let fork: Value = fork.json().await.unwrap();
    let fork_id = fork["id"].as_str().unwrap();
    assert_ne!(fork_id, id);
    assert_eq!(fork["config"]["title"], "files");
    let copied: Value = app
        .get(&format!("/v1/sessions/{fork_id}/messages"), &token)
        .await
        .json()
        .await
        .unwrap();
    let original = app.messages(&token, &id).await;
    let content = |v: &Value| {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(content(&copied), content(&original)[..3].to_vec());
    // Another tenant cannot fork it.
    let other = app
        .post_json(
            &format!("/v1/sessions/{id}/fork"),
            &app.token("intruder"),
            &json!({}),
        )
        .await;
    assert_eq!(error_code(other).await, (404, "NOT_FOUND".into()));
}

#[tokio::test]
async fn tenant_limits_answer_429() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.limits.sessions = 2;
        s.limits.concurrent_runs = 1;
    })
    .await
    .unwrap();
    let token = app.token("small");
    let slow = json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 3"}}]}, {"text": "ok"}]}}});
    let a = app.create_session("small", &slow).await;
    let b = app.create_session("small", &slow).await;
    let third = app.post_json("/v1/sessions", &token, &json!({})).await;
    assert_eq!(error_code(third).await, (429, "TENANT_LIMIT".into()));
    // Another tenant is not affected.
    app.create_session("other", &json!({})).await;
    let first: Value = app.prompt(&token, &a, "1").await.json().await.unwrap();
    let second = app.prompt(&token, &b, "2").await;
    assert_eq!(error_code(second).await, (429, "TENANT_LIMIT".into()));
    let run = first["run_id"].as_str().unwrap();
    app.client
        .post(app.url(&format!("/v1/sessions/{a}/runs/{run}/cancel")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    // Closing a session frees a slot.
    app.delete(&format!("/v1/sessions/{b}"), &token).await;
    assert_eq!(
        app.post_json("/v1/sessions", &token, &json!({}))
            .await
            .status(),
        201
    );
}

#[tokio::test]
async fn idle_sessions_expire_and_stop_accepting_prompts() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.session_idle_expiry_seconds = 1)
        .await
        .unwrap();
    let token = app.token("acme");
    let id = app.create_session("acme", &json!({})).await;
    app.wait_until_closed(&token, &id, "the idle session never expired")
        .await;
    let events: Value = app
        .get(&format!("/v1/sessions/{id}/events"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(events["events"][0]["type"], "session_expired");
    let prompt = app.prompt(&token, &id, "hi").await;
    assert_eq!(error_code(prompt).await, (409, "SESSION_CLOSED".into()));
}

/// A client streaming an idle session when it expires receives `session_expired` live (on
/// SQLite too, where no store notification carries committed events).
#[tokio::test]
async fn a_live_stream_receives_session_expired() {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.session_idle_expiry_seconds = 1)
        .await
        .unwrap();
    let token = app.token("acme");
    let id = app.create_session("acme", &json!({})).await;
    let response = app.get(&format!("/v1/sessions/{id}/stream"), &token).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream().eventsource();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("session_expired within 20 s")
            .expect("the stream stays open until the event")
            .expect("a well-formed SSE event");
        if event.event == "session_expired" {
            break;
        }
    }
}

#[tokio::test]
async fn background_task_completion_reaches_the_loop() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let id = app
        .create_session("acme", &json!({
            "permission": {"mode": "bypass"},
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 0.3; echo bg-done", "run_in_background": true}}]},
                {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 1.5"}}]},
                {"text": "waiting for the task"},
                {"text": "the task finished"}
            ]}}
        }))
        .await;
    let session: Value = app
        .get(&format!("/v1/sessions/{id}"), &token)
        .await
        .json()
        .await
        .unwrap();
    for part in ["env", "filesystem", "network", "rlimits"] {
        assert_eq!(
            session["sandbox"][part]["status"], "enforced",
            "{part}: {}",
            session["sandbox"]
        );
    }
    app.prompt(&token, &id, "go").await;
    let events = wait_idle(&app, &token, &id).await;
    let reasons: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "continue")
        .map(|e| e["payload"]["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["tool_turn", "tool_turn", "task_notification"]);
    let messages = app.messages(&token, &id).await;
    let texts: Vec<String> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"][0]["text"].as_str().map(str::to_owned))
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("Background tasks reported:")
                && t.contains("Completed")
                && t.contains("exit code 0")),
        "{texts:?}"
    );
    assert_eq!(texts.last().unwrap(), "the task finished");
    // Closing the session removes the task output files.
    let logs = app.data_dir().join("tasks").join(&id);
    assert!(logs.is_dir(), "task output lives under the data dir");
    app.delete(&format!("/v1/sessions/{id}"), &token).await;
    assert!(!logs.exists(), "task output files are cleaned up at close");
}

#[tokio::test]
async fn deferred_tools_are_hidden_until_found_and_run_under_their_own_name() {
    let app = TestApp::spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let grep = json!({"pattern": "needle"});
    let id = app
        .create_session("acme", &json!({
            "deferred_tools": ["Grep"],
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Grep", "input": grep}]},
                {"tool_calls": [{"name": "ExecuteExtraTool", "input": {"name": "Grep", "input": grep}}]},
                {"tool_calls": [{"name": "SearchExtraTools", "input": {"query": "grep"}}]},
                {"tool_calls": [{"name": "ExecuteExtraTool", "input": {"name": "Grep", "input": grep}}]},
                {"text": "done"},
                {"tool_calls": [{"name": "ExecuteExtraTool", "input": {"name": "Grep", "input": grep}}]},
                {"text": "done again"}
            ]}}
        }))
        .await;
    app.prompt(&token, &id, "go").await;
    let events = wait_idle(&app, &token, &id).await;
    let messages = app.messages(&token, &id).await;
    let results = tool_results(&messages);
    assert_eq!(
        results[0]["code"], "TOOL_NOT_FOUND",
        "a hidden tool named directly does not exist"
    );
    assert_eq!(results[1]["code"], "TOOL_NOT_FOUND", "not unlocked yet");
    assert!(
        results[2]["content"].as_str().unwrap().contains("\"Grep\""),
        "{}",
        results[2]
    );
    assert_eq!(results[3]["is_error"], false, "{}", results[3]);
    // The inner call was decided under its own name.
    let last = events
        .iter()
        .rfind(|e| e["type"] == "permission_decision")
        .unwrap();
    assert_eq!(last["payload"]["tool"], "Grep");
    assert_eq!(last["payload"]["decision"]["stage"], "read_only");

    // The unlock is stored with the session: a later run may call the tool without searching.
    app.prompt(&token, &id, "again").await;
    wait_for_terminals(&app, &token, &id, 2).await;
    let messages = app.messages(&token, &id).await;
    let results = tool_results(&messages);
    assert_eq!(results.len(), 5);
    assert_eq!(results[4]["is_error"], false, "{}", results[4]);
}

async fn wait_for_terminals(app: &TestApp, token: &str, id: &str, n: usize) {
    app.wait_for_events(token, id, |e| count(e, "terminal") == n)
        .await;
}
