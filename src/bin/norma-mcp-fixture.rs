//! A small MCP server over stdio, built with rmcp's server side, for the integration tests:
//! a read-only tool (`echo`, annotated `readOnlyHint`), one that writes a file (`write_file`),
//! one that reads a file (`read_file`), an erroring one (`fail`), a slow one (`slow`), one
//! that crashes the server (`crash`), one that prints garbage on stdout (`garbage`), one
//! that shows its environment (`env`) and one that answers with an image and an embedded
//! resource (`media`); and tools that make the
//! server ask the client: an elicitation (`ask`), progress notifications (`progress`), a
//! tool list change (`grow`: adds the tool `extra`; `shrink`: removes it; `flood`: says the
//! list changed `count` times; `lists`: how many times the list was read), sampling
//! (`sample`: `times` requests of `max_tokens` each, answering with what the model said),
//! and one that tells which process answers (`pid`: its id and start time).
//!
//! `--endless-list` makes the tool list hostile: after the first page (the tools above), every
//! page has 20 tools of ~10 KB, a tool with a 200 KB schema, and a `nextCursor`, forever.
//!
//! `--http ADDR` serves the same tools over Streamable HTTP (rmcp's server side on axum) at
//! `http://ADDR/mcp` instead of stdio, printing the bound address on its first line of
//! stdout; `--token T` then refuses requests without `Authorization: Bearer T` (401).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitationAction,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

struct Fixture;

/// This process's identity (its PID is 1 in its own PID namespace): the start time.
fn instance() -> String {
    static START: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    START
        .get_or_init(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            format!("{}-{}", std::process::id(), now.as_nanos())
        })
        .clone()
}

/// Set by `grow` (cleared by `shrink`): the tool list then has `extra`.
static GROWN: AtomicBool = AtomicBool::new(false);
/// How many times the tool list was read.
static LISTS: AtomicU32 = AtomicU32::new(0);
/// `--endless-list` (see the module docs).
static ENDLESS: AtomicBool = AtomicBool::new(false);

/// Page `page` (≥ 1) of the endless list: 20 tools of ~10 KB, one huge tool, a next cursor.
fn endless_page(page: u64) -> Value {
    let mut tools: Vec<Value> = (0..20)
        .map(|n| {
            json!({"name": format!("junk_{page}_{n}"), "description": "x".repeat(10_000),
                   "inputSchema": {"type": "object"}})
        })
        .collect();
    let properties: serde_json::Map<String, Value> = (0..4_000)
        .map(|n| {
            (
                format!("field_{n:05}_padding_padding"),
                json!({"type": "string"}),
            )
        })
        .collect();
    tools.push(
        json!({"name": format!("huge_{page}"), "description": "huge",
                      "inputSchema": {"type": "object", "properties": properties}}),
    );
    json!({"tools": tools, "nextCursor": (page + 1).to_string()})
}

fn tools() -> Value {
    let object = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required});
    let mut list = json!({"tools": [
        {"name": "echo", "description": "Echo the text back.",
         "inputSchema": object(json!({"text": {"type": "string"}}), json!(["text"])),
         "annotations": {"readOnlyHint": true}},
        {"name": "write_file", "description": "Write text to a file.",
         "inputSchema": object(json!({"path": {"type": "string"}, "text": {"type": "string"}}), json!(["path", "text"]))},
        {"name": "read_file", "description": "Reads a file.",
         "inputSchema": object(json!({"path": {"type": "string"}}), json!(["path"]))},
        {"name": "fail", "description": "Always fails.", "inputSchema": object(json!({}), json!([]))},
        {"name": "slow", "description": "Sleeps a while.",
         "inputSchema": object(json!({"seconds": {"type": "number"}}), json!(["seconds"]))},
        {"name": "crash", "description": "Ends the server.", "inputSchema": object(json!({}), json!([]))},
        {"name": "garbage", "description": "Prints garbage on stdout.", "inputSchema": object(json!({}), json!([]))},
        {"name": "env", "description": "Shows the server's environment.",
         "inputSchema": object(json!({}), json!([])), "annotations": {"readOnlyHint": true}},
        {"name": "media", "description": "Answers with an image and a resource.",
         "inputSchema": object(json!({}), json!([]))},
        {"name": "ask", "description": "Asks the user for a name (elicitation).",
         "inputSchema": object(json!({}), json!([]))},
        {"name": "progress", "description": "Reports progress `count` times.",
         "inputSchema": object(json!({"count": {"type": "integer"}}), json!(["count"]))},
        {"name": "grow", "description": "Adds the tool `extra`.", "inputSchema": object(json!({}), json!([]))},
        {"name": "pid", "description": "Tells which server process answers.", "inputSchema": object(json!({}), json!([]))},
        {"name": "sample", "description": "Asks the client's model (sampling).",
         "inputSchema": object(json!({"times": {"type": "integer"}, "max_tokens": {"type": "integer"}}), json!([]))},
        {"name": "shrink", "description": "Removes the tool `extra`.", "inputSchema": object(json!({}), json!([]))},
        {"name": "flood", "description": "Says the tool list changed `count` times.",
         "inputSchema": object(json!({"count": {"type": "integer"}}), json!(["count"]))},
        {"name": "lists", "description": "How many times the tool list was read.", "inputSchema": object(json!({}), json!([]))}
    ]});
    if GROWN.load(Ordering::SeqCst) {
        list["tools"].as_array_mut().unwrap().push(json!(
            {"name": "extra", "description": "Added by grow.", "inputSchema": object(json!({}), json!([]))}
        ));
    }
    list
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        LISTS.fetch_add(1, Ordering::SeqCst);
        let page = if ENDLESS.load(Ordering::SeqCst) {
            match request.and_then(|params| params.cursor) {
                Some(cursor) => endless_page(cursor.parse().unwrap_or(1)),
                None => {
                    let mut first = tools();
                    first["nextCursor"] = json!("1");
                    first
                }
            }
        } else {
            tools()
        };
        serde_json::from_value(page).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "echo" => {
                let text = args["text"].as_str().unwrap_or_default().to_owned();
                let mut result = text_result(format!("echo: {text}"));
                result.structured_content = Some(json!({"echoed": text}));
                result
            }
            "write_file" => {
                let path = args["path"].as_str().unwrap_or_default();
                match std::fs::write(path, args["text"].as_str().unwrap_or_default()) {
                    Ok(()) => text_result(format!("wrote {path}")),
                    Err(error) => CallToolResult::error(vec![ContentBlock::text(format!(
                        "cannot write {path}: {error}"
                    ))]),
                }
            }
            "read_file" => {
                let path = args["path"].as_str().unwrap_or_default();
                match std::fs::read(path) {
                    Ok(bytes) => text_result(format!("read {} bytes", bytes.len())),
                    Err(error) => CallToolResult::error(vec![ContentBlock::text(format!(
                        "cannot read {path}: {error}"
                    ))]),
                }
            }
            "fail" => {
                CallToolResult::error(vec![ContentBlock::text("the fixture failed on purpose")])
            }
            "slow" => {
                let seconds = args["seconds"].as_f64().unwrap_or(1.0);
                tokio::time::sleep(std::time::Duration::from_secs_f64(seconds)).await;
                text_result(format!("slept {seconds} s"))
            }
            "crash" => std::process::exit(3),
            "garbage" => {
                {
                    let mut out = std::io::stdout().lock();
                    for _ in 0..1000 {
                        let _ = out.write_all(b"this is not JSON-RPC at all\n");
                    }
                    let _ = out.flush();
                }
                tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                text_result("still here")
            }
            "env" => {
                let vars: serde_json::Map<String, Value> = std::env::vars()
                    .map(|(k, v)| (k, Value::String(v)))
                    .collect();
                text_result(Value::Object(vars).to_string())
            }
            "media" => CallToolResult::success(vec![
                ContentBlock::text("a picture:"),
                ContentBlock::image("aGVsbG8=", "image/png"),
                ContentBlock::embedded_text("file:///notes.txt", "the notes"),
            ]),
            "ask" => {
                let params = serde_json::from_value(json!({
                    "mode": "form",
                    "message": "What is your name?",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"name": {"type": "string", "maxLength": 20}},
                        "required": ["name"]
                    }
                }))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                match context.peer.create_elicitation(params).await {
                    Ok(answer) => match answer.action {
                        ElicitationAction::Accept => {
                            text_result(format!("accepted: {}", answer.content.unwrap_or_default()))
                        }
                        ElicitationAction::Decline => text_result("declined"),
                        _ => text_result("cancelled"),
                    },
                    Err(error) => text_result(format!("elicitation failed: {error}")),
                }
            }
            "progress" => {
                let count = args["count"].as_u64().unwrap_or(1);
                if let Some(token) = context.meta.get_progress_token() {
                    for step in 1..=count {
                        let params = serde_json::from_value(json!({
                            "progressToken": token,
                            "progress": step,
                            "total": count,
                            "message": format!("step {step}"),
                        }))
                        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                        let _ = context.peer.notify_progress(params).await;
                        if step == 1 {
                            // Later steps come in a burst (the client bounds their rate).
                            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                        }
                    }
                }
                text_result(format!("made {count} steps"))
            }
            "grow" => {
                GROWN.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text_result("grown")
            }
            "shrink" => {
                GROWN.store(false, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text_result("shrunk")
            }
            "flood" => {
                let count = args["count"].as_u64().unwrap_or(1);
                GROWN.store(true, Ordering::SeqCst);
                for _ in 0..count {
                    let _ = context.peer.notify_tool_list_changed().await;
                }
                text_result(format!("said it {count} times"))
            }
            "lists" => text_result(format!("lists: {}", LISTS.load(Ordering::SeqCst))),
            "extra" if GROWN.load(Ordering::SeqCst) => text_result("extra ran"),
            "pid" => text_result(instance()),
            "sample" => {
                let times = args["times"].as_u64().unwrap_or(1);
                let max_tokens = args["max_tokens"].as_u64().unwrap_or(16);
                let mut answers = Vec::new();
                for _ in 0..times {
                    let params = serde_json::from_value(json!({
                        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                        "systemPrompt": "Answer briefly.",
                        "maxTokens": max_tokens
                    }))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                    #[allow(deprecated)]
                    let answer = context.peer.create_message(params).await;
                    match answer {
                        Ok(answer) => {
                            let answer = serde_json::to_value(&answer).unwrap_or_default();
                            answers.push(format!(
                                "sampled: {} ({})",
                                answer["content"]["text"].as_str().unwrap_or_default(),
                                answer["stopReason"].as_str().unwrap_or_default()
                            ));
                        }
                        Err(error) => {
                            answers.push(format!("sampling refused: {error}"));
                            break;
                        }
                    }
                }
                text_result(answers.join("\n"))
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|arg| arg == name)
            .and_then(|at| args.get(at + 1).cloned())
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        instance();
        ENDLESS.store(
            args.iter().any(|arg| arg == "--endless-list"),
            Ordering::SeqCst,
        );
        if let Some(addr) = flag("--http") {
            return serve_http(&addr, flag("--token")).await;
        }
        let server = Fixture.serve(rmcp::transport::stdio()).await?;
        server.waiting().await?;
        Ok(())
    })
}

/// Serves the tools over Streamable HTTP at `http://ADDR/mcp` (see the module docs).
async fn serve_http(addr: &str, token: Option<String>) -> Result<(), Box<dyn std::error::Error>> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let service = StreamableHttpService::new(
        || Ok(Fixture),
        std::sync::Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let expected = token.map(|token| format!("Bearer {token}"));
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let expected = expected.clone();
                    async move {
                        let given = request
                            .headers()
                            .get(axum::http::header::AUTHORIZATION)
                            .and_then(|value| value.to_str().ok());
                        match &expected {
                            Some(expected) if given != Some(expected.as_str()) => {
                                axum::response::IntoResponse::into_response((
                                    axum::http::StatusCode::UNAUTHORIZED,
                                    [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                                    "a bearer token is required",
                                ))
                            }
                            _ => next.run(request).await,
                        }
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", listener.local_addr()?)?;
        out.flush()?;
    }
    axum::serve(listener, router).await?;
    Ok(())
}
