//! MCP servers of a session (issue 12), end to end through the HTTP API with the scripted
//! provider, against the real stdio fixture server (`norma-mcp-fixture`, built with rmcp's
//! server side) running in the command sandbox.

use crate::helpers::*;
use serde_json::{Value, json};

pub(crate) const FIXTURE: &str = env!("CARGO_BIN_EXE_norma-mcp-fixture");

/// A server whose sandbox can run the fixture (its directory is an extra read-only tree).
pub(crate) async fn spawn(backend: Backend) -> Option<TestApp> {
    TestApp::spawn_with(backend, |settings| {
        let dir = std::path::Path::new(FIXTURE).parent().unwrap().to_owned();
        settings.sandbox.extra_read = vec![dir];
    })
    .await
}

pub(crate) fn fixture(extra: Value) -> Value {
    let mut server = json!({"name": "fx", "command": FIXTURE});
    server
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    server
}

pub(crate) fn calls(calls: &[(&str, Value)]) -> Value {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(|(name, input)| json!({"tool_calls": [{"name": name, "input": input}]}))
        .collect();
    turns.push(json!({"text": "done"}));
    json!({"turns": turns})
}

pub(crate) async fn wait_idle(app: &TestApp, token: &str, id: &str) -> Vec<Value> {
    app.wait_for_events(token, id, |events| count(events, "terminal") >= 1)
        .await
}

/// A plain session of another tenant still runs to its end.
pub(crate) async fn assert_still_serves_another_tenant(app: &TestApp) {
    let token = app.token("globex");
    let id = app
        .create_session(
            "globex",
            &json!({"model": {"script": {"turns": [{"text": "hi"}]}}}),
        )
        .await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    let events = wait_idle(app, &token, &id).await;
    assert_eq!(count(&events, "terminal"), 1);
}

pub(crate) async fn session(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(&format!("/v1/sessions/{id}"), token)
        .await
        .json()
        .await
        .unwrap()
}

pub(crate) async fn run(app: &TestApp, config: Value) -> (String, Vec<Value>) {
    let token = app.token("acme");
    let id = app.create_session("acme", &config).await;
    assert_eq!(app.prompt(&token, &id, "go").await.status(), 202);
    wait_idle(app, &token, &id).await;
    let results = tool_results(&app.messages(&token, &id).await);
    (id, results)
}

#[tokio::test]
async fn an_untrusted_tool_asks_for_approval_and_runs_once_allowed() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "model": {"script": calls(&[("mcp__fx__echo", json!({"text": "hi"}))])}
    });
    let id = app.create_session("acme", &config).await;
    let before = session(&app, &token, &id).await;
    assert_eq!(before["mcp_servers"][0]["state"], "not_started", "{before}");
    app.prompt(&token, &id, "go").await;
    // readOnlyHint is not honoured for an untrusted server: the call waits on an approval.
    app.wait_for_events(&token, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let approval = app.first_pending_approval(&token, &id).await;
    let answered = app
        .answer(&token, &id, &approval, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answered.status(), 200);
    let events = wait_idle(&app, &token, &id).await;
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_executing" && e["payload"]["name"] == "mcp__fx__echo"),
        "MCP calls are journaled like built-in ones"
    );
    let results = tool_results(&app.messages(&token, &id).await);
    assert_eq!(results[0]["is_error"], false, "{results:?}");
    assert_eq!(
        results[0]["content"],
        "echo: hi\nstructured content: {\"echoed\":\"hi\"}"
    );
    let after = session(&app, &token, &id).await;
    let server = &after["mcp_servers"][0];
    assert_eq!(server["state"], "ready", "{server}");
    assert!(
        server["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "mcp__fx__echo"),
        "{server}"
    );
}

async fn results_errors_and_the_sandbox(backend: Backend) {
    let Some(app) = spawn(backend).await else {
        return;
    };
    let outside = app.data_dir().join("escaped.txt");
    let config = json!({
        "mcp_servers": [fixture(json!({"env": {"FIXTURE_TOKEN": "tenant-value"}}))],
        "permission": {"allow": ["mcp__fx__*"]},
        "model": {"script": calls(&[
            ("mcp__fx__fail", json!({})),
            ("mcp__fx__media", json!({})),
            ("mcp__fx__env", json!({})),
            ("mcp__fx__write_file", json!({"path": "inside.txt", "text": "ok"})),
            ("mcp__fx__write_file", json!({"path": "/usr/escaped.txt", "text": "no"})),
            ("mcp__fx__echo", json!({"text": 5})),
            ("mcp__fx__write_file", json!({"path": outside.to_str().unwrap(), "text": "no"})),
        ])}
    });
    let (id, results) = run(&app, config).await;
    assert_eq!(results[0]["code"], "TOOL_FAILED");
    assert_eq!(results[0]["content"], "the fixture failed on purpose");
    assert_eq!(
        results[1]["content"],
        "a picture:\n[image 1: image/png]\n[resource file:///notes.txt]\nthe notes"
    );
    // The image travels beside the text, for providers that take images in tool results.
    assert_eq!(
        results[1]["images"],
        json!([{"media_type": "image/png", "data": "aGVsbG8="}])
    );
    // The server's environment: the sandbox's four variables and the one it was given.
    let env: Value = serde_json::from_str(results[2]["content"].as_str().unwrap()).unwrap();
    let mut names: Vec<&str> = env
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["FIXTURE_TOKEN", "HOME", "LANG", "PATH", "TERM"],
        "{env}"
    );
    assert_eq!(env["FIXTURE_TOKEN"], "tenant-value");
    let workspace = std::path::PathBuf::from(env["HOME"].as_str().unwrap());
    assert_eq!(results[3]["is_error"], false, "{:?}", results[3]);
    assert_eq!(
        std::fs::read_to_string(workspace.join("inside.txt")).unwrap(),
        "ok"
    );
    assert_eq!(results[4]["code"], "TOOL_FAILED", "{:?}", results[4]);
    assert!(
        !outside.exists(),
        "the server cannot write outside the workspace"
    );
    // The input schema is checked before the server sees the call.
    assert_eq!(
        results[5]["code"], "INPUT_SCHEMA_INVALID",
        "{:?}",
        results[5]
    );
    // The environment values are never returned.
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    assert_eq!(
        shown["config"]["mcp_servers"][0]["env"]["FIXTURE_TOKEN"],
        "<redacted>"
    );
}

#[tokio::test]
async fn results_errors_and_the_sandbox_sqlite() {
    results_errors_and_the_sandbox(Backend::Sqlite).await;
}

#[tokio::test]
async fn results_errors_and_the_sandbox_postgres() {
    results_errors_and_the_sandbox(Backend::Postgres).await;
}

#[tokio::test]
async fn a_crashed_server_is_restarted_with_backoff() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__fx__crash", json!({})),
            ("mcp__fx__echo", json!({"text": "too soon"})),
            ("Bash", json!({"command": "sleep 1.5"})),
            ("mcp__fx__echo", json!({"text": "back"})),
        ])}
    });
    let (id, results) = run(&app, config).await;
    assert_eq!(results[0]["code"], "TOOL_FAILED");
    assert!(
        results[0]["content"].as_str().unwrap().contains("ended"),
        "{:?}",
        results[0]
    );
    assert_eq!(results[1]["code"], "TOOL_FAILED");
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("restarting in"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[3]["is_error"], false, "{:?}", results[3]);
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    assert_eq!(shown["mcp_servers"][0]["state"], "ready");
    assert_eq!(shown["mcp_servers"][0]["restarts"], 1);
}

#[tokio::test]
async fn a_server_printing_garbage_is_cut_off() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__fx__garbage", json!({})),
            ("mcp__fx__echo", json!({"text": "still?"})),
        ])}
    });
    let (id, results) = run(&app, config).await;
    for result in &results[..2] {
        assert_eq!(result["code"], "TOOL_FAILED", "{result}");
        assert!(
            result["content"].as_str().unwrap().contains("cut off"),
            "{result}"
        );
    }
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    let server = &shown["mcp_servers"][0];
    assert_eq!(server["state"], "cut_off", "{server}");
    assert!(
        server["error"].as_str().unwrap().contains("not JSON-RPC"),
        "{server}"
    );
}

#[tokio::test]
async fn a_slow_call_times_out_and_the_server_keeps_serving() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({"timeout_seconds": 1}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__fx__slow", json!({"seconds": 10})),
            ("mcp__fx__echo", json!({"text": "after"})),
        ])}
    });
    let (_, results) = run(&app, config).await;
    assert_eq!(results[0]["code"], "TOOL_TIMEOUT", "{:?}", results[0]);
    assert_eq!(results[1]["is_error"], false, "{:?}", results[1]);
}

#[tokio::test]
async fn a_server_that_does_not_start_shows_why() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [{"name": "broken", "command": "/nonexistent/mcp-server"}],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__broken__anything", json!({}))])}
    });
    let (id, results) = run(&app, config).await;
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND");
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    let server = &shown["mcp_servers"][0];
    assert_eq!(server["state"], "failed", "{server}");
    assert!(
        server["error"].as_str().unwrap().contains("did not start"),
        "{server}"
    );
}

#[tokio::test]
async fn deferred_mcp_tools_are_found_with_search_extra_tools() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({"deferred": true, "tools": ["echo", "env"]}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__fx__echo", json!({"text": "hidden"})),
            ("SearchExtraTools", json!({"query": "echo"})),
            ("ExecuteExtraTool", json!({"name": "mcp__fx__echo", "input": {"text": "found"}})),
            ("SearchExtraTools", json!({"query": "crash"})),
        ])}
    });
    let (id, results) = run(&app, config).await;
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND");
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("mcp__fx__echo")
    );
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("echo: found"),
        "{:?}",
        results[2]
    );
    assert!(
        !results[3]["content"].as_str().unwrap().contains("crash"),
        "tools outside the allow-list are not offered"
    );
    let token = app.token("acme");
    let shown = session(&app, &token, &id).await;
    assert_eq!(
        shown["mcp_servers"][0]["tools"],
        json!(["mcp__fx__echo", "mcp__fx__env"])
    );
}

#[tokio::test]
async fn a_trusted_servers_read_only_tools_run_without_approval() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({"trusted": true}))],
        "model": {"script": calls(&[("mcp__fx__echo", json!({"text": "trusted"}))])}
    });
    // Only a tenant admin may mark a server trusted.
    let user = app.token("acme");
    let refused = app.post_json("/v1/sessions", &user, &config).await;
    assert_eq!(error_code(refused).await, (403, "FORBIDDEN_SCOPE".into()));
    let admin = app.token_with_scopes("acme", &["sessions:write", "tenant:admin"]);
    let created = app.post_json("/v1/sessions", &admin, &config).await;
    assert_eq!(created.status(), 201);
    let id = created.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.prompt(&user, &id, "go").await;
    let events = wait_idle(&app, &user, &id).await;
    assert_eq!(count(&events, "approval_requested"), 0);
    let results = tool_results(&app.messages(&user, &id).await);
    assert_eq!(results[0]["is_error"], false, "{results:?}");
}

/// A server whose tool list never ends (a `nextCursor` on every page, ~380 KB pages with a
/// 180 KB tool on each) is read within bounds: the server starts, its real tools are offered,
/// and what was left out is named in its status; another tenant is still served.
#[tokio::test]
async fn an_endless_tool_list_is_read_within_bounds() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let config = json!({
        "mcp_servers": [fixture(json!({"args": ["--endless-list"]}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__fx__echo", json!({"text": "still works"}))])}
    });
    let (id, results) = run(&app, config).await;
    assert_eq!(results[0]["is_error"], false, "{results:?}");
    assert!(
        results[0]["content"].to_string().contains("still works"),
        "{results:?}"
    );
    let status = session(&app, &app.token("acme"), &id).await["mcp_servers"][0].clone();
    assert_eq!(status["state"], "ready", "{status}");
    fn strings(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect()
    }
    let offered = strings(&status["tools"]);
    assert!(offered.contains(&"mcp__fx__echo"), "{offered:?}");
    assert!(offered.len() <= 1000, "{}", offered.len());
    let skipped = strings(&status["skipped_tools"]);
    assert!(
        skipped.contains(&"huge_1: its definition is larger than 96 KiB"),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|note| note.ends_with(": the server's tool definitions pass 1 MiB")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|note| note.ends_with("more tools were left out")),
        "{skipped:?}"
    );
    assert!(
        skipped.contains(&"the server's list has more than 32 pages; the rest was not read"),
        "{skipped:?}"
    );
    assert!(skipped.len() <= 40, "{}", skipped.len());
    assert_still_serves_another_tenant(&app).await;
}

/// A tenant's stdio server processes are counted (`mcp_processes`): past the cap a session's
/// server is not started (its run goes on without the server's tools, its status says why,
/// and it is not marked failed), another tenant's still starts, and a closed session's process
/// frees its place.
async fn stdio_server_processes_count_against_the_tenants_limit(backend: Backend) {
    let Some(app) = TestApp::spawn_with(backend, |settings| {
        let dir = std::path::Path::new(FIXTURE).parent().unwrap().to_owned();
        settings.sandbox.extra_read = vec![dir];
        settings.limits.mcp_processes = 1;
    })
    .await
    else {
        return;
    };
    let config = json!({
        "mcp_servers": [fixture(json!({}))],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__fx__echo", json!({"text": "hi"}))])}
    });
    let token = app.token("acme");
    let (first, results) = run(&app, config.clone()).await;
    assert_eq!(results[0]["is_error"], false, "{results:?}");
    let (second, results) = run(&app, config.clone()).await;
    assert_eq!(results[0]["is_error"], true, "{results:?}");
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND", "{results:?}");
    let status = session(&app, &token, &second).await["mcp_servers"][0].clone();
    assert_ne!(status["state"], "failed", "{status}");
    let error = status["error"].as_str().unwrap_or_default();
    assert!(error.contains("(limit mcp_processes)"), "{status}");
    // Another tenant's server starts.
    let globex = app.token("globex");
    let other = app.create_session("globex", &config).await;
    assert_eq!(app.prompt(&globex, &other, "go").await.status(), 202);
    wait_idle(&app, &globex, &other).await;
    let results = tool_results(&app.messages(&globex, &other).await);
    assert_eq!(results[0]["is_error"], false, "{results:?}");
    // Closing the first session stops its server and frees the place (released a moment
    // after the close).
    assert_eq!(
        app.delete(&format!("/v1/sessions/{first}"), &token)
            .await
            .status(),
        200
    );
    let mut started = false;
    for _ in 0..50 {
        let (_, results) = run(&app, config.clone()).await;
        if results[0]["is_error"] == false {
            started = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(started, "a server started once the first session closed");
}

#[tokio::test]
async fn stdio_server_processes_count_against_the_tenants_limit_sqlite() {
    stdio_server_processes_count_against_the_tenants_limit(Backend::Sqlite).await;
}

#[tokio::test]
async fn stdio_server_processes_count_against_the_tenants_limit_postgres() {
    stdio_server_processes_count_against_the_tenants_limit(Backend::Postgres).await;
}

#[tokio::test]
async fn bad_entries_are_refused_with_their_field() {
    let app = spawn(Backend::Sqlite).await.unwrap();
    let token = app.token("acme");
    for (server, field) in [
        (
            json!({"name": "a__b", "command": "x"}),
            "mcp_servers[0].name",
        ),
        (
            json!({"name": "a", "command": ""}),
            "mcp_servers[0].command",
        ),
        (
            json!({"name": "a", "command": "x", "env": {"PATH": "/"}}),
            "mcp_servers[0].env",
        ),
        (
            json!({"name": "a", "command": "x", "transport": "carrier-pigeon"}),
            "mcp_servers[0].transport",
        ),
        (
            json!({"name": "a", "command": "x", "bogus": 1}),
            "mcp_servers[0]",
        ),
    ] {
        let response = app
            .post_json("/v1/sessions", &token, &json!({"mcp_servers": [server]}))
            .await;
        assert_eq!(response.status(), 422, "{server}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "INVALID_REQUEST");
        assert!(
            body["details"]["field"]
                .as_str()
                .unwrap()
                .starts_with(field),
            "{server}: {body}"
        );
    }
}
