//! Graceful shutdown with the real binary: `norma serve` gets SIGTERM in the middle of a run and
//! hands the run off; another replica (on SQLite: a new process on the same data dir, started
//! after the first exited; on Postgres: a second process running all along) finishes it at once,
//! without waiting for a lease to expire (leases here last far longer than every wait).
//!
//! - a run whose model turn asked for two exclusive calls is stopped while the first runs: the
//!   first call's real result is kept (not `INTERRUPTED`, not run again), the second runs on the
//!   next replica, an SSE client gets `reconnect`, and the process exits within a bound;
//! - a stuck command past the grace period does not keep the process alive: it is killed and
//!   reports `INTERRUPTED` on the next replica;
//! - a call waiting in process for its approval parks at once: the same request stays pending
//!   and is answered on the next replica, the call runs once;
//! - a model stream in flight is abandoned at once and issued again on the next replica;
//! - a second SIGTERM during the shutdown exits at once.
//!
//! Where waiting would be the bug (an approval wait, a model stream), the grace period is
//! 600 s: only the hand-off lets the process exit within the bound.
//!
//! In every case the transcript's seqs are 1..=N with no gap and no duplicate.

#[path = "support/fake_llm.rs"]
mod fake_llm;
#[path = "support/pg.rs"]
mod pg;
#[path = "support/server.rs"]
mod server;

use std::time::Duration;

use eventsource_stream::Eventsource;
use fake_llm::{FakeLlm, Reply, anthropic as an};
use futures::StreamExt;
use serde_json::{Value, json};
use server::{
    ServerProcess, assert_contiguous, count, of_kind, processes_running, single_terminal_reason,
    summarize,
};

const TENANT: &str = "acme";
const FIRST: &str = "shutdown-replica-a";
const SECOND: &str = "shutdown-replica-b";
/// Far longer than any wait below: a run that only moves once its lease expired fails.
const LEASE_SECONDS: &str = "300";
/// Bound for the handed-off run to reach `terminal` on the next replica.
const FINISH_WITHIN: Duration = Duration::from_secs(45);
/// Bound for a SIGTERMed process to exit (grace period plus a few seconds, with slack).
const EXIT_WITHIN: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

/// The replica that gets SIGTERM, and (on Postgres) the survivor already running on the same
/// database. `None` when Postgres is skipped (outside CI only).
struct Replicas {
    first: ServerProcess,
    survivor: Option<ServerProcess>,
}

impl Replicas {
    async fn start(backend: Backend, env: &[(&str, &str)]) -> Option<Self> {
        let database_url = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(pg::fresh_pg_database().await?),
        };
        let configure = |mut server: ServerProcess, replica: &str| {
            server = server
                .env("NORMA_REPLICA_ID", replica)
                .env("NORMA_RUN_LEASE_SECONDS", LEASE_SECONDS);
            for (key, value) in env {
                server = server.env(key, *value);
            }
            server
        };
        let mut first = configure(ServerProcess::new(database_url.clone()), FIRST);
        first.start().await;
        let survivor = match database_url {
            Some(url) => {
                let mut survivor = configure(ServerProcess::new(Some(url)), SECOND);
                survivor.start().await;
                Some(survivor)
            }
            None => None,
        };
        Some(Self { first, survivor })
    }

    /// After the first replica exited: the replica that finishes the run (on SQLite a new
    /// process on the same data dir under another replica id).
    async fn next(self) -> ServerProcess {
        match self.survivor {
            Some(survivor) => survivor,
            None => {
                let mut next = self.first.env("NORMA_REPLICA_ID", SECOND);
                next.start().await;
                next
            }
        }
    }
}

macro_rules! on_both_backends {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                $case(Backend::Sqlite).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                $case(Backend::Postgres).await;
            }
        }
    )*};
}

on_both_backends! {
    sigterm_between_two_calls_hands_the_run_off => sigterm_between_two_calls;
    stuck_tool_past_the_grace_period_is_interrupted => stuck_tool_past_grace;
    approval_wait_parks_and_stays_answerable => approval_wait_parks;
    model_stream_in_flight_is_abandoned => model_stream_abandoned;
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The events of `kind` about call `tool_use_id`.
fn of_call<'a>(events: &'a [Value], kind: &str, tool_use_id: &str) -> Vec<&'a Value> {
    of_kind(events, kind)
        .into_iter()
        .filter(|e| e["payload"]["tool_use_id"] == tool_use_id)
        .collect()
}

/// The single `run_resumed` event's payload.
fn run_resumed(events: &[Value]) -> Value {
    let resumed = of_kind(events, "run_resumed");
    assert_eq!(
        resumed.len(),
        1,
        "one run_resumed event\n{}",
        summarize(events)
    );
    resumed[0]["payload"].clone()
}

/// Polls until `needle` runs (or no longer runs), bounded.
async fn wait_process(needle: &str, running: bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while processes_running(needle) != running {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process `{needle}` running: {} (wanted {running})",
            !running
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `sleep` argument unique to this test, to find the command in /proc.
fn unique_sleep(seconds: u32) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("sleep {seconds}.{nanos:09}")
}

/// Follows the session's SSE stream from the start (open once this returns, so a shutdown
/// begun afterwards finds it); resolves to the `reconnect` event's `last_event_id` (or `None`
/// if the stream ended without one).
async fn follow_until_reconnect(
    server: &ServerProcess,
    token: &str,
    session: &str,
) -> tokio::task::JoinHandle<Option<i64>> {
    let response = reqwest::Client::new()
        .get(server.url(&format!("/v1/sessions/{session}/stream")))
        .bearer_auth(token)
        .send()
        .await
        .expect("open SSE stream");
    assert_eq!(response.status(), 200);
    tokio::spawn(async move {
        let mut stream = response.bytes_stream().eventsource();
        while let Some(Ok(event)) = stream.next().await {
            if event.event == "reconnect" {
                let data: Value = serde_json::from_str(&event.data).expect("reconnect data");
                return data["last_event_id"].as_i64();
            }
        }
        None
    })
}

/// Waits (bounded) for the run's `terminal` event on `next`; asserts it ended `end_turn` with
/// contiguous seqs, and returns the transcript.
async fn finished_normally(next: &ServerProcess, token: &str, id: &str, what: &str) -> Vec<Value> {
    let events = next
        .wait_for_events(token, id, FINISH_WITHIN, what, |e| {
            count(e, "terminal") >= 1
        })
        .await;
    assert_eq!(single_terminal_reason(&events), "end_turn");
    assert_contiguous(&events);
    events
}

// ---------------------------------------------------------------------------------------------
// SIGTERM while the first of two exclusive calls runs
// ---------------------------------------------------------------------------------------------

async fn sigterm_between_two_calls(backend: Backend) {
    let Some(mut replicas) = Replicas::start(backend, &[]).await else {
        return;
    };
    let token = replicas.first.token(TENANT);
    let sleep = unique_sleep(2);
    let config = json!({
        "title": "two calls",
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [
                {"name": "Bash", "input": {"command": format!("{sleep}; echo first-done > first.txt; echo first-done")}},
                {"name": "Write", "input": {"file_path": "second.txt", "content": "second-done"}}
            ]},
            {"text": "both calls done"}
        ]}}
    });
    let (id, _run) = replicas
        .first
        .session_with_prompt(&token, &config, "go")
        .await;
    let sse = follow_until_reconnect(&replicas.first, &token, &id).await;
    let before = replicas
        .first
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "first call executing",
            |e| count(e, "tool_executing") == 1,
        )
        .await;
    let first_call = of_kind(&before, "tool_executing")[0]["payload"]["tool_use_id"]
        .as_str()
        .expect("tool_use_id")
        .to_owned();
    let second_call = of_kind(&before, "tool_call")
        .iter()
        .map(|e| {
            e["payload"]["tool_use_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .find(|id| *id != first_call)
        .expect("the second call was streamed with the first");
    wait_process(&sleep, true).await;

    let status = replicas.first.terminate(EXIT_WITHIN).await;
    assert!(status.success(), "graceful shutdown exit status: {status}");
    let reconnect = tokio::time::timeout(Duration::from_secs(5), sse)
        .await
        .expect("the SSE client saw its stream end")
        .expect("SSE task");
    assert!(
        reconnect.is_some_and(|last| last > 0),
        "the SSE client got `reconnect` with its last id: {reconnect:?}"
    );

    let next = replicas.next().await;
    let events = finished_normally(&next, &token, &id, "terminal on the next replica").await;
    assert_eq!(
        count(&events, "run_handed_off"),
        1,
        "{}",
        summarize(&events)
    );
    let resumed = run_resumed(&events);
    assert_eq!(resumed["replica"], SECOND, "{resumed}");
    assert_eq!(resumed["interrupted"], json!([]), "{resumed}");
    assert_eq!(resumed["rerun"], json!([second_call]), "{resumed}");

    // The first call ran once, to the end, and its real result was kept.
    assert_eq!(of_call(&events, "tool_executing", &first_call).len(), 1);
    let first = of_call(&events, "tool_result", &first_call);
    assert_eq!(first.len(), 1, "{}", summarize(&events));
    let first = &first[0]["payload"]["result"];
    assert_eq!(first["is_error"], false, "{first}");
    assert!(first.to_string().contains("first-done"), "{first}");
    // The second did not start before the hand-off, then ran normally.
    assert_eq!(of_call(&events, "tool_executing", &second_call).len(), 1);
    let second = of_call(&events, "tool_result", &second_call);
    assert_eq!(second.len(), 1, "{}", summarize(&events));
    assert_eq!(
        second[0]["payload"]["result"]["is_error"], false,
        "{}",
        second[0]
    );
}

// ---------------------------------------------------------------------------------------------
// A stuck command past the grace period
// ---------------------------------------------------------------------------------------------

async fn stuck_tool_past_grace(backend: Backend) {
    let Some(mut replicas) =
        Replicas::start(backend, &[("NORMA_SHUTDOWN_GRACE_SECONDS", "1")]).await
    else {
        return;
    };
    let token = replicas.first.token(TENANT);
    let sleep = unique_sleep(600);
    let config = json!({
        "title": "stuck",
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {"command": format!("{sleep}; echo never")}}]},
            {"text": "after the interruption"}
        ]}}
    });
    let (id, _run) = replicas
        .first
        .session_with_prompt(&token, &config, "go")
        .await;
    let before = replicas
        .first
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "call executing",
            |e| count(e, "tool_executing") == 1,
        )
        .await;
    let call = of_kind(&before, "tool_executing")[0]["payload"]["tool_use_id"]
        .as_str()
        .expect("tool_use_id")
        .to_owned();
    wait_process(&sleep, true).await;

    let status = replicas.first.terminate(EXIT_WITHIN).await;
    assert!(status.success(), "graceful shutdown exit status: {status}");
    // The stuck command did not outlive the shutdown.
    wait_process(&sleep, false).await;

    let next = replicas.next().await;
    let events = finished_normally(&next, &token, &id, "terminal on the next replica").await;
    let resumed = run_resumed(&events);
    assert_eq!(resumed["interrupted"], json!([call]), "{resumed}");
    let results = of_call(&events, "tool_result", &call);
    assert_eq!(results.len(), 1, "{}", summarize(&events));
    assert_eq!(
        results[0]["payload"]["result"]["code"], "INTERRUPTED",
        "{}",
        results[0]
    );
}

// ---------------------------------------------------------------------------------------------
// A second signal
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_sigterm_exits_at_once() {
    let Some(mut replicas) =
        Replicas::start(Backend::Sqlite, &[("NORMA_SHUTDOWN_GRACE_SECONDS", "600")]).await
    else {
        return;
    };
    let server = &mut replicas.first;
    let token = server.token(TENANT);
    let sleep = unique_sleep(600);
    let config = json!({
        "title": "stuck",
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {"command": sleep.clone()}}]}
        ]}}
    });
    let (id, _run) = server.session_with_prompt(&token, &config, "go").await;
    server
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "call executing",
            |e| count(e, "tool_executing") == 1,
        )
        .await;
    wait_process(&sleep, true).await;
    server.signal(nix::sys::signal::Signal::SIGTERM);
    // The first signal started a shutdown that would wait up to 600 s for the command.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !server.logs().contains("shutting down") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no shutdown\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(server.is_running());
    let status = server.terminate(EXIT_WITHIN).await;
    assert_eq!(
        status.code(),
        Some(130),
        "exit status of the second signal: {status}"
    );
    wait_process(&sleep, false).await;
}

// ---------------------------------------------------------------------------------------------
// A call waiting in process for its approval
// ---------------------------------------------------------------------------------------------

async fn approval_wait_parks(backend: Backend) {
    let env = [
        // Never parks on its own, and the shutdown would wait for it 600 s.
        ("NORMA_APPROVAL_PARK_AFTER_MS", "600000"),
        ("NORMA_SHUTDOWN_GRACE_SECONDS", "600"),
    ];
    let Some(mut replicas) = Replicas::start(backend, &env).await else {
        return;
    };
    let token = replicas.first.token(TENANT);
    let config = json!({
        "title": "approval",
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {"command": "echo approved > marker; echo approved-ran"}}]},
            {"text": "done: {{last_tool_result}}"}
        ]}}
    });
    let (id, _run) = replicas
        .first
        .session_with_prompt(&token, &config, "go")
        .await;
    let before = replicas
        .first
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "approval_requested",
            |e| count(e, "approval_requested") == 1,
        )
        .await;
    let call = of_kind(&before, "tool_call")[0]["payload"]["tool_use_id"]
        .as_str()
        .expect("tool_use_id")
        .to_owned();
    let (status, pending) = replicas
        .first
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await;
    assert_eq!(status, 200, "{pending}");
    let approval = pending["approvals"][0]["id"]
        .as_str()
        .expect("a pending approval")
        .to_owned();

    let status = replicas.first.terminate(EXIT_WITHIN).await;
    assert!(status.success(), "graceful shutdown exit status: {status}");

    let next = replicas.next().await;
    let resumed = next
        .wait_for_events(
            &token,
            &id,
            FINISH_WITHIN,
            "run_resumed on the next replica",
            |e| count(e, "run_resumed") >= 1,
        )
        .await;
    let payload = run_resumed(&resumed);
    assert_eq!(payload["rerun"], json!([call]), "{payload}");
    assert_eq!(payload["interrupted"], json!([]), "{payload}");
    // The same request, still pending, is answered on the next replica.
    let (status, all) = next
        .get(&format!("/v1/sessions/{id}/approvals"), &token)
        .await;
    assert_eq!(status, 200, "{all}");
    let all = all["approvals"].as_array().cloned().unwrap_or_default();
    assert_eq!(all.len(), 1, "the request was reused: {all:?}");
    assert_eq!(all[0]["id"], approval.as_str());
    assert_eq!(all[0]["status"], "pending", "{}", all[0]);
    let (status, answer) = next
        .post(
            &format!("/v1/sessions/{id}/approvals/{approval}"),
            &token,
            &json!({"decision": "allow"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    let events = finished_normally(&next, &token, &id, "terminal after the answer").await;
    assert_eq!(
        count(&events, "run_handed_off"),
        1,
        "{}",
        summarize(&events)
    );
    assert_eq!(of_call(&events, "tool_executing", &call).len(), 1);
    let results = of_call(&events, "tool_result", &call);
    assert_eq!(results.len(), 1, "{}", summarize(&events));
    let result = &results[0]["payload"]["result"];
    assert_eq!(result["is_error"], false, "{result}");
    assert!(result.to_string().contains("approved-ran"), "{result}");
}

// ---------------------------------------------------------------------------------------------
// A model stream in flight
// ---------------------------------------------------------------------------------------------

const ANSWER: &str = "the answer from the next replica";

async fn model_stream_abandoned(backend: Backend) {
    let fake = FakeLlm::start().await;
    // First answer: a stream of 300 deltas 100 ms apart, cut short by the shutdown.
    fake.push(Reply::slow_text_stream(300, Duration::from_millis(100)));
    fake.push(Reply::sse(an::text_turn(ANSWER)));
    let url = fake.url();
    let env = [
        ("NORMA_PROVIDER__KIND", "anthropic"),
        ("NORMA_PROVIDER__BASE_URL", url.as_str()),
        ("NORMA_PROVIDER__MODEL", "claude-test"),
        ("NORMA_PROVIDER__API_KEY", "test-key-not-secret"),
        // The fake provider listens on loopback: the operator's private allow-list.
        ("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS", "[\"127.0.0.0/8\"]"),
        ("NORMA_SHUTDOWN_GRACE_SECONDS", "600"),
    ];
    let Some(mut replicas) = Replicas::start(backend, &env).await else {
        return;
    };
    let token = replicas.first.token(TENANT);
    let (id, _run) = replicas
        .first
        .session_with_prompt(&token, &json!({"title": "stream"}), "go")
        .await;
    replicas
        .first
        .wait_for_events(
            &token,
            &id,
            Duration::from_secs(20),
            "assistant deltas",
            |e| count(e, "assistant_delta") >= 3,
        )
        .await;

    let status = replicas.first.terminate(EXIT_WITHIN).await;
    assert!(status.success(), "graceful shutdown exit status: {status}");
    // One model request before the shutdown. On Postgres the surviving replica is already
    // running: it may claim the released run and issue the call again before the first
    // process has finished exiting, so its request can be counted here too (the total below
    // stays exact).
    let before = fake.request_count();
    match backend {
        Backend::Sqlite => assert_eq!(before, 1, "one model request before the shutdown"),
        Backend::Postgres => assert!(
            (1..=2).contains(&before),
            "one model request before the shutdown (and perhaps the survivor's): {before}"
        ),
    }

    let next = replicas.next().await;
    let events = finished_normally(&next, &token, &id, "terminal on the next replica").await;
    assert_eq!(
        count(&events, "run_handed_off"),
        1,
        "{}",
        summarize(&events)
    );
    assert_eq!(
        fake.request_count(),
        2,
        "the model call was issued again, once"
    );
    let messages = next.all_messages(&token, &id).await;
    let history = serde_json::to_string(&messages).unwrap();
    assert!(
        !history.contains("tick"),
        "no half stream in history: {history}"
    );
    assert!(
        history.contains(ANSWER),
        "the re-issued answer is in history: {history}"
    );
}
