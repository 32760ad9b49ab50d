//! Commands with network (`network: "egress"`): real `curl` in the real sandbox, through the
//! session's egress proxy. A loopback HTTP server of the test stands for a public site (the
//! server allows `127.0.0.0/8` through `egress.allow_private_cidrs`); `169.254.169.254`
//! stands for a denied one, and a session deny rule (`domain:localhost`) refuses that name. Hostile: 500 connections and a 1 MiB header are bounded.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::ServerProcess;
use crate::support::{assert_still_serves, code, create_session, prompt_and_wait, start_server};

const WITHIN: Duration = Duration::from_secs(90);
const PAGE: &str = "hello-from-the-allowed-site";

/// A loopback HTTP server answering every request with [`PAGE`]; returns its port.
async fn site() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{PAGE}",
                    PAGE.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// The whole log of the server's first start.
fn full_log(server: &ServerProcess) -> String {
    let root = server.data_dir().parent().expect("root").to_owned();
    std::fs::read_to_string(root.join("server-1.log")).expect("server log")
}

async fn egress_server() -> ServerProcess {
    start_server(&[("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS", "[\"127.0.0.0/8\"]")]).await
}

/// Runs each command with Bash in one turn of a new session of `tenant` with `network`;
/// returns the session id and each tool result as text.
async fn run_bash(
    server: &ServerProcess,
    tenant: &str,
    network: &str,
    commands: &[String],
) -> (String, Vec<String>) {
    let (session, results, _) = run_bash_with(server, tenant, network, json!({}), commands).await;
    (session, results)
}

/// [`run_bash`] with the session's `egress` rules (in `bypass` mode); also returns the run's
/// events.
async fn run_bash_with(
    server: &ServerProcess,
    tenant: &str,
    network: &str,
    egress: Value,
    commands: &[String],
) -> (String, Vec<String>, Vec<Value>) {
    let permission = json!({"mode": "bypass"});
    run_bash_as(server, tenant, network, egress, permission, commands).await
}

/// [`run_bash_with`] with the session's `permission` settings.
async fn run_bash_as(
    server: &ServerProcess,
    tenant: &str,
    network: &str,
    egress: Value,
    permission: Value,
    commands: &[String],
) -> (String, Vec<String>, Vec<Value>) {
    let calls: Vec<Value> = commands
        .iter()
        .map(|c| json!({"name": "Bash", "input": {"command": c, "timeout": 60000}}))
        .collect();
    let config = json!({
        "permission": permission,
        "network": network,
        "egress": egress,
        "model": {"script": {"turns": [{"tool_calls": calls}, {"text": "done"}]}},
    });
    let session = create_session(server, tenant, &config).await;
    let events = prompt_and_wait(server, tenant, &session, "go", WITHIN).await;
    let results: Vec<String> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["payload"]["result"].to_string())
        .collect();
    assert_eq!(
        results.len(),
        commands.len(),
        "{}",
        crate::server::summarize(&events)
    );
    (session, results, events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_commands_reach_allowed_sites_through_the_proxy_and_nothing_else() {
    let port = site().await;
    let server = egress_server().await;
    let url = format!("http://127.0.0.1:{port}/");
    let (session, results, events) = run_bash_with(
        &server,
        "acme",
        "egress",
        json!({"deny": ["domain:localhost"]}),
        &[
            format!("curl -s -m 20 {url}"),
            format!("curl -s -m 20 -p {url}"),
            "curl -s -m 20 -w ' status=%{http_code}' http://169.254.169.254/latest/meta-data/"
                .into(),
            format!("curl -s -m 5 --noproxy '*' {url}; echo \" exit=$?\""),
            "echo \"proxy=$HTTPS_PROXY\"".into(),
            format!("curl -s -m 20 -w ' status=%{{http_code}}' http://localhost:{port}/"),
        ],
    )
    .await;
    assert!(
        results[5].contains("EGRESS_DENIED") && results[5].contains("status=403"),
        "a session deny rule refuses the name: {}",
        results[5]
    );
    // Every proxied connection is an `egress` event of the run (purpose `command`).
    let egress: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "egress")
        .map(|e| &e["payload"])
        .filter(|p| p["purpose"] == "command")
        .collect();
    let relayed = egress
        .iter()
        .filter(|p| p["decision"] == "allowed" && p["port"] == port)
        .count();
    assert_eq!(relayed, 2, "{egress:?}");
    assert!(
        egress.iter().any(|p| p["decision"] == "allowed"
            && p["bytes"].as_u64().unwrap_or(0) > 0
            && p["bytes_out"].as_u64().unwrap_or(0) > 0),
        "{egress:?}"
    );
    assert!(
        egress.iter().any(|p| p["host"] == "169.254.169.254"
            && p["decision"] == "denied"
            && p["reason"] == "private_address"),
        "{egress:?}"
    );
    assert!(
        egress.iter().any(|p| p["host"] == "localhost"
            && p["reason"] == "not_allowed"
            && p["rule"] == "domain:localhost"),
        "{egress:?}"
    );
    assert!(
        results[0].contains(PAGE),
        "plain HTTP via the proxy: {}",
        results[0]
    );
    assert!(
        results[1].contains(PAGE),
        "CONNECT tunnel via the proxy: {}",
        results[1]
    );
    assert!(
        results[2].contains("EGRESS_DENIED") && results[2].contains("status=403"),
        "denied destination: {}",
        results[2]
    );
    assert!(
        !results[3].contains(PAGE) && !results[3].contains("exit=0"),
        "a direct connection must fail: {}",
        results[3]
    );
    assert!(
        results[4].contains("proxy=http://127.0.0.1:3128"),
        "{}",
        results[4]
    );
    let (status, body) = server
        .get(&format!("/v1/sessions/{session}"), &server.token("acme"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["config"]["network"], "egress", "{body}");
    let network = &body["sandbox"]["session_network"];
    assert_eq!(network["mode"], "egress", "{body}");
    assert_eq!(network["available"], true, "{body}");
    let logs = server.logs();
    assert!(logs.contains("egress proxy refused"), "{logs}");
    assert!(logs.contains("egress proxy relayed"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlisted_destinations_need_the_sessions_rules_or_grants_not_only_the_bash_call() {
    let port = site().await;
    let server = egress_server().await;
    let curl = format!("curl -s -m 20 -w ' status=%{{http_code}}' http://127.0.0.1:{port}/");
    // Default mode, Bash allowed by rule, no egress rule lists the host: refused.
    let bash_only = json!({"allow": ["Bash(curl:*)"]});
    let (_, results, events) = run_bash_as(
        &server,
        "acme",
        "egress",
        json!({}),
        bash_only,
        std::slice::from_ref(&curl),
    )
    .await;
    assert!(
        results[0].contains("EGRESS_DENIED") && results[0].contains("status=403"),
        "{}",
        results[0]
    );
    assert!(
        events.iter().any(|e| e["type"] == "egress"
            && e["payload"]["decision"] == "denied"
            && e["payload"]["reason"] == "not_allowed"),
        "{}",
        crate::server::summarize(&events)
    );
    // A WebFetch allow rule for the host lets the session's commands reach it too.
    let with_rule = json!({"allow": ["Bash(curl:*)", "WebFetch(domain:127.0.0.1)"]});
    let (_, results, events) =
        run_bash_as(&server, "acme", "egress", json!({}), with_rule, &[curl]).await;
    assert!(results[0].contains(PAGE), "{}", results[0]);
    assert!(
        events.iter().any(|e| e["type"] == "egress"
            && e["payload"]["decision"] == "allowed"
            && e["payload"]["rule"]
                .as_str()
                .is_some_and(|rule| rule.contains("WebFetch(domain:127.0.0.1)"))),
        "{}",
        crate::server::summarize(&events)
    );
    assert_still_serves(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_egress_commands_have_no_network_at_all() {
    let port = site().await;
    let server = egress_server().await;
    let url = format!("http://127.0.0.1:{port}/");
    let (session, results) = run_bash(
        &server,
        "acme",
        "none",
        &[
            format!("curl -s -m 5 {url}; echo \" exit=$?\""),
            format!("curl -s -m 5 -x http://127.0.0.1:3128 {url}; echo \" exit=$?\""),
        ],
    )
    .await;
    for result in &results {
        assert!(
            !result.contains(PAGE) && !result.contains("exit=0"),
            "{result}"
        );
    }
    let (_, body) = server
        .get(&format!("/v1/sessions/{session}"), &server.token("acme"))
        .await;
    assert_eq!(body["sandbox"]["session_network"]["mode"], "none", "{body}");
    let (status, body) = server
        .post(
            "/v1/sessions",
            &server.token("acme"),
            &json!({"network": "host"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(code(&body), "INVALID_REQUEST", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tunnels_and_a_huge_header_are_bounded_and_others_still_get_out() {
    let port = site().await;
    let server = egress_server().await;
    let open_many = "opened=0; for i in $(seq 500); do \
                     if exec {fd}<>/dev/tcp/127.0.0.1/3128; then opened=$((opened+1)); fi; \
                     done 2>/dev/null; echo \"opened=$opened\"; echo \"last=$(timeout 5 head -c 12 <&$fd)\""
        .to_string();
    // One request head of 1 MiB, sent raw (curl refuses such a header itself).
    let huge_header = "exec 3<>/dev/tcp/127.0.0.1/3128; \
                       { printf 'GET http://127.0.0.1:9/ HTTP/1.1\\r\\nX-Big: '; \
                         head -c 1048576 /dev/zero | tr '\\0' a; } >&3 2>/dev/null; \
                       echo \"answer=$(timeout 5 head -c 12 <&3)\""
        .to_string();
    let (_, results) = run_bash(&server, "mallory", "egress", &[open_many, huge_header]).await;
    // The last connections are beyond every bound: closed at once, or answered 429.
    assert!(results[0].contains("opened=500"), "{}", results[0]);
    assert!(!results[1].contains(PAGE), "{}", results[1]);
    let logs = full_log(&server);
    assert!(logs.contains("EGRESS_TUNNEL_LIMIT"), "{logs}");
    assert!(logs.contains("EGRESS_HEADER_TOO_LARGE"), "{logs}");
    // Another tenant's egress command still gets out, and the server still serves.
    let (_, results) = run_bash(
        &server,
        "globex",
        "egress",
        &[format!("curl -s -m 20 http://127.0.0.1:{port}/")],
    )
    .await;
    assert!(results[0].contains(PAGE), "{}", results[0]);
    assert_still_serves(&server).await;
}
