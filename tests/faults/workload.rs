//! The work the campaign puts under fault: scripted sessions (no model server needed) of a few
//! shapes chosen by a seeded RNG, their prompts, an SSE witness per session, and a driver that
//! answers approvals until every accepted run ended (bounded).
//!
//! Every tool call of a workload appends its own marker line to `calls.log` in the session's
//! workspace when its code starts, so a call that ran twice shows as a repeated line.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::invariants::Witness;
use crate::server::ServerProcess;

pub const TENANT: &str = "acme";

/// The shapes of session the campaign runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Three model turns, two with tool calls (Bash with a short sleep, Bash + Write), in
    /// bypass mode: tool_call, tool_started, tool_executing, tool_result, tool_results, continue.
    Tools,
    /// One Bash call that asks for approval (answered by the driver or a webhook), then text:
    /// permission_decision, approval_requested, approval_decided (and run_parked when slow).
    Approval,
    /// Like [`Shape::Approval`], answered by the session's approval webhook (never over REST
    /// by the driver).
    Webhook,
    /// A long text answer streamed in many deltas: assistant_delta, assistant_message.
    Text,
}

impl Shape {
    pub fn pick(rng: &mut StdRng) -> Self {
        match rng.gen_range(0..3) {
            0 => Self::Tools,
            1 => Self::Approval,
            _ => Self::Text,
        }
    }
}

/// The session config of a shape; `sleep` is the seconds each Bash call sleeps, `webhook` an
/// approval webhook `{"url", "secret"}` for [`Shape::Approval`].
pub fn session_config(shape: Shape, sleep: f64, webhook: Option<&Value>) -> Value {
    let bash = |marker: &str| {
        json!({"name": "Bash", "input": {"command":
            format!("echo {marker} >> calls.log; sleep {sleep}; echo {marker}-done")}})
    };
    let long_text = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    match shape {
        Shape::Tools => json!({
            "title": "fault tools",
            "permission": {"mode": "bypass"},
            "model": {"script": {"turns": [
                {"text": "first a command", "tool_calls": [bash("call-1")]},
                {"text": "then two more", "tool_calls": [
                    bash("call-2"),
                    {"name": "Write", "input": {"file_path": "note.txt", "content": "written"}}
                ]},
                {"text": "all done: {{last_tool_result}}"}
            ]}}
        }),
        Shape::Approval | Shape::Webhook => {
            let mut config = json!({
                "title": "fault approval",
                "model": {"script": {"turns": [
                    {"text": "asking first", "tool_calls": [bash("call-approved")]},
                    {"text": "done: {{last_tool_result}}"}
                ]}}
            });
            if let Some(webhook) = webhook {
                config["approvals"] = json!({ "webhook": webhook });
            }
            config
        }
        Shape::Text => json!({
            "title": "fault text",
            "model": {"script": {"turns": [{"text": long_text}]}}
        }),
    }
}

/// One session under test: its id, the runs it accepted, and its SSE witness.
pub struct Tracked {
    pub id: String,
    pub shape: Shape,
    pub runs: Vec<String>,
    pub witness: Witness,
}

/// Creates a session of `shape` on `server`, starts its SSE witness (following `stream_urls`,
/// base URLs tried in turn), and sends one prompt; panics unless both are accepted.
pub async fn start_session(
    server: &ServerProcess,
    token: &str,
    config: &Value,
    shape: Shape,
    stream_urls: &[String],
) -> Tracked {
    let (status, session) = server.post("/v1/sessions", token, config).await;
    assert_eq!(status, 201, "create session: {session}\n{}", server.logs());
    let id = session["id"].as_str().expect("session id").to_owned();
    let witness = Witness::follow(stream_urls.to_vec(), token, &id, 1);
    let run = prompt(server, token, &id).await;
    Tracked {
        id,
        shape,
        runs: vec![run],
        witness,
    }
}

/// Sends the prompt `go` to a session; the accepted run's id (panics unless `202`).
pub async fn prompt(server: &ServerProcess, token: &str, session: &str) -> String {
    let (status, accepted) = server
        .post(
            &format!("/v1/sessions/{session}/prompts"),
            token,
            &json!({ "text": "go" }),
        )
        .await;
    assert_eq!(status, 202, "prompt: {accepted}\n{}", server.logs());
    accepted["run_id"].as_str().expect("run id").to_owned()
}

/// Starts `count` sessions of seeded shapes (no webhook) on `server`, each followed on
/// `stream_urls`.
pub async fn seeded_sessions(
    server: &ServerProcess,
    token: &str,
    rng: &mut StdRng,
    count: usize,
    sleep: f64,
    stream_urls: &[String],
) -> Vec<Tracked> {
    let mut tracked = Vec::new();
    for _ in 0..count {
        let shape = Shape::pick(rng);
        let config = session_config(shape, sleep, None);
        tracked.push(start_session(server, token, &config, shape, stream_urls).await);
    }
    tracked
}

/// Waits (bounded) until at least `n` sessions' streams showed `kind`.
pub async fn wait_until_seen(tracked: &[Tracked], kind: &str, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while tracked.iter().filter(|t| t.witness.count(kind) > 0).count() < n
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The shared Postgres (`host:port`) behind a fresh database URL.
pub fn upstream_of(url: &str) -> String {
    let parsed = url::Url::parse(url).unwrap();
    format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    )
}

/// A GET that tolerates an unreachable or failing server: `None` unless `200`.
pub async fn try_get(server: &ServerProcess, path: &str, token: &str) -> Option<Value> {
    let response = server
        .client
        .get(server.url(path))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    if response.status() != 200 {
        return None;
    }
    response.json().await.ok()
}

/// Answers `allow` to every pending approval of `session` through `server`; errors (an
/// unreachable store, `409` already decided) are ignored — the driver tries again.
pub async fn allow_pending(server: &ServerProcess, token: &str, session: &str) {
    let Some(page) = try_get(
        server,
        &format!("/v1/sessions/{session}/approvals?status=pending"),
        token,
    )
    .await
    else {
        return;
    };
    for approval in page["approvals"].as_array().cloned().unwrap_or_default() {
        let Some(approval_id) = approval["id"].as_str() else {
            continue;
        };
        let _ = server
            .client
            .post(server.url(&format!("/v1/sessions/{session}/approvals/{approval_id}")))
            .bearer_auth(token)
            .json(&json!({"decision": "allow", "reason": "fault campaign"}))
            .send()
            .await;
    }
}

/// Whether every accepted run of `tracked` is in a final status (read through `server`).
pub async fn all_final(server: &ServerProcess, token: &str, tracked: &Tracked) -> bool {
    for run in &tracked.runs {
        let Some(record) = try_get(
            server,
            &format!("/v1/sessions/{}/runs/{run}", tracked.id),
            token,
        )
        .await
        else {
            return false;
        };
        let status = record["status"].as_str().unwrap_or_default();
        if !["completed", "failed", "cancelled"].contains(&status) {
            return false;
        }
    }
    true
}

/// Polls until every accepted run of every session is final, at most `within`, answering the
/// pending approvals through `approver` when given (sessions answered by a webhook need none).
/// Returns how long it took, or `None` past the bound (the invariant check then says which
/// runs did not end).
pub async fn drive_to_end(
    reader: &ServerProcess,
    approver: Option<&ServerProcess>,
    token: &str,
    tracked: &[Tracked],
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let deadline = started + within;
    let mut open: Vec<&Tracked> = tracked.iter().collect();
    loop {
        let mut still = Vec::new();
        for session in open {
            if all_final(reader, token, session).await {
                continue;
            }
            if let Some(approver) = approver
                && session.shape == Shape::Approval
            {
                allow_pending(approver, token, &session.id).await;
            }
            still.push(session);
        }
        open = still;
        if open.is_empty() {
            return Some(started.elapsed());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `/readyz` until it answers 200, at most `within`; how long that took, or `None`.
pub async fn wait_ready(server: &ServerProcess, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Ok(response) = server.client.get(server.url("/readyz")).send().await
            && response.status() == 200
        {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Prints one measured line of the campaign (shown with `--nocapture`).
pub fn report(scenario: &str, line: impl std::fmt::Display) {
    println!("[fault campaign] {scenario}: {line}");
}
