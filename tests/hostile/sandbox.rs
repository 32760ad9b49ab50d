//! The command sandbox against a hostile tenant: a scripted model tries to read the data dir,
//! the server's `/proc/<pid>/environ` and `cmdline`, another tenant's workspace and a host
//! UNIX socket; with a required sandbox part missing, command tools answer
//! `SANDBOX_UNAVAILABLE` (the reason is in the session's `sandbox` report) while other tools
//! keep working; a data dir in a sandbox-readable directory stops start-up.

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::ServerProcess;
use crate::support::{assert_still_serves, create_session, prompt_and_wait, start_server};

const WITHIN: Duration = Duration::from_secs(60);
const NEIGHBOUR_SECRET: &str = "neighbour-secret-5c2e";

/// A session of `tenant` whose model runs each of `calls` (tool name, input) in one turn, in
/// bypass mode; returns the tool results' JSON in order.
async fn run_tools(server: &ServerProcess, tenant: &str, calls: &[(&str, Value)]) -> Vec<Value> {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(name, input)| json!({"name": name, "input": input}))
        .collect();
    let config = json!({
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [{"tool_calls": tool_calls}, {"text": "done"}]}},
    });
    let session = create_session(server, tenant, &config).await;
    let events = prompt_and_wait(server, tenant, &session, "go", WITHIN).await;
    let results: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["payload"]["result"].clone())
        .collect();
    assert_eq!(
        results.len(),
        calls.len(),
        "{}",
        crate::server::summarize(&events)
    );
    results
}

fn bash(command: &str) -> (&'static str, Value) {
    ("Bash", json!({"command": command}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_cannot_reach_the_data_dir_the_server_or_another_tenant() {
    let server = start_server(&[]).await;
    // Another tenant leaves a secret in its workspace.
    let config = json!({
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Write", "input": {"file_path": "secret.txt", "content": NEIGHBOUR_SECRET}}]},
            {"text": "saved"}]}},
    });
    let neighbour = create_session(&server, "globex", &config).await;
    prompt_and_wait(&server, "globex", &neighbour, "save", WITHIN).await;
    let secret_path = server.workspace("globex", &neighbour).join("secret.txt");
    assert_eq!(
        std::fs::read_to_string(&secret_path).expect("neighbour secret"),
        NEIGHBOUR_SECRET
    );
    let data = server.data_dir();
    let pid = server.pid().expect("server pid");
    let socket_path = data.parent().expect("root").join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket_path).expect("host socket");
    let results = run_tools(
        &server,
        "acme",
        &[
            bash(&format!(
                "head -c 64 {0}/norma.db; ls {0}; ls {0}/workspaces",
                data.display()
            )),
            bash(&format!("cat {}", secret_path.display())),
            bash(&format!(
                "cat /proc/{pid}/environ /proc/{pid}/cmdline; cat /proc/1/environ | tr '\\0' ' '"
            )),
            bash(&format!(
                "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(\"CONNECTED\")' {}",
                socket_path.display()
            )),
        ],
    )
    .await;
    let texts: Vec<String> = results.iter().map(Value::to_string).collect();
    assert!(
        texts[0].contains("No such file or directory"),
        "{}",
        texts[0]
    );
    assert!(!texts[0].contains("SQLite format"), "{}", texts[0]);
    assert!(!texts[0].contains("globex"), "{}", texts[0]);
    assert!(
        texts[1].contains("No such file or directory"),
        "{}",
        texts[1]
    );
    assert!(!texts[1].contains(NEIGHBOUR_SECRET), "{}", texts[1]);
    assert!(
        texts[2].contains(&format!("/proc/{pid}/environ: No such file or directory")),
        "{}",
        texts[2]
    );
    assert!(!texts[2].contains("NORMA_"), "{}", texts[2]);
    assert!(!texts[2].contains("serve"), "{}", texts[2]);
    assert!(!texts[3].contains("CONNECTED"), "{}", texts[3]);
    assert!(
        texts[3].contains("FileNotFoundError") || texts[3].contains("PermissionError"),
        "{}",
        texts[3]
    );
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_required_part_turns_command_tools_off_and_nothing_else() {
    let server = start_server(&[("NORMA_SANDBOX__DISABLE", "[mount]")]).await;
    let token = server.token("acme");
    let session = create_session(&server, "acme", &json!({})).await;
    let (status, body) = server.get(&format!("/v1/sessions/{session}"), &token).await;
    assert_eq!(status, 200, "{body}");
    let report = &body["sandbox"];
    assert_eq!(report["mount"]["status"], "disabled", "{report}");
    assert_eq!(report["commands"]["available"], false, "{report}");
    assert!(
        report["commands"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("`mount`")),
        "{report}"
    );
    assert!(
        server.logs().contains("command sandbox incomplete"),
        "start-up warning missing\n{}",
        server.logs()
    );
    let results = run_tools(
        &server,
        "acme",
        &[
            bash("echo ran > ran.txt"),
            ("ShellStart", json!({})),
            (
                "Write",
                json!({"file_path": "ok.txt", "content": "still works"}),
            ),
        ],
    )
    .await;
    assert_eq!(results[0]["code"], "SANDBOX_UNAVAILABLE", "{}", results[0]);
    assert_eq!(results[1]["code"], "SANDBOX_UNAVAILABLE", "{}", results[1]);
    assert!(results[2]["code"].is_null(), "{}", results[2]);
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opting_out_of_the_missing_part_restores_command_tools() {
    let server = start_server(&[
        ("NORMA_SANDBOX__DISABLE", "[mount]"),
        (
            "NORMA_SANDBOX__REQUIRE",
            "[env, filesystem, network, pid, rlimits]",
        ),
    ])
    .await;
    let results = run_tools(&server, "acme", &[bash("echo back")]).await;
    assert!(results[0]["code"].is_null(), "{}", results[0]);
    assert!(results[0].to_string().contains("back"), "{}", results[0]);
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_the_sandbox_can_read_stops_start_up() {
    for (key, value, what) in [
        (
            "NORMA_DATA_DIR",
            "/usr/share/norma-hostile-test",
            "data dir",
        ),
        (
            "NORMA_AUTH__HS256_SECRET_FILE",
            "/etc/passwd",
            "HS256 secret file",
        ),
    ] {
        let mut server = ServerProcess::new(None).env(key, value);
        let (status, logs) = server.start_expecting_refusal().await;
        assert!(!status.success(), "{key}={value} started");
        assert!(
            logs.contains(&format!(
                "the {what} {value} lies in a directory sandboxed commands can read"
            )),
            "{logs}"
        );
    }
    assert!(!std::path::Path::new("/usr/share/norma-hostile-test").exists());
    let server = start_server(&[]).await;
    assert_still_serves(&server).await;
}
