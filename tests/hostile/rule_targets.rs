//! Permission rules bind to the tools they name (issue #14, D2 and D5): a rule naming an
//! unknown tool, or giving arguments to a tool that only matches by name, is refused at session
//! creation; the PTY shell tools are judged by the session's `Bash(...)` rules.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_naming_unknown_tools_or_arguments_of_name_only_tools_are_refused() {
    let server = support::start_server(&[]).await;
    let token = server.token("hostile");
    let cases = [
        (json!({"deny": ["bash(rm:*)"]}), "permission.deny[0]"),
        (
            json!({"allow": ["Read", "Memory(x)"]}),
            "permission.allow[1]",
        ),
        (
            json!({"deny": ["Bash(rm:*)", "TodoWrite(x)"]}),
            "permission.deny[1]",
        ),
        (json!({"allow": ["mcp__srv__"]}), "permission.allow[0]"),
    ];
    for (permission, field) in cases {
        let config = json!({ "permission": permission });
        let (status, body) = server.post("/v1/sessions", &token, &config).await;
        assert_eq!(status, 422, "{permission}: {body}");
        assert_eq!(support::code(&body), "INVALID_REQUEST", "{body}");
        assert_eq!(body["details"]["field"], field, "{body}");
    }
    // Known tools, `*`, MCP-shaped names and WebFetch domain rules stay valid.
    let config = json!({"permission": {
        "allow": ["*", "Memory", "mcp__srv__tool", "WebFetch(domain:docs.rs)", "Bash(git status:*)"],
        "deny": ["ShellStart(rm:*)", "SearchExtraTools"],
    }});
    support::create_session(&server, "hostile", &config).await;
    support::assert_still_serves(&server).await;
}

/// The first `tool_result` event's result.
fn first_tool_result(events: &[Value]) -> &Value {
    &events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool_result event")["payload"]["result"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_deny_rule_denies_a_shell_started_with_that_command() {
    let server = support::start_server(&[]).await;
    let config = json!({
        "tools": ["ShellStart", "ShellWrite", "ShellClose"],
        "permission": {"mode": "default", "deny": ["Bash(rm:*)"]},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "ShellStart", "input": {"command": "rm -rf x"}}]},
            {"text": "done"}
        ]}},
    });
    let session = support::create_session(&server, "hostile", &config).await;
    let events =
        support::prompt_and_wait(&server, "hostile", &session, "go", Duration::from_secs(60)).await;
    let result = first_tool_result(&events);
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["code"], "PERMISSION_DENIED", "{result}");
    let content = result["content"].to_string();
    assert!(content.contains("Bash(rm:*)"), "{content}");
    support::assert_still_serves(&server).await;
}
