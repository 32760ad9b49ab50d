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
    let result = support::first_tool_result(&events);
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(result["code"], "PERMISSION_DENIED", "{result}");
    let content = result["content"].to_string();
    assert!(content.contains("Bash(rm:*)"), "{content}");
    support::assert_still_serves(&server).await;
}

/// The results of a scripted run of `calls` (one turn) under `permission`, in call order.
async fn results_of(
    server: &crate::server::ServerProcess,
    permission: Value,
    calls: Value,
) -> Vec<Value> {
    let config = json!({
        "tools": ["ShellStart", "ShellWrite"],
        "permission": permission,
        "model": {"script": {"turns": [{"tool_calls": calls}, {"text": "done"}]}},
    });
    let session = support::create_session(server, "hostile", &config).await;
    let events =
        support::prompt_and_wait(server, "hostile", &session, "go", Duration::from_secs(60)).await;
    events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["payload"]["result"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_writes_are_judged_by_bash_rules_before_the_shell_is_looked_up() {
    let server = support::start_server(&[]).await;
    // A denied line is refused by the rule, before the (unknown) shell is even looked up.
    let results = results_of(
        &server,
        json!({"mode": "default", "deny": ["Bash(rm:*)"]}),
        json!([{"name": "ShellWrite", "input": {"shell_id": "shell_x", "command": "cd / && rm -rf x"}}]),
    )
    .await;
    assert_eq!(results[0]["code"], "PERMISSION_DENIED", "{}", results[0]);
    assert!(
        results[0]["content"].to_string().contains("Bash(rm:*)"),
        "{}",
        results[0]
    );
    // A Bash allow rule covers the line: the call passes the permission step and reaches the
    // tool, which reports the unknown shell. Without the rule the same call needs approval,
    // which dontAsk refuses.
    let write =
        json!([{"name": "ShellWrite", "input": {"shell_id": "shell_x", "command": "git status"}}]);
    let allowed = results_of(
        &server,
        json!({"mode": "dontAsk", "allow": ["Bash(git status:*)"]}),
        write.clone(),
    )
    .await;
    assert_eq!(allowed[0]["code"], "SHELL_NOT_FOUND", "{}", allowed[0]);
    let asked = results_of(&server, json!({"mode": "dontAsk"}), write).await;
    assert_eq!(asked[0]["code"], "PERMISSION_DENIED", "{}", asked[0]);
    support::assert_still_serves(&server).await;
}
