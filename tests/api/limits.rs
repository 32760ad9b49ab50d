//! Tenant limits through the HTTP API (`[limits]`): each limit reached answers `429
//! TENANT_LIMIT` with `details.limit`/`details.max` (or a tool result with code
//! `TENANT_LIMIT`), and works again once released. Run-slot and stream counts are shared by
//! replicas on one Postgres.

use crate::helpers::{Backend, TestApp, count, fresh_pg_database, test_settings, tool_results};
use norma::config::Settings;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::time::Duration;

/// A session whose first run sleeps in a Bash call: busy for a minute.
fn sleeping_config() -> Value {
    json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 60", "timeout": 90000}}]},
        {"text": "done"}
    ]}}})
}

/// Starts the sleeping run of a [`sleeping_config`] session.
async fn start_sleeping(app: &TestApp, token: &str, id: &str) {
    assert_eq!(app.prompt(token, id, "go").await.status(), 202);
}

/// A session whose first run asks for approval of a Bash call and waits: busy until answered.
fn waiting_config() -> Value {
    json!({"model": {"script": {"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": "echo approved"}}]},
        {"text": "done"}
    ]}}})
}

/// Reads a 429 and returns its `details`.
async fn tenant_limit(response: reqwest::Response) -> Value {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("TENANT_LIMIT")),
        "{body}"
    );
    body["details"].clone()
}

async fn enqueue(app: &TestApp, token: &str, id: &str) -> reqwest::Response {
    app.post_json(
        &format!("/v1/sessions/{id}/prompts"),
        token,
        &json!({"text": "later", "busy": "enqueue"}),
    )
    .await
}

/// Starts a run that waits on its approval; returns the approval id.
async fn start_waiting(app: &TestApp, token: &str, id: &str) -> String {
    assert_eq!(app.prompt(token, id, "go").await.status(), 202);
    app.wait_for_events(token, id, |e| count(e, "approval_requested") == 1)
        .await;
    app.first_pending_approval(token, id).await
}

async fn queued_prompts_are_capped(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.limits.queued_prompts_per_session = 2;
        s.limits.queued_prompts = 3;
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    let a = app.create_session("acme", &sleeping_config()).await;
    let b = app.create_session("acme", &sleeping_config()).await;
    start_sleeping(&app, &token, &a).await;
    start_sleeping(&app, &token, &b).await;
    let mut queued = Vec::new();
    for _ in 0..2 {
        let response = enqueue(&app, &token, &a).await;
        assert_eq!(response.status(), 202);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], "queued");
        queued.push(body["run_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        tenant_limit(enqueue(&app, &token, &a).await).await,
        json!({"limit": "queued_prompts_per_session", "max": 2})
    );
    assert_eq!(enqueue(&app, &token, &b).await.status(), 202);
    assert_eq!(
        tenant_limit(enqueue(&app, &token, &b).await).await,
        json!({"limit": "queued_prompts", "max": 3})
    );
    // Another tenant queues freely.
    let other = app.token("other");
    let c = app.create_session("other", &sleeping_config()).await;
    start_sleeping(&app, &other, &c).await;
    assert_eq!(enqueue(&app, &other, &c).await.status(), 202);
    // Cancelling a queued prompt frees its slot.
    let cancelled = app
        .post_json(
            &format!("/v1/sessions/{a}/runs/{}/cancel", queued[0]),
            &token,
            &json!({}),
        )
        .await;
    assert_eq!(cancelled.status(), 202);
    assert_eq!(enqueue(&app, &token, &a).await.status(), 202);
}

#[tokio::test]
async fn queued_prompts_are_capped_sqlite() {
    queued_prompts_are_capped(Backend::Sqlite).await;
}

#[tokio::test]
async fn queued_prompts_are_capped_postgres() {
    queued_prompts_are_capped(Backend::Postgres).await;
}

async fn sessions_and_hooks_are_capped(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.limits.sessions = 1;
        s.limits.hooks_per_session = 1;
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    let hook = |name: &str| {
        json!({"name": name, "event": "PreToolUse", "enabled": false,
        "handler": {"type": "in_process", "hook": "x"}})
    };
    let too_many = app
        .post_json(
            "/v1/sessions",
            &token,
            &json!({"hooks": [hook("a"), hook("b")]}),
        )
        .await;
    assert_eq!(too_many.status(), 422);
    let body: Value = too_many.json().await.unwrap();
    assert_eq!(body["code"], "INVALID_REQUEST");
    assert_eq!(body["details"]["limit"], "hooks_per_session", "{body}");
    let id = app.create_session("acme", &json!({})).await;
    let second = app.post_json("/v1/sessions", &token, &json!({})).await;
    assert_eq!(
        tenant_limit(second).await,
        json!({"limit": "sessions", "max": 1})
    );
    // A fork is a new session and counts.
    let fork = app
        .post_json(&format!("/v1/sessions/{id}/fork"), &token, &json!({}))
        .await;
    assert_eq!(
        tenant_limit(fork).await,
        json!({"limit": "sessions", "max": 1})
    );
    app.delete(&format!("/v1/sessions/{id}"), &token).await;
    assert_eq!(
        app.post_json("/v1/sessions", &token, &json!({}))
            .await
            .status(),
        201
    );
}

/// A burst of concurrent creations (a hostile client racing the cap) admits exactly the cap;
/// the others get `TENANT_LIMIT` and another tenant is still served.
async fn concurrent_creations_never_pass_the_session_cap(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| s.limits.sessions = 4).await else {
        return;
    };
    let token = app.token("acme");
    let body = json!({});
    let answers =
        futures::future::join_all((0..24).map(|_| app.post_json("/v1/sessions", &token, &body)))
            .await;
    let mut created = 0;
    for answer in answers {
        match answer.status().as_u16() {
            201 => created += 1,
            429 => assert_eq!(
                tenant_limit(answer).await,
                json!({"limit": "sessions", "max": 4})
            ),
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(created, 4);
    let listed: Value = app.get("/v1/sessions", &token).await.json().await.unwrap();
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 4);
    app.create_session("other", &json!({})).await;
}

#[tokio::test]
async fn concurrent_creations_never_pass_the_session_cap_sqlite() {
    concurrent_creations_never_pass_the_session_cap(Backend::Sqlite).await;
}

#[tokio::test]
async fn concurrent_creations_never_pass_the_session_cap_postgres() {
    concurrent_creations_never_pass_the_session_cap(Backend::Postgres).await;
}

#[tokio::test]
async fn sessions_and_hooks_are_capped_sqlite() {
    sessions_and_hooks_are_capped(Backend::Sqlite).await;
}

#[tokio::test]
async fn sessions_and_hooks_are_capped_postgres() {
    sessions_and_hooks_are_capped(Backend::Postgres).await;
}

/// A session (bypass mode) whose one run calls `tool` with `input` twice, then ends.
fn twice(tool: &str, input: Value) -> Value {
    json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": [
            {"name": tool, "input": input.clone()},
            {"name": tool, "input": input}
        ]},
        {"text": "done"}
    ]}}})
}

async fn run_to_end(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    let before = count(&app.events(token, id).await, "terminal");
    assert_eq!(app.prompt(token, id, "go").await.status(), 202);
    app.wait_for_events(token, id, |e| count(e, "terminal") > before)
        .await;
    tool_results(&app.messages(token, id).await)
}

/// Tasks and shells a scripted model opens are capped per session; closing the session
/// releases them for the tenant's other sessions.
async fn tasks_and_shells_are_capped(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.limits.tasks_per_session = 1;
        s.limits.shells_per_session = 1;
        s.limits.shells = 1;
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    let tasks = app
        .create_session(
            "acme",
            &twice(
                "Bash",
                json!({"command": "sleep 60", "run_in_background": true}),
            ),
        )
        .await;
    let results = run_to_end(&app, &token, &tasks).await;
    assert!(
        results[0].get("code").is_none_or(Value::is_null),
        "{results:?}"
    );
    assert_eq!(results[1]["code"], "TENANT_LIMIT", "{results:?}");

    let shells = app
        .create_session("acme", &twice("ShellStart", json!({"command": "sleep 60"})))
        .await;
    let results = run_to_end(&app, &token, &shells).await;
    assert!(
        results[0].get("code").is_none_or(Value::is_null),
        "{results:?}"
    );
    assert_eq!(results[1]["code"], "TENANT_LIMIT", "{results:?}");
    // The tenant's one shell is taken: another session cannot open one...
    let one = json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": [
        {"tool_calls": [{"name": "ShellStart", "input": {"command": "sleep 60"}}]},
        {"text": "done"}
    ]}}});
    let other = app.create_session("acme", &one).await;
    let results = run_to_end(&app, &token, &other).await;
    assert_eq!(results[0]["code"], "TENANT_LIMIT", "{results:?}");
    // ...until the session holding it closes (the release is asynchronous: retry, each time
    // in a fresh session, as a script plays once per session).
    app.delete(&format!("/v1/sessions/{shells}"), &token).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let retry = app.create_session("acme", &one).await;
        let results = run_to_end(&app, &token, &retry).await;
        if results[0].get("code").is_none_or(Value::is_null) {
            break;
        }
        assert_eq!(results[0]["code"], "TENANT_LIMIT", "{results:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the shell was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn tasks_and_shells_are_capped_sqlite() {
    tasks_and_shells_are_capped(Backend::Sqlite).await;
}

#[tokio::test]
async fn tasks_and_shells_are_capped_postgres() {
    tasks_and_shells_are_capped(Backend::Postgres).await;
}

async fn replica(url: &str, name: &str, configure: impl FnOnce(&mut Settings)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path());
    settings.database_url = Some(SecretString::from(url.to_owned()));
    settings.replica_id = Some(name.into());
    configure(&mut settings);
    TestApp::start(settings, Backend::Postgres, dir).await
}

#[tokio::test]
async fn replicas_share_run_slots_and_stream_counts() {
    let Some(url) = fresh_pg_database().await else {
        return;
    };
    let limits = |s: &mut Settings| {
        s.limits.concurrent_runs = 1;
        s.limits.sse_streams = 1;
    };
    let a = replica(&url, "replica-a", limits).await;
    let b = replica(&url, "replica-b", limits).await;
    let token = a.token("acme");
    let first = a.create_session("acme", &waiting_config()).await;
    let second = a.create_session("acme", &waiting_config()).await;
    // A run waits on A: the tenant's only run slot is taken on every replica.
    let approval = start_waiting(&a, &token, &first).await;
    assert_eq!(
        tenant_limit(b.prompt(&token, &second, "go").await).await,
        json!({"limit": "concurrent_runs", "max": 1})
    );
    // Another tenant runs on B.
    let other = b
        .create_session(
            "other",
            &json!({"model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    assert_eq!(
        b.prompt(&b.token("other"), &other, "go").await.status(),
        202
    );
    // Once A's run ends, B may start one.
    let answered = b
        .answer(&token, &first, &approval, &json!({"decision": "deny"}))
        .await;
    assert_eq!(answered.status(), 200);
    a.wait_for_events(&token, &first, |e| count(e, "terminal") == 1)
        .await;
    assert_eq!(b.prompt(&token, &second, "go").await.status(), 202);

    // An open stream on A is the tenant's only one, on B too.
    let open = a
        .client
        .get(a.url(&format!("/v1/sessions/{first}/stream")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(open.status(), 200);
    let refused = b
        .client
        .get(b.url(&format!("/v1/sessions/{second}/stream")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        tenant_limit(refused).await,
        json!({"limit": "sse_streams", "max": 1})
    );
    // Closing it frees the slot (released asynchronously: retry).
    drop(open);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = b
            .client
            .get(b.url(&format!("/v1/sessions/{second}/stream")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        if response.status() == 200 {
            break;
        }
        assert_eq!(response.status(), 429);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stream was never released"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A session (bypass mode) whose one run calls each of `calls` in turn, then ends.
fn calling(calls: Vec<Value>) -> Value {
    let mut turns: Vec<Value> = calls
        .into_iter()
        .map(|call| json!({"tool_calls": [call]}))
        .collect();
    turns.push(json!({"text": "done"}));
    json!({"permission": {"mode": "bypass"}, "model": {"script": {"turns": turns}}})
}

fn write(path: &str, bytes: usize) -> Value {
    json!({"name": "Write", "input": {"file_path": path, "content": "x".repeat(bytes)}})
}

/// Workspace bytes are measured after each mutating call and summed over the tenant's open
/// sessions; over the quota mutating calls are refused, reads still run, and closing a
/// session gives the room back.
async fn workspace_quota_is_enforced(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |s| {
        s.limits.workspace_bytes = 1500;
    })
    .await
    else {
        return;
    };
    let token = app.token("acme");
    let full = app
        .create_session(
            "acme",
            &calling(vec![
                write("a.txt", 1000),
                write("b.txt", 1000),
                write("c.txt", 10),
                json!({"name": "Read", "input": {"file_path": "a.txt"}}),
            ]),
        )
        .await;
    let results = run_to_end(&app, &token, &full).await;
    let codes: Vec<&Value> = results.iter().map(|r| &r["code"]).collect();
    assert!(codes[0].is_null() && codes[1].is_null(), "{results:?}");
    assert_eq!(
        results[2]["code"], "WORKSPACE_QUOTA_EXCEEDED",
        "{results:?}"
    );
    assert!(results[3]["code"].is_null(), "reads still run: {results:?}");
    // The quota is the tenant's: another session is refused too; another tenant is not.
    let again = calling(vec![write("d.txt", 10)]);
    let second = app.create_session("acme", &again).await;
    let results = run_to_end(&app, &token, &second).await;
    assert_eq!(
        results[0]["code"], "WORKSPACE_QUOTA_EXCEEDED",
        "{results:?}"
    );
    let theirs = app.create_session("other", &again).await;
    let results = run_to_end(&app, &app.token("other"), &theirs).await;
    assert!(results[0]["code"].is_null(), "{results:?}");
    // Closing the full session frees the tenant's room.
    app.delete(&format!("/v1/sessions/{full}"), &token).await;
    let third = app.create_session("acme", &again).await;
    let results = run_to_end(&app, &token, &third).await;
    assert!(results[0]["code"].is_null(), "{results:?}");
}

#[tokio::test]
async fn workspace_quota_is_enforced_sqlite() {
    workspace_quota_is_enforced(Backend::Sqlite).await;
}

#[tokio::test]
async fn workspace_quota_is_enforced_postgres() {
    workspace_quota_is_enforced(Backend::Postgres).await;
}

/// Background-task logs count inside the workspace quota.
#[tokio::test]
async fn task_logs_count_inside_the_workspace_quota() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.limits.workspace_bytes = 1_000_000;
    })
    .await
    .unwrap();
    let token = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &calling(vec![
                json!({"name": "Bash", "input": {
                    "command": "head -c 1200000 /dev/zero", "run_in_background": true}}),
                // Gives the task time to write its output (a log outside the workspace).
                json!({"name": "Bash", "input": {"command": "sleep 2"}}),
                write("a.txt", 10),
            ]),
        )
        .await;
    let results = run_to_end(&app, &token, &id).await;
    assert!(
        results[0]["code"].is_null() && results[1]["code"].is_null(),
        "{results:?}"
    );
    assert_eq!(
        results[2]["code"], "WORKSPACE_QUOTA_EXCEEDED",
        "{results:?}"
    );
}

/// Past `limits.pending_approvals`, a call that needs approval is refused at once with the
/// tool-result code `TENANT_LIMIT` (it never parks waiting for an answer that has no room).
#[tokio::test]
async fn pending_approvals_over_the_cap_refuse_the_call() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.limits.pending_approvals = 1)
        .await
        .unwrap();
    let token = app.token("acme");
    let first = app.create_session("acme", &waiting_config()).await;
    let pending = start_waiting(&app, &token, &first).await;
    assert!(!pending.is_empty());

    let second = app.create_session("acme", &waiting_config()).await;
    assert_eq!(app.prompt(&token, &second, "go").await.status(), 202);
    app.wait_for_events(&token, &second, |e| count(e, "terminal") == 1)
        .await;
    let results = tool_results(&app.messages(&token, &second).await);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["code"], "TENANT_LIMIT", "{results:?}");
    assert_eq!(results[0]["is_error"], true, "{results:?}");
}
