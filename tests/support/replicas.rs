//! Helpers of the two-replica tests (tests/replicas_workspace.rs, tests/replicas_snapshot.rs):
//! creating a prompted session and reading a call's result from the events. Included with
//! `#[path]` next to `server.rs` (as `mod server`).
#![allow(dead_code)]

use super::server::{ServerProcess, of_kind, summarize};
use serde_json::{Value, json};

/// Creates a session with `config` and prompts it; returns (session id, run id).
pub async fn create_and_prompt(
    server: &ServerProcess,
    token: &str,
    config: &Value,
) -> (String, String) {
    let (status, session) = server.post("/v1/sessions", token, config).await;
    assert_eq!(status, 201, "create session: {session}");
    let id = session["id"].as_str().expect("session id").to_owned();
    let (status, accepted) = server
        .post(
            &format!("/v1/sessions/{id}/prompts"),
            token,
            &json!({ "text": "go" }),
        )
        .await;
    assert_eq!(status, 202, "prompt: {accepted}");
    (id, accepted["run_id"].as_str().expect("run id").to_owned())
}

/// The payload of the first `tool_result` event of a call to `tool`.
pub fn result_event_of<'a>(events: &'a [Value], tool: &str) -> &'a Value {
    nth_result_event_of(events, tool, 0)
}

/// The payload of the `tool_result` event of the `n`th call (from 0) to `tool`.
pub fn nth_result_event_of<'a>(events: &'a [Value], tool: &str, n: usize) -> &'a Value {
    let call = of_kind(events, "tool_call")
        .into_iter()
        .filter(|e| e["payload"]["name"] == tool)
        .nth(n)
        .unwrap_or_else(|| panic!("no call {n} to {tool}\n{}", summarize(events)));
    let id = &call["payload"]["tool_use_id"];
    of_kind(events, "tool_result")
        .into_iter()
        .find(|e| &e["payload"]["tool_use_id"] == id)
        .map(|e| &e["payload"])
        .unwrap_or_else(|| panic!("no result for {tool}\n{}", summarize(events)))
}

/// The result block of the first `tool_result` event of a call to `tool`.
pub fn result_of(events: &[Value], tool: &str) -> Value {
    result_event_of(events, tool)["result"].clone()
}
