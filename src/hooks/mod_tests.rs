use super::*;
use pretty_assertions::assert_eq;
use serde_json::json;

#[test]
fn events_serialize_with_the_event_name_tag_beside_the_session() {
    let session = SessionId::generate();
    let event = HookEvent {
        session_id: session.clone(),
        tenant: TenantId::new("acme"),
        payload: HookPayload::PreToolUse {
            tool_use_id: "tu_1".into(),
            tool_name: "Bash".into(),
            tool_input: json!({"command": "ls"}),
        },
    };
    let value = serde_json::to_value(&event).unwrap();
    assert_eq!(
        value,
        json!({
            "session_id": session.as_str(),
            "tenant": "acme",
            "hook_event_name": "PreToolUse",
            "tool_use_id": "tu_1",
            "tool_name": "Bash",
            "tool_input": {"command": "ls"}
        })
    );
    let back: HookEvent = serde_json::from_value(value).unwrap();
    assert_eq!(back, event);
    assert_eq!(back.event_name(), HookEventName::PreToolUse);
    assert_eq!(back.payload.tool_name(), Some("Bash"));
}

#[test]
fn every_event_name_matches_its_payload_tag() {
    let payloads = [
        HookPayload::PreToolUse {
            tool_use_id: "a".into(),
            tool_name: "T".into(),
            tool_input: json!({}),
        },
        HookPayload::PostToolUse {
            tool_use_id: "a".into(),
            tool_name: "T".into(),
            tool_input: json!({}),
            tool_response: "ok".into(),
            output_id: None,
        },
        HookPayload::PostToolUseFailure {
            tool_use_id: "a".into(),
            tool_name: "T".into(),
            tool_input: json!({}),
            error_code: "TOOL_FAILED".into(),
            error: "boom".into(),
        },
        HookPayload::UserPromptSubmit {
            prompt: "hi".into(),
        },
        HookPayload::SessionStart {
            source: "create".into(),
        },
        HookPayload::SessionEnd {
            reason: "closed".into(),
        },
        HookPayload::Stop {
            stop_hook_active: false,
        },
        HookPayload::SubagentStart {
            agent_type: "general".into(),
            description: "d".into(),
        },
    ];
    let names: Vec<_> = payloads.iter().map(HookPayload::event_name).collect();
    assert_eq!(names, HookEventName::ALL.to_vec());
    for payload in payloads {
        let value = serde_json::to_value(&payload).unwrap();
        assert_eq!(value["hook_event_name"], payload.event_name().as_str());
        assert_eq!(
            payload.tool_name().is_some(),
            payload.event_name().is_tool_event()
        );
    }
}

#[test]
fn responses_default_every_missing_field() {
    let answer: HookResponse = serde_json::from_value(json!({})).unwrap();
    assert_eq!(answer, HookResponse::proceed());
    let answer: HookResponse = serde_json::from_value(json!({
        "decision": "block", "reason": "no", "additional_context": "ctx"
    }))
    .unwrap();
    assert_eq!(answer, HookResponse::block("no").with_context("ctx"));
    let answer: HookResponse = serde_json::from_value(json!({"decision": "prevent"})).unwrap();
    assert_eq!(answer.decision, HookDecision::Prevent);
    assert!(serde_json::from_value::<HookResponse>(json!({"decision": "maybe"})).is_err());
}

#[test]
fn null_and_empty_rewrites_are_not_rewrites() {
    assert_eq!(HookResponse::rewrite(json!(null)).rewritten_input(), None);
    assert_eq!(HookResponse::rewrite(json!({})).rewritten_input(), None);
    assert_eq!(
        HookResponse::rewrite(json!({"a": 1})).rewritten_input(),
        Some(&json!({"a": 1}))
    );
}
