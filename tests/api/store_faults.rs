//! Accepted work survives store outages and lost signals (issue #18): a run whose store goes
//! away after its prompt was accepted still ends `end_turn` once the store is back (never a
//! `RUN_FAILED` terminal), and an approval answered on another replica while this replica's
//! listening connection is down wakes the parked run as soon as the listener is back (not at
//! the approval's expiry). The outage is a TCP proxy that cuts and refuses connections.

use crate::helpers::{Backend, TestApp, count, fresh_pg_database, test_settings};
use crate::proxy::FaultProxy;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

async fn replica(url: &str, name: &str) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(SecretString::from(url.to_owned()));
    settings.database_acquire_timeout_ms = 500;
    settings.replica_id = Some(name.into());
    // A lease far longer than the test: the takeover sweep (once per lease) never runs, so
    // what recovers the runs here is the retry, the reclaim and the listener's reconnect.
    settings.run_lease_seconds = 600;
    TestApp::start(settings, Backend::Postgres, dir).await
}

/// The one terminal event of the session, once there is one (waits at most 30 s).
async fn terminal_of(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    app.wait_for_events(token, id, |e| count(e, "terminal") >= 1)
        .await
}

fn assert_ended_normally(events: &[Value]) {
    assert_eq!(count(events, "terminal"), 1, "one terminal: {events:#?}");
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(
        terminal["payload"]["reason"], "end_turn",
        "the run was not failed by the outage: {terminal}"
    );
    assert_eq!(
        count(events, "run_started"),
        1,
        "the prompt was written once"
    );
}

#[tokio::test]
async fn accepted_prompt_survives_store_outage_before_the_run_is_prepared() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let proxy = FaultProxy::start(pg_upstream(&url)).await;
    let proxied = proxy.proxied_url(&url);
    let app = replica(&proxied, "replica-a").await;
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({"model": {"script": {"turns": [{"text": "done"}]}}}),
        )
        .await;
    let accepted = app.prompt(&token, &id, "go").await;
    assert_eq!(accepted.status(), 202);
    // The store goes away right after the 202: preparing the run (reading the session,
    // writing the prompt) meets a dead store. It used to end the run for good with
    // `RUN_FAILED: cannot prepare the run: store unavailable`.
    proxy.go_down();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.come_back();
    let back = Instant::now();
    let events = terminal_of(&app, &token, &id).await;
    eprintln!(
        "store outage before the run is prepared: run ended {:?} after the store came back",
        back.elapsed()
    );
    assert_ended_normally(&events);
    let runs: Value = app
        .get(&format!("/v1/sessions/{id}/runs"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(runs["runs"][0]["status"], "completed");
}

#[tokio::test]
async fn store_blip_mid_run_does_not_fail_the_run() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let proxy = FaultProxy::start(pg_upstream(&url)).await;
    let proxied = proxy.proxied_url(&url);
    let app = replica(&proxied, "replica-a").await;
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({
                "permission": {"allow": ["Bash"]},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 1; echo slept"}}]},
                    {"text": "done"}
                ]}}
            }),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    app.wait_for_events(&token, &id, |e| count(e, "tool_executing") == 1)
        .await;
    // Down while the tool runs: its result (and the next turn) is written into a dead store.
    proxy.go_down();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.come_back();
    let back = Instant::now();
    let events = terminal_of(&app, &token, &id).await;
    eprintln!(
        "store outage mid-run: run ended {:?} after the store came back",
        back.elapsed()
    );
    assert_ended_normally(&events);
    assert_eq!(count(&events, "tool_result"), 1, "{events:#?}");
}

#[tokio::test]
async fn approval_answered_while_the_listener_is_down_wakes_the_run_when_it_returns() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    // A reaches Postgres through the proxy (its listener too); B directly.
    let proxy = FaultProxy::start(pg_upstream(&url)).await;
    let proxied = proxy.proxied_url(&url);
    let a = replica(&proxied, "replica-a").await;
    let b = replica(&url, "replica-b").await;
    let token = a.token("acme");
    let id = a
        .create_session(
            "acme",
            &json!({
                "approvals": {"timeout_seconds": 600},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "echo approved"}}]},
                    {"text": "done"}
                ]}}
            }),
        )
        .await;
    assert_eq!(a.prompt(&token, &id, "go").await.status(), 202);
    b.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let approval = b.first_pending_approval(&token, &id).await;

    // A's connections (the listening one included) are cut; B's answer is signalled to
    // nobody on A.
    proxy.go_down();
    let answered = b
        .answer(&token, &id, &approval, &json!({ "decision": "allow" }))
        .await;
    assert_eq!(answered.status(), 200);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    proxy.come_back();
    let back = Instant::now();

    // Without reconciliation the run would wait for the approval's 600 s expiry.
    let events = b
        .wait_for_events(&token, &id, |e| count(e, "terminal") >= 1)
        .await;
    let recovered = back.elapsed();
    eprintln!("listener gap: run resumed {recovered:?} after the store came back");
    assert_ended_normally(&events);
    assert_eq!(count(&events, "approval_decided"), 1, "{events:#?}");
}

/// `host:port` of the Postgres in `url`.
fn pg_upstream(url: &str) -> String {
    let parsed = url::Url::parse(url).unwrap();
    format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    )
}

/// A cancel sent to replica B for a run replica A holds, while A's listening connection is cut
/// (and every reconnect of it): the cancel is recorded in the store, and A's periodic
/// reconcile cancels the run without the signal, even before its listener returns.
#[tokio::test]
async fn cancel_sent_while_the_listener_is_down_reaches_the_run() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let proxy = FaultProxy::start(pg_upstream(&url)).await;
    let proxied = proxy.proxied_url(&url);
    let a = replica(&proxied, "replica-a").await;
    let b = replica(&url, "replica-b").await;
    let token = a.token("acme");
    let id = a
        .create_session(
            "acme",
            &json!({
                "permission": {"mode": "bypass"},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 60", "timeout": 90000}}]},
                    {"text": "done"}
                ]}}
            }),
        )
        .await;
    let accepted: Value = a.prompt(&token, &id, "go").await.json().await.unwrap();
    let run = accepted["run_id"].as_str().unwrap().to_owned();
    b.wait_for_events(&token, &id, |e| count(e, "tool_executing") == 1)
        .await;
    // A's listener is cut and stays cut; its pool keeps working.
    proxy.block_listen(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled_at = Instant::now();
    let cancel = b
        .client
        .post(b.url(&format!("/v1/sessions/{id}/runs/{run}/cancel")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), 202);
    let events = b
        .wait_for_events(&token, &id, |e| count(e, "terminal") >= 1)
        .await;
    eprintln!(
        "listener down: the cancel reached the run {:?} after it was sent",
        cancelled_at.elapsed()
    );
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(terminal["payload"]["reason"], "cancelled", "{terminal}");
    proxy.block_listen(false);
}
