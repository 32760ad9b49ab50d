//! Parsers are bounded: a shell text nested 100,000 levels deep (under the body limit) once
//! killed the process with a stack overflow, as a permission rule at session creation and as
//! a Bash command chosen by the model. Now the rule is a `422 INVALID_REQUEST` naming the rule,
//! and the command is "unparsable": refused with `COMMAND_DENIED`. Tool inputs nest at most 64
//! levels wherever they come from (a model, an approver, a hook).

use std::time::Duration;

use serde_json::json;

use crate::support;

/// `( ( ( … true ) ) )`, 100,000 levels.
fn deeply_nested() -> String {
    let levels = 100_000;
    format!("{}true{}", "( ".repeat(levels), " )".repeat(levels))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_permission_rule_is_refused_at_session_creation() {
    let server = support::start_server(&[]).await;
    let token = server.token("hostile");
    for list in ["allow", "deny"] {
        let config = json!({
            "permission": { list: ["Bash(git status:*)", format!("Bash({})", deeply_nested())] },
        });
        let (status, body) = server.post("/v1/sessions", &token, &config).await;
        assert_eq!(status, 422, "{list}: {body}");
        assert_eq!(support::code(&body), "INVALID_REQUEST", "{body}");
        assert_eq!(
            body["details"]["field"],
            format!("permission.{list}[1]"),
            "{body}"
        );
        // The message names the rule without echoing 400 KB back.
        assert!(
            body.to_string().len() < 4096,
            "{} bytes",
            body.to_string().len()
        );
    }
    // A deeply nested path glob of a file rule too.
    let glob = format!("Read({}x{})", "{a,".repeat(50), "}".repeat(50));
    let (status, body) = server
        .post(
            "/v1/sessions",
            &token,
            &json!({"permission": {"deny": [glob]}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["details"]["field"], "permission.deny[0]", "{body}");
    support::assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_command_chosen_by_the_model_is_denied() {
    let server = support::start_server(&[]).await;
    for (mode, deny) in [("bypass", json!([])), ("default", json!(["Bash(rm:*)"]))] {
        let config = json!({
            "tools": ["Bash"],
            "permission": {"mode": mode, "deny": deny},
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": deeply_nested()}}]},
                {"text": "done"}
            ]}},
        });
        let session = support::create_session(&server, "hostile", &config).await;
        let events =
            support::prompt_and_wait(&server, "hostile", &session, "go", Duration::from_secs(60))
                .await;
        let result = support::first_tool_result(&events);
        assert_eq!(result["is_error"], true, "{mode}: {result}");
        if mode == "bypass" {
            // No rule matched; the Bash tool's own check refuses the unparsable text, and
            // the result says why.
            assert_eq!(result["code"], "COMMAND_DENIED", "{result}");
            let content = result["content"].to_string();
            assert!(content.contains("cannot be parsed"), "{content}");
        } else {
            // The deny rule matches a text that cannot be analysed.
            assert_eq!(result["code"], "PERMISSION_DENIED", "{result}");
            let content = result["content"].to_string();
            assert!(content.contains("Bash(rm:*)"), "{content}");
        }
    }
    support::assert_still_serves(&server).await;
}

/// `{"a": {"a": … {}}}`, `levels` objects.
fn nested_object(levels: usize) -> serde_json::Value {
    let mut value = json!({});
    for _ in 1..levels {
        value = json!({ "a": value });
    }
    value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_tool_input_chosen_by_the_model_leaves_the_transcript_readable() {
    let server = support::start_server(&[]).await;
    let token = server.token("hostile");
    // 118: the deepest a session body (nesting limit 128) can carry inside its script.
    for levels in [60, 118] {
        let config = json!({
            "tools": ["Read"],
            "permission": {"mode": "bypass"},
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Read", "input": nested_object(levels)}]},
                {"text": "done"}
            ]}},
        });
        let session = support::create_session(&server, "hostile", &config).await;
        let events =
            support::prompt_and_wait(&server, "hostile", &session, "go", Duration::from_secs(60))
                .await;
        assert!(events.iter().any(|e| e["type"] == "terminal"), "{levels}");
        // The whole transcript reads back, page by page and as a stream's backlog.
        let (status, page) = server
            .get(&format!("/v1/sessions/{session}/events?limit=1000"), &token)
            .await;
        assert_eq!(status, 200, "{levels}: {page}");
    }
    support::assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answer_nested_past_the_tool_input_bound_is_refused_and_the_approval_stays_open()
 {
    let server = support::start_server(&[]).await;
    let token = server.token("hostile");
    // `Write` asks in the default mode.
    let config = json!({
        "tools": ["Write"],
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Write", "input": {"file_path": "a.txt", "content": "a"}}]},
            {"text": "done"}
        ]}},
    });
    let (session, _run) = server.session_with_prompt(&token, &config, "go").await;
    let requested = first_event(&server, &token, &session, "approval_requested").await;
    let approval = requested["payload"]["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_owned();
    let answer_path = format!("/v1/sessions/{session}/approvals/{approval}");
    // 65 levels (the input itself counting as one): one past the bound; 100 still parses
    // as a body (128).
    for levels in [65, 100] {
        let updated =
            json!({"file_path": "a.txt", "content": "a", "extra": nested_object(levels - 1)});
        let (status, body) = server
            .post(
                &answer_path,
                &token,
                &json!({"decision": "allow", "updated_input": updated}),
            )
            .await;
        assert_eq!(status, 422, "{levels}: {body}");
        assert_eq!(support::code(&body), "INVALID_REQUEST", "{body}");
        assert_eq!(body["details"]["field"], "updated_input", "{body}");
    }
    // Nothing was decided: the approval is still pending and takes a good answer.
    let (status, listed) = server
        .get(&format!("/v1/sessions/{session}/approvals"), &token)
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["approvals"][0]["status"], "pending", "{listed}");
    let (status, body) = server
        .post(&answer_path, &token, &json!({"decision": "allow"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let terminal = first_event(&server, &token, &session, "terminal").await;
    assert_eq!(terminal["payload"]["reason"], "end_turn", "{terminal}");
    support::assert_still_serves(&server).await;
}

/// The session's first event of `kind`, waited for (at most 30 s).
async fn first_event(
    server: &crate::server::ServerProcess,
    token: &str,
    session: &str,
    kind: &str,
) -> serde_json::Value {
    let events = server
        .wait_for_events(token, session, Duration::from_secs(30), kind, |events| {
            crate::server::count(events, kind) > 0
        })
        .await;
    crate::server::of_kind(&events, kind)[0].clone()
}
