//! Sessions that move between replicas keep their files with `workspace.storage = "snapshot"`.
//!
//! Two real `norma serve` processes on one Postgres database, each with its own data dir (no
//! shared filesystem), both snapshotting workspaces to a real S3-compatible server on loopback
//! (`moto`, see tests/support/moto.rs). A short run lease (3 s) keeps takeovers quick.
//!
//! - a run killed (SIGKILL) in the middle of a turn that had written `notes.txt` is taken
//!   over by the other replica, which restores the snapshot and reads the file; the killed
//!   command's own (unrecorded) write is not there;
//! - the same on one replica restarted on its data dir: the restore removes what the
//!   unrecorded call left and keeps what the recorded one wrote;
//! - a run parked on an approval on a replica that dies is answered on the other replica,
//!   whose command sees the file;
//! - hostile: a workspace over the tenant's quota is not snapshotted (the call's result says
//!   `WORKSPACE_QUOTA_EXCEEDED`), and the server still serves another tenant;
//! - a replica whose object store is unreachable refuses to start, saying why (and never
//!   printing the credentials).

#[path = "support/moto.rs"]
mod moto;
#[path = "support/pg.rs"]
mod pg;
#[path = "support/replicas.rs"]
mod replicas;
#[path = "support/server.rs"]
mod server;

use moto::Moto;
use replicas::{create_and_prompt, nth_result_event_of, result_event_of, result_of};
use serde_json::{Value, json};
use server::{ServerProcess, count, of_kind, summarize};
use std::time::Duration;

const TENANT: &str = "acme";
const LEASE_SECONDS: &str = "3";
/// Bound for a taken-over run to reach `terminal`.
const FINISH_WITHIN: Duration = Duration::from_secs(45);

/// A not-yet-started replica on `database_url` with snapshot storage on `store`.
fn replica(database_url: &str, name: &str, store: &Moto) -> ServerProcess {
    let mut server = ServerProcess::new(Some(database_url.to_owned()))
        .env("NORMA_REPLICA_ID", name)
        .env("NORMA_RUN_LEASE_SECONDS", LEASE_SECONDS)
        .env("NORMA_APPROVAL_PARK_AFTER_MS", "200");
    for (key, value) in store.replica_env() {
        server = server.env(key, value);
    }
    server
}

/// Writes `notes.txt`, then a command that writes `unrecorded.txt` and sleeps (killed
/// mid-way); the next turn reads the file back and lists the workspace.
fn write_then_sleep_then_read() -> Value {
    json!({
        "permission": {"allow": ["Bash", "Write"]},
        "model": {"script": {"turns": [
            {"tool_calls": [
                {"name": "Write", "input": {"file_path": "notes.txt", "content": "remember the lighthouse"}},
                {"name": "Bash", "input": {"command": "echo half > unrecorded.txt; sleep 60"}}
            ]},
            {"tool_calls": [
                {"name": "Read", "input": {"file_path": "notes.txt"}},
                {"name": "Bash", "input": {"command": "ls -A"}}
            ]},
            {"text": "done"}
        ]}}
    })
}

/// Runs [`write_then_sleep_then_read`] on `a`, kills it once the command wrote its file,
/// and returns the session's events once the run ended on `b` (`None`: `a` restarted).
async fn kill_mid_turn(a: &mut ServerProcess, b: Option<&ServerProcess>) -> Vec<Value> {
    let token = a.token(TENANT);
    let (id, run) = create_and_prompt(a, &token, &write_then_sleep_then_read()).await;
    a.wait_for_events(
        &token,
        &id,
        Duration::from_secs(20),
        "Write done and Bash executing",
        |e| count(e, "tool_result") == 1 && count(e, "tool_executing") == 2,
    )
    .await;
    let unrecorded = a.workspace(TENANT, &id).join("unrecorded.txt");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !unrecorded.exists() {
        assert!(tokio::time::Instant::now() < deadline, "{}", a.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.kill();
    let (resumer, name) = match b {
        Some(b) => (b, "replica-b"),
        None => {
            a.start().await;
            (&*a, "replica-a")
        }
    };
    let events = resumer
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal", |e| {
            count(e, "terminal") == 1
        })
        .await;
    let resumed = of_kind(&events, "run_resumed");
    assert_eq!(resumed.len(), 1, "{}", summarize(&events));
    assert_eq!(resumed[0]["payload"]["replica"], name);
    assert_eq!(resumed[0]["payload"]["run_id"], run.as_str());
    assert_eq!(result_of(&events, "Bash")["code"], "INTERRUPTED");
    let write = result_event_of(&events, "Write");
    assert!(write["result"]["is_error"] != true, "{write}");
    let snapshot = write["workspace_snapshot"].as_str().unwrap_or_default();
    assert!(
        snapshot.len() == 64 && snapshot.bytes().all(|b| b.is_ascii_hexdigit()),
        "the Write's result carries its workspace snapshot: {write}"
    );
    let read = result_of(&events, "Read");
    assert!(
        read.to_string().contains("remember the lighthouse"),
        "the resumed run reads what the recorded Write wrote: {read}\n{}",
        summarize(&events)
    );
    let listing = nth_result_event_of(&events, "Bash", 1)["result"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(listing.contains("notes.txt"), "{listing}");
    assert!(
        !listing.contains("unrecorded.txt"),
        "nothing from the call whose result was not recorded: {listing}"
    );
    assert!(
        resumer
            .logs()
            .contains("restored the session's workspace from its snapshot"),
        "{}",
        resumer.logs()
    );
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_storage_a_run_taken_over_mid_turn_reads_the_file_it_wrote() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let Some(store) = Moto::start().await else {
        return;
    };
    let mut a = replica(&url, "replica-a", &store);
    a.start().await;
    let mut b = replica(&url, "replica-b", &store);
    b.start().await;
    kill_mid_turn(&mut a, Some(&b)).await;
    let logs = b.logs();
    assert!(
        !logs.contains("will not find its files"),
        "no local-storage warning with snapshot storage\n{logs}"
    );
    assert!(
        !logs.contains("testing-secret-never-logged"),
        "credentials are never logged\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_storage_a_restarted_replica_drops_what_an_unrecorded_call_wrote() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let Some(store) = Moto::start().await else {
        return;
    };
    let mut a = replica(&url, "replica-a", &store);
    a.start().await;
    kill_mid_turn(&mut a, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_storage_a_parked_run_is_answered_on_the_other_replica() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let Some(store) = Moto::start().await else {
        return;
    };
    let mut a = replica(&url, "replica-a", &store);
    a.start().await;
    let mut b = replica(&url, "replica-b", &store);
    b.start().await;
    let token = a.token(TENANT);
    let config = json!({
        "permission": {"allow": ["Write"]},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Write", "input": {"file_path": "deep/dir/notes.txt", "content": "parked but kept"}}]},
            {"tool_calls": [{"name": "Bash", "input": {"command": "cat deep/dir/notes.txt"}}]},
            {"text": "saw: {{last_tool_result}}"}
        ]}}
    });
    let (id, _run) = create_and_prompt(&a, &token, &config).await;
    a.wait_for_events(
        &token,
        &id,
        Duration::from_secs(20),
        "approval_requested",
        |e| count(e, "approval_requested") == 1,
    )
    .await;
    a.kill();
    let (status, pending) = b
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
    let (status, answered) = b
        .post(
            &format!("/v1/sessions/{id}/approvals/{approval}"),
            &token,
            &json!({ "decision": "allow" }),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let events = b
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal on B", |e| {
            count(e, "terminal") == 1
        })
        .await;
    assert_eq!(
        of_kind(&events, "run_resumed")
            .last()
            .map(|e| e["payload"]["replica"].clone()),
        Some(json!("replica-b")),
        "{}",
        summarize(&events)
    );
    let bash = result_of(&events, "Bash");
    assert!(
        bash.to_string().contains("parked but kept"),
        "the command on B sees A's file: {bash}\n{}",
        summarize(&events)
    );
    assert!(
        b.workspace(TENANT, &id)
            .join("deep/dir/notes.txt")
            .is_file()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_storage_a_workspace_over_quota_is_refused_and_other_tenants_are_served() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let Some(store) = Moto::start().await else {
        return;
    };
    let mut a = replica(&url, "replica-a", &store).env("NORMA_LIMITS__WORKSPACE_BYTES", "4096");
    a.start().await;
    let hostile = a.token("hostile");
    let big = "x".repeat(6000);
    let config = json!({
        "permission": {"allow": ["Write"]},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Write", "input": {"file_path": "big.txt", "content": big}}]},
            {"tool_calls": [{"name": "Write", "input": {"file_path": "more.txt", "content": "more"}}]},
            {"text": "done"}
        ]}}
    });
    let (id, _) = create_and_prompt(&a, &hostile, &config).await;
    let events = a
        .wait_for_events(&hostile, &id, FINISH_WITHIN, "terminal", |e| {
            count(e, "terminal") == 1
        })
        .await;
    let first = nth_result_event_of(&events, "Write", 0);
    assert_eq!(
        first["result"]["code"], "WORKSPACE_QUOTA_EXCEEDED",
        "{first}"
    );
    assert!(
        first.get("workspace_snapshot").is_none(),
        "no snapshot over the quota: {first}"
    );
    let second = nth_result_event_of(&events, "Write", 1);
    assert_eq!(
        second["result"]["code"], "WORKSPACE_QUOTA_EXCEEDED",
        "{second}"
    );

    // Another tenant is served, and its files are snapshotted.
    let other = a.token("other");
    let config = json!({
        "permission": {"allow": ["Write"]},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Write", "input": {"file_path": "ok.txt", "content": "fine"}}]},
            {"tool_calls": [{"name": "Read", "input": {"file_path": "ok.txt"}}]},
            {"text": "done"}
        ]}}
    });
    let (id, _) = create_and_prompt(&a, &other, &config).await;
    let events = a
        .wait_for_events(&other, &id, FINISH_WITHIN, "terminal", |e| {
            count(e, "terminal") == 1
        })
        .await;
    let write = result_event_of(&events, "Write");
    assert!(write["workspace_snapshot"].is_string(), "{write}");
    assert!(result_of(&events, "Read").to_string().contains("fine"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_storage_with_an_unreachable_store_refuses_to_start() {
    let unused = server::free_port();
    let mut a = ServerProcess::new(None)
        .env("NORMA_WORKSPACE__STORAGE", "snapshot")
        .env(
            "NORMA_WORKSPACE__SNAPSHOT__ENDPOINT",
            format!("http://127.0.0.1:{unused}"),
        )
        .env("NORMA_WORKSPACE__SNAPSHOT__BUCKET", "nowhere")
        .env("NORMA_WORKSPACE__SNAPSHOT__ALLOW_HTTP", "true")
        .env("NORMA_WORKSPACE__SNAPSHOT__ACCESS_KEY_ID", "key")
        .env(
            "NORMA_WORKSPACE__SNAPSHOT__SECRET_ACCESS_KEY",
            "secret-never-logged",
        );
    let (status, log) = a.start_expecting_refusal().await;
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("snapshot object store") && log.contains("nowhere"),
        "says which store and why\n{log}"
    );
    assert!(!log.contains("secret-never-logged"), "{log}");
}
