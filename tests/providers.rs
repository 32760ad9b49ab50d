//! Providers against fake servers over real HTTP on loopback: both wire formats, retry and
//! rate limiting (N19–N20, every row of conformance/retry.json), the scripted provider, and
//! key redaction.

#[path = "support/fake_llm.rs"]
mod fake_llm;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fake_llm::{FakeLlm, Reply, anthropic as an, openai as oa};
use norma::llm::retry::{RetryPolicy, retry_after_delay};
use norma::llm::{
    AssistantTurn, ModelRequest, Provider, ProviderConfig, ProviderError, ProviderKind, StopReason,
    StreamItem, ToolSpec, Usage, build_provider, collect,
};
use norma::message::{ContentBlock, Message, Role, ToolResultBlock, ViewMessage};
use pretty_assertions::assert_eq;
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const ANTHROPIC_KEY: &str = "sk-ant-SECRET-anthropic-0123";
const OPENAI_KEY: &str = "sk-SECRET-openai-4567";

fn config(kind: ProviderKind, url: &str, key: &str) -> ProviderConfig {
    let mut config = ProviderConfig::new(kind);
    config.base_url = Some(url.to_owned());
    config.model = "test-model".into();
    config.api_key = Some(SecretString::from(key));
    config.request_timeout = Duration::from_secs(3600);
    config
}

fn anthropic(url: &str) -> ProviderConfig {
    config(ProviderKind::Anthropic, url, ANTHROPIC_KEY)
}

fn openai(url: &str) -> ProviderConfig {
    config(ProviderKind::OpenAi, url, OPENAI_KEY)
}

fn provider(config: &ProviderConfig) -> Arc<dyn Provider> {
    build_provider(config, reqwest::Client::new()).expect("provider builds")
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        system: Some("You are a test.".into()),
        messages: messages.into_iter().map(ViewMessage::from).collect(),
        tools: vec![ToolSpec {
            name: "Read".into(),
            description: "Read a file".into(),
            input_schema:
                json!({"type": "object", "properties": {"file_path": {"type": "string"}}}).into(),
        }]
        .into(),
        max_tokens: 1024,
        temperature: None,
    }
}

fn hello() -> ModelRequest {
    request(vec![Message::user_text("hello")])
}

/// Runs one logical request to completion, returning the turn (or error) and every item.
async fn run(
    provider: &dyn Provider,
    request: &ModelRequest,
) -> (Result<AssistantTurn, ProviderError>, Vec<StreamItem>) {
    let cancel = CancellationToken::new();
    let mut items = Vec::new();
    let result = match provider.stream(request, &cancel).await {
        Ok(stream) => collect(stream, |item| items.push(item.clone())).await,
        Err(error) => Err(error),
    };
    (result, items)
}

fn text_of(turn: &AssistantTurn) -> String {
    turn.message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn position(items: &[StreamItem], wanted: impl Fn(&StreamItem) -> bool) -> usize {
    items.iter().position(wanted).expect("item present")
}

// ---------------------------------------------------------------- Anthropic wire format

#[tokio::test]
async fn anthropic_streams_every_block_type() {
    let fake = FakeLlm::start().await;
    let input = json!({"file_path": "src/main.rs", "limit": 20, "nested": {"a": [1, 2, 3]}});
    let json_text = input.to_string();
    let mut frames = vec![
        an::message_start(10),
        an::ping(),
        an::block_start(0, json!({"type": "thinking", "thinking": ""})),
        an::delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
        an::delta(0, json!({"type": "thinking_delta", "thinking": "think."})),
        an::delta(
            0,
            json!({"type": "signature_delta", "signature": "sig-abc"}),
        ),
        an::block_stop(0),
        an::block_start(1, json!({"type": "redacted_thinking", "data": "opaque=="})),
        an::block_stop(1),
        an::block_start(2, json!({"type": "text", "text": ""})),
        an::text_delta(2, "I will "),
        an::text_delta(2, "read "),
        an::text_delta(2, "it."),
        an::block_stop(2),
        an::block_start(
            3,
            json!({"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}),
        ),
    ];
    let chars: Vec<char> = json_text.chars().collect();
    for piece in chars.chunks(3) {
        frames.push(an::json_delta(3, &piece.iter().collect::<String>()));
    }
    frames.extend([
        an::block_stop(3),
        an::block_start(
            4,
            json!({"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}}),
        ),
        an::block_stop(4),
        an::ping(),
        an::message_delta("tool_use", 42),
        an::message_stop(),
    ]);
    fake.push(Reply::sse(frames));

    let provider = provider(&anthropic(&fake.url()));
    let (turn, items) = run(provider.as_ref(), &hello()).await;
    let turn = turn.expect("turn");

    assert_eq!(
        turn.message,
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Let me think.".into(),
                    signature: Some("sig-abc".into())
                },
                ContentBlock::RedactedThinking {
                    data: "opaque==".into()
                },
                ContentBlock::Text {
                    text: "I will read it.".into()
                },
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "Read".into(),
                    input: input.clone()
                },
                ContentBlock::ToolUse {
                    id: "toolu_2".into(),
                    name: "Read".into(),
                    input: json!({})
                },
            ]
        }
    );
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 10,
            output_tokens: 42,
            cache_read_tokens: 7,
            cache_write_tokens: 3
        }
    );
    assert_eq!(turn.stop_reason, StopReason::ToolUse);

    // The input arrived in many fragments, each surfaced, and the call was done (parsed) as
    // soon as its block stopped: before the next block started.
    let fragments: Vec<&str> = items
        .iter()
        .filter_map(|item| match item {
            StreamItem::ToolUseInputDelta {
                index: 3,
                partial_json,
            } => Some(partial_json.as_str()),
            _ => None,
        })
        .collect();
    assert!(fragments.len() > 10, "{} fragments", fragments.len());
    assert_eq!(fragments.concat(), json_text);
    let done_1 = position(&items, |i| {
        matches!(i, StreamItem::ToolUseDone { index: 3, .. })
    });
    let start_2 = position(&items, |i| {
        matches!(i, StreamItem::ToolUseStart { index: 4, .. })
    });
    assert!(done_1 < start_2);
    assert_eq!(
        items[items.len() - 1],
        StreamItem::Stop(StopReason::ToolUse)
    );
    assert!(items.contains(&StreamItem::ThinkingSignature("sig-abc".into())));

    let seen = fake.requests();
    assert_eq!(seen.len(), 1);
    let seen = &seen[0];
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], ANTHROPIC_KEY);
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.body["model"], "test-model");
    assert_eq!(seen.body["max_tokens"], 1024);
    assert_eq!(seen.body["system"], "You are a test.");
    assert_eq!(seen.body["tools"][0]["name"], "Read");
    assert_eq!(seen.body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(
        seen.body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hello"}]}])
    );
}

#[tokio::test]
async fn anthropic_history_goes_to_the_wire_unchanged() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(an::text_turn("ok")));
    let history = vec![
        Message::user_text("read a"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::RedactedThinking { data: "xx".into() },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "Read".into(),
                    input: json!({"file_path": "a"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock::error(
                "t1",
                "TOOL_FAILED",
                "no such file",
            ))],
        },
    ];
    let provider = provider(&anthropic(&fake.url()));
    let (turn, _) = run(provider.as_ref(), &request(history)).await;
    assert_eq!(text_of(&turn.expect("turn")), "ok");
    assert_eq!(
        fake.requests()[0].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "read a"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "no such file", "is_error": true},
            ]},
        ])
    );
}

#[tokio::test]
async fn anthropic_max_tokens_stop_reason() {
    let fake = FakeLlm::start().await;
    let mut frames = an::text_turn("truncat");
    frames[4] = an::message_delta("max_tokens", 1024);
    fake.push(Reply::sse(frames));
    let provider = provider(&anthropic(&fake.url()));
    let turn = run(provider.as_ref(), &hello()).await.0.expect("turn");
    assert_eq!(turn.stop_reason, StopReason::MaxTokens);
    assert_eq!(turn.usage.output_tokens, 1024);
    assert_eq!(text_of(&turn), "truncat");
}

#[tokio::test]
async fn anthropic_tool_input_split_in_many_deltas() {
    let fake = FakeLlm::start().await;
    let input = json!({"command": "ls -la", "description": "list ünïcode files"});
    fake.push(Reply::sse(an::tool_turn("toolu_9", "Bash", &input, 25)));
    let provider = provider(&anthropic(&fake.url()));
    let (turn, items) = run(provider.as_ref(), &hello()).await;
    let turn = turn.expect("turn");
    let uses: Vec<_> = turn.message.tool_uses().collect();
    assert_eq!(uses, vec![("toolu_9", "Bash", &input)]);
    let deltas = items
        .iter()
        .filter(|i| matches!(i, StreamItem::ToolUseInputDelta { .. }))
        .count();
    assert!(deltas >= 15, "{deltas} deltas");
}

#[tokio::test]
async fn anthropic_malformed_tool_json_is_a_decode_error() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(vec![
        an::message_start(1),
        an::block_start(
            0,
            json!({"type": "tool_use", "id": "t", "name": "Read", "input": {}}),
        ),
        an::json_delta(0, "{\"file_path\": "),
        an::json_delta(0, "oops}"),
        an::block_stop(0),
        an::message_delta("tool_use", 3),
        an::message_stop(),
    ]));
    let provider = provider(&anthropic(&fake.url()));
    let error = run(provider.as_ref(), &hello())
        .await
        .0
        .expect_err("decode error");
    assert!(matches!(error, ProviderError::Decode(_)), "{error:?}");
    assert_eq!(error.code(), "PROVIDER_DECODE");
}

/// A tool input nested `levels` deep (`{"a": [[…[1]…]]}`), as Anthropic streams it.
fn deep_tool_turn(levels: usize) -> Vec<String> {
    let input = format!(
        r#"{{"a": {}1{}}}"#,
        "[".repeat(levels - 1),
        "]".repeat(levels - 1)
    );
    vec![
        an::message_start(1),
        an::block_start(
            0,
            json!({"type": "tool_use", "id": "t", "name": "Read", "input": {}}),
        ),
        an::json_delta(0, &input),
        an::block_stop(0),
        an::message_delta("tool_use", 3),
        an::message_stop(),
    ]
}

#[tokio::test]
async fn anthropic_tool_input_nested_past_the_bound_is_a_decode_error() {
    let fake = FakeLlm::start().await;
    let provider = provider(&anthropic(&fake.url()));
    // The deepest input serde_json parses (127 levels) would make the transcript that stores
    // it unreadable; 64 levels is the bound, 65 is refused.
    fake.push(Reply::sse(deep_tool_turn(64)));
    let (turn, _) = run(provider.as_ref(), &hello()).await;
    assert_eq!(turn.expect("64 levels").message.tool_uses().count(), 1);
    for levels in [65, 127] {
        fake.push(Reply::sse(deep_tool_turn(levels)));
        let error = run(provider.as_ref(), &hello())
            .await
            .0
            .expect_err("too deep");
        assert_eq!(error.code(), "PROVIDER_DECODE", "{levels}: {error}");
        assert!(
            error.to_string().contains("nests deeper than 64 levels"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn anthropic_error_event_mid_stream_ends_the_turn_without_retry() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(vec![
        an::message_start(1),
        an::block_start(0, json!({"type": "text", "text": ""})),
        an::text_delta(0, "partial"),
        an::event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]));
    fake.set_fallback(Reply::sse(an::text_turn("should not be fetched")));
    let provider = provider(&anthropic(&fake.url()));
    let (result, items) = run(provider.as_ref(), &hello()).await;
    let error = result.expect_err("overloaded");
    assert!(
        matches!(&error, ProviderError::StreamDropped(m) if m.contains("overloaded_error")),
        "{error:?}"
    );
    assert_eq!(items, vec![StreamItem::TextDelta("partial".into())]);
    assert_eq!(fake.request_count(), 1);
}

// ---------------------------------------------------------------- OpenAI wire format

#[tokio::test]
async fn openai_streams_text_and_tool_calls() {
    let fake = FakeLlm::start().await;
    let first = json!({"file_path": "a.txt"}).to_string();
    let second = json!({"pattern": "**/*.rs", "path": "src"}).to_string();
    let mut frames = vec![
        oa::delta(json!({"role": "assistant", "content": ""}), None),
        oa::text("Let me "),
        oa::text("check."),
        oa::call_start(0, "call_a", "Read"),
    ];
    for piece in first.as_bytes().chunks(2) {
        frames.push(oa::call_args(0, std::str::from_utf8(piece).unwrap()));
    }
    frames.push(oa::call_start(1, "call_b", "Glob"));
    for piece in second.as_bytes().chunks(3) {
        frames.push(oa::call_args(1, std::str::from_utf8(piece).unwrap()));
    }
    frames.extend([oa::finish("tool_calls"), oa::usage(100, 20, 30), oa::done()]);
    fake.push(Reply::sse(frames));

    let provider = provider(&openai(&fake.url()));
    let (turn, items) = run(provider.as_ref(), &hello()).await;
    let turn = turn.expect("turn");
    assert_eq!(
        turn.message.content,
        vec![
            ContentBlock::Text {
                text: "Let me check.".into()
            },
            ContentBlock::ToolUse {
                id: "call_a".into(),
                name: "Read".into(),
                input: json!({"file_path": "a.txt"})
            },
            ContentBlock::ToolUse {
                id: "call_b".into(),
                name: "Glob".into(),
                input: json!({"pattern": "**/*.rs", "path": "src"})
            },
        ]
    );
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 70,
            output_tokens: 20,
            cache_read_tokens: 30,
            cache_write_tokens: 0
        }
    );
    assert_eq!(turn.stop_reason, StopReason::ToolUse);
    // The first call is complete as soon as the second one starts.
    let done_a = position(&items, |i| {
        matches!(i, StreamItem::ToolUseDone { index: 0, .. })
    });
    let start_b = position(&items, |i| {
        matches!(i, StreamItem::ToolUseStart { index: 1, .. })
    });
    assert!(done_a < start_b);
    let fragments = items
        .iter()
        .filter(|i| matches!(i, StreamItem::ToolUseInputDelta { .. }))
        .count();
    assert!(fragments > 15, "{fragments}");

    let seen = &fake.requests()[0];
    assert_eq!(seen.path, "/chat/completions");
    assert_eq!(
        seen.headers["authorization"],
        format!("Bearer {OPENAI_KEY}").as_str()
    );
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.body["stream_options"]["include_usage"], true);
    assert_eq!(seen.body["model"], "test-model");
    assert_eq!(seen.body["max_tokens"], 1024);
    assert_eq!(
        seen.body["messages"],
        json!([
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "hello"},
        ])
    );
    assert_eq!(seen.body["tools"][0]["type"], "function");
    assert_eq!(seen.body["tools"][0]["function"]["name"], "Read");
    assert_eq!(
        seen.body["tools"][0]["function"]["parameters"]["type"],
        "object"
    );
}

#[tokio::test]
async fn openai_length_and_reasoning() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(vec![
        oa::delta(json!({"reasoning_content": "thinking..."}), None),
        oa::text("cut"),
        oa::finish("length"),
        oa::usage(5, 1024, 0),
        oa::done(),
    ]));
    let provider = provider(&openai(&fake.url()));
    let turn = run(provider.as_ref(), &hello()).await.0.expect("turn");
    assert_eq!(turn.stop_reason, StopReason::MaxTokens);
    assert_eq!(turn.usage.output_tokens, 1024);
    assert_eq!(
        turn.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "thinking...".into(),
                signature: None
            },
            ContentBlock::Text { text: "cut".into() },
        ]
    );
}

#[tokio::test]
async fn openai_history_uses_tool_calls_and_tool_messages() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(oa::text_turn("fine")));
    let history = vec![
        Message::user_text("look"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "private".into(),
                    signature: None,
                },
                ContentBlock::Text {
                    text: "Reading.".into(),
                },
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "Read".into(),
                    input: json!({"file_path": "a"}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "Read".into(),
                    input: json!({"file_path": "b"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult(ToolResultBlock::ok("call_1", "alpha")),
                ContentBlock::ToolResult(ToolResultBlock::error(
                    "call_2",
                    "TOOL_FAILED",
                    "missing",
                )),
            ],
        },
    ];
    let provider = provider(&openai(&fake.url()));
    let turn = run(provider.as_ref(), &request(history))
        .await
        .0
        .expect("turn");
    assert_eq!(text_of(&turn), "fine");
    assert_eq!(turn.stop_reason, StopReason::EndTurn);
    assert_eq!(
        fake.requests()[0].body["messages"],
        json!([
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "look"},
            {"role": "assistant", "content": "Reading.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "Read", "arguments": "{\"file_path\":\"a\"}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "Read", "arguments": "{\"file_path\":\"b\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "alpha"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error (TOOL_FAILED): missing"},
        ])
    );
}

#[tokio::test]
async fn openai_without_key_sends_no_authorization() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(oa::text_turn("local")));
    let mut config = openai(&fake.url());
    config.api_key = None;
    let turn = run(provider(&config).as_ref(), &hello())
        .await
        .0
        .expect("turn");
    assert_eq!(text_of(&turn), "local");
    assert!(fake.requests()[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn openai_context_length_exceeded_is_context_overflow() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status_body(
        400,
        json!({"error": {"message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error", "code": "context_length_exceeded"}})
        .to_string(),
    ));
    let provider = provider(&openai(&fake.url()));
    let error = run(provider.as_ref(), &hello())
        .await
        .0
        .expect_err("overflow");
    assert!(
        matches!(error, ProviderError::ContextOverflow(_)),
        "{error:?}"
    );
    assert_eq!(error.code(), "CONTEXT_OVERFLOW");
    assert!(!error.is_retryable());
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn openai_stream_ending_before_finish_is_dropped() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(vec![oa::text("half")]));
    let provider = provider(&openai(&fake.url()));
    let error = run(provider.as_ref(), &hello())
        .await
        .0
        .expect_err("dropped");
    assert!(
        matches!(error, ProviderError::StreamDropped(_)),
        "{error:?}"
    );
    assert_eq!(fake.request_count(), 1);
}

// ---------------------------------------------------------------- Retry (N19–N20)

fn secs(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds)
}

#[tokio::test(start_paused = true)]
async fn retries_429_503_408_then_succeeds_after_the_schedule() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status(429))
        .push(Reply::status(503))
        .push(Reply::status(408))
        .push(Reply::sse(an::text_turn("finally")));
    let provider = provider(&anthropic(&fake.url()));
    let start = Instant::now();
    let turn = run(provider.as_ref(), &hello()).await.0.expect("turn");
    assert_eq!(text_of(&turn), "finally");
    assert_eq!(start.elapsed(), secs(0.5 + 1.0 + 2.0));
    assert_eq!(fake.gaps(), vec![secs(0.5), secs(1.0), secs(2.0)]);
    let bodies: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 4);
    assert!(
        bodies.iter().all(|body| body == &bodies[0]),
        "same body re-sent"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_30_is_capped_at_8_seconds() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::retry_after(429, "30"))
        .push(Reply::sse(oa::text_turn("ok")));
    let provider = provider(&openai(&fake.url()));
    let start = Instant::now();
    let turn = run(provider.as_ref(), &hello()).await.0.expect("turn");
    assert_eq!(text_of(&turn), "ok");
    assert_eq!(start.elapsed(), secs(8.0));
    assert_eq!(fake.gaps(), vec![secs(8.0)]);
}

#[tokio::test(start_paused = true)]
async fn zero_and_negative_retries_do_not_retry() {
    for retries in [0, -1] {
        let fake = FakeLlm::start().await;
        fake.push(Reply::status(503))
            .push(Reply::sse(an::text_turn("never")));
        let mut config = anthropic(&fake.url());
        config.retries = retries;
        let error = run(provider(&config).as_ref(), &hello())
            .await
            .0
            .expect_err("no retry");
        assert!(
            matches!(error, ProviderError::Status { status: 503, .. }),
            "retries={retries}: {error:?}"
        );
        assert_eq!(fake.request_count(), 1, "retries={retries}");
    }
}

#[tokio::test(start_paused = true)]
async fn status_400_is_not_retried_and_keeps_the_body() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status_body(400, "{\"error\":\"bad tool schema\"}"))
        .push(Reply::sse(an::text_turn("never")));
    let provider = provider(&anthropic(&fake.url()));
    let error = run(provider.as_ref(), &hello()).await.0.expect_err("400");
    assert_eq!(
        error,
        ProviderError::Status {
            status: 400,
            body: "{\"error\":\"bad tool schema\"}".into()
        }
    );
    assert_eq!(error.code(), "PROVIDER_STATUS");
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn anthropic_prompt_too_long_is_context_overflow() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::status_body(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "prompt is too long: 210000 tokens > 200000 maximum"}})
        .to_string(),
    ));
    let provider = provider(&anthropic(&fake.url()));
    let error = run(provider.as_ref(), &hello())
        .await
        .0
        .expect_err("overflow");
    assert!(
        matches!(&error, ProviderError::ContextOverflow(body) if body.contains("210000")),
        "{error:?}"
    );
    assert_eq!(fake.request_count(), 1);
}

/// A provider answering `400` with a body that never ends (1 KiB chunks for as long as the
/// client reads), or that stops sending after a first chunk: the error keeps the first 64 KiB
/// and the read ends (at the body cap, or at the request timeout), never with the run.
#[tokio::test(start_paused = true)]
async fn an_endless_or_stalled_error_body_is_read_to_its_cap_or_timeout() {
    for stall in [false, true] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_http_request(&mut socket).await;
            let head = "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            let chunk = format!("400\r\n{}\r\n", "e".repeat(1024));
            loop {
                if socket.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
                if stall {
                    std::future::pending::<()>().await;
                }
            }
        });
        let provider = provider(&anthropic(&format!("http://{addr}")));
        let error = run(provider.as_ref(), &hello()).await.0.expect_err("400");
        let ProviderError::Status { status, body } = error else {
            panic!("{error:?}");
        };
        assert_eq!(status, 400);
        let expected = if stall {
            1024
        } else {
            norma::llm::retry::MAX_ERROR_BODY_BYTES
        };
        assert_eq!(body.len(), expected, "stall: {stall}");
    }
}

/// Reads one HTTP/1.1 request (headers and a content-length body) from `socket`.
async fn read_http_request(socket: &mut tokio::net::TcpStream) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.expect("read request");
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buffer);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())
                        .flatten()
                })
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                return;
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn connection_reset_before_the_response_is_retried() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let n = counter.fetch_add(1, Ordering::SeqCst);
            read_http_request(&mut socket).await;
            if n == 0 {
                // Close without answering: the client sees the connection die before a response.
                drop(socket);
                continue;
            }
            let body = an::text_turn("after reset").concat();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(response.as_bytes()).await.unwrap();
            socket.shutdown().await.unwrap();
        }
    });
    let provider = provider(&anthropic(&format!("http://{addr}")));
    let start = Instant::now();
    let turn = run(provider.as_ref(), &hello()).await.0.expect("turn");
    assert_eq!(text_of(&turn), "after reset");
    assert_eq!(connections.load(Ordering::SeqCst), 2);
    assert_eq!(start.elapsed(), secs(0.5));
}

#[tokio::test]
async fn connect_failure_is_a_network_error_after_the_retries() {
    // Bind then drop a listener so the port is (almost certainly) closed.
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut config = anthropic(&format!("http://{addr}"));
    config.retries = 1;
    let start = std::time::Instant::now();
    let error = run(provider(&config).as_ref(), &hello())
        .await
        .0
        .expect_err("refused");
    assert!(matches!(error, ProviderError::Network(_)), "{error:?}");
    assert!(error.is_retryable());
    assert!(start.elapsed() >= secs(0.5), "one retry waited 0.5 s");
}

#[tokio::test]
async fn stream_dropped_mid_body_is_not_retried() {
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse_then_abort(vec![
        an::message_start(10),
        an::block_start(0, json!({"type": "text", "text": ""})),
        an::text_delta(0, "half an ans"),
    ]));
    fake.set_fallback(Reply::sse(an::text_turn("a duplicate")));
    let provider = provider(&anthropic(&fake.url()));
    let (result, items) = run(provider.as_ref(), &hello()).await;
    let error = result.expect_err("dropped");
    assert!(
        matches!(error, ProviderError::StreamDropped(_)),
        "{error:?}"
    );
    assert_eq!(error.code(), "STREAM_DROPPED");
    assert!(!error.is_retryable());
    assert_eq!(fake.request_count(), 1);
    assert!(
        !items.contains(&StreamItem::TextDelta("a duplicate".into())),
        "no second stream"
    );
}

#[tokio::test]
async fn stream_ending_cleanly_before_message_stop_is_dropped() {
    let fake = FakeLlm::start().await;
    let mut frames = an::text_turn("cut short");
    frames.truncate(3);
    fake.push(Reply::sse(frames));
    fake.set_fallback(Reply::sse(an::text_turn("a duplicate")));
    let provider = provider(&anthropic(&fake.url()));
    let error = run(provider.as_ref(), &hello())
        .await
        .0
        .expect_err("dropped");
    assert!(
        matches!(error, ProviderError::StreamDropped(_)),
        "{error:?}"
    );
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_during_backoff_stops_at_once() {
    let fake = FakeLlm::start().await;
    fake.set_fallback(Reply::retry_after(503, "8"));
    let provider = provider(&anthropic(&fake.url()));
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(secs(1.0)).await;
        trigger.cancel();
    });
    let start = Instant::now();
    let error = provider
        .stream(&hello(), &cancel)
        .await
        .err()
        .expect("cancelled");
    assert_eq!(error, ProviderError::Cancelled);
    assert_eq!(start.elapsed(), secs(1.0));
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn cancel_mid_stream_ends_the_stream() {
    let fake = FakeLlm::start().await;
    let mut frames = an::text_turn("slow");
    frames.insert(3, an::text_delta(0, " and slower"));
    fake.push(Reply::Sse {
        frames,
        gap: Duration::from_millis(200),
        abort: false,
    });
    let provider = provider(&anthropic(&fake.url()));
    let cancel = CancellationToken::new();
    let stream = provider.stream(&hello(), &cancel).await.expect("stream");
    let trigger = cancel.clone();
    let error = collect(stream, move |item| {
        if matches!(item, StreamItem::TextDelta(_)) {
            trigger.cancel();
        }
    })
    .await
    .expect_err("cancelled");
    assert_eq!(error, ProviderError::Cancelled);
    assert_eq!(fake.request_count(), 1);
}

#[tokio::test]
async fn empty_response_resend_is_off_by_default_and_separate() {
    let empty = vec![
        an::message_start(3),
        an::message_delta("end_turn", 0),
        an::message_stop(),
    ];
    // Off (default): the empty turn is returned as is, one request.
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(empty.clone()))
        .push(Reply::sse(an::text_turn("second")));
    let turn = run(provider(&anthropic(&fake.url())).as_ref(), &hello())
        .await
        .0
        .expect("turn");
    assert!(turn.message.content.is_empty());
    assert_eq!(fake.request_count(), 1);

    // On: one resend.
    let fake = FakeLlm::start().await;
    fake.push(Reply::sse(empty.clone()))
        .push(Reply::sse(an::text_turn("second")));
    let mut config = anthropic(&fake.url());
    config.empty_response_retry = true;
    let turn = run(provider(&config).as_ref(), &hello())
        .await
        .0
        .expect("turn");
    assert_eq!(text_of(&turn), "second");
    assert_eq!(fake.request_count(), 2);

    // On, empty twice: EMPTY_RESPONSE, no third request.
    let fake = FakeLlm::start().await;
    fake.set_fallback(Reply::sse(empty));
    let mut config = anthropic(&fake.url());
    config.empty_response_retry = true;
    let error = run(provider(&config).as_ref(), &hello())
        .await
        .0
        .expect_err("empty");
    assert_eq!(error, ProviderError::EmptyResponse);
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn rate_limiter_is_acquired_once_per_logical_request() {
    let fake = FakeLlm::start().await;
    fake.set_fallback(Reply::sse(an::text_turn("ok")));
    let mut config = anthropic(&fake.url());
    config.requests_per_second = Some(2);
    let provider = provider(&config);
    let start = std::time::Instant::now();
    for _ in 0..3 {
        run(provider.as_ref(), &hello()).await.0.expect("turn");
    }
    // Burst of 2, then the third waits for a cell (0.5 s at 2/s).
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(fake.request_count(), 3);

    config.requests_per_second = Some(0);
    assert!(matches!(
        build_provider(&config, reqwest::Client::new()),
        Err(ProviderError::Config(_))
    ));
}

// ------------------------------------------- conformance/retry.json, every row, as a table

/// `retryable_statuses`.
const RETRYABLE_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];
/// `not_retryable_examples`.
const NOT_RETRYABLE: [u16; 9] = [400, 401, 403, 404, 409, 413, 422, 501, 505];
/// `schedules`: retries → delays (seconds) before each re-send, no retry-after.
const SCHEDULES: [(i32, &[f64]); 5] = [
    (3, &[0.5, 1.0, 2.0]),
    (5, &[0.5, 1.0, 2.0, 4.0, 8.0]),
    (7, &[0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]),
    (0, &[]),
    (-1, &[]),
];
/// `retry_after`: header → delay (seconds).
const RETRY_AFTER: [(&str, f64); 2] = [("2", 2.0), ("30", 8.0)];

#[test]
fn conformance_retry_table_pure() {
    for status in RETRYABLE_STATUSES {
        assert!(norma::llm::retry::is_retryable_status(status), "{status}");
        assert!(
            ProviderError::Status {
                status,
                body: String::new()
            }
            .is_retryable()
        );
    }
    for status in NOT_RETRYABLE {
        assert!(!norma::llm::retry::is_retryable_status(status), "{status}");
    }
    for (retries, delays) in SCHEDULES {
        let expected: Vec<Duration> = delays.iter().map(|&d| secs(d)).collect();
        assert_eq!(
            RetryPolicy::new(retries).delays(),
            expected,
            "retries={retries}"
        );
    }
    for (header, delay) in RETRY_AFTER {
        assert_eq!(
            retry_after_delay(header),
            Some(secs(delay)),
            "retry-after {header}"
        );
    }
    // never_retried
    assert!(!ProviderError::StreamDropped("x".into()).is_retryable());
    assert!(!ProviderError::Cancelled.is_retryable());
}

#[tokio::test(start_paused = true)]
async fn conformance_retryable_statuses_over_http() {
    for status in RETRYABLE_STATUSES {
        let fake = FakeLlm::start().await;
        fake.push(Reply::status(status))
            .push(Reply::sse(an::text_turn("ok")));
        let turn = run(provider(&anthropic(&fake.url())).as_ref(), &hello())
            .await
            .0
            .unwrap_or_else(|e| panic!("{status}: {e:?}"));
        assert_eq!(text_of(&turn), "ok");
        assert_eq!(fake.gaps(), vec![secs(0.5)], "{status}");
    }
}

#[tokio::test(start_paused = true)]
async fn conformance_not_retryable_statuses_over_http() {
    for status in NOT_RETRYABLE {
        let fake = FakeLlm::start().await;
        fake.push(Reply::status_body(status, format!("body {status}")))
            .push(Reply::sse(an::text_turn("never")));
        let error = run(provider(&openai(&fake.url())).as_ref(), &hello())
            .await
            .0
            .expect_err("not retried");
        assert_eq!(
            error,
            ProviderError::Status {
                status,
                body: format!("body {status}")
            }
        );
        assert_eq!(fake.request_count(), 1, "{status}");
    }
}

#[tokio::test(start_paused = true)]
async fn conformance_schedules_over_http() {
    for (retries, delays) in SCHEDULES {
        let fake = FakeLlm::start().await;
        fake.set_fallback(Reply::status(503));
        let mut config = anthropic(&fake.url());
        config.retries = retries;
        let start = Instant::now();
        let error = run(provider(&config).as_ref(), &hello())
            .await
            .0
            .expect_err("always 503");
        assert!(matches!(error, ProviderError::Status { status: 503, .. }));
        let expected: Vec<Duration> = delays.iter().map(|&d| secs(d)).collect();
        assert_eq!(fake.gaps(), expected, "retries={retries}");
        assert_eq!(fake.request_count(), delays.len() + 1);
        assert_eq!(start.elapsed(), secs(delays.iter().sum()));
    }
}

#[tokio::test(start_paused = true)]
async fn conformance_retry_after_over_http() {
    for (header, delay) in RETRY_AFTER {
        let fake = FakeLlm::start().await;
        fake.push(Reply::retry_after(503, header))
            .push(Reply::sse(an::text_turn("ok")));
        run(provider(&anthropic(&fake.url())).as_ref(), &hello())
            .await
            .0
            .expect("turn");
        assert_eq!(fake.gaps(), vec![secs(delay)], "retry-after {header}");
    }
}

// ---------------------------------------------------------------- Output budget

#[tokio::test]
async fn a_response_past_the_output_budget_fails_with_a_code() {
    // Text past the per-response limit, in well-formed events.
    let fake = FakeLlm::start().await;
    let mut frames = vec![
        an::message_start(1),
        an::block_start(0, json!({"type": "text", "text": ""})),
    ];
    let chunk = "y".repeat(256 * 1024);
    frames.extend((0..5).map(|_| an::text_delta(0, &chunk)));
    frames.push(an::block_stop(0));
    frames.push(an::message_delta("end_turn", 1));
    fake.push(Reply::sse(frames));
    let (turn, _) = run(provider(&anthropic(&fake.url())).as_ref(), &hello()).await;
    assert_eq!(turn.unwrap_err().code(), "MODEL_OUTPUT_TOO_LARGE");

    // One event line that never ends: the body budget stops the read.
    let fake = FakeLlm::start().await;
    let endless = format!("data: {}", "z".repeat(33 * 1024 * 1024));
    fake.push(Reply::sse(vec![an::message_start(1), endless]));
    let (turn, _) = run(provider(&anthropic(&fake.url())).as_ref(), &hello()).await;
    assert_eq!(turn.unwrap_err().code(), "MODEL_OUTPUT_TOO_LARGE");
}

// ---------------------------------------------------------------- Scripted provider

fn scripted(script: Option<Value>) -> Arc<dyn Provider> {
    let mut config = ProviderConfig::new(ProviderKind::Scripted);
    config.script = script;
    build_provider(&config, reqwest::Client::new()).expect("scripted")
}

fn tool_result(id: &str, text: &str) -> Message {
    Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(id, text))],
    }
}

#[tokio::test]
async fn scripted_plays_turns_in_order_and_reacts_to_tool_results() {
    let provider = scripted(Some(json!({"turns": [
        {"thinking": "plan", "text": "Reading {{last_user_text}} for you now.",
         "tool_calls": [{"name": "Read", "input": {"file_path": "{{last_user_text}}"}}]},
        {"when_last_tool_result_contains": "No such file", "text": "That file is missing."},
        {"text": "It says: {{last_tool_result}}", "stop": "end_turn"}
    ]})));
    let first_history = vec![Message::user_text("notes.txt")];
    let (first, items) = run(provider.as_ref(), &request(first_history.clone())).await;
    let first = first.expect("turn 0");
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert_eq!(text_of(&first), "Reading notes.txt for you now.");
    assert_eq!(
        first.message.tool_uses().collect::<Vec<_>>(),
        vec![(
            "toolu_scripted_0_0",
            "Read",
            &json!({"file_path": "notes.txt"})
        )]
    );
    assert!(matches!(
        first.message.content[0],
        ContentBlock::Thinking { .. }
    ));
    let text_deltas = items
        .iter()
        .filter(|i| matches!(i, StreamItem::TextDelta(_)))
        .count();
    assert!(text_deltas >= 2, "streams several deltas");
    assert!(first.usage.input_tokens > 0 && first.usage.output_tokens > 0);

    // Deterministic: the same history gives the same turn.
    let again = run(provider.as_ref(), &request(first_history.clone()))
        .await
        .0
        .expect("again");
    assert_eq!(again.message, first.message);

    let mut ok_history = first_history.clone();
    ok_history.push(first.message.clone());
    ok_history.push(tool_result("toolu_scripted_0_0", "hello world"));
    let second = run(provider.as_ref(), &request(ok_history.clone()))
        .await
        .0
        .expect("turn 1");
    assert_eq!(text_of(&second), "It says: hello world");
    assert_eq!(second.stop_reason, StopReason::EndTurn);

    let mut missing_history = first_history;
    missing_history.push(first.message);
    missing_history.push(tool_result(
        "toolu_scripted_0_0",
        "No such file or directory",
    ));
    let reaction = run(provider.as_ref(), &request(missing_history))
        .await
        .0
        .expect("reaction");
    assert_eq!(text_of(&reaction), "That file is missing.");

    // Past the end of the script: a short end_turn saying so.
    ok_history.push(second.message);
    ok_history.push(Message::user_text("more?"));
    let past = run(provider.as_ref(), &request(ok_history))
        .await
        .0
        .expect("past end");
    assert!(text_of(&past).contains("no turn 2"), "{}", text_of(&past));
    assert_eq!(past.stop_reason, StopReason::EndTurn);
}

#[tokio::test]
async fn scripted_without_script_echoes_the_last_user_text() {
    let provider = scripted(None);
    let history = vec![
        Message::user_text("first"),
        Message::assistant_text("first"),
        Message::user_text("echo me, please, in several pieces"),
    ];
    let (turn, items) = run(provider.as_ref(), &request(history)).await;
    let turn = turn.expect("turn");
    assert_eq!(text_of(&turn), "echo me, please, in several pieces");
    assert_eq!(turn.stop_reason, StopReason::EndTurn);
    assert!(items.len() > 3);
    assert_eq!(provider.name(), "scripted");
}

#[tokio::test]
async fn scripted_rejects_a_malformed_script() {
    let mut config = ProviderConfig::new(ProviderKind::Scripted);
    config.script = Some(json!({"turns": [{"txt": "typo"}]}));
    let error = build_provider(&config, reqwest::Client::new()).expect_err("bad script");
    assert_eq!(error.code(), "PROVIDER_CONFIG");
}

#[tokio::test]
async fn scripted_honours_cancel() {
    let provider = scripted(None);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let error = provider
        .stream(&hello(), &cancel)
        .await
        .err()
        .expect("cancelled");
    assert_eq!(error, ProviderError::Cancelled);
}

#[tokio::test]
async fn scripted_expansion_is_bounded_before_expanding() {
    // The issue's reproduction: 50 `{{last_user_text}}` and a 20,000-character prompt.
    let provider = scripted(Some(json!({"turns": [
        {"text": "{{last_user_text}}".repeat(50)}
    ]})));
    let prompt = "p".repeat(20_000);
    let (turn, items) = run(
        provider.as_ref(),
        &request(vec![Message::user_text(&prompt)]),
    )
    .await;
    let error = turn.expect_err("over the expansion limit");
    assert_eq!(error.code(), "MODEL_OUTPUT_TOO_LARGE");
    assert!(items.is_empty(), "nothing is streamed: {}", items.len());

    // The same in a tool input.
    let provider = scripted(Some(json!({"turns": [
        {"tool_calls": [{"name": "Write", "input": {"content": "{{last_user_text}}".repeat(50)}}]}
    ]})));
    let (turn, _) = run(
        provider.as_ref(),
        &request(vec![Message::user_text(&prompt)]),
    )
    .await;
    assert_eq!(
        turn.expect_err("tool input").code(),
        "MODEL_OUTPUT_TOO_LARGE"
    );
}

#[tokio::test]
async fn scripted_placeholders_are_cut_and_substituted_once() {
    let provider = scripted(Some(json!({"turns": [{"text": "<{{last_user_text}}>"}]})));
    let prompt = "q".repeat(100_000);
    let (turn, items) = run(
        provider.as_ref(),
        &request(vec![Message::user_text(&prompt)]),
    )
    .await;
    let text = text_of(&turn.expect("turn"));
    assert!(
        text.starts_with(&format!("<{}", "q".repeat(65_536))),
        "cut value"
    );
    assert!(
        text.ends_with("… [cut at 65536 bytes]>"),
        "{}",
        &text[text.len() - 40..]
    );
    let deltas = items
        .iter()
        .filter(|item| matches!(item, StreamItem::TextDelta(_)))
        .count();
    assert!(
        deltas <= norma::llm::scripted::MAX_DELTAS_PER_BLOCK && deltas > 1,
        "{deltas} deltas for one block"
    );

    // A value holding a placeholder is not expanded again.
    let provider = scripted(Some(
        json!({"turns": [{"text": "{{last_user_text}}{{last_user_text}}"}]}),
    ));
    let history = vec![Message::user_text("{{last_user_text}}")];
    let (turn, _) = run(provider.as_ref(), &request(history)).await;
    assert_eq!(
        text_of(&turn.expect("turn")),
        "{{last_user_text}}{{last_user_text}}"
    );
}

// ---------------------------------------------------------------- Config and keys

#[test]
fn keys_never_appear_in_debug_or_serialization() {
    let config = anthropic("http://127.0.0.1:9");
    let debug = format!("{config:?}");
    assert!(!debug.contains("SECRET"), "{debug}");
    let json = serde_json::to_string(&config).unwrap();
    assert!(!json.contains("SECRET"), "{json}");
    assert!(!json.contains("api_key"), "{json}");

    for config in [
        anthropic("http://127.0.0.1:9"),
        openai("http://127.0.0.1:9"),
    ] {
        let provider = build_provider(&config, reqwest::Client::new()).unwrap();
        let debug = format!("{provider:?}");
        assert!(!debug.contains("SECRET"), "{debug}");
        assert!(debug.contains("test-model"), "{debug}");
    }
}

#[test]
fn config_parses_with_defaults_and_rejects_unknown_fields() {
    let config: ProviderConfig = serde_json::from_value(json!({
        "kind": "openai", "base_url": "http://localhost:8000/v1", "model": "qwen",
        "api_key": "sk-SECRET", "request_timeout": 2.5
    }))
    .unwrap();
    assert_eq!(config.kind, ProviderKind::OpenAi);
    assert_eq!(config.retries, 3);
    assert!(!config.empty_response_retry);
    assert_eq!(config.request_timeout, secs(2.5));
    assert!(config.api_key.is_some());
    assert!(
        serde_json::from_value::<ProviderConfig>(json!({"kind": "anthropic", "modle": "x"}))
            .is_err()
    );
    assert!(serde_json::from_value::<ProviderConfig>(json!({"kind": "gemini"})).is_err());

    let mut missing_model = ProviderConfig::new(ProviderKind::Anthropic);
    missing_model.api_key = Some(SecretString::from("k"));
    assert!(matches!(
        build_provider(&missing_model, reqwest::Client::new()),
        Err(ProviderError::Config(_))
    ));
    let mut missing_key = ProviderConfig::new(ProviderKind::Anthropic);
    missing_key.model = "m".into();
    assert!(matches!(
        build_provider(&missing_key, reqwest::Client::new()),
        Err(ProviderError::Config(_))
    ));
}
