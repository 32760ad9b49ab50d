//! Metrics and traces of the real binary (issue 16).
//!
//! - `/metrics` on `metrics_bind` after real runs, parsed by the Prometheus client library's
//!   strict OpenMetrics parser (Python `prometheus_client`): runs, model calls, tool calls,
//!   permission decisions, HTTP requests by route template; a session's own model name and an
//!   MCP-shaped tool name fold into `other` / `mcp`; the public listener answers 404 for
//!   `/metrics`, and still serves another tenant; outbound webhook attempts counted by
//!   outcome (a 500 then a 200: one `failed`, one `delivered`);
//! - spans exported over OTLP/HTTP to a receiver in this test process (started before the
//!   server), decoded with `opentelemetry-proto`: `invoke_agent` per run with `chat {model}`
//!   and `execute_tool {tool}` children and the GenAI attributes; prompts and tool content
//!   only with `telemetry.capture_content`.

#[path = "support/server.rs"]
mod server;
#[path = "support/webhook_receiver.rs"]
mod webhook_receiver;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use server::{ServerProcess, count, free_port, of_kind};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TENANT: &str = "acme";
/// The model the server's provider is configured with (a label value kept as is).
const CONFIGURED_MODEL: &str = "configured-model";
/// A model name a session chose (never a label value).
const TENANT_MODEL: &str = "tenant-chosen-model-7f3a";
/// An MCP-shaped tool name the model calls (never a label value).
const TENANT_TOOL: &str = "mcp__tenantsrv__secret_tool";

/// A scripted run that lists the workspace (a read-only built-in tool) and ends.
fn listing_session() -> Value {
    json!({"model": {"script": {"turns": [
        {"text": "Looking.", "tool_calls": [{"name": "LS", "input": {"path": "."}}]},
        {"text": "done"}
    ]}}})
}

/// A session naming its own model and calling an MCP-shaped tool it does not have.
fn hostile_labels_session() -> Value {
    json!({"model": {"name": TENANT_MODEL, "script": {"turns": [
        {"tool_calls": [{"name": TENANT_TOOL, "input": {}}]},
        {"text": "done"}
    ]}}})
}

async fn finished(server: &ServerProcess, token: &str, session: &str) -> Vec<Value> {
    server
        .wait_for_events(token, session, Duration::from_secs(30), "terminal", |e| {
            count(e, "terminal") == 1
        })
        .await
}

/// The samples of an exposition, as parsed by `prometheus_client`'s OpenMetrics parser.
fn parse_openmetrics(text: &str) -> Vec<Value> {
    use std::io::Write;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/observability/parse_metrics.py"
    );
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (with prometheus-client, see .ci/run)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the OpenMetrics parser refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The value of the sample `name` whose labels include `labels` (`None`: no such sample).
fn sample(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s["name"] == name
                && labels
                    .iter()
                    .all(|(key, value)| s["labels"][*key].as_str() == Some(*value))
        })
        .map(|s| s["value"].as_f64().unwrap())
}

fn label_values(samples: &[Value], family: &str, label: &str) -> Vec<String> {
    let mut values: Vec<String> = samples
        .iter()
        .filter(|s| s["family"] == family)
        .filter_map(|s| s["labels"][label].as_str().map(str::to_owned))
        .collect();
    values.sort();
    values.dedup();
    values
}

#[tokio::test]
async fn metrics_are_parsed_by_a_real_parser_and_tenant_names_fold() {
    let metrics_port = free_port();
    let mut server = ServerProcess::new(None)
        .env("NORMA_METRICS_BIND", format!("127.0.0.1:{metrics_port}"))
        .env("NORMA_PROVIDER__MODEL", CONFIGURED_MODEL)
        .env("NORMA_ALLOW_PRIVATE_WEBHOOKS", "true")
        .env("NORMA_WEBHOOKS__RETRY_BASE_MS", "50");
    server.start().await;
    let token = server.token(TENANT);
    // The listing session's completion is notified; the receiver fails the first attempt.
    let receiver = webhook_receiver::Receiver::start().await;
    receiver.fail_next(&[500]);
    let (status, session) = server
        .post("/v1/sessions", &token, &listing_session())
        .await;
    assert_eq!(status, 201, "{session}");
    let listing = session["id"].as_str().unwrap().to_owned();
    let (status, webhook) = server
        .post(
            "/v1/webhooks",
            &token,
            &json!({"url": receiver.url, "events": ["run.completed"], "session_id": listing}),
        )
        .await;
    assert_eq!(status, 201, "{webhook}");
    let webhook = webhook["id"].as_str().unwrap().to_owned();
    let (status, accepted) = server
        .post(
            &format!("/v1/sessions/{listing}/prompts"),
            &token,
            &json!({"text": "list the files"}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let (hostile, _) = server
        .session_with_prompt(&token, &hostile_labels_session(), "go")
        .await;
    finished(&server, &token, &listing).await;
    let events = finished(&server, &token, &hostile).await;
    assert_eq!(
        of_kind(&events, "tool_result")[0]["payload"]["result"]["code"],
        "TOOL_NOT_FOUND",
        "{events:?}"
    );
    // The delivery log shows the delivery once the worker counted both attempts.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, log) = server
            .get(&format!("/v1/webhooks/{webhook}/deliveries"), &token)
            .await;
        if log["deliveries"][0]["status"] == "delivered" {
            assert_eq!(log["deliveries"][0]["attempts"], 2, "{log}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not delivered: {log}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The public listener has no metrics, with or without a token.
    for token in [None, Some(&token)] {
        let mut request = server.client.get(server.url("/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 404);
    }

    let response = server
        .client
        .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("metrics listener: {e}\n{}", server.logs()));
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    let text = response.text().await.unwrap();
    let samples = parse_openmetrics(&text);

    // Tenant-chosen names are never label values.
    for secret in [
        TENANT_MODEL,
        "tenantsrv",
        "secret_tool",
        listing.as_str(),
        hostile.as_str(),
    ] {
        assert!(!text.contains(secret), "`{secret}` leaked into\n{text}");
    }
    assert_eq!(
        label_values(&samples, "norma_model_calls", "model"),
        [CONFIGURED_MODEL, "other"]
    );
    let calls = |model| {
        sample(
            &samples,
            "norma_model_calls_total",
            &[
                ("provider", "scripted"),
                ("model", model),
                ("outcome", "ok"),
            ],
        )
    };
    assert_eq!(calls(CONFIGURED_MODEL), Some(2.0), "{text}");
    assert_eq!(calls("other"), Some(2.0), "{text}");
    assert!(
        sample(
            &samples,
            "norma_model_tokens_total",
            &[("model", CONFIGURED_MODEL), ("kind", "output")]
        )
        .unwrap()
            >= 2.0
    );
    assert_eq!(
        sample(
            &samples,
            "norma_model_time_to_first_token_seconds_count",
            &[("model", "other")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &samples,
            "norma_tool_calls_total",
            &[("tool", "LS"), ("outcome", "ok")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &samples,
            "norma_tool_calls_total",
            &[("tool", "mcp"), ("outcome", "error")]
        ),
        Some(1.0)
    );
    assert_eq!(
        label_values(&samples, "norma_tool_calls", "tool"),
        ["LS", "mcp"]
    );
    assert!(
        sample(&samples, "norma_permission_decisions_total", &[]).is_some(),
        "{text}"
    );
    assert_eq!(
        sample(
            &samples,
            "norma_runs_total",
            &[("status", "completed"), ("reason", "end_turn")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&samples, "norma_run_duration_seconds_count", &[]),
        Some(2.0)
    );
    assert_eq!(sample(&samples, "norma_runs_started_total", &[]), Some(2.0));
    assert!(
        sample(
            &samples,
            "norma_store_transaction_duration_seconds_count",
            &[("op", "append")]
        )
        .unwrap()
            >= 2.0
    );
    let outbound = |outcome| {
        sample(
            &samples,
            "norma_webhook_deliveries_total",
            &[("kind", "outbound"), ("outcome", outcome)],
        )
    };
    assert_eq!(outbound("failed"), Some(1.0), "{text}");
    assert_eq!(outbound("delivered"), Some(1.0), "{text}");
    assert_eq!(outbound("refused"), None, "{text}");
    assert_eq!(sample(&samples, "norma_sse_subscribers", &[]), Some(0.0));
    assert_eq!(sample(&samples, "norma_approvals_pending", &[]), Some(0.0));
    assert_eq!(sample(&samples, "norma_runs_queued", &[]), Some(0.0));

    // Requests count by route template (never a raw path with ids), unmatched as `other`.
    assert_eq!(
        sample(
            &samples,
            "norma_http_requests_total",
            &[
                ("route", "/v1/sessions/{id}/prompts"),
                ("method", "POST"),
                ("status", "202")
            ]
        ),
        Some(2.0)
    );
    let routes = label_values(&samples, "norma_http_requests", "route");
    assert!(routes.contains(&"other".to_owned()), "{routes:?}");
    assert!(routes.iter().all(|r| r == "other" || r.starts_with('/')));
    assert!(
        sample(
            &samples,
            "norma_http_request_duration_seconds_bucket",
            &[("route", "/v1/sessions"), ("le", "+Inf")]
        )
        .unwrap()
            >= 2.0
    );

    // Scrapes answer nothing else; the server still serves another tenant.
    let other = server
        .client
        .get(format!("http://127.0.0.1:{metrics_port}/v1/sessions"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    let (status, _) = server
        .post("/v1/sessions", &server.token("globex"), &json!({}))
        .await;
    assert_eq!(status, 201, "the server still serves another tenant");
}

/// Collects every span posted to `/v1/traces` (OTLP/HTTP protobuf).
async fn otlp_receiver() -> (u16, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let sink = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|kv| kv.key == "service.name")
                        .and_then(|kv| kv.value.as_ref()?.value.clone());
                    assert_eq!(service, Some(Any::StringValue("norma".into())));
                    for scope in resource.scope_spans {
                        sink.lock().unwrap().extend(scope.spans);
                    }
                }
                (
                    [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, spans)
}

fn attr(span: &Span, key: &str) -> Option<Any> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
}

fn text_attr(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        Any::StringValue(text) => Some(text),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn int_attr(span: &Span, key: &str) -> Option<i64> {
    match attr(span, key)? {
        Any::IntValue(value) => Some(value),
        other => panic!("{key} is not an integer: {other:?}"),
    }
}

/// Runs the listing session on a server exporting to a local receiver; returns the run's
/// spans (`invoke_agent` first) and the session, run and tool call ids.
async fn traced_run(capture_content: bool) -> (Vec<Span>, String, String, String) {
    let (port, spans) = otlp_receiver().await;
    let mut server = ServerProcess::new(None)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("NORMA_PROVIDER__MODEL", CONFIGURED_MODEL)
        .env(
            "NORMA_TELEMETRY__CAPTURE_CONTENT",
            capture_content.to_string(),
        );
    server.start().await;
    let token = server.token(TENANT);
    let (session, run) = server
        .session_with_prompt(&token, &listing_session(), "list the files")
        .await;
    let events = finished(&server, &token, &session).await;
    let call_id = of_kind(&events, "tool_call")[0]["payload"]["tool_use_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // SIGTERM: the exporter flushes what is left before the process exits.
    server.terminate(Duration::from_secs(20)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let received = spans.lock().unwrap().clone();
        let agent = received
            .iter()
            .find(|s| s.name == "invoke_agent" && text_attr(s, "run_id").as_deref() == Some(&run));
        if let Some(agent) = agent {
            let children: Vec<Span> = received
                .iter()
                .filter(|s| s.parent_span_id == agent.span_id)
                .cloned()
                .collect();
            if children.len() >= 3 {
                let mut run_spans = vec![agent.clone()];
                run_spans.extend(children);
                return (run_spans, session, run, call_id);
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run's spans did not arrive: {:?}\n{}",
            received.iter().map(|s| &s.name).collect::<Vec<_>>(),
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_run_is_traced_with_the_genai_conventions() {
    let (spans, session, run, call_id) = traced_run(false).await;
    let agent = &spans[0];
    assert_eq!(
        text_attr(agent, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    for span in &spans {
        assert_eq!(span.trace_id, agent.trace_id, "one trace per run");
        assert_eq!(
            text_attr(span, "gen_ai.conversation.id").as_deref(),
            Some(session.as_str())
        );
        assert_eq!(
            text_attr(span, "session_id").as_deref(),
            Some(session.as_str())
        );
        assert_eq!(text_attr(span, "run_id").as_deref(), Some(run.as_str()));
        assert_eq!(text_attr(span, "tenant").as_deref(), Some(TENANT));
        for content in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert_eq!(
                attr(span, content),
                None,
                "{content} without capture_content"
            );
        }
    }
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == format!("chat {CONFIGURED_MODEL}"))
        .collect();
    assert_eq!(chats.len(), 2, "two model calls: {spans:?}");
    for chat in &chats {
        assert_eq!(
            text_attr(chat, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            text_attr(chat, "gen_ai.provider.name").as_deref(),
            Some("scripted")
        );
        assert_eq!(
            text_attr(chat, "gen_ai.system").as_deref(),
            Some("scripted")
        );
        assert_eq!(
            text_attr(chat, "gen_ai.request.model").as_deref(),
            Some(CONFIGURED_MODEL)
        );
        assert_eq!(
            text_attr(chat, "gen_ai.response.model").as_deref(),
            Some(CONFIGURED_MODEL)
        );
        assert!(int_attr(chat, "gen_ai.usage.input_tokens").unwrap() > 0);
        assert!(int_attr(chat, "gen_ai.usage.output_tokens").unwrap() > 0);
    }
    let finish: Vec<String> = chats
        .iter()
        .map(|chat| text_attr(chat, "gen_ai.response.finish_reasons").unwrap())
        .collect();
    assert!(finish.contains(&"tool_use".to_owned()), "{finish:?}");
    assert!(finish.contains(&"end_turn".to_owned()), "{finish:?}");
    let tools: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "execute_tool LS")
        .collect();
    assert_eq!(tools.len(), 1, "{spans:?}");
    let tool = tools[0];
    assert_eq!(
        text_attr(tool, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(text_attr(tool, "gen_ai.tool.name").as_deref(), Some("LS"));
    assert_eq!(
        text_attr(tool, "gen_ai.tool.call.id").as_deref(),
        Some(call_id.as_str())
    );
    assert_eq!(attr(tool, "error.type"), None, "the call succeeded");
}

#[tokio::test]
async fn content_is_on_the_spans_only_when_capture_is_on() {
    let (spans, ..) = traced_run(true).await;
    let chat = spans
        .iter()
        .find(|s| s.name.starts_with("chat "))
        .expect("a chat span");
    let input = text_attr(chat, "gen_ai.input.messages").expect("the prompt");
    assert!(input.contains("list the files"), "{input}");
    let outputs: Vec<String> = spans
        .iter()
        .filter_map(|s| text_attr(s, "gen_ai.output.messages"))
        .collect();
    assert!(
        outputs.iter().any(|o| o.contains("Looking.")),
        "{outputs:?}"
    );
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool LS")
        .expect("the tool span");
    let arguments = text_attr(tool, "gen_ai.tool.call.arguments").unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&arguments).unwrap(),
        json!({"path": "."})
    );
    assert!(text_attr(tool, "gen_ai.tool.call.result").is_some());
}
