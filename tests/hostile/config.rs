//! Configuration, development mode, scripted turns and NUL bytes (issue "hostile tenants",
//! README "Configuration, development mode and scripted turns").

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::{ServerProcess, summarize};
use crate::support::{self, code, create_session, prompt_and_wait};

const RUN_WITHIN: Duration = Duration::from_secs(60);

/// What Kubernetes injects into every pod of a namespace with a Service named `norma`, the
/// terminal client's variables and a test harness variable: none of them is a setting.
const FOREIGN_ENV: [(&str, &str); 10] = [
    ("NORMA_SERVICE_HOST", "10.96.0.17"),
    ("NORMA_SERVICE_PORT", "80"),
    ("NORMA_SERVICE_PORT_HTTP", "80"),
    ("NORMA_PORT", "tcp://10.96.0.17:80"),
    ("NORMA_PORT_80_TCP", "tcp://10.96.0.17:80"),
    ("NORMA_PORT_80_TCP_PROTO", "tcp"),
    ("NORMA_PORT_80_TCP_PORT", "80"),
    ("NORMA_PORT_80_TCP_ADDR", "10.96.0.17"),
    ("NORMA_URL", "http://norma"),
    ("NORMA_TOKEN", "client-token-value-never-logged"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_style_environment_starts_and_logs_only_the_ignored_names() {
    let server = support::start_server(&FOREIGN_ENV).await;
    let logs = server.logs();
    for (name, _) in FOREIGN_ENV {
        assert!(logs.contains(name), "{name} not logged as ignored\n{logs}");
    }
    assert!(
        !logs.contains("client-token-value-never-logged"),
        "a value was logged\n{logs}"
    );
    support::assert_still_serves(&server).await;
}

/// The server's async runtime: one worker per core unless `worker_threads` (1 to 512) says
/// otherwise. The count is the running runtime's own, as the start-up log reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_has_a_worker_per_core_or_as_configured() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The start-up line's `workers=N` field.
    let workers = |server: &ServerProcess| {
        let logs = server.logs();
        let line = logs
            .lines()
            .find(|line| line.contains("norma listening"))
            .unwrap_or_else(|| panic!("no start-up line\n{logs}"));
        line.split_whitespace()
            .find_map(|field| field.strip_prefix("workers="))
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no workers field: {line}"))
    };
    let server = support::start_server(&[]).await;
    // tokio's own variable, when the environment has it, is the default's.
    let default = std::env::var("TOKIO_WORKER_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cores);
    assert_eq!(workers(&server), default);
    support::assert_still_serves(&server).await;
    drop(server);

    let server = support::start_server(&[("NORMA_WORKER_THREADS", "3")]).await;
    assert_eq!(workers(&server), 3);
    support::assert_still_serves(&server).await;
    drop(server);

    for refused in ["0", "513"] {
        let mut server = ServerProcess::new(None).env("NORMA_WORKER_THREADS", refused);
        let (status, output) = server.start_expecting_refusal().await;
        assert!(!status.success(), "{output}");
        assert!(
            output.contains("worker_threads must be 1 to 512"),
            "{output}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_setting_refuses_to_start_naming_the_variable() {
    let mut server = ServerProcess::new(None).env("NORMA_DATABSE_URL", "postgres://db/norma");
    let (status, output) = server.start_expecting_refusal().await;
    assert!(!status.success(), "{output}");
    assert!(output.contains("NORMA_DATABSE_URL"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_hs256_secret_refuses_to_start() {
    let mut server = ServerProcess::new(None).env("NORMA_AUTH__HS256_SECRET", "x");
    let (status, output) = server.start_expecting_refusal().await;
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("at least 32 bytes") && output.contains("auth.hs256_secret"),
        "{output}"
    );

    let secret_file = server.data_dir().join("hs256-secret");
    std::fs::write(&secret_file, "").unwrap();
    let mut server = server.without_env("NORMA_AUTH__HS256_SECRET").env(
        "NORMA_AUTH__HS256_SECRET_FILE",
        secret_file.display().to_string(),
    );
    let (status, output) = server.start_expecting_refusal().await;
    assert!(!status.success(), "{output}");
    assert!(output.contains("(empty)"), "{output}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn development_mode_on_a_public_bind_needs_dev_and_never_logs_a_token() {
    let mut server = ServerProcess::new(None).without_env("NORMA_AUTH__HS256_SECRET");
    let bind = format!("0.0.0.0:{}", server.port());
    server = server.env("NORMA_BIND", bind);
    let (status, output) = server.start_expecting_refusal().await;
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("--dev") && output.contains("NORMA_DEV=true"),
        "{output}"
    );

    let mut server = server.env("NORMA_DEV", "true");
    server.start().await;
    let logs = server.logs();
    assert!(logs.contains("norma token --tenant dev"), "{logs}");
    assert!(!logs.contains("Bearer token for tenant"), "{logs}");
    // The generated key signs tokens; development mode allows scripts.
    let key = std::fs::read_to_string(server.data_dir().join("dev-signing-key")).unwrap();
    server.use_signing_secret(key.trim());
    support::assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_script_is_refused_where_scripts_are_not_allowed() {
    let server = support::start_server(&[("NORMA_ALLOW_SESSION_SCRIPTS", "false")]).await;
    let token = server.token("mallory");
    let (status, body) = server
        .post(
            "/v1/sessions",
            &token,
            &json!({"model": {"script": {"turns": [{"text": "I am the model now"}]}}}),
        )
        .await;
    assert_eq!((status, code(&body)), (422, "INVALID_REQUEST"), "{body}");
    assert_eq!(body["details"]["field"], "model.script", "{body}");
    assert_still_serves_without_scripts(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_script_fails_its_next_run_once_scripts_are_no_longer_allowed() {
    let mut server = support::start_server(&[]).await;
    let config = json!({"model": {"script": {"turns": [{"text": "scripted"}]}}});
    let session = create_session(&server, "mallory", &config).await;
    server.kill();
    server = server.env("NORMA_ALLOW_SESSION_SCRIPTS", "false");
    server.start().await;

    let events = prompt_and_wait(&server, "mallory", &session, "go", RUN_WITHIN).await;
    let terminal = events
        .iter()
        .rev()
        .find(|e| e["type"] == "terminal")
        .expect("terminal");
    assert_eq!(
        terminal["payload"]["reason"],
        "error",
        "{}",
        summarize(&events)
    );
    assert_eq!(terminal["payload"]["code"], "SCRIPTS_NOT_ALLOWED");
    assert!(
        !events.iter().any(|e| e["type"] == "model_request"),
        "the script must not run: {}",
        summarize(&events)
    );
    let token = server.token("mallory");
    let (status, runs) = server
        .get(&format!("/v1/sessions/{session}/runs"), &token)
        .await;
    assert_eq!(status, 200, "{runs}");
    assert_eq!(runs["runs"][0]["status"], "failed", "{runs}");
    assert_still_serves_without_scripts(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_in_request_bodies_are_422_naming_the_field() {
    let server = support::start_server(&[]).await;
    let token = server.token("mallory");
    for (body, field) in [
        (json!({"title": "a\u{0}b"}), "title"),
        (json!({"system_prompt": "\u{0}"}), "system_prompt"),
        (
            json!({"metadata": {"note": ["ok", "x\u{0}"]}}),
            "metadata.note[1]",
        ),
        (json!({"metadata": {"k\u{0}": 1}}), "metadata.k\u{FFFD}"),
    ] {
        let (status, answer) = server.post("/v1/sessions", &token, &body).await;
        assert_eq!(
            (status, code(&answer)),
            (422, "INVALID_REQUEST"),
            "{body}: {answer}"
        );
        assert_eq!(answer["details"]["field"], field, "{body}: {answer}");
    }
    // An escaped backslash followed by `u0000` is text, not a NUL.
    let session = create_session(&server, "mallory", &json!({"title": "\\u0000"})).await;
    let (status, answer) = server
        .post(
            &format!("/v1/sessions/{session}/prompts"),
            &token,
            &json!({"text": "hello\u{0}"}),
        )
        .await;
    assert_eq!(
        (status, code(&answer)),
        (422, "INVALID_REQUEST"),
        "{answer}"
    );
    assert_eq!(answer["details"]["field"], "text", "{answer}");
    support::assert_still_serves(&server).await;
}

/// A NUL in a path id or a query parameter never reaches the store (on Postgres it would
/// be a `500`): `404` in the path, `422` in the query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_in_paths_and_queries_are_refused_on_postgres() {
    let Some(url) = crate::pg::fresh_pg_database().await else {
        return;
    };
    let mut server = ServerProcess::new(Some(url));
    server.start().await;
    let token = server.token("mallory");
    let session = create_session(&server, "mallory", &json!({})).await;
    for path in [
        "/v1/sessions/ses_%00".to_owned(),
        format!("/v1/sessions/{session}/runs/run_%00"),
        format!("/v1/sessions/{session}/outputs/out%00"),
    ] {
        let (status, body) = server.get(&path, &token).await;
        assert_eq!((status, code(&body)), (404, "NOT_FOUND"), "{path}: {body}");
    }
    let (status, body) = server.get("/v1/sessions?cursor=%00", &token).await;
    assert_eq!((status, code(&body)), (422, "INVALID_REQUEST"), "{body}");
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{session}/approvals/apr_%00"),
            &token,
            &json!({"decision": "allow"}),
        )
        .await;
    assert_eq!((status, code(&body)), (404, "NOT_FOUND"), "{body}");
    support::assert_still_serves(&server).await;
}

/// A command printing a NUL and a model repeating it (`{{last_tool_result}}`) do not fail the
/// run on Postgres: the stored text carries U+FFFD instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_printing_command_does_not_fail_the_run_on_postgres() {
    let Some(url) = crate::pg::fresh_pg_database().await else {
        return;
    };
    let mut server = ServerProcess::new(Some(url));
    server.start().await;
    let config = json!({
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {"command": "printf 'a\\0b'"}}]},
            {"text": "it printed {{last_tool_result}}"}
        ]}}
    });
    let session = create_session(&server, "mallory", &config).await;
    let events = prompt_and_wait(&server, "mallory", &session, "print", RUN_WITHIN).await;
    let terminal = events
        .iter()
        .rev()
        .find(|e| e["type"] == "terminal")
        .expect("terminal");
    assert_eq!(
        terminal["payload"]["reason"],
        "end_turn",
        "{}",
        summarize(&events)
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("tool_result");
    let text = result["payload"].to_string();
    assert!(text.contains("a\u{FFFD}b"), "{text}");
    let messages = server
        .all_messages(&server.token("mallory"), &session)
        .await;
    let last = messages.last().expect("messages");
    assert!(
        last["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("a\u{FFFD}b")),
        "{last}"
    );
    support::assert_still_serves(&server).await;
}

/// Like [`support::assert_still_serves`], for a server that refuses session scripts: the
/// bystander's session has none (the server's scripted provider echoes the prompt).
async fn assert_still_serves_without_scripts(server: &ServerProcess) {
    support::assert_still_serves_with(server, &Value::Object(Default::default())).await;
}
