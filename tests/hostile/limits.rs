//! Tenant limits against the real binary: a tenant that floods the queue, opens streams,
//! tasks and shells, or whose replica dies holding them, is bounded by its own limits and
//! leaves the server serving others.

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::ServerProcess;
use crate::support::{assert_still_serves, code, create_session, start_server};

const ATTACKER: &str = "attacker";

/// A session whose run sleeps in a Bash call: busy for a minute.
fn sleeping_config() -> Value {
    json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 60", "timeout": 90000}}]},
        {"text": "done"}
    ]}}})
}

async fn start_sleeping(server: &ServerProcess, session: &str) {
    let token = server.token(ATTACKER);
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/prompts"),
            &token,
            &json!({"text": "go"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_enqueued_prompts_are_bounded() {
    let server = start_server(&[]).await;
    let token = server.token(ATTACKER);
    let session = create_session(&server, ATTACKER, &sleeping_config()).await;
    start_sleeping(&server, &session).await;
    let (mut accepted, mut refused) = (0, 0);
    for n in 0..300 {
        let (status, body) = server
            .post(
                &format!("/v1/sessions/{session}/prompts"),
                &token,
                &json!({"text": format!("prompt {n} {}", "x".repeat(10_000)), "busy": "enqueue"}),
            )
            .await;
        match status {
            202 => accepted += 1,
            429 => {
                assert_eq!(code(&body), "TENANT_LIMIT", "{body}");
                assert_eq!(
                    body["details"],
                    json!({"limit": "queued_prompts_per_session", "max": 16})
                );
                refused += 1;
            }
            other => panic!("prompt {n}: {other} {body}"),
        }
    }
    assert_eq!((accepted, refused), (16, 284), "the default queue bound");
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sse_streams_are_bounded() {
    let server = start_server(&[("NORMA_LIMITS__SSE_STREAMS", "4")]).await;
    let token = server.token(ATTACKER);
    let session = create_session(&server, ATTACKER, &json!({})).await;
    let mut open = Vec::new();
    for _ in 0..4 {
        let response = server.open_stream(&token, &session).await;
        assert_eq!(response.status(), 200);
        open.push(response);
    }
    for _ in 0..50 {
        let response = server.open_stream(&token, &session).await;
        assert_eq!(response.status(), 429);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["details"], json!({"limit": "sse_streams", "max": 4}));
    }
    // The bystander streams while the attacker's streams are open.
    let bystander = server.token("bystander");
    let theirs = create_session(&server, "bystander", &json!({})).await;
    assert_eq!(server.open_stream(&bystander, &theirs).await.status(), 200);
    assert_still_serves(&server).await;
    drop(open);
}

/// An AG-UI run's event stream counts against `sse_streams` like `GET …/stream`: with the
/// tenant's streams all open it is `429` and starts no run; with one freed it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ag_ui_streams_count_against_sse_streams() {
    let server = start_server(&[("NORMA_LIMITS__SSE_STREAMS", "2")]).await;
    let token = server.token(ATTACKER);
    let config = json!({"model": {"script": {"turns": [{"text": "hi"}]}}});
    let session = create_session(&server, ATTACKER, &config).await;
    let mut open = vec![
        server.open_stream(&token, &session).await,
        server.open_stream(&token, &session).await,
    ];
    assert!(open.iter().all(|response| response.status() == 200));
    let input = json!({
        "threadId": session, "runId": "r1", "state": {},
        "messages": [{"id": "m1", "role": "user", "content": "go"}],
        "tools": [], "context": [], "forwardedProps": {}
    });
    let ag_ui = format!("/v1/sessions/{session}/ag-ui");
    for _ in 0..10 {
        let (status, body) = server.post(&ag_ui, &token, &input).await;
        assert_eq!(status, 429, "{body}");
        assert_eq!(
            body["details"],
            json!({"limit": "sse_streams", "max": 2}),
            "{body}"
        );
    }
    let (status, runs) = server
        .get(&format!("/v1/sessions/{session}/runs"), &token)
        .await;
    assert_eq!(status, 200, "{runs}");
    assert_eq!(
        runs["runs"],
        json!([]),
        "a refused AG-UI request starts no run"
    );
    // One stream freed: the AG-UI run streams to its end.
    drop(open.pop());
    let response = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let response = server
                .client
                .post(server.url(&ag_ui))
                .bearer_auth(&token)
                .json(&input)
                .send()
                .await
                .expect("AG-UI request");
            // The freed stream's hold is released when the server notices the close.
            if response.status() != 429 {
                return response;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the freed stream's hold is released");
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(30), response.text())
        .await
        .expect("the AG-UI stream ends")
        .expect("body");
    assert!(body.contains("RUN_FINISHED"), "{body}");
    assert_still_serves(&server).await;
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_and_shells_by_a_scripted_model_are_bounded() {
    let server = start_server(&[]).await;
    let token = server.token(ATTACKER);
    let mut calls = Vec::new();
    for _ in 0..12 {
        calls.push(
            json!({"name": "Bash", "input": {"command": "sleep 60", "run_in_background": true}}),
        );
        calls.push(json!({"name": "ShellStart", "input": {"command": "sleep 60"}}));
    }
    let config = json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": calls}, {"text": "done"}
    ]}}});
    let session = create_session(&server, ATTACKER, &config).await;
    crate::support::prompt_and_wait(&server, ATTACKER, &session, "go", Duration::from_secs(60))
        .await;
    let messages = server.all_messages(&token, &session).await;
    let codes: Vec<String> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["code"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(codes.len(), 24, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| *c == "TENANT_LIMIT").count(),
        8,
        "8 tasks and 8 shells per session by default, the rest refused: {codes:?}"
    );
    let (status, _) = server
        .client
        .delete(server.url(&format!("/v1/sessions/{session}")))
        .bearer_auth(&token)
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 200);
    assert_still_serves(&server).await;
}

/// A replica killed with `kill -9` while holding a stream leaks nothing: its hold expires with
/// its lease and the tenant may open a stream on another replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_leaks_no_stream_slot() {
    let Some(url) = crate::pg::fresh_pg_database().await else {
        return;
    };
    let replica = |name: &str| {
        ServerProcess::new(Some(url.clone()))
            .env("NORMA_REPLICA_ID", name)
            .env("NORMA_RUN_LEASE_SECONDS", "1")
            .env("NORMA_LIMITS__SSE_STREAMS", "1")
    };
    let mut doomed = replica("doomed");
    doomed.start().await;
    let mut survivor = replica("survivor");
    survivor.start().await;
    let token = doomed.token(ATTACKER);
    let session = create_session(&doomed, ATTACKER, &json!({})).await;
    let held = doomed.open_stream(&token, &session).await;
    assert_eq!(held.status(), 200);
    let refused = survivor.open_stream(&token, &session).await;
    assert_eq!(
        refused.status(),
        429,
        "the stream on the other replica counts"
    );
    doomed.kill();
    drop(held);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = survivor.open_stream(&token, &session).await;
        if response.status() == 200 {
            break;
        }
        assert_eq!(response.status(), 429);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the killed replica's stream never expired\n{}",
            survivor.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_still_serves(&survivor).await;
}

/// A model that fills the workspace with Bash (per-file limits cannot cap a directory) is
/// stopped by the tenant's workspace quota after the command that crossed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_filling_the_workspace_hits_the_quota() {
    let server = start_server(&[("NORMA_LIMITS__WORKSPACE_BYTES", "1048576")]).await;
    let token = server.token(ATTACKER);
    let mut turns = Vec::new();
    for n in 0..5 {
        turns.push(json!({"tool_calls": [{"name": "Bash", "input": {
            "command": format!("head -c 600000 /dev/zero > fill{n}")
        }}]}));
    }
    turns.push(json!({"text": "done"}));
    let config = json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": turns}}});
    let session = create_session(&server, ATTACKER, &config).await;
    crate::support::prompt_and_wait(&server, ATTACKER, &session, "go", Duration::from_secs(60))
        .await;
    let codes: Vec<String> = server
        .all_messages(&token, &session)
        .await
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["code"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        codes,
        [
            "",
            "",
            "WORKSPACE_QUOTA_EXCEEDED",
            "WORKSPACE_QUOTA_EXCEEDED",
            "WORKSPACE_QUOTA_EXCEEDED"
        ],
        "two commands fit or cross 1 MiB, the rest are refused"
    );
    let files = std::fs::read_dir(server.workspace(ATTACKER, &session))
        .unwrap()
        .count();
    assert_eq!(files, 2, "refused commands did not run");
    assert_still_serves(&server).await;
}
