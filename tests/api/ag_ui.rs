//! The AG-UI endpoint over real HTTP, on both stores: a run streamed as AG-UI events, a
//! pending approval ending it with the interrupt outcome, `resume[]` answering it exactly once,
//! and hostile inputs. Every captured stream is checked by the AG-UI tools themselves
//! (`tests/ag_ui/validate_events.py`: the `ag-ui-protocol` pydantic models and the
//! `ag-ui-validate` conformance validator); outside CI a missing validator skips that check.

use crate::helpers::{TestApp, error_code};
use crate::on_both_backends;
use serde_json::{Value, json};
use std::time::Duration;

const VALIDATOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/ag_ui/validate_events.py"
);

on_both_backends! {
    an_approval_interrupts_the_run_and_resume_answers_it => interrupt_and_resume;
    hostile_ag_ui_inputs_get_codes => hostile_inputs;
}

/// POSTs a RunAgentInput; returns the raw SSE body and its events.
async fn ag_ui(app: &TestApp, token: &str, id: &str, input: &Value) -> (String, Vec<Value>) {
    let response = tokio::time::timeout(
        Duration::from_secs(30),
        app.client
            .post(app.url(&format!("/v1/sessions/{id}/ag-ui")))
            .bearer_auth(token)
            .json(input)
            .send(),
    )
    .await
    .expect("answer within 30 s")
    .expect("request");
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .expect("the stream ends within 30 s")
        .expect("body");
    let events = body
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).expect("event JSON"))
        .collect();
    (body, events)
}

/// Checks a captured stream with the AG-UI validator and models.
fn validate(body: &str) {
    let available = std::process::Command::new("python3")
        .args(["-c", "import ag_ui.core, ag_ui_validate"])
        .status()
        .is_ok_and(|status| status.success());
    if !available {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: PyPI ag-ui-protocol and ag-ui-validate are required"
        );
        eprintln!("skipped the AG-UI validator: ag-ui-protocol / ag-ui-validate missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("capture.sse");
    std::fs::write(&file, body).unwrap();
    let output = std::process::Command::new("python3")
        .arg(VALIDATOR)
        .arg(&file)
        .output()
        .expect("python3");
    assert!(
        output.status.success(),
        "AG-UI validation failed:\n{}{}\n--- stream ---\n{body}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

async fn interrupt_and_resume(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [
                {"text": "Writing the file.", "tool_calls": [{"name": "Write", "input": {"file_path": "notes.txt", "content": "hello"}}]},
                {"text": "Done: {{last_tool_result}}"}
            ]}}}),
        )
        .await;
    let input = json!({
        "threadId": id, "runId": "client-run-1", "state": {"ignored": true},
        "messages": [
            {"id": "m0", "role": "user", "content": "an older message"},
            {"id": "m1", "role": "assistant", "content": "client history is not trusted"},
            {"id": "m2", "role": "user", "content": [{"type": "text", "text": "write the notes"}]}
        ],
        "tools": [], "context": [], "forwardedProps": {}
    });
    let (body, events) = ag_ui(&app, &token, &id, &input).await;
    validate(&body);
    let kinds = types(&events);
    assert_eq!(kinds[0], "RUN_STARTED");
    assert_eq!(events[0]["threadId"], id.as_str());
    assert_eq!(events[0]["runId"], "client-run-1");
    assert_eq!(kinds[1], "STATE_SNAPSHOT");
    assert_eq!(
        events[1]["snapshot"],
        json!({"todos": [], "planMode": false})
    );
    for expected in [
        "STEP_STARTED",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
    ] {
        assert!(kinds.contains(&expected), "{expected} in {kinds:?}");
    }
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{kinds:?}");
    assert_eq!(finished["outcome"]["type"], "interrupt");
    let interrupts = finished["outcome"]["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1);
    let approval_id = app.first_pending_approval(&token, &id).await;
    assert_eq!(interrupts[0]["id"], approval_id.as_str());
    assert_eq!(interrupts[0]["metadata"]["tool"], "Write");
    assert_eq!(interrupts[0]["metadata"]["input"]["file_path"], "notes.txt");
    // The prompt was the last user message, nothing else of the client's history.
    let messages = app.messages(&token, &id).await;
    assert_eq!(
        messages["messages"][0]["content"][0]["text"],
        "write the notes"
    );

    // A new prompt while the approval waits: the session's policy (409 APPROVAL_PENDING).
    let again = app
        .client
        .post(app.url(&format!("/v1/sessions/{id}/ag-ui")))
        .bearer_auth(&token)
        .json(&json!({"threadId": id, "runId": "x", "messages": [{"id": "m", "role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(again).await, (409, "APPROVAL_PENDING".into()));

    // resume[] needs approvals:write.
    let resume = json!({
        "threadId": id, "runId": "client-run-2", "messages": [],
        "resume": [{"interruptId": approval_id, "status": "resolved", "payload": {"decision": "allow", "reason": "fine"}}]
    });
    let writer = app.token_with_scopes("acme", &["sessions:write"]);
    let refused = app
        .client
        .post(app.url(&format!("/v1/sessions/{id}/ag-ui")))
        .bearer_auth(&writer)
        .json(&resume)
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(refused).await, (403, "FORBIDDEN_SCOPE".into()));

    let (body, events) = ag_ui(&app, &token, &id, &resume).await;
    validate(&body);
    let kinds = types(&events);
    assert_eq!(kinds[0], "RUN_STARTED");
    assert_eq!(events[0]["runId"], "client-run-2");
    let result = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .expect("the approved call's result");
    assert_eq!(result["toolCallId"], interrupts[0]["toolCallId"]);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(text.starts_with("Done:"), "{text}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "CUSTOM" && e["name"] == "norma.approval_decided"),
        "{kinds:?}"
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{kinds:?}");
    assert!(finished.get("outcome").is_none(), "success: {finished}");
    // The REST record shows the same single decision.
    let approvals: Value = app
        .get(&format!("/v1/sessions/{id}/approvals"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(approvals["approvals"][0]["status"], "allowed");
    assert_eq!(approvals["approvals"][0]["decision_reason"], "fine");

    // Exactly once: the same resume again is refused, as over REST.
    let replay = app
        .client
        .post(app.url(&format!("/v1/sessions/{id}/ag-ui")))
        .bearer_auth(&token)
        .json(&resume)
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(replay).await,
        (409, "APPROVAL_ALREADY_DECIDED".into())
    );
}

async fn hostile_inputs(app: TestApp) {
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    let post = |path: String, body: Value, token: String| {
        let app = &app;
        async move {
            app.client
                .post(app.url(&path))
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let path = format!("/v1/sessions/{id}/ag-ui");
    let user = json!([{"id": "m", "role": "user", "content": "hi"}]);
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"threadId": "another", "runId": "r", "messages": user}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "", "messages": user}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "r".repeat(201), "messages": user}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "r", "messages": []}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "r", "messages": [{"id": "m", "role": "user", "content": ""}]}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "r", "messages": vec![json!({"id": "m", "role": "user", "content": "x"}); 1001]}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "r"}),
            422,
            "INVALID_REQUEST",
        ),
        (
            json!({"threadId": id, "runId": "r", "messages": [], "resume": [{"interruptId": "nope", "status": "resolved"}]}),
            404,
            "NOT_FOUND",
        ),
        (
            json!({"threadId": id, "runId": "r", "messages": [], "resume": [{"interruptId": "nope", "status": "maybe"}]}),
            422,
            "INVALID_REQUEST",
        ),
    ];
    for (body, status, code) in cases {
        let response = post(path.clone(), body.clone(), token.clone()).await;
        assert_eq!(
            error_code(response).await,
            (status, code.to_owned()),
            "{}",
            body.to_string().chars().take(200).collect::<String>()
        );
    }
    // Unknown session (or another tenant's): 404.
    let input = json!({"threadId": id, "runId": "r", "messages": user});
    let response = post(path.clone(), input.clone(), app.token("globex")).await;
    assert_eq!(error_code(response).await, (404, "NOT_FOUND".into()));
    let response = post(
        "/v1/sessions/no-such-session/ag-ui".into(),
        json!({"threadId": "no-such-session", "runId": "r", "messages": user}),
        token.clone(),
    )
    .await;
    assert_eq!(error_code(response).await, (404, "NOT_FOUND".into()));
    // A read-only token cannot run the agent.
    let response = post(
        path.clone(),
        input.clone(),
        app.token_with_scopes("acme", &["sessions:read"]),
    )
    .await;
    assert_eq!(error_code(response).await, (403, "FORBIDDEN_SCOPE".into()));
    // Not JSON, wrong media type, too large.
    let response = app
        .client
        .post(app.url(&path))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(error_code(response).await, (400, "INVALID_JSON".into()));
    let response = app
        .client
        .post(app.url(&path))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(input.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        error_code(response).await,
        (415, "UNSUPPORTED_MEDIA_TYPE".into())
    );
    let huge = json!({"threadId": id, "runId": "r", "messages": user, "state": {"blob": "x".repeat(2 * 1024 * 1024)}});
    let response = post(path.clone(), huge, token.clone()).await;
    assert_eq!(
        error_code(response).await,
        (413, "PAYLOAD_TOO_LARGE".into())
    );
    // After all that, a good request still runs to completion.
    let (body, events) = ag_ui(&app, &token, &id, &input).await;
    validate(&body);
    assert_eq!(events.last().unwrap()["type"], "RUN_FINISHED");
}
