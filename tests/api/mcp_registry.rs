//! The tenant's MCP server registry (`/v1/mcp-servers`) and Streamable HTTP servers (issue 12),
//! end to end through the HTTP API with the scripted provider, against the real fixture
//! server (`norma-mcp-fixture`, rmcp's server side): over stdio in the command sandbox, and
//! with `--http` as a Streamable HTTP server on a loopback port, reached through the egress
//! client (the tests' operator lists loopback in `egress.allow_private_cidrs`).

use crate::helpers::*;
use serde_json::{Value, json};
use std::io::BufRead;

const FIXTURE: &str = env!("CARGO_BIN_EXE_norma-mcp-fixture");
const ADMIN: [&str; 4] = [
    "sessions:read",
    "sessions:write",
    "approvals:write",
    "tenant:admin",
];

/// The fixture serving Streamable HTTP on a loopback port (killed when dropped).
struct HttpFixture {
    child: std::process::Child,
    addr: String,
}

impl HttpFixture {
    fn start(token: Option<&str>) -> Self {
        let mut command = std::process::Command::new(FIXTURE);
        command.args(["--http", "127.0.0.1:0"]);
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the fixture starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the fixture prints its address");
        Self {
            child,
            addr: line.trim().to_owned(),
        }
    }

    /// The endpoint, named by `host` (`127.0.0.1` or `localhost`).
    fn url(&self, host: &str) -> String {
        let port = self.addr.rsplit(':').next().unwrap();
        format!("http://{host}:{port}/mcp")
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server that can run the stdio fixture in its sandbox and, with `loopback`, reach
/// loopback through the egress client.
async fn spawn(backend: Backend, loopback: bool) -> Option<TestApp> {
    TestApp::spawn_with(backend, |settings| configure(settings, loopback)).await
}

fn configure(settings: &mut norma::config::Settings, loopback: bool) {
    let dir = std::path::Path::new(FIXTURE).parent().unwrap().to_owned();
    settings.sandbox.extra_read = vec![dir];
    if loopback {
        settings.egress.allow_private_cidrs = vec!["127.0.0.0/8".parse().unwrap()];
    }
}

fn admin(app: &TestApp, tenant: &str) -> String {
    app.token_with_scopes(tenant, &ADMIN)
}

async fn put_json(app: &TestApp, path: &str, token: &str, body: &Value) -> reqwest::Response {
    app.client
        .put(app.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn register(app: &TestApp, token: &str, entry: &Value) -> reqwest::Response {
    app.post_json("/v1/mcp-servers", token, entry).await
}

fn stdio_entry(name: &str) -> Value {
    json!({"name": name, "command": FIXTURE, "env": {"FIXTURE_TOKEN": "stdio-s3cret"}})
}

fn http_entry(name: &str, url: &str, token: &str) -> Value {
    json!({"name": name, "transport": "http", "url": url, "bearer_token": token,
           "headers": {"X-Fixture": "header-s3cret"}})
}

fn calls(calls: &[(&str, Value)]) -> Value {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(|(name, input)| json!({"tool_calls": [{"name": name, "input": input}]}))
        .collect();
    turns.push(json!({"text": "done"}));
    json!({"turns": turns})
}

async fn json_of(response: reqwest::Response) -> Value {
    response.json().await.unwrap()
}

async fn session(app: &TestApp, token: &str, id: &str) -> Value {
    json_of(app.get(&format!("/v1/sessions/{id}"), token).await).await
}

async fn invalid_field(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 422);
    let body = json_of(response).await;
    assert_eq!(body["code"], "INVALID_REQUEST", "{body}");
    body["details"]["field"].as_str().unwrap().to_owned()
}

async fn crud_scopes_and_secrets(backend: Backend) {
    let Some(app) = spawn(backend, true).await else {
        return;
    };
    let fixture = HttpFixture::start(Some("tok-123"));
    let user = app.token("acme");
    let root = admin(&app, "acme");
    // Writing needs tenant:admin.
    let refused = register(&app, &user, &stdio_entry("fx")).await;
    assert_eq!(error_code(refused).await, (403, "FORBIDDEN_SCOPE".into()));
    let created = register(&app, &root, &stdio_entry("fx")).await;
    assert_eq!(created.status(), 201);
    let text = created.text().await.unwrap();
    assert!(!text.contains("stdio-s3cret"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["server"]["env"]["FIXTURE_TOKEN"], "<redacted>");
    let created = register(
        &app,
        &root,
        &http_entry("hx", &fixture.url("127.0.0.1"), "tok-123"),
    )
    .await;
    assert_eq!(created.status(), 201);
    let again = register(&app, &root, &stdio_entry("fx")).await;
    assert_eq!(error_code(again).await, (409, "CONFLICT".into()));
    // Reading needs the read scope; secrets are never returned.
    let listed = app.get("/v1/mcp-servers", &user).await;
    assert_eq!(listed.status(), 200);
    let text = listed.text().await.unwrap();
    for secret in ["stdio-s3cret", "tok-123", "header-s3cret"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let listed: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["server"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fx", "hx"]);
    let one = json_of(app.get("/v1/mcp-servers/hx", &user).await).await;
    assert_eq!(one["server"]["bearer_token"], "<redacted>", "{one}");
    assert_eq!(one["server"]["headers"]["X-Fixture"], "<redacted>", "{one}");
    // Another tenant sees none of it.
    let other = app.token("globex");
    assert_eq!(app.get("/v1/mcp-servers/hx", &other).await.status(), 404);
    let theirs = json_of(app.get("/v1/mcp-servers", &other).await).await;
    assert_eq!(theirs["servers"], json!([]));
    // A replace may send the secrets back as shown: they keep their stored values.
    let mut changed = one["server"].clone();
    changed["deferred"] = json!(true);
    let replaced = put_json(&app, "/v1/mcp-servers/hx", &root, &changed).await;
    assert_eq!(replaced.status(), 200);
    assert_eq!(json_of(replaced).await["server"]["deferred"], true);
    let renamed = put_json(&app, "/v1/mcp-servers/hx", &root, &stdio_entry("other")).await;
    assert_eq!(invalid_field(renamed).await, "name");
    let by_user = put_json(&app, "/v1/mcp-servers/hx", &user, &changed).await;
    assert_eq!(by_user.status(), 403);
    // The kept token still opens the server: a session using it reaches its tools.
    let id = app
        .create_session(
            "acme",
            &json!({"use_mcp_servers": ["hx"], "permission": {"mode": "bypass"},
            "model": {"script": calls(&[
                ("SearchExtraTools", json!({"query": "echo"})),
                ("ExecuteExtraTool", json!({"name": "mcp__hx__echo", "input": {"text": "kept"}})),
            ])}}),
        )
        .await;
    app.prompt(&user, &id, "go").await;
    app.wait_for_events(&user, &id, |e| count(e, "terminal") >= 1)
        .await;
    let results = tool_results(&app.messages(&user, &id).await);
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("echo: kept"),
        "{results:?}"
    );
    // Deleting needs tenant:admin too.
    assert_eq!(app.delete("/v1/mcp-servers/fx", &user).await.status(), 403);
    assert_eq!(app.delete("/v1/mcp-servers/fx", &root).await.status(), 204);
    assert_eq!(app.get("/v1/mcp-servers/fx", &user).await.status(), 404);
    assert_eq!(app.delete("/v1/mcp-servers/fx", &root).await.status(), 404);
}

#[tokio::test]
async fn registry_crud_scopes_and_secrets_sqlite() {
    crud_scopes_and_secrets(Backend::Sqlite).await;
}

#[tokio::test]
async fn registry_crud_scopes_and_secrets_postgres() {
    crud_scopes_and_secrets(Backend::Postgres).await;
}

#[tokio::test]
async fn hostile_entries_are_refused_with_their_field() {
    let app = TestApp::spawn_with(Backend::Sqlite, |settings| {
        configure(settings, false);
        settings.limits.mcp_servers = 2;
    })
    .await
    .unwrap();
    let root = admin(&app, "acme");
    let http = |extra: Value| {
        let mut entry =
            json!({"name": "h", "transport": "http", "url": "https://mcp.example.com/mcp"});
        entry
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        entry
    };
    let cases = [
        (json!({"name": "a__b", "command": "x"}), "name"),
        (json!({"name": "", "command": "x"}), "name"),
        (json!({"name": "a", "command": "x", "bogus": 1}), "bogus"),
        (
            json!({"name": "a", "command": "x", "transport": "pigeon"}),
            "transport",
        ),
        (
            json!({"name": "a", "command": "x", "url": "https://x.example"}),
            "url",
        ),
        (
            json!({"name": "a", "command": "x", "args": ["a".repeat(70_000)]}),
            "(root)",
        ),
        (
            json!({"name": "a", "command": "x", "env": {"K": "<redacted>"}}),
            "env",
        ),
        (http(json!({"url": "ftp://x.example/"})), "url"),
        (http(json!({"url": "https://user:pw@x.example/"})), "url"),
        (http(json!({"url": "http://127.0.0.1:9/mcp"})), "url"),
        (http(json!({"url": "http://[::1]:9/mcp"})), "url"),
        (http(json!({"url": "http://169.254.169.254/"})), "url"),
        (http(json!({"command": "x"})), "command"),
        (
            http(json!({"headers": {"Authorization": "Basic x"}})),
            "headers",
        ),
        (http(json!({"headers": {"Bad Name": "x"}})), "headers"),
        (
            http(json!({"headers": {"X-A": "line\r\nbreak"}})),
            "headers",
        ),
        (http(json!({"bearer_token": ""})), "bearer_token"),
        (http(json!({"bearer_token": "<redacted>"})), "bearer_token"),
        (json!({"name": "h", "transport": "http"}), "url"),
        (json!([1, 2]), "(root)"),
    ];
    for (entry, field) in cases {
        let response = register(&app, &root, &entry).await;
        let got = invalid_field(response).await;
        assert_eq!(got, field, "{entry}");
    }
    // Too many servers for the tenant: 429 naming the limit, nothing written.
    for name in ["a", "b"] {
        assert_eq!(
            register(&app, &root, &stdio_entry(name)).await.status(),
            201
        );
    }
    let over = register(&app, &root, &stdio_entry("c")).await;
    assert_eq!(over.status(), 429);
    let body = json_of(over).await;
    assert_eq!(body["code"], "TENANT_LIMIT");
    assert_eq!(body["details"], json!({"limit": "mcp_servers", "max": 2}));
    let listed = json_of(app.get("/v1/mcp-servers", &root).await).await;
    assert_eq!(listed["servers"].as_array().unwrap().len(), 2);
    // Sessions naming servers badly.
    let user = app.token("acme");
    for (config, field) in [
        (json!({"use_mcp_servers": ["nope"]}), "use_mcp_servers[0]"),
        (json!({"use_mcp_servers": ["a", "a"]}), "use_mcp_servers[1]"),
        (json!({"use_mcp_servers": ["a__b"]}), "use_mcp_servers[0]"),
        (
            json!({"use_mcp_servers": ["a"], "mcp_servers": [{"name": "a", "command": "x"}]}),
            "use_mcp_servers[0]",
        ),
    ] {
        let response = app.post_json("/v1/sessions", &user, &config).await;
        assert_eq!(invalid_field(response).await, field, "{config}");
    }
    // The server still serves another tenant.
    let other = admin(&app, "globex");
    assert_eq!(
        register(&app, &other, &stdio_entry("a")).await.status(),
        201
    );
    app.create_session("globex", &json!({"use_mcp_servers": ["a"]}))
        .await;
}

async fn sessions_call_registered_stdio_and_http_tools(backend: Backend) {
    let Some(app) = spawn(backend, true).await else {
        return;
    };
    let fixture = HttpFixture::start(Some("tok-123"));
    let root = admin(&app, "acme");
    assert_eq!(
        register(&app, &root, &stdio_entry("fx")).await.status(),
        201
    );
    let entry = http_entry("hx", &fixture.url("localhost"), "tok-123");
    assert_eq!(register(&app, &root, &entry).await.status(), 201);
    let user = app.token("acme");
    let config = json!({
        "use_mcp_servers": ["fx", "hx"],
        "permission": {"allow": ["mcp__hx__*"]},
        "model": {"script": calls(&[
            ("mcp__fx__env", json!({})),
            ("mcp__hx__echo", json!({"text": "over http"})),
            ("mcp__hx__fail", json!({})),
        ])}
    });
    let id = app.create_session("acme", &config).await;
    app.prompt(&user, &id, "go").await;
    // The stdio server is untrusted and no rule allows it: its call waits on an approval.
    app.wait_for_events(&user, &id, |e| count(e, "approval_requested") == 1)
        .await;
    let approval = app.first_pending_approval(&user, &id).await;
    let answered = app
        .answer(&user, &id, &approval, &json!({"decision": "allow"}))
        .await;
    assert_eq!(answered.status(), 200);
    let events = app
        .wait_for_events(&user, &id, |e| count(e, "terminal") >= 1)
        .await;
    assert_eq!(
        count(&events, "approval_requested"),
        1,
        "the rule allows mcp__hx__*"
    );
    let executing: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_executing")
        .map(|e| e["payload"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        executing,
        ["mcp__fx__env", "mcp__hx__echo", "mcp__hx__fail"]
    );
    let results = tool_results(&app.messages(&user, &id).await);
    let env: Value = serde_json::from_str(results[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        env["FIXTURE_TOKEN"], "stdio-s3cret",
        "the registered env reaches the server"
    );
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("echo: over http"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2]["code"], "TOOL_FAILED");
    assert_eq!(results[2]["content"], "the fixture failed on purpose");
    let shown = session(&app, &user, &id).await;
    let states: Vec<(&str, &str)> = shown["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("fx", "ready"), ("hx", "ready")], "{shown}");
    assert_eq!(shown["config"]["use_mcp_servers"], json!(["fx", "hx"]));
    let text = shown.to_string();
    for secret in ["stdio-s3cret", "tok-123", "header-s3cret"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

#[tokio::test]
async fn sessions_call_registered_stdio_and_http_tools_sqlite() {
    sessions_call_registered_stdio_and_http_tools(Backend::Sqlite).await;
}

#[tokio::test]
async fn sessions_call_registered_stdio_and_http_tools_postgres() {
    sessions_call_registered_stdio_and_http_tools(Backend::Postgres).await;
}

fn state_of<'a>(shown: &'a Value, name: &str) -> &'a Value {
    shown["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {shown}"))
}

#[tokio::test]
async fn http_servers_that_refuse_or_are_down_show_why() {
    let app = spawn(Backend::Sqlite, true).await.unwrap();
    let fixture = HttpFixture::start(Some("tok-123"));
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = json!({
        "mcp_servers": [
            {"name": "wrong", "transport": "http", "url": fixture.url("127.0.0.1"), "bearer_token": "nope"},
            {"name": "down", "transport": "http", "url": format!("http://127.0.0.1:{closed}/mcp")},
            {"name": "ok", "transport": "http", "url": fixture.url("127.0.0.1"), "bearer_token": "tok-123"},
        ],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[
            ("mcp__wrong__echo", json!({"text": "x"})),
            ("mcp__ok__echo", json!({"text": "fine"})),
        ])}
    });
    let user = app.token("acme");
    let id = app.create_session("acme", &config).await;
    app.prompt(&user, &id, "go").await;
    app.wait_for_events(&user, &id, |e| count(e, "terminal") >= 1)
        .await;
    let results = tool_results(&app.messages(&user, &id).await);
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND", "{results:?}");
    assert_eq!(results[1]["is_error"], false, "{results:?}");
    let shown = session(&app, &user, &id).await;
    let wrong = state_of(&shown, "wrong");
    assert_eq!(wrong["state"], "failed", "{wrong}");
    assert!(
        wrong["error"].as_str().unwrap().contains("did not start"),
        "{wrong}"
    );
    let down = state_of(&shown, "down");
    assert_eq!(down["state"], "failed", "{down}");
    assert_eq!(state_of(&shown, "ok")["state"], "ready");
}

#[tokio::test]
async fn an_http_server_on_a_non_public_address_is_refused_by_egress() {
    // No `egress.allow_private_cidrs`: loopback is not reachable, even by a host name.
    let app = spawn(Backend::Sqlite, false).await.unwrap();
    let fixture = HttpFixture::start(None);
    let config = json!({
        "mcp_servers": [{"name": "local", "transport": "http", "url": fixture.url("localhost")}],
        "permission": {"mode": "bypass"},
        "model": {"script": calls(&[("mcp__local__echo", json!({"text": "x"}))])}
    });
    let user = app.token("acme");
    let id = app.create_session("acme", &config).await;
    app.prompt(&user, &id, "go").await;
    app.wait_for_events(&user, &id, |e| count(e, "terminal") >= 1)
        .await;
    let results = tool_results(&app.messages(&user, &id).await);
    assert_eq!(results[0]["code"], "TOOL_NOT_FOUND", "{results:?}");
    let shown = session(&app, &user, &id).await;
    let local = state_of(&shown, "local");
    assert_eq!(local["state"], "failed", "{local}");
    assert!(
        local["error"]
            .as_str()
            .unwrap()
            .contains("egress policy refuses"),
        "{local}"
    );
    // The tenant admin's registration of an IP literal is refused at once.
    let root = admin(&app, "acme");
    let entry = json!({"name": "local", "transport": "http", "url": fixture.url("127.0.0.1")});
    assert_eq!(
        invalid_field(register(&app, &root, &entry).await).await,
        "url"
    );
}

#[tokio::test]
async fn registrations_and_sessions_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path());
    configure(&mut settings, false);
    let app = TestApp::start(
        settings.clone(),
        Backend::Sqlite,
        tempfile::tempdir().unwrap(),
    )
    .await;
    let root = admin(&app, "acme");
    assert_eq!(
        register(&app, &root, &stdio_entry("fx")).await.status(),
        201
    );
    let user = app.token("acme");
    let id = app
        .create_session(
            "acme",
            &json!({"use_mcp_servers": ["fx"], "permission": {"mode": "bypass"},
            "model": {"script": {"per_prompt": true, "turns": [
                {"tool_calls": [{"name": "mcp__fx__echo", "input": {"text": "again"}}]},
                {"text": "done"}
            ]}}}),
        )
        .await;
    app.prompt(&user, &id, "go").await;
    app.wait_for_events(&user, &id, |e| count(e, "terminal") >= 1)
        .await;
    assert_eq!(
        state_of(&session(&app, &user, &id).await, "fx")["state"],
        "ready"
    );
    drop(app);
    let app = TestApp::start(settings, Backend::Sqlite, tempfile::tempdir().unwrap()).await;
    let user = app.token("acme");
    let listed = json_of(app.get("/v1/mcp-servers", &user).await).await;
    assert_eq!(listed["servers"][0]["server"]["name"], "fx", "{listed}");
    // The session's servers start again with its next run.
    assert_eq!(
        state_of(&session(&app, &user, &id).await, "fx")["state"],
        "not_started"
    );
    app.prompt(&user, &id, "go").await;
    app.wait_for_events(&user, &id, |e| count(e, "terminal") >= 2)
        .await;
    let results = tool_results(&app.messages(&user, &id).await);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("echo: again"),
        "{results:?}"
    );
    assert_eq!(
        state_of(&session(&app, &user, &id).await, "fx")["state"],
        "ready"
    );
}

/// A replica died while an MCP call was executing (its `tool_executing` is the last event):
/// the next replica resumes the run with an `INTERRUPTED` result and never calls it again.
#[tokio::test]
async fn an_mcp_call_cut_by_a_crash_is_interrupted_and_not_rerun() {
    use norma::ids::{RunId, SessionId, TenantId};
    use norma::store::{AppendBatch, ConnectOptions, NewEvent, NewRun, NewSession};
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(dir.path());
    configure(&mut settings, false);
    settings.run_lease_seconds = 1;
    let store = norma::store::connect(&settings.database_url(), &ConnectOptions::default())
        .await
        .unwrap();
    let tenant = TenantId::new("acme");
    let session = SessionId::generate();
    let input = json!({"path": "marker", "text": "ran"});
    let config = json!({
        "mcp_servers": [{"name": "fx", "command": FIXTURE}],
        "permission": {"mode": "bypass"},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "mcp__fx__write_file", "input": input}]},
            {"text": "after: {{last_tool_result}}"}
        ]}}
    });
    store
        .create_session(NewSession {
            id: session.clone(),
            tenant: tenant.clone(),
            config,
        })
        .await
        .unwrap();
    let run = store
        .create_run(
            &tenant,
            NewRun {
                id: RunId::generate(),
                session: session.clone(),
                prompt: "go".into(),
            },
            Some(("crashed-replica", std::time::Duration::from_millis(1))),
            norma::limits::RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    let lease = run.lease().unwrap();
    let run_id = Some(run.id.to_string());
    let events = [
        ("run_started", json!({"run_id": run.id, "prompt": "go"})),
        ("model_request", json!({"request": 1})),
        (
            "tool_call",
            json!({"tool_use_id": "toolu_scripted_0_0", "name": "mcp__fx__write_file", "input": input}),
        ),
        ("tool_started", json!({"tool_use_id": "toolu_scripted_0_0"})),
        (
            "tool_executing",
            json!({"tool_use_id": "toolu_scripted_0_0", "name": "mcp__fx__write_file"}),
        ),
    ];
    store
        .append(
            &tenant,
            &session,
            AppendBatch {
                messages: vec![norma::store::NewMessage {
                    message: norma::message::Message::user_text("go"),
                    run_id: run_id.clone(),
                    compaction_boundary: false,
                }],
                events: events
                    .into_iter()
                    .map(|(kind, payload)| NewEvent {
                        kind: kind.into(),
                        payload: payload.into(),
                        run_id: run_id.clone(),
                    })
                    .collect(),
                lease: Some(lease),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let app = TestApp::start(settings, Backend::Sqlite, dir).await;
    let token = app.token("acme");
    app.wait_for_events(&token, session.as_str(), |e| count(e, "terminal") >= 1)
        .await;
    let results = tool_results(&app.messages(&token, session.as_str()).await);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["code"], "INTERRUPTED", "{results:?}");
    let marker = app
        .data_dir()
        .join("workspaces/acme")
        .join(session.as_str())
        .join("marker");
    assert!(
        !marker.exists(),
        "the interrupted MCP call ran a second time"
    );
}
