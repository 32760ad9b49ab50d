//! The OpenAPI document against the real server: schemathesis (PyPI) generates valid and
//! invalid requests for every operation of the served `/openapi.json` and checks every answer
//! (`not_a_server_error`, `status_code_conformance`, `content_type_conformance`,
//! `response_schema_conformance`, `negative_data_rejection`), on SQLite and on a fresh Postgres
//! database, against the real `norma serve` binary with a token holding every scope.
//!
//! Before the run the test seeds real objects (a session with a finished run, a grant and a
//! pending approval, a plain session, a session to close) and binds the path parameters to
//! them most of the time, so the answers of real resources are checked too, not only `404`s.
//! Each store's run is bounded by examples and by time (`MAX_TIME`). Without schemathesis the
//! test skips loudly, and fails under `CI=true` (`.ci/run` installs it).

#[path = "support/pg.rs"]
mod pg;
#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

/// The checks that must report no failure.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,negative_data_rejection";
/// Test cases per operation and phase.
const MAX_EXAMPLES: &str = "25";
/// The time budget of one store's run, in seconds.
const MAX_TIME: &str = "120";
const TENANT: &str = "contract";

/// One store's run at a time: two would share the machine's cores and time budget.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_contract_holds_on_sqlite() {
    let Some(st) = schemathesis() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    run_contract(&st, None, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_contract_holds_on_postgres() {
    let Some(st) = schemathesis() else { return };
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    run_contract(&st, Some(url), "postgres").await;
}

/// The `st` command, or `None` (with a loud message) when it is not installed outside CI.
fn schemathesis() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("st"))
            .find(|candidate| {
                Command::new(candidate)
                    .arg("--version")
                    .output()
                    .is_ok_and(|output| output.status.success())
            })
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("schemathesis (`st`) is required in CI: python3 -m pip install schemathesis");
        }
        eprintln!(
            "\n!!!!!!!! SKIPPING CONTRACT TEST: schemathesis (`st`) not found; \
             python3 -m pip install schemathesis !!!!!!!!\n"
        );
    }
    found
}

/// The objects the run's path parameters are bound to.
struct Seeded {
    /// A session with a finished run, a grant and a run waiting on an approval.
    busy: String,
    /// A session with no script: prompts run the offline provider.
    plain: String,
    /// The session `DELETE /v1/sessions/{id}` closes.
    to_close: String,
    runs: Vec<String>,
    approval: String,
    grant: String,
}

async fn run_contract(st: &Path, database_url: Option<String>, store: &str) {
    let mut server = server::ServerProcess::new(database_url);
    server.start().await;
    let token = server.token_with_scopes(
        TENANT,
        &[
            "sessions:read",
            "sessions:write",
            "approvals:write",
            "tenant:admin",
        ],
    );
    let seeded = seed(&server, &token).await;

    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("openapi.json");
    let document = server
        .client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    std::fs::write(&schema, document).unwrap();
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(&config, config_toml(&seeded)).unwrap();

    let output = tokio::task::spawn_blocking({
        let st = st.to_path_buf();
        let base = server.url("");
        let report = dir.path().join("report");
        let scratch = dir.path().to_path_buf();
        move || {
            Command::new(st)
                // Its cache (`.schemathesis/`) lands in the scratch directory, not the tree.
                .current_dir(&scratch)
                .arg("--config-file")
                .arg(&config)
                .arg("run")
                .arg(&schema)
                .args(["--url", &base])
                .args(["--header", &format!("Authorization: Bearer {token}")])
                .args(["--checks", CHECKS])
                .args(["--max-examples", MAX_EXAMPLES])
                .args(["--max-time", MAX_TIME])
                // One worker: Hypothesis describing its strategies from two threads at once
                // trips a CPython 3.11 `ast` bug (a runtime error, not a finding).
                .args(["--workers", "1"])
                .args(["--request-timeout", "10"])
                .args(["--seed", "13"])
                .arg("--generation-deterministic")
                .args(["--suppress-health-check", "all"])
                .arg("--no-color")
                .args(["--report-dir", &report.display().to_string()])
                .env("NO_COLOR", "1")
                .output()
                .expect("st runs")
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "schemathesis found contract failures on {store}:\n{stdout}\n{stderr}\n{}",
        server.logs()
    );
    assert!(
        stdout.contains("passed") || stdout.contains("PASSED"),
        "schemathesis ran no test on {store}:\n{stdout}\n{stderr}"
    );
    eprintln!("schemathesis on {store}:\n{stdout}");

    // The server still serves the seeded sessions afterwards.
    let (status, session) = server
        .get(
            &format!("/v1/sessions/{}", seeded.plain),
            &server.token(TENANT),
        )
        .await;
    assert_eq!(status, 200, "{session}");
    let (status, _) = server.get("/readyz", "").await;
    assert_eq!(status, 200);
}

/// Seeds the objects of [`Seeded`] through the API.
async fn seed(server: &server::ServerProcess, token: &str) -> Seeded {
    // Every prompt: a Write (asks for approval), then a closing text.
    let script = json!({"per_prompt": true, "turns": [
        {"text": "Writing.", "tool_calls": [
            {"name": "Write", "input": {"file_path": "note.txt", "content": "{{last_user_text}}"}}]},
        {"text": "Done: {{last_user_text}}"}
    ]});
    let create = |body: Value| async move {
        let (status, session) = server.post("/v1/sessions", token, &body).await;
        assert_eq!(status, 201, "{session}");
        session["id"].as_str().unwrap().to_owned()
    };
    let busy = create(json!({"title": "busy", "model": {"script": script}})).await;
    let plain = create(json!({"title": "plain"})).await;
    let to_close = create(json!({"title": "to close"})).await;

    // First run: approved with a session grant, then it finishes.
    let (status, first) = server
        .post(
            &format!("/v1/sessions/{busy}/prompts"),
            token,
            &json!({"text": "one"}),
        )
        .await;
    assert_eq!(status, 202, "{first}");
    let approval = pending_approval(server, token, &busy).await;
    let (status, answer) = server
        .post(
            &format!("/v1/sessions/{busy}/approvals/{approval}"),
            token,
            &json!({"decision": "allow", "grant": {"scope": "session", "rule": "Write(*.md)"}}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    wait_for_run_end(server, token, &busy, first["run_id"].as_str().unwrap()).await;
    // Second run: waits on its approval while schemathesis runs.
    let (status, second) = server
        .post(
            &format!("/v1/sessions/{busy}/prompts"),
            token,
            &json!({"text": "two"}),
        )
        .await;
    assert_eq!(status, 202, "{second}");
    let approval = pending_approval(server, token, &busy).await;
    let (_, grants) = server
        .get(&format!("/v1/sessions/{busy}/grants"), token)
        .await;
    let grant = grants["grants"][0]["id"].as_str().unwrap().to_owned();
    // The plain session's run (the offline provider answers at once).
    let (status, third) = server
        .post(
            &format!("/v1/sessions/{plain}/prompts"),
            token,
            &json!({"text": "hello"}),
        )
        .await;
    assert_eq!(status, 202, "{third}");
    wait_for_run_end(server, token, &plain, third["run_id"].as_str().unwrap()).await;
    Seeded {
        busy,
        plain,
        to_close,
        runs: [&first, &second, &third]
            .iter()
            .map(|run| run["run_id"].as_str().unwrap().to_owned())
            .collect(),
        approval,
        grant,
    }
}

async fn pending_approval(server: &server::ServerProcess, token: &str, session: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, page) = server
            .get(
                &format!("/v1/sessions/{session}/approvals?status=pending"),
                token,
            )
            .await;
        if let Some(id) = page["approvals"][0]["id"].as_str() {
            return id.to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pending approval: {page}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_run_end(server: &server::ServerProcess, token: &str, session: &str, run: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, record) = server
            .get(&format!("/v1/sessions/{session}/runs/{run}"), token)
            .await;
        if ["completed", "failed", "cancelled"].contains(&record["status"].as_str().unwrap_or("")) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run did not end: {record}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The schemathesis configuration: path parameters bound to the seeded objects most of the
/// time (random values the rest), `DELETE` on its own session, the endless SSE stream read
/// for a bounded time, and `413` counted as the rejection of invalid data it is.
fn config_toml(seeded: &Seeded) -> String {
    let list = |values: &[&String]| {
        values
            .iter()
            .map(|v| format!("\"{v}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        r#"
[dictionaries.sessions]
values = [{sessions}]
[dictionaries.runs]
values = [{runs}]
[dictionaries.approvals]
values = ["{approval}"]
[dictionaries.grants]
values = ["{grant}"]

[parameters]
"path.id" = {{ dictionary = "sessions", probability = 0.85 }}
"path.run_id" = {{ dictionary = "runs", probability = 0.7 }}
"path.approval_id" = {{ dictionary = "approvals", probability = 0.7 }}
"path.grant_id" = {{ dictionary = "grants", probability = 0.5 }}
"body.threadId" = {{ dictionary = "sessions", probability = 0.7 }}

# A body larger than `max_body_bytes` (a prompt far over 200,000 characters) is refused with
# `413 PAYLOAD_TOO_LARGE` before it is parsed: a documented rejection of invalid data.
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]

[[operations]]
include-operation-id = "close_session"
parameters = {{ "path.id" = "{to_close}" }}

[[operations]]
include-operation-id = "stream"
request-timeout = 1.5
max-stream-events = 5
"#,
        sessions = list(&[&seeded.busy, &seeded.plain]),
        runs = list(&seeded.runs.iter().collect::<Vec<_>>()),
        approval = seeded.approval,
        grant = seeded.grant,
        to_close = seeded.to_close,
    )
}

/// Every operation of the document, as `(method, path, operation)` JSON.
fn operations() -> Vec<(String, String, Value)> {
    use utoipa::OpenApi;
    let document = serde_json::to_value(norma::api::ApiDoc::openapi()).unwrap();
    let mut all = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            all.push((method.clone(), path.clone(), operation.clone()));
        }
    }
    all
}

/// The shared answers of `src/api/contract.rs` reach every operation (a new endpoint gets them
/// without annotations), each error with the error body.
#[test]
fn every_operation_documents_the_answers_of_the_shared_layers() {
    for (method, path, operation) in operations() {
        let responses = operation["responses"].as_object().unwrap();
        let has = |status: &str| responses.contains_key(status);
        assert!(has("422") && has("500"), "{method} {path}");
        if operation["security"].to_string().contains("bearer") {
            for status in ["401", "403", "503"] {
                assert!(has(status), "{method} {path} lacks {status}");
            }
        }
        if path.contains('{') {
            assert!(has("404"), "{method} {path} lacks 404");
        }
        if operation.get("requestBody").is_some() {
            for status in ["400", "413", "415"] {
                assert!(has(status), "{method} {path} lacks {status}");
            }
        }
        for (status, response) in responses {
            if status.starts_with('2') {
                continue;
            }
            let text = response.to_string();
            assert!(
                text.contains("#/components/responses/") || text.contains("ErrorBody"),
                "{method} {path} {status} has no error body"
            );
        }
    }
}

/// An operation's own description of a shared status stays, completed with the shared code.
#[test]
fn an_operations_own_description_is_kept_and_completed() {
    use utoipa::OpenApi;
    let document = serde_json::to_value(norma::api::ApiDoc::openapi()).unwrap();
    let prompt = &document["paths"]["/v1/sessions/{id}/prompts"]["post"]["responses"];
    let unavailable = prompt["503"]["description"].as_str().unwrap();
    assert!(unavailable.contains("SHUTTING_DOWN"), "{unavailable}");
    assert!(unavailable.contains("STORE_UNAVAILABLE"), "{unavailable}");
    assert!(prompt["503"]["headers"]["Retry-After"].is_object());
    assert_eq!(
        prompt["401"]["$ref"],
        "#/components/responses/Unauthenticated"
    );
}

/// Values the schema forbids and the server used to take (or took differently) are refused
/// with `422 INVALID_REQUEST` naming the field, and the server serves the tenant afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_the_schema_forbids_are_refused_with_their_field() {
    let mut server = server::ServerProcess::new(None);
    server.start().await;
    let token = server.token(TENANT);
    for (body, field) in [
        (
            json!({"approvals": {"timeout_seconds": 0}}),
            "approvals.timeout_seconds",
        ),
        (
            json!({"approvals": {"timeout_seconds": 86_401}}),
            "approvals.timeout_seconds",
        ),
        (json!({"budgets": {"max_turns": 1001}}), "budgets.max_turns"),
        (json!({"title": "t".repeat(201)}), "title"),
        (
            json!({"hooks": [{"name": "h", "event": "Stop", "handler": {"type": "in_process", "hook": "x"}, "colour": "red"}]}),
            "hooks[0]",
        ),
    ] {
        let (status, error) = server.post("/v1/sessions", &token, &body).await;
        assert_eq!(status, 422, "{body} -> {error}");
        assert_eq!(error["code"], "INVALID_REQUEST", "{error}");
        let named = error["details"]["field"].as_str().unwrap_or_default();
        assert!(
            named.starts_with(field),
            "{body}: field {named:?}, not {field}"
        );
    }
    let (status, session) = server
        .post("/v1/sessions", &token, &json!({"title": "ok"}))
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap();

    // `Last-Event-ID` is digits only; `after` is not negative.
    for (query, last_event_id) in [("", Some("+5")), ("", Some("-1")), ("?after=-1", None)] {
        let mut request = server
            .client
            .get(server.url(&format!("/v1/sessions/{id}/stream{query}")))
            .bearer_auth(&token);
        if let Some(value) = last_event_id {
            request = request.header("last-event-id", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 422, "{query} {last_event_id:?}");
    }
    // AG-UI messages are objects.
    let (status, error) = server
        .post(
            &format!("/v1/sessions/{id}/ag-ui"),
            &token,
            &json!({"threadId": id, "runId": "r1", "messages": [1],
                    "resume": [{"interruptId": "apr_x", "status": "cancelled"}]}),
        )
        .await;
    assert_eq!(status, 422, "{error}");
    // Limits above their maximum are refused, not clamped.
    let (status, _) = server.get("/v1/sessions?limit=101", &token).await;
    assert_eq!(status, 422);
    let (status, _) = server
        .get(&format!("/v1/sessions/{id}/events?limit=1001"), &token)
        .await;
    assert_eq!(status, 422);
    // The tenant is still served.
    let (status, _) = server.get(&format!("/v1/sessions/{id}"), &token).await;
    assert_eq!(status, 200);
}
