//! Two replicas sharing one Postgres database: a client may talk to either. Events committed
//! by one replica reach SSE subscribers of the other live; an approval answered on one wakes
//! the run parked on the other; a cancel sent to one stops the run on the other; a grant
//! revoked through one is withdrawn from the run holding it on the other.

use crate::helpers::{Backend, TestApp, count, fresh_pg_database, test_settings};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::time::Duration;

async fn replica(url: &str, name: &str) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(SecretString::from(url.to_owned()));
    settings.replica_id = Some(name.into());
    TestApp::start(settings, Backend::Postgres, dir).await
}

#[tokio::test]
async fn replicas_share_live_events_approvals_and_cancels() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let a = replica(&url, "replica-a").await;
    let b = replica(&url, "replica-b").await;
    let token = a.token("acme");
    let id = a
        .create_session(
            "acme",
            &json!({
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "echo approved"}}]},
                    {"text": "done"}
                ]}}
            }),
        )
        .await;

    // Subscribed on B before anything happens: every event must arrive live from A. Read
    // through a client without a total timeout (the test apps' 20 s one counts from the
    // request and would end the stream with an error, unread events and all, if the steps
    // below took that long on a loaded machine); the read loop's deadline bounds it.
    let streaming = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = streaming
        .get(b.url(&format!("/v1/sessions/{id}/stream")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream().eventsource();

    assert_eq!(a.prompt(&token, &id, "go").await.status(), 202);
    a.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    // B lists what waits, and answers it; the run parked on A goes on at once (the
    // request would otherwise wait its 600 s expiry).
    let approval = b.first_pending_approval(&token, &id).await;
    let answered = b
        .answer(&token, &id, &approval, &json!({ "decision": "allow" }))
        .await;
    assert_eq!(answered.status(), 200);

    let mut live = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while let Ok(Some(Ok(event))) = tokio::time::timeout_at(deadline, stream.next()).await {
        live.push((event.id.parse::<i64>().unwrap(), event.event.clone()));
        if event.event == "terminal" {
            break;
        }
    }
    assert_eq!(
        live.last().map(|e| e.1.as_str()),
        Some("terminal"),
        "B's subscriber saw the run end: {live:?}"
    );
    let stored = a.events(&token, &id).await;
    let stored: Vec<(i64, String)> = stored
        .iter()
        .map(|e| {
            (
                e["seq"].as_i64().unwrap(),
                e["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        live, stored,
        "every event once, in order, on the other replica"
    );
    let run: Value = b
        .get(&format!("/v1/sessions/{id}/runs"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(run["runs"][0]["status"], "completed");
    assert_eq!(run["runs"][0]["owner"], "replica-a");

    // A cancel sent to B stops the run A is executing.
    let slow = a
        .create_session(
            "acme",
            &json!({
                "permission": {"allow": ["Bash"]},
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}]},
                    {"text": "finished"}
                ]}}
            }),
        )
        .await;
    let accepted: Value = a.prompt(&token, &slow, "go").await.json().await.unwrap();
    let run_id = accepted["run_id"].as_str().unwrap();
    a.wait_for_events(&token, &slow, |e| count(e, "tool_executing") == 1)
        .await;
    let cancelled = b
        .post_json(
            &format!("/v1/sessions/{slow}/runs/{run_id}/cancel"),
            &token,
            &json!({}),
        )
        .await;
    assert_eq!(cancelled.status(), 202);
    let events = a
        .wait_for_events(&token, &slow, |e| count(e, "terminal") == 1)
        .await;
    let terminal = events.iter().find(|e| e["type"] == "terminal").unwrap();
    assert_eq!(terminal["payload"]["reason"], "cancelled");
}

/// A grant revoked through one replica is withdrawn from the run that holds it on the other
/// (the `grant_revoked` signal): the run's next call the grant covered asks again.
#[tokio::test]
async fn a_grant_revoked_on_one_replica_is_withdrawn_from_the_run_on_the_other() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let a = replica(&url, "replica-a").await;
    let b = replica(&url, "replica-b").await;
    let token = a.token("acme");
    let id = a
        .create_session(
            "acme",
            &json!({
                "model": {"script": {"turns": [
                    {"tool_calls": [{"name": "Bash", "input": {"command": "echo one"}}]},
                    {"tool_calls": [{"name": "Bash", "input": {"command": "echo hold"}}]},
                    {"tool_calls": [{"name": "Bash", "input": {"command": "echo two"}}]},
                    {"text": "done"}
                ]}}
            }),
        )
        .await;
    assert_eq!(a.prompt(&token, &id, "go").await.status(), 202);
    let asked = |n: usize| move |e: &[Value]| count(e, "approval_requested") == n;
    a.wait_for_events(&token, &id, asked(1)).await;
    // Allowed on A with a grant covering the third call; the run (on A) holds it in force.
    let first = a.first_pending_approval(&token, &id).await;
    let allow_with_grant = json!({"decision": "allow",
        "grant": {"scope": "session", "rule": "Bash(echo two)"}});
    let answered = a.answer(&token, &id, &first, &allow_with_grant).await;
    assert_eq!(answered.status(), 200);
    let grant = answered.json::<Value>().await.unwrap()["grant_id"]
        .as_str()
        .expect("the answer names its grant")
        .to_owned();
    a.wait_for_events(&token, &id, asked(2)).await;
    // While the second call waits: the grant is revoked through B, then the call allowed
    // through B (B's signals go out in that order).
    let revoked = b
        .delete(&format!("/v1/sessions/{id}/grants/{grant}"), &token)
        .await;
    assert_eq!(revoked.status(), 204);
    let second = b.first_pending_approval(&token, &id).await;
    let answered = b
        .answer(&token, &id, &second, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answered.status(), 200);
    // Without the grant the third call asks; with it the run would have gone on to its end.
    let events = a
        .wait_for_events(&token, &id, |e| {
            count(e, "approval_requested") == 3 || count(e, "terminal") == 1
        })
        .await;
    assert_eq!(
        count(&events, "approval_requested"),
        3,
        "the revoked grant still allowed `echo two` on replica A"
    );
}
