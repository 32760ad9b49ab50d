//! Crash recovery with the real binary: `norma serve` runs as a child process, is killed with
//! SIGKILL in the middle of a run, and is restarted on the same port, data dir and database
//! with the same replica id. The restarted process must resume the run on its own:
//!
//! - (a) killed while the model is streaming: the model call is issued again, the run ends with
//!   `end_turn`, the prompt is in history once and nothing of the half stream is;
//! - (b) killed while a tool call waits for approval: the same approval is still pending on the
//!   new process, answering it runs the tool exactly once;
//! - (c) killed while a tool runs: the call gets an `INTERRUPTED` result and is not run again;
//! - (d) killed while a subagent runs a slow tool: the subagent run resumes like any run (its
//!   own call `INTERRUPTED`), and the parent's `Agent` call re-attaches to it (no
//!   `INTERRUPTED` for the parent) and gets its final answer; the resumed parent's usage
//!   counts the subagent's recorded calls;
//! - (e) killed with a tenant's SSE streams open up to its cap: the restarted process (same
//!   replica id, whose heartbeat renews that id's holds) does not count the dead process's
//!   streams; the tenant opens as many as its cap again, and no more.
//!
//! Every case runs on SQLite (the default file in the data dir) and on Postgres (a fresh
//! database; skipped loudly when Postgres is unreachable outside CI, failing in CI). In every
//! case the transcript's seqs are 1..=N with no gap and no duplicate.

#[path = "support/fake_llm.rs"]
mod fake_llm;
#[path = "support/pg.rs"]
mod pg;
#[path = "support/server.rs"]
mod server;

use std::time::Duration;

use fake_llm::{FakeLlm, Reply, anthropic as an};
use serde_json::{Value, json};
use server::{
    ServerProcess, assert_contiguous, count, of_kind, processes_running, read_lines,
    single_terminal_reason, summarize,
};

const TENANT: &str = "acme";
const REPLICA: &str = "crash-replica-1";
/// Longer than any wait below: a resumed run that only moves once its lease expired fails.
const LEASE_SECONDS: &str = "120";
/// Bound for a resumed run to reach `terminal`.
const FINISH_WITHIN: Duration = Duration::from_secs(45);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// A not-yet-started server on `backend` with the fixed replica id; `None` when Postgres is
/// skipped (outside CI only).
async fn server_on(backend: Backend) -> Option<ServerProcess> {
    let database_url = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(pg::fresh_pg_database().await?),
    };
    Some(
        ServerProcess::new(database_url)
            .env("NORMA_REPLICA_ID", REPLICA)
            .env("NORMA_RUN_LEASE_SECONDS", LEASE_SECONDS),
    )
}

macro_rules! on_both_backends {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let server = server_on(Backend::Sqlite).await.expect("sqlite server");
                $case(server).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(server) = server_on(Backend::Postgres).await {
                    $case(server).await;
                }
            }
        }
    )*};
}

on_both_backends! {
    kill_during_model_stream => kill_during_model_stream;
    kill_while_parked_on_approval => kill_while_parked_on_approval;
    kill_during_slow_tool => kill_during_slow_tool;
    kill_during_subagent_run => kill_during_subagent_run;
    kill_with_streams_open => kill_with_streams_open;
}

/// The embedded SQLite store is one process's alone: a second server on the same data dir
/// (the same SQLite file) is refused at start-up with an error that says why, after the busy
/// timeout, while the first keeps serving; once the first is killed, the file is free at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_sqlite_file_is_refused() {
    let mut first = server_on(Backend::Sqlite).await.expect("sqlite server");
    first.start().await;
    let token = first.token(TENANT);
    let (status, before) = first.post("/v1/sessions", &token, &json!({})).await;
    assert_eq!(status, 201, "{before}");

    let mut second = ServerProcess::new(None)
        .env("NORMA_DATA_DIR", first.data_dir().display().to_string())
        .env("NORMA_REPLICA_ID", "crash-replica-2");
    let (exit, log) = second.start_expecting_refusal().await;
    assert!(!exit.success(), "the second process started: {log}");
    assert!(log.contains("is in use by another process"), "{log}");

    // The first is untouched: it serves, and what it stored is still there.
    let (status, after) = first.post("/v1/sessions", &token, &json!({})).await;
    assert_eq!(status, 201, "{after}");
    let (status, listed) = first.get("/v1/sessions", &token).await;
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|session| session["id"].as_str())
        .collect();
    for session in [&before, &after] {
        assert!(ids.contains(&session["id"].as_str().unwrap()), "{listed}");
    }

    // A killed process leaves no lock behind.
    first.kill();
    second.start().await;
    let (status, found) = second
        .get(
            &format!("/v1/sessions/{}", before["id"].as_str().unwrap()),
            &second.token(TENANT),
        )
        .await;
    assert_eq!(status, 200, "{found}");
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// `GET /v1/sessions/{id}/runs/{run_id}`; asserts 200 and the record's ids.
async fn run_record(server: &ServerProcess, token: &str, session: &str, run: &str) -> Value {
    let (status, record) = server
        .get(&format!("/v1/sessions/{session}/runs/{run}"), token)
        .await;
    assert_eq!(status, 200, "GET run {run}: {record}");
    assert_eq!(record["id"], run, "run record: {record}");
    assert_eq!(record["session_id"], session, "run record: {record}");
    record
}

/// Polls the run until its status is final (completed, failed or cancelled), bounded.
async fn wait_run_final(server: &ServerProcess, token: &str, session: &str, run: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let record = run_record(server, token, session, run).await;
        let status = record["status"].as_str().unwrap_or_default().to_owned();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {run} still {status} after its terminal event: {record}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The single `run_resumed` event of the run.
fn run_resumed<'a>(events: &'a [Value], run: &str) -> &'a Value {
    let resumed = of_kind(events, "run_resumed");
    assert_eq!(
        resumed.len(),
        1,
        "exactly one run_resumed event\n{}",
        summarize(events)
    );
    assert_eq!(resumed[0]["payload"]["run_id"], run, "{}", resumed[0]);
    &resumed[0]["payload"]
}

/// Every `tool_result` block in history for `tool_use_id`.
fn history_results(messages: &[Value], tool_use_id: &str) -> Vec<Value> {
    messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result" && b["tool_use_id"] == tool_use_id)
        .collect()
}

/// How many user text blocks in history are exactly `text`.
fn user_texts(messages: &[Value], text: &str) -> usize {
    messages
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "text" && b["text"] == text)
        .count()
}

// ---------------------------------------------------------------------------------------------
// (a) Killed during a model stream
// ---------------------------------------------------------------------------------------------

const STORY_PROMPT: &str = "tell me a long story";
const RECOVERED: &str = "recovered answer after the restart";

async fn kill_during_model_stream(server: ServerProcess) {
    let fake = FakeLlm::start().await;
    // First answer: a slow stream (300 deltas, 100 ms apart) that the crash cuts short.
    fake.push(Reply::slow_text_stream(300, Duration::from_millis(100)));
    // Second answer (the re-issued call after the restart): a whole text turn.
    fake.push(Reply::sse(an::text_turn(RECOVERED)));

    let mut server = server
        .env("NORMA_PROVIDER__KIND", "anthropic")
        .env("NORMA_PROVIDER__BASE_URL", fake.url())
        .env("NORMA_PROVIDER__MODEL", "claude-test")
        .env("NORMA_PROVIDER__API_KEY", "test-key-not-secret")
        // The fake provider listens on loopback: the operator's private allow-list.
        .env("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS", "[\"127.0.0.0/8\"]");
    server.start().await;
    let token = server.token(TENANT);
    let (id, run) = server
        .session_with_prompt(&token, &json!({"title": "stream"}), STORY_PROMPT)
        .await;

    let before = server
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "some assistant_delta events",
            |e| count(e, "assistant_delta") >= 3,
        )
        .await;
    assert_eq!(count(&before, "terminal"), 0, "{}", summarize(&before));
    assert_eq!(
        run_record(&server, &token, &id, &run).await["status"],
        "running"
    );
    server.kill();
    assert_eq!(
        fake.request_count(),
        1,
        "one model request before the crash"
    );

    server.start().await;
    let events = server
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal after restart", |e| {
            count(e, "terminal") >= 1
        })
        .await;
    assert_eq!(single_terminal_reason(&events), "end_turn");
    assert_contiguous(&events);
    let resumed = run_resumed(&events, &run);
    assert_eq!(resumed["interrupted"], json!([]), "{resumed}");
    assert_eq!(resumed["rerun"], json!([]), "{resumed}");

    // The model call was issued again, exactly once, with the prompt once and no half stream.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "the fake saw exactly 2 requests");
    let resent = requests[1].body["messages"].to_string();
    assert_eq!(
        resent.matches(STORY_PROMPT).count(),
        1,
        "prompt once in the re-issued request: {resent}"
    );
    assert!(
        !resent.contains("tick"),
        "no half-streamed text in the re-issued request: {resent}"
    );

    let messages = server.all_messages(&token, &id).await;
    assert_eq!(
        user_texts(&messages, STORY_PROMPT),
        1,
        "prompt in history exactly once: {messages:#?}"
    );
    let history = serde_json::to_string(&messages).unwrap();
    assert!(
        !history.contains("tick"),
        "no half-streamed text in history: {history}"
    );
    assert!(
        history.contains(RECOVERED),
        "the re-issued answer is in history"
    );

    let record = wait_run_final(&server, &token, &id, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
}

// ---------------------------------------------------------------------------------------------
// (b) Killed while parked on an approval
// ---------------------------------------------------------------------------------------------

async fn kill_while_parked_on_approval(mut server: ServerProcess) {
    server.start().await;
    let token = server.token(TENANT);
    let config = json!({
        "title": "approval",
        "model": {"script": {"turns": [
            {"text": "Asking first.", "tool_calls": [
                {"name": "Bash", "input": {"command": "echo approved >> marker"}}
            ]},
            {"text": "done: {{last_tool_result}}"}
        ]}}
    });
    let (id, run) = server
        .session_with_prompt(&token, &config, "append a line")
        .await;
    let marker = server.workspace(TENANT, &id).join("marker");

    let before = server
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "approval_requested",
            |e| count(e, "approval_requested") == 1,
        )
        .await;
    let tool_use_id = of_kind(&before, "tool_call")[0]["payload"]["tool_use_id"]
        .as_str()
        .expect("tool_use_id")
        .to_owned();
    let (status, pending) = server
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await;
    assert_eq!(status, 200, "{pending}");
    let pending = pending["approvals"].as_array().cloned().unwrap_or_default();
    assert_eq!(pending.len(), 1, "one pending approval: {pending:?}");
    let approval_id = pending[0]["id"].as_str().expect("approval id").to_owned();
    assert_eq!(
        run_record(&server, &token, &id, &run).await["status"],
        "running"
    );
    server.kill();
    assert!(
        read_lines(&marker).is_empty(),
        "nothing ran before the crash"
    );

    server.start().await;
    let resumed_events = server
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "run_resumed after restart",
            |e| count(e, "run_resumed") >= 1,
        )
        .await;
    let resumed = run_resumed(&resumed_events, &run);
    assert_eq!(resumed["interrupted"], json!([]), "{resumed}");
    assert_eq!(resumed["rerun"], json!([tool_use_id]), "{resumed}");

    // The new process shows the same approval, still pending, and no second one.
    let (status, pending) = server
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await;
    assert_eq!(status, 200, "{pending}");
    let pending = pending["approvals"].as_array().cloned().unwrap_or_default();
    assert_eq!(pending.len(), 1, "one pending approval: {pending:?}");
    assert_eq!(pending[0]["id"], approval_id.as_str(), "the same approval");
    let (status, all) = server
        .get(&format!("/v1/sessions/{id}/approvals"), &token)
        .await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        all["approvals"].as_array().map(Vec::len),
        Some(1),
        "the pending approval was reused, not asked again: {all}"
    );

    let (status, answer) = server
        .post(
            &format!("/v1/sessions/{id}/approvals/{approval_id}"),
            &token,
            &json!({"decision": "allow", "reason": "fine after the restart"}),
        )
        .await;
    assert_eq!(status, 200, "answer on the new process: {answer}");

    let events = server
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal after approval", |e| {
            count(e, "terminal") >= 1
        })
        .await;
    assert_eq!(single_terminal_reason(&events), "end_turn");
    assert_contiguous(&events);

    // The tool ran exactly once, and its one result is a success.
    assert_eq!(read_lines(&marker), vec!["approved".to_owned()]);
    let messages = server.all_messages(&token, &id).await;
    let results = history_results(&messages, &tool_use_id);
    assert_eq!(results.len(), 1, "one tool_result in history: {results:?}");
    assert_ne!(results[0]["is_error"], true, "{}", results[0]);
    let result_events: Vec<&Value> = of_kind(&events, "tool_result")
        .into_iter()
        .filter(|e| e["payload"]["tool_use_id"] == tool_use_id.as_str())
        .collect();
    assert_eq!(result_events.len(), 1, "one tool_result event");
    assert_eq!(
        count(&events, "tool_executing"),
        1,
        "{}",
        summarize(&events)
    );

    let record = wait_run_final(&server, &token, &id, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
}

// ---------------------------------------------------------------------------------------------
// (c) Killed during a slow tool
// ---------------------------------------------------------------------------------------------

async fn kill_during_slow_tool(mut server: ServerProcess) {
    server.start().await;
    let token = server.token(TENANT);
    // A duration unique to this test, to find the command's process in /proc.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let sleep = format!("sleep 20.{nanos:09}");
    let config = json!({
        "title": "slow tool",
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [
                {"name": "Bash", "input": {"command": format!("echo ran >> marker; {sleep}; echo late >> marker")}}
            ]},
            {"text": "after the interruption"}
        ]}}
    });
    let (id, run) = server
        .session_with_prompt(&token, &config, "run the slow thing")
        .await;
    let marker = server.workspace(TENANT, &id).join("marker");

    let before = server
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "tool_executing",
            |e| count(e, "tool_executing") == 1,
        )
        .await;
    let executing = &of_kind(&before, "tool_executing")[0]["payload"];
    assert_eq!(executing["name"], "Bash", "{executing}");
    let tool_use_id = executing["tool_use_id"]
        .as_str()
        .expect("tool_use_id")
        .to_owned();
    // The command really started (its first line is written) before the crash.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while read_lines(&marker).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool never wrote its marker\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        run_record(&server, &token, &id, &run).await["status"],
        "running"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !processes_running(&sleep) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started sleeping"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill();
    // Nothing the command started outlives the server.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while processes_running(&sleep) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sandboxed command survived the server"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    server.start().await;
    let events = server
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal after restart", |e| {
            count(e, "terminal") >= 1
        })
        .await;
    assert_eq!(single_terminal_reason(&events), "end_turn");
    assert_contiguous(&events);
    let resumed = run_resumed(&events, &run);
    assert_eq!(resumed["interrupted"], json!([tool_use_id]), "{resumed}");
    assert_eq!(resumed["rerun"], json!([]), "{resumed}");

    // The interrupted call has one INTERRUPTED result, in history and as an event.
    let messages = server.all_messages(&token, &id).await;
    let results = history_results(&messages, &tool_use_id);
    assert_eq!(results.len(), 1, "one tool_result in history: {results:?}");
    assert_eq!(results[0]["is_error"], true, "{}", results[0]);
    assert_eq!(results[0]["code"], "INTERRUPTED", "{}", results[0]);
    let result_events: Vec<&Value> = of_kind(&events, "tool_result")
        .into_iter()
        .filter(|e| e["payload"]["tool_use_id"] == tool_use_id.as_str())
        .collect();
    assert_eq!(
        result_events.len(),
        1,
        "one tool_result event\n{}",
        summarize(&events)
    );
    assert_eq!(
        result_events[0]["payload"]["result"]["code"], "INTERRUPTED",
        "{}",
        result_events[0]
    );
    assert_eq!(
        count(&events, "tool_executing"),
        1,
        "not executed again\n{}",
        summarize(&events)
    );

    // It was not run again.
    assert_eq!(read_lines(&marker), vec!["ran".to_owned()]);

    let record = wait_run_final(&server, &token, &id, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
}

// ---------------------------------------------------------------------------------------------
// (d) Killed while a subagent runs
// ---------------------------------------------------------------------------------------------

async fn kill_during_subagent_run(mut server: ServerProcess) {
    server.start().await;
    let token = server.token(TENANT);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let sleep = format!("sleep 20.{nanos:09}");
    let config = json!({
        "title": "subagent crash",
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Agent", "input": {"subagent_type": "worker", "prompt": "work"}}]},
            {"text": "parent after restart"}
        ]}},
        "agents": {"worker": {
            "description": "Runs commands",
            "tools": ["Bash"],
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Bash", "input": {"command": format!("echo ran >> marker; {sleep}")}}]},
                {"text": "worker finished"}
            ]}}
        }}
    });
    let (id, run) = server
        .session_with_prompt(&token, &config, "delegate")
        .await;
    let nested_executing = |e: &[Value]| {
        e.iter()
            .any(|e| e["type"] == "subagent_event" && e["payload"]["kind"] == "tool_executing")
    };
    let before = server
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "the subagent's call executing",
            nested_executing,
        )
        .await;
    let started = of_kind(&before, "subagent_started")[0]["payload"].clone();
    let agent_call = started["tool_use_id"].as_str().unwrap().to_owned();
    let child = started["session_id"].as_str().unwrap().to_owned();
    let child_run = started["run_id"].as_str().unwrap().to_owned();
    // The subagent works in the parent's workspace.
    let marker = server.workspace(TENANT, &id).join("marker");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while read_lines(&marker).is_empty() || !processes_running(&sleep) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the subagent's command never started\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    server.kill();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while processes_running(&sleep) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sandboxed command survived the server"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    server.start().await;
    let events = server
        .wait_for_events(
            &token,
            &id,
            FINISH_WITHIN,
            "parent terminal after restart",
            |e| count(e, "terminal") >= 1,
        )
        .await;
    assert_eq!(single_terminal_reason(&events), "end_turn");
    assert_contiguous(&events);
    // The parent's Agent call was re-attached, not interrupted.
    let resumed = run_resumed(&events, &run);
    assert_eq!(resumed["interrupted"], json!([]), "{resumed}");
    assert_eq!(resumed["rerun"], json!([agent_call]), "{resumed}");
    let starts = of_kind(&events, "subagent_started");
    assert_eq!(starts.len(), 2, "{}", summarize(&events));
    assert_eq!(starts[1]["payload"]["reattached"], true, "{}", starts[1]);
    assert_eq!(starts[1]["payload"]["session_id"], child.as_str());
    assert_eq!(starts[1]["payload"]["run_id"], child_run.as_str());
    // Each child event is nested once, across the restart.
    let mut nested: Vec<i64> = of_kind(&events, "subagent_event")
        .iter()
        .map(|e| e["payload"]["seq"].as_i64().unwrap())
        .collect();
    let all = nested.len();
    nested.sort_unstable();
    nested.dedup();
    assert_eq!(nested.len(), all, "{}", summarize(&events));
    // The parent's result is the subagent's final answer.
    let messages = server.all_messages(&token, &id).await;
    let results = history_results(&messages, &agent_call);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["content"], "worker finished", "{}", results[0]);

    // The subagent's run resumed like any run: its own call INTERRUPTED, not run again.
    let own = server.all_events(&token, &child).await;
    assert_contiguous(&own);
    assert_eq!(single_terminal_reason(&own), "end_turn");
    let child_resumed = run_resumed(&own, &child_run);
    assert_eq!(
        child_resumed["interrupted"].as_array().map(Vec::len),
        Some(1),
        "{child_resumed}"
    );
    assert_eq!(read_lines(&marker), vec!["ran".to_owned()]);
    let record = wait_run_final(&server, &token, &id, &run).await;
    assert_eq!(record["status"], "completed", "{record}");
    // The resumed parent's usage counts the subagent's recorded calls (its run's ledger) into
    // its own, in the run record and in its `usage` event.
    let child_calls =
        &run_record(&server, &token, &child, &child_run).await["usage"]["model_calls"];
    for usage in [&record["usage"], &of_kind(&events, "usage")[0]["payload"]] {
        let part = &usage["subagents"];
        assert_eq!(
            (&part["runs"], &part["model_calls"]),
            (&json!(1), child_calls),
            "{usage}"
        );
        assert!(
            usage["model_calls"].as_u64() > part["model_calls"].as_u64(),
            "{usage}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (e) Killed with streams open
// ---------------------------------------------------------------------------------------------

/// Opens streams until the cap (2), and checks the next is refused with `TENANT_LIMIT`.
async fn fill_stream_cap(
    server: &ServerProcess,
    token: &str,
    session: &str,
) -> Vec<reqwest::Response> {
    let mut open = Vec::new();
    for n in 0..2 {
        let response = server.open_stream(token, session).await;
        assert_eq!(response.status(), 200, "stream {n}\n{}", server.logs());
        open.push(response);
    }
    let refused = server.open_stream(token, session).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["details"],
        json!({"limit": "sse_streams", "max": 2}),
        "{body}"
    );
    open
}

async fn kill_with_streams_open(server: ServerProcess) {
    let mut server = server.env("NORMA_LIMITS__SSE_STREAMS", "2");
    server.start().await;
    let token = server.token(TENANT);
    let (status, created) = server.post("/v1/sessions", &token, &json!({})).await;
    assert_eq!(status, 201, "{created}");
    let session = created["id"].as_str().unwrap().to_owned();
    let before = fill_stream_cap(&server, &token, &session).await;
    server.kill();
    drop(before);
    // Within the holds' lease (the run lease, 120 s): without the release at start-up, the
    // dead process's two streams would still count, renewed by the new one's heartbeat.
    server.start().await;
    let after = fill_stream_cap(&server, &token, &session).await;
    drop(after);
}
