//! Unit tests of [`collect`] and of the wire decoders' edge cases (no HTTP).

use eventsource_stream::Event;
use futures::stream;
use serde_json::json;

use super::anthropic::AnthropicDecoder;
use super::openai::OpenAiDecoder;
use super::sse::SseDecoder;
use super::*;

async fn fold(
    items: Vec<Result<StreamItem, ProviderError>>,
) -> Result<AssistantTurn, ProviderError> {
    collect(stream::iter(items), |_| {}).await
}

fn event(name: &str, data: serde_json::Value) -> Event {
    Event {
        event: name.into(),
        data: data.to_string(),
        id: String::new(),
        retry: None,
    }
}

#[tokio::test]
async fn a_signature_closes_a_thinking_block() {
    let turn = fold(vec![
        Ok(StreamItem::ThinkingDelta("one".into())),
        Ok(StreamItem::ThinkingSignature("s1".into())),
        Ok(StreamItem::ThinkingDelta("two".into())),
        Ok(StreamItem::TextDelta("a".into())),
        Ok(StreamItem::TextDelta("b".into())),
        Ok(StreamItem::Stop(StopReason::EndTurn)),
    ])
    .await
    .unwrap();
    assert_eq!(
        turn.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "one".into(),
                signature: Some("s1".into())
            },
            ContentBlock::Thinking {
                thinking: "two".into(),
                signature: None
            },
            ContentBlock::Text { text: "ab".into() },
        ]
    );
}

#[tokio::test]
async fn a_stream_without_stop_is_dropped_and_errors_propagate() {
    let error = fold(vec![Ok(StreamItem::TextDelta("a".into()))])
        .await
        .unwrap_err();
    assert!(matches!(error, ProviderError::StreamDropped(_)));
    let error = fold(vec![
        Ok(StreamItem::TextDelta("a".into())),
        Err(ProviderError::Decode("bad".into())),
        Ok(StreamItem::Stop(StopReason::EndTurn)),
    ])
    .await
    .unwrap_err();
    assert_eq!(error, ProviderError::Decode("bad".into()));
}

#[tokio::test]
async fn a_tool_call_that_never_completes_is_a_decode_error() {
    let error = fold(vec![
        Ok(StreamItem::ToolUseStart {
            index: 0,
            id: "t".into(),
            name: "Read".into(),
        }),
        Ok(StreamItem::Stop(StopReason::ToolUse)),
    ])
    .await
    .unwrap_err();
    assert!(matches!(error, ProviderError::Decode(_)), "{error:?}");
}

#[tokio::test]
async fn tool_calls_keep_their_start_position() {
    let turn = fold(vec![
        Ok(StreamItem::ToolUseStart {
            index: 1,
            id: "t".into(),
            name: "Read".into(),
        }),
        Ok(StreamItem::TextDelta("after".into())),
        Ok(StreamItem::ToolUseDone {
            index: 1,
            id: "t".into(),
            name: "Read".into(),
            input: json!({"a": 1}),
        }),
        Ok(StreamItem::Stop(StopReason::ToolUse)),
    ])
    .await
    .unwrap();
    assert_eq!(
        turn.message.content,
        vec![
            ContentBlock::ToolUse {
                id: "t".into(),
                name: "Read".into(),
                input: json!({"a": 1})
            },
            ContentBlock::Text {
                text: "after".into()
            },
        ]
    );
}

#[test]
fn anthropic_tool_input_sent_whole_in_block_start_is_kept() {
    let mut decoder = AnthropicDecoder::default();
    let start = event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block":
            {"type": "tool_use", "id": "t", "name": "Read", "input": {"file_path": "x"}}}),
    );
    decoder.on_event(&start).unwrap();
    let stop = event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    assert_eq!(
        decoder.on_event(&stop).unwrap(),
        vec![StreamItem::ToolUseDone {
            index: 0,
            id: "t".into(),
            name: "Read".into(),
            input: json!({"file_path": "x"}),
        }]
    );
    assert!(matches!(
        decoder.on_end(),
        Err(ProviderError::StreamDropped(_))
    ));
}

#[test]
fn openai_fragment_after_a_call_completed_is_a_decode_error() {
    let mut decoder = OpenAiDecoder::default();
    let call = |index: usize, id: Option<&str>, args: &str| {
        let mut call = json!({"index": index, "function": {"arguments": args}});
        if let Some(id) = id {
            call["id"] = json!(id);
            call["function"]["name"] = json!("Read");
        }
        event(
            "",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}),
        )
    };
    decoder.on_event(&call(0, Some("a"), "{}")).unwrap();
    let items = decoder.on_event(&call(1, Some("b"), "")).unwrap();
    assert!(matches!(items[0], StreamItem::ToolUseDone { index: 0, .. }));
    let error = decoder.on_event(&call(0, None, "more")).unwrap_err();
    assert!(matches!(error, ProviderError::Decode(_)), "{error:?}");
}

#[test]
fn openai_end_without_done_after_finish_is_accepted() {
    let mut decoder = OpenAiDecoder::default();
    decoder
        .on_event(&event(
            "",
            json!({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}),
        ))
        .unwrap();
    let items = decoder.on_end().unwrap();
    assert_eq!(items.last(), Some(&StreamItem::Stop(StopReason::EndTurn)));
}

#[test]
fn error_codes_are_upper_snake_and_distinct() {
    let errors = [
        ProviderError::Status {
            status: 500,
            body: String::new(),
        },
        ProviderError::Network(String::new()),
        ProviderError::ContextOverflow(String::new()),
        ProviderError::StreamDropped(String::new()),
        ProviderError::Decode(String::new()),
        ProviderError::Cancelled,
        ProviderError::EmptyResponse,
        ProviderError::Config(String::new()),
    ];
    let codes: std::collections::HashSet<&str> = errors.iter().map(ProviderError::code).collect();
    assert_eq!(codes.len(), errors.len());
    for code in codes {
        assert!(
            code.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_response_past_its_budget_fails_before_the_item_is_reported() {
    let chunk = "x".repeat(64 * 1024);
    let items: Vec<Result<StreamItem, ProviderError>> =
        std::iter::repeat_with(|| Ok(StreamItem::TextDelta(chunk.clone())))
            .take(budget::MAX_TEXT_BYTES / chunk.len() + 1)
            .chain([Ok(StreamItem::Stop(StopReason::EndTurn))])
            .collect();
    let mut reported = 0usize;
    let error = collect(stream::iter(items), |item| {
        if let StreamItem::TextDelta(text) = item {
            reported += text.len();
        }
    })
    .await
    .unwrap_err();
    assert_eq!(error.code(), "MODEL_OUTPUT_TOO_LARGE");
    assert_eq!(
        reported,
        budget::MAX_TEXT_BYTES,
        "the item past the limit was not reported"
    );
}
