//! The agent loop against the fake Anthropic and OpenAI servers over real loopback HTTP: three
//! tool turns then a final answer, asserting what the fake server was sent (every tool result
//! sent back paired with its call, in order) and what the loop committed.

#[path = "support/fake_llm.rs"]
mod fake_llm;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fake_llm::{FakeLlm, Reply, anthropic as an, openai as oa};
use norma::harness::engine::{
    Engine, EngineConfig, HistoryAppend, HostError, LoopHost, RunHistory,
};
use norma::harness::ledger::RunLedger;
use norma::harness::scheduler::PendingCall;
use norma::harness::turn::TerminalReason;
use norma::ids::{RunId, SessionId, TenantId};
use norma::llm::{ProviderConfig, ProviderKind, ToolSpec, build_provider};
use norma::message::{ContentBlock, Message, ToolResultBlock};
use norma::run_event::RunEvent;
use pretty_assertions::assert_eq;
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A host with one read-only tool, `Lookup`, answering `looked up <key>`.
#[derive(Default)]
struct Host {
    /// Committed events, by wire name.
    events: Mutex<Vec<String>>,
    history: Mutex<Vec<Message>>,
}

#[async_trait]
impl LoopHost for Host {
    fn emit(&self, _event: RunEvent) {}

    async fn commit(
        &self,
        messages: Vec<HistoryAppend>,
        events: Vec<RunEvent>,
    ) -> Result<(), HostError> {
        self.history
            .lock()
            .unwrap()
            .extend(messages.into_iter().map(|a| a.message));
        self.events
            .lock()
            .unwrap()
            .extend(events.iter().map(|e| e.to_parts().0));
        Ok(())
    }

    fn tool_specs(&self) -> std::sync::Arc<[ToolSpec]> {
        vec![ToolSpec {
            name: "Lookup".into(),
            description: "Looks a key up".into(),
            input_schema: json!({"type": "object", "properties": {"key": {"type": "string"}}})
                .into(),
        }]
        .into()
    }

    fn is_concurrency_safe(&self, _name: &str, _input: &Value) -> bool {
        true
    }

    async fn execute_tool(&self, call: PendingCall, _cancel: CancellationToken) -> ToolResultBlock {
        let key = call.input["key"].as_str().unwrap_or("?").to_owned();
        ToolResultBlock::ok(call.tool_use_id, format!("looked up {key}"))
    }
}

fn provider_config(kind: ProviderKind, url: String) -> ProviderConfig {
    let mut config = ProviderConfig::new(kind);
    config.base_url = Some(url);
    config.model = "test-model".into();
    config.api_key = Some(SecretString::from("sk-test-key"));
    config.request_timeout = Duration::from_secs(30);
    config
}

async fn run_loop(config: &ProviderConfig) -> (Arc<Host>, norma::harness::engine::RunOutcome) {
    let host = Arc::new(Host::default());
    let engine = Engine {
        provider: build_provider(config, reqwest::Client::new()).expect("provider"),
        host: host.clone(),
        config: EngineConfig {
            model: "test-model".into(),
            system: Some("Be brief.".into()),
            ..EngineConfig::default()
        },
        policy: None,
    };
    let mut ledger = RunLedger::new(TenantId::new("t"), SessionId::generate(), RunId::generate());
    let history = RunHistory::new(vec![Message::user_text("find a, b and c")], 0);
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        engine.run(history, &mut ledger, CancellationToken::new()),
    )
    .await
    .expect("the run finishes")
    .expect("the host never fails");
    (host, outcome)
}

/// The tool calls of each turn: (id, key). Turn 2 makes two calls.
fn turns() -> Vec<Vec<(&'static str, &'static str)>> {
    vec![
        vec![("call_1", "a")],
        vec![("call_2a", "b1"), ("call_2b", "b2")],
        vec![("call_3", "c")],
    ]
}

/// An Anthropic turn calling `Lookup` once per `(id, key)`, each input split into 3 fragments.
fn anthropic_tool_turn(calls: &[(&str, &str)]) -> Vec<String> {
    let mut frames = vec![an::message_start(10)];
    for (index, (id, key)) in calls.iter().enumerate() {
        frames.push(an::block_start(
            index,
            json!({"type": "tool_use", "id": id, "name": "Lookup", "input": {}}),
        ));
        let input = json!({ "key": key }).to_string();
        let chars: Vec<char> = input.chars().collect();
        for piece in chars.chunks(chars.len().div_ceil(3)) {
            frames.push(an::json_delta(index, &piece.iter().collect::<String>()));
        }
        frames.push(an::block_stop(index));
    }
    frames.extend([an::message_delta("tool_use", 9), an::message_stop()]);
    frames
}

/// An OpenAI turn calling `Lookup` once per `(id, key)`, arguments in 2 fragments.
fn openai_tool_turn(calls: &[(&str, &str)]) -> Vec<String> {
    let mut frames = vec![oa::delta(
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (index, (id, key)) in calls.iter().enumerate() {
        frames.push(oa::call_start(index, id, "Lookup"));
        let input = json!({ "key": key }).to_string();
        let (head, tail) = input.split_at(input.len() / 2);
        frames.push(oa::call_args(index, head));
        frames.push(oa::call_args(index, tail));
    }
    frames.extend([oa::finish("tool_calls"), oa::usage(30, 8, 0), oa::done()]);
    frames
}

/// Checks the committed history: three tool turns, each answered in order, then the answer.
fn assert_history(host: &Host, final_text: &str) {
    let history = host.history.lock().unwrap().clone();
    assert_eq!(history.len(), 7, "3 × (assistant, results) + answer");
    for (turn, calls) in turns().iter().enumerate() {
        let uses: Vec<&str> = history[2 * turn].tool_uses().map(|(id, _, _)| id).collect();
        let expected: Vec<&str> = calls.iter().map(|(id, _)| *id).collect();
        assert_eq!(uses, expected);
        let results: Vec<(String, String)> = history[2 * turn + 1]
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult(r) => Some((r.tool_use_id.clone(), r.content.clone())),
                _ => None,
            })
            .collect();
        let expected: Vec<(String, String)> = calls
            .iter()
            .map(|(id, key)| ((*id).to_owned(), format!("looked up {key}")))
            .collect();
        assert_eq!(results, expected);
    }
    assert_eq!(history[6], Message::assistant_text(final_text));
    assert_eq!(
        *host.events.lock().unwrap(),
        vec![
            "assistant_message",
            "tool_results",
            "continue",
            "assistant_message",
            "tool_results",
            "continue",
            "assistant_message",
            "tool_results",
            "continue",
            "assistant_message",
            "usage",
            "terminal",
        ]
    );
}

#[tokio::test]
async fn three_tool_turns_against_the_anthropic_fake() {
    let fake = FakeLlm::start().await;
    for calls in turns() {
        fake.push(Reply::sse(anthropic_tool_turn(&calls)));
    }
    fake.push(Reply::sse(an::text_turn("a, b and c found")));
    let (host, outcome) = run_loop(&provider_config(ProviderKind::Anthropic, fake.url())).await;

    assert_eq!(outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(outcome.main_turns, 4);
    assert_eq!(outcome.usage.model_calls, 4);
    assert_eq!(outcome.usage.tool_calls, 4);
    assert_history(&host, "a, b and c found");

    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.body["system"], json!("Be brief."));
        assert_eq!(request.body["tools"][0]["name"], json!("Lookup"));
        let messages = request.body["messages"].as_array().expect("messages");
        // The prompt, then (assistant tool_use, user tool_result) per earlier turn.
        assert_eq!(messages.len(), 1 + 2 * index, "request {index}");
        assert_eq!(messages[0]["content"][0]["text"], json!("find a, b and c"));
        for (turn, calls) in turns().iter().take(index).enumerate() {
            let assistant = &messages[1 + 2 * turn];
            let user = &messages[2 + 2 * turn];
            assert_eq!(assistant["role"], json!("assistant"));
            assert_eq!(user["role"], json!("user"));
            for (position, (id, key)) in calls.iter().enumerate() {
                assert_eq!(
                    assistant["content"][position],
                    json!({"type": "tool_use", "id": id, "name": "Lookup", "input": {"key": key}})
                );
                assert_eq!(
                    user["content"][position],
                    json!({"type": "tool_result", "tool_use_id": id,
                           "content": format!("looked up {key}"), "is_error": false})
                );
            }
            assert_eq!(
                user["content"].as_array().map(Vec::len),
                Some(calls.len()),
                "exactly one result per call"
            );
        }
    }
}

#[tokio::test]
async fn three_tool_turns_against_the_openai_fake() {
    let fake = FakeLlm::start().await;
    for calls in turns() {
        fake.push(Reply::sse(openai_tool_turn(&calls)));
    }
    fake.push(Reply::sse(oa::text_turn("a, b and c found")));
    let (host, outcome) = run_loop(&provider_config(ProviderKind::OpenAi, fake.url())).await;

    assert_eq!(outcome.terminal, TerminalReason::EndTurn);
    assert_eq!(outcome.main_turns, 4);
    assert_eq!(outcome.usage.model_calls, 4);
    assert_eq!(outcome.usage.tool_calls, 4);
    assert_eq!(outcome.usage.input_tokens, 3 * 30 + 12);
    assert_history(&host, "a, b and c found");

    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    for (index, request) in requests.iter().enumerate() {
        assert!(request.path.ends_with("/chat/completions"));
        let messages = request.body["messages"].as_array().expect("messages");
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(
            messages[1],
            json!({"role": "user", "content": "find a, b and c"})
        );
        // After system and prompt: per earlier turn, one assistant message with tool_calls
        // followed directly by one `tool` message per call, in the same order.
        let mut at = 2;
        for calls in turns().iter().take(index) {
            let assistant = &messages[at];
            assert_eq!(assistant["role"], json!("assistant"));
            let ids: Vec<&str> = assistant["tool_calls"]
                .as_array()
                .expect("tool_calls")
                .iter()
                .filter_map(|call| call["id"].as_str())
                .collect();
            assert_eq!(ids, calls.iter().map(|(id, _)| *id).collect::<Vec<_>>());
            for (offset, (id, key)) in calls.iter().enumerate() {
                let arguments: Value = serde_json::from_str(
                    assistant["tool_calls"][offset]["function"]["arguments"]
                        .as_str()
                        .expect("arguments"),
                )
                .expect("arguments are JSON");
                assert_eq!(arguments, json!({"key": key}));
                assert_eq!(
                    messages[at + 1 + offset],
                    json!({"role": "tool", "tool_call_id": id,
                           "content": format!("looked up {key}")})
                );
            }
            at += 1 + calls.len();
        }
        assert_eq!(messages.len(), at, "request {index} has nothing else");
    }
}
