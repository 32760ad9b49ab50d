//! Tool budgets and file kinds (issue "hostile tenants": every tool has a size budget, only
//! regular files are opened, bounded pattern compilation, bounded scripted expansion). Scripted
//! model turns make the model call the tools with hostile inputs.

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::summarize;
use crate::support::{
    assert_still_serves, create_session, prompt_and_wait, start_server, start_server_with_model,
};

const ATTACKER: &str = "attacker";
const WITHIN: Duration = Duration::from_secs(60);

/// The `code` of every tool_result event, in order (`"ok"` for a success).
fn tool_codes(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| {
            e["payload"]["result"]["code"]
                .as_str()
                .unwrap_or("ok")
                .to_owned()
        })
        .collect()
}

fn terminal(events: &[Value]) -> &Value {
    events
        .iter()
        .rev()
        .find(|e| e["type"] == "terminal")
        .expect("terminal event")
}

/// A session in bypass mode playing `turns`, then one final text turn.
async fn scripted_session(server: &crate::server::ServerProcess, mut turns: Vec<Value>) -> String {
    turns.push(json!({"text": "done"}));
    let config = json!({
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": turns}},
    });
    create_session(server, ATTACKER, &config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_edit_doubling_is_refused_before_allocating() {
    let server = start_server(&[]).await;
    let doubling = json!({"old_string": "a", "new_string": "aa", "replace_all": true});
    let session = scripted_session(
        &server,
        vec![
            json!({"tool_calls": [{"name": "Write", "input": {"file_path": "a.txt", "content": "a"}}]}),
            json!({"tool_calls": [{"name": "MultiEdit", "input": {"file_path": "a.txt", "edits": vec![doubling.clone(); 40]}}]}),
            json!({"tool_calls": [{"name": "Read", "input": {"file_path": "a.txt"}}]}),
        ],
    )
    .await;
    let events = prompt_and_wait(&server, ATTACKER, &session, "go", WITHIN).await;
    assert_eq!(
        tool_codes(&events),
        ["ok", "FILE_TOO_LARGE", "ok"],
        "{}",
        summarize(&events)
    );
    assert_eq!(terminal(&events)["payload"]["reason"], "end_turn");
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_fifo_made_by_bash_returns_not_a_regular_file() {
    let server = start_server(&[]).await;
    let session = scripted_session(
        &server,
        vec![
            json!({"tool_calls": [{"name": "Bash", "input": {"command": "mkfifo p && echo made"}}]}),
            json!({"tool_calls": [
                {"name": "Read", "input": {"file_path": "p"}},
                {"name": "Grep", "input": {"pattern": "x", "path": "p"}},
                {"name": "Edit", "input": {"file_path": "p", "old_string": "a", "new_string": "b"}},
                {"name": "Write", "input": {"file_path": "p", "content": "x"}}
            ]}),
            json!({"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}),
        ],
    )
    .await;
    let events = prompt_and_wait(&server, ATTACKER, &session, "go", WITHIN).await;
    let codes = tool_codes(&events);
    assert_eq!(codes[0], "ok", "mkfifo: {}", summarize(&events));
    assert_eq!(
        codes[1..5],
        ["NOT_A_REGULAR_FILE"; 4],
        "{}",
        summarize(&events)
    );
    assert_eq!(codes[5], "ok");
    assert_eq!(terminal(&events)["payload"]["reason"], "end_turn");
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_placeholder_expansion_ends_the_run_with_a_code() {
    let server = start_server(&[]).await;
    let config = json!({
        "model": {"script": {"turns": [{"text": "{{last_user_text}}".repeat(50)}]}},
    });
    let session = create_session(&server, ATTACKER, &config).await;
    let prompt = "p".repeat(20_000);
    let events = prompt_and_wait(&server, ATTACKER, &session, &prompt, WITHIN).await;
    let end = terminal(&events);
    assert_eq!(end["payload"]["reason"], "error", "{}", summarize(&events));
    assert_eq!(end["payload"]["code"], "MODEL_OUTPUT_TOO_LARGE");
    let deltas = events
        .iter()
        .filter(|e| e["type"] == "assistant_delta")
        .count();
    assert_eq!(deltas, 0, "nothing of the expansion was streamed");
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catastrophic_patterns_are_refused_at_compilation() {
    let server = start_server(&[]).await;
    let nested_braces = format!("{}a{}", "{a,".repeat(20), "}".repeat(20));
    let session = scripted_session(
        &server,
        vec![json!({"tool_calls": [
            {"name": "Grep", "input": {"pattern": "(a{1000}){1000}"}},
            {"name": "Grep", "input": {"pattern": "(\\w{100}){100}"}},
            {"name": "Glob", "input": {"pattern": nested_braces}},
            {"name": "Grep", "input": {"pattern": "a", "glob": "*".repeat(5_000)}}
        ]})],
    )
    .await;
    let events = prompt_and_wait(&server, ATTACKER, &session, "go", WITHIN).await;
    assert_eq!(
        tool_codes(&events),
        ["PATTERN_TOO_COMPLEX"; 4],
        "{}",
        summarize(&events)
    );
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_model_endpoint_cannot_grow_a_response_without_limit() {
    use crate::fake_llm::{FakeLlm, Reply, anthropic as an};
    let fake = FakeLlm::start().await;
    // One event line that never ends (past the 32 MiB body budget).
    fake.push(Reply::sse(vec![
        an::message_start(1),
        format!("data: {}", "z".repeat(33 * 1024 * 1024)),
    ]));
    // A response with more tool calls than one response may make.
    let mut frames = vec![an::message_start(1)];
    for index in 0..65 {
        frames.push(an::block_start(
            index,
            json!({"type": "tool_use", "id": format!("toolu_{index}"), "name": "LS", "input": {}}),
        ));
        frames.push(an::json_delta(index, "{}"));
        frames.push(an::block_stop(index));
    }
    frames.push(an::message_delta("tool_use", 1));
    frames.push(an::message_stop());
    fake.push(Reply::sse(frames));
    let url = fake.url();
    let server = start_server_with_model(&url).await;
    let session = create_session(
        &server,
        ATTACKER,
        &json!({"permission": {"mode": "bypass"}}),
    )
    .await;
    for attempt in ["endless line", "65 tool calls"] {
        let events = prompt_and_wait(&server, ATTACKER, &session, "go", WITHIN).await;
        let end = terminal(&events);
        assert_eq!(
            end["payload"]["reason"],
            "error",
            "{attempt}: {}",
            summarize(&events)
        );
        assert_eq!(
            end["payload"]["code"], "MODEL_OUTPUT_TOO_LARGE",
            "{attempt}"
        );
        // Calls start while the response streams; the 65th never does.
        let ran = tool_codes(&events);
        assert!(ran.len() <= 64, "{attempt}: {} tool results", ran.len());
    }
    assert_still_serves(&server).await;
}
