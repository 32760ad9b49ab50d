//! Fake model servers for tests: one axum server on 127.0.0.1:0 that answers the Anthropic
//! (`POST /v1/messages`) and OpenAI (`POST /chat/completions`, `/v1/chat/completions`) routes
//! from a queue of scripted [`Reply`]s, and records every request it saw.
//!
//! ```ignore
//! let fake = FakeLlm::start().await;
//! fake.push(Reply::status(503)).push(Reply::sse(anthropic::text_turn("hi")));
//! // point a provider at fake.url() ...
//! assert_eq!(fake.request_count(), 2);
//! ```
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

/// One scripted answer of the fake server.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A plain answer with a status, extra headers and a body.
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// A 200 `text/event-stream` answer sending `frames` (raw SSE text), `gap` apart; with
    /// `abort`, the connection is cut after the last frame instead of ending the body.
    Sse {
        frames: Vec<String>,
        gap: Duration,
        abort: bool,
    },
}

impl Reply {
    /// A bare status with an empty JSON error body.
    pub fn status(status: u16) -> Self {
        Self::Status {
            status,
            headers: vec![],
            body: json!({"error": {"message": format!("status {status}")}}).to_string(),
        }
    }

    /// A status with a body.
    pub fn status_body(status: u16, body: impl Into<String>) -> Self {
        Self::Status {
            status,
            headers: vec![],
            body: body.into(),
        }
    }

    /// A status with a `retry-after` header.
    pub fn retry_after(status: u16, seconds: &str) -> Self {
        Self::Status {
            status,
            headers: vec![("retry-after".into(), seconds.into())],
            body: "{}".into(),
        }
    }

    /// A complete SSE stream.
    pub fn sse(frames: Vec<String>) -> Self {
        Self::Sse {
            frames,
            gap: Duration::ZERO,
            abort: false,
        }
    }

    /// A slow Anthropic text turn: `ticks` deltas (`tick0 `, `tick1 `, …) `gap` apart, then
    /// `end_turn` — long enough for a test to crash or stop the server mid-stream.
    pub fn slow_text_stream(ticks: usize, gap: Duration) -> Self {
        let mut frames = vec![
            anthropic::message_start(10),
            anthropic::block_start(0, json!({"type": "text", "text": ""})),
        ];
        for i in 0..ticks {
            frames.push(anthropic::text_delta(0, &format!("tick{i} ")));
        }
        frames.extend([
            anthropic::block_stop(0),
            anthropic::message_delta("end_turn", 300),
            anthropic::message_stop(),
        ]);
        Self::Sse {
            frames,
            gap,
            abort: false,
        }
    }

    /// An SSE stream whose connection is cut after `frames`.
    pub fn sse_then_abort(frames: Vec<String>) -> Self {
        Self::Sse {
            frames,
            gap: Duration::ZERO,
            abort: true,
        }
    }
}

/// A request the fake server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// When it arrived (tokio time, so paused-clock tests can measure retry gaps).
    pub at: tokio::time::Instant,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    replies: Mutex<VecDeque<Reply>>,
    fallback: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// A running fake model server (lives as long as the test's runtime).
#[derive(Clone)]
pub struct FakeLlm {
    url: String,
    inner: Arc<Inner>,
}

impl FakeLlm {
    /// Starts a server on an ephemeral loopback port.
    pub async fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/v1/messages", post(handle))
            .route("/chat/completions", post(handle))
            .route("/v1/chat/completions", post(handle))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake llm");
        let addr = listener.local_addr().expect("fake llm address");
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("fake llm server");
        });
        Self {
            url: format!("http://{addr}"),
            inner,
        }
    }

    /// Base URL (`http://127.0.0.1:PORT`), for Anthropic configs and OpenAI configs alike.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Queues a reply (answers are taken in order).
    pub fn push(&self, reply: Reply) -> &Self {
        self.inner.replies.lock().unwrap().push_back(reply);
        self
    }

    /// The reply used once the queue is empty (default: 500 "no scripted reply").
    pub fn set_fallback(&self, reply: Reply) -> &Self {
        *self.inner.fallback.lock().unwrap() = Some(reply);
        self
    }

    /// Every request seen so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// Gaps between consecutive requests (the retry delays actually waited).
    pub fn gaps(&self) -> Vec<Duration> {
        let requests = self.inner.requests.lock().unwrap();
        requests
            .windows(2)
            .map(|pair| pair[1].at.duration_since(pair[0].at))
            .collect()
    }

    /// How many requests were seen.
    pub fn request_count(&self) -> usize {
        self.inner.requests.lock().unwrap().len()
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    inner.requests.lock().unwrap().push(Recorded {
        at: tokio::time::Instant::now(),
        path: uri.path().to_owned(),
        headers,
        body,
    });
    let reply = inner.replies.lock().unwrap().pop_front();
    let reply = reply
        .or_else(|| inner.fallback.lock().unwrap().clone())
        .unwrap_or_else(|| Reply::status_body(500, "no scripted reply"));
    match reply {
        Reply::Status {
            status,
            headers,
            body,
        } => {
            let mut builder = Response::builder()
                .status(StatusCode::from_u16(status).expect("valid status"))
                .header("content-type", "application/json");
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            builder.body(Body::from(body)).expect("response")
        }
        Reply::Sse { frames, gap, abort } => {
            let frames = futures::stream::iter(frames).then(move |frame| async move {
                if !gap.is_zero() {
                    tokio::time::sleep(gap).await;
                }
                Ok::<_, std::io::Error>(Bytes::from(frame))
            });
            let body = if abort {
                let cut = futures::stream::once(async {
                    // Let the client read what was sent, then cut the connection.
                    tokio::task::yield_now().await;
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "fake server cut the stream",
                    ))
                });
                Body::from_stream(frames.chain(cut))
            } else {
                Body::from_stream(frames)
            };
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(body)
                .expect("response")
        }
    }
}

/// Anthropic Messages SSE frames.
pub mod anthropic {
    use serde_json::{Value, json};

    /// One SSE frame `event: name` with JSON data.
    pub fn event(name: &str, data: Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    pub fn message_start(input_tokens: u64) -> String {
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "content": [], "model": "claude-test",
                "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                          "cache_creation_input_tokens": 3, "cache_read_input_tokens": 7}}}),
        )
    }

    pub fn block_start(index: usize, block: Value) -> String {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    }

    pub fn delta(index: usize, delta: Value) -> String {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    }

    pub fn text_delta(index: usize, text: &str) -> String {
        delta(index, json!({"type": "text_delta", "text": text}))
    }

    pub fn json_delta(index: usize, partial: &str) -> String {
        delta(
            index,
            json!({"type": "input_json_delta", "partial_json": partial}),
        )
    }

    pub fn block_stop(index: usize) -> String {
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        )
    }

    pub fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason,
                "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
        )
    }

    pub fn message_stop() -> String {
        event("message_stop", json!({"type": "message_stop"}))
    }

    pub fn ping() -> String {
        event("ping", json!({"type": "ping"}))
    }

    /// A whole turn answering `text` in one text block.
    pub fn text_turn(text: &str) -> Vec<String> {
        vec![
            message_start(10),
            block_start(0, json!({"type": "text", "text": ""})),
            text_delta(0, text),
            block_stop(0),
            message_delta("end_turn", 5),
            message_stop(),
        ]
    }

    /// A whole turn calling one tool, its input JSON sent in `pieces` fragments.
    pub fn tool_turn(id: &str, name: &str, input: &Value, pieces: usize) -> Vec<String> {
        let json = input.to_string();
        let chars: Vec<char> = json.chars().collect();
        let size = chars.len().div_ceil(pieces.max(1)).max(1);
        let mut frames = vec![
            message_start(10),
            block_start(
                0,
                json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            ),
        ];
        for piece in chars.chunks(size) {
            frames.push(json_delta(0, &piece.iter().collect::<String>()));
        }
        frames.extend([block_stop(0), message_delta("tool_use", 9), message_stop()]);
        frames
    }
}

/// OpenAI Chat Completions SSE frames.
pub mod openai {
    use serde_json::{Value, json};

    /// One `data:` frame with a chunk.
    pub fn chunk(value: Value) -> String {
        format!("data: {value}\n\n")
    }

    /// A chunk with one choice carrying `delta` and an optional finish reason.
    pub fn delta(delta: Value, finish_reason: Option<&str>) -> String {
        chunk(
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}),
        )
    }

    pub fn text(text: &str) -> String {
        delta(json!({"content": text}), None)
    }

    pub fn finish(reason: &str) -> String {
        delta(json!({}), Some(reason))
    }

    pub fn usage(prompt: u64, completion: u64, cached: u64) -> String {
        chunk(
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}}),
        )
    }

    pub fn done() -> String {
        "data: [DONE]\n\n".to_owned()
    }

    /// The first fragment of tool call `index`: id and name.
    pub fn call_start(index: usize, id: &str, name: &str) -> String {
        delta(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        )
    }

    /// A later fragment of tool call `index`: more arguments.
    pub fn call_args(index: usize, arguments: &str) -> String {
        delta(
            json!({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}),
            None,
        )
    }

    /// A whole turn answering `text`.
    pub fn text_turn(text: &str) -> Vec<String> {
        vec![
            delta(json!({"role": "assistant", "content": ""}), None),
            self::text(text),
            finish("stop"),
            usage(12, 4, 0),
            done(),
        ]
    }
}
