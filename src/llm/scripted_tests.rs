//! Tests of the scripted provider: the context window, ref placeholders and delays.

use super::*;
use crate::message::{Message, ViewMessage};

/// A request of `messages` to the scripted model.
fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "scripted".into(),
        system: None,
        messages: messages.into_iter().map(ViewMessage::from).collect(),
        tools: Default::default(),
        max_tokens: 100,
        temperature: None,
    }
}

mod noa_tests {
    use super::*;
    use crate::message::ToolResultBlock;
    use serde_json::json;

    #[tokio::test]
    async fn a_request_over_the_window_is_a_context_overflow() {
        let provider = ScriptedProvider::new(Some(&json!({
            "context_window": 50, "turns": [{"text": "ok"}]
        })))
        .unwrap();
        let cancel = CancellationToken::new();
        assert!(
            provider
                .stream(&request(vec![Message::user_text("hi")]), &cancel)
                .await
                .is_ok()
        );
        let big = request(vec![Message::user_text("x".repeat(400))]);
        assert!(matches!(
            provider.stream(&big, &cancel).await,
            Err(ProviderError::ContextOverflow(_))
        ));
    }

    #[test]
    fn ref_placeholders_resolve_to_the_refs_in_the_request() {
        let mut results = Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(
                "t",
                "[ref m7] done",
            ))],
        };
        results.content.push(ContentBlock::Text {
            text: "[ref m8]".into(),
        });
        let request = request(vec![Message::user_text("[ref m2]"), results]);
        let refs = visible_refs(&request);
        assert_eq!(refs, ["m2", "m7", "m8"]);
        let input = json!({"a": "{{ref:0}}", "b": ["{{ref:-1}}..{{ref:-2}}"], "c": "{{ref:9}}"});
        assert_eq!(
            fill_refs(&input, &refs),
            json!({"a": "m2", "b": ["m8..m7"], "c": "none"})
        );
    }
}

mod delay_tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn a_delay_over_the_limit_is_a_malformed_script() {
        let over = json!({"turns": [{"text": "ok", "delay_ms": MAX_DELAY_MS + 1}]});
        let error = ScriptedProvider::new(Some(&over)).unwrap_err();
        assert!(
            matches!(&error, ProviderError::Config(message) if message.contains("delay_ms")),
            "{error:?}"
        );
        let at_limit = json!({"turns": [{"text": "ok", "delay_ms": MAX_DELAY_MS}]});
        assert!(ScriptedProvider::new(Some(&at_limit)).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_turn_waits_before_its_first_output() {
        let provider =
            ScriptedProvider::new(Some(&json!({"turns": [{"text": "ok", "delay_ms": 2000}]})))
                .unwrap();
        let started = tokio::time::Instant::now();
        let mut stream = provider
            .stream(
                &request(vec![Message::user_text("hi")]),
                &CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(stream.next().await.unwrap().is_ok());
        assert_eq!(started.elapsed(), Duration::from_millis(2000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancel_ends_the_wait_at_once() {
        let provider = ScriptedProvider::new(Some(
            &json!({"turns": [{"text": "ok", "delay_ms": 10_000}]}),
        ))
        .unwrap();
        let cancel = CancellationToken::new();
        let mut stream = provider
            .stream(&request(vec![Message::user_text("hi")]), &cancel)
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let canceller = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            canceller.cancel();
        });
        assert!(matches!(
            stream.next().await,
            Some(Err(ProviderError::Cancelled))
        ));
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        assert!(stream.next().await.is_none());
    }
}
