//! The wire format did not change: every variant against the exact JSON the server emitted
//! before the enum existed (the `json!` expressions of the old emit sites, with sample values).

use super::*;
use serde_json::json;

fn approval() -> Value {
    json!({
        "id": "apr_1", "session_id": "ses_1", "run_id": "run_1", "tool_use_id": "tu_1",
        "tool_name": "Bash", "input": {"command": "git push"}, "input_sha256": "ab12",
        "reason": "ask rule", "status": "allowed", "decided_by": "alice",
        "decided_at": "2026-11-30T20:00:01Z", "decision_reason": "ok",
        "grant_id": "gr_1", "expires_at": "2026-11-30T20:10:00Z",
        "created_at": "2026-11-30T20:00:00Z"
    })
}

/// `(kind, payload)` as written by the server today.
fn fixtures() -> Vec<(&'static str, Value)> {
    let message = json!({"role": "assistant", "content": [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "tu_1", "name": "Bash", "input": {"command": "ls"}}
    ]});
    vec![
        (
            "run_started",
            json!({ "run_id": "run_1", "prompt": "do it" }),
        ),
        (
            "model_request",
            json!({ "request": 1, "main_turn": 1, "reason": null, "messages": 3 }),
        ),
        (
            "model_request",
            json!({ "request": 2, "main_turn": 2, "reason": "tool_turn", "messages": 5 }),
        ),
        ("assistant_delta", json!({ "text": "hel" })),
        (
            "assistant_message",
            json!({ "message": message, "stop_reason": "tool_use",
                    "usage": {"input_tokens": 10, "output_tokens": 5,
                              "cache_read_tokens": 0, "cache_write_tokens": 0} }),
        ),
        (
            "tool_call",
            json!({ "tool_use_id": "tu_1", "name": "Bash", "input": {"command": "ls"} }),
        ),
        ("tool_started", json!({ "tool_use_id": "tu_1" })),
        (
            "tool_executing",
            json!({ "tool_use_id": "tu_1", "name": "Bash" }),
        ),
        (
            "tool_progress",
            json!({ "tool_use_id": "tu_1", "data": {"todos": [1, 2]} }),
        ),
        (
            "tool_result",
            json!({ "tool_use_id": "tu_1", "result": {"tool_use_id": "tu_1", "content": "ok", "is_error": false} }),
        ),
        (
            "tool_result",
            json!({ "tool_use_id": "tu_2", "result": {"tool_use_id": "tu_2", "content": "big",
                    "is_error": true, "code": "INTERRUPTED", "output_id": "out_1", "capped": true} }),
        ),
        ("tool_results", json!({ "count": 2 })),
        (
            "permission_decision",
            json!({ "tool_use_id": "tu_1", "tool": "Bash", "decision": {
                "stage": "allowed", "rule": "Bash(ls)", "grant_id": null, "message": "allowed",
                "approved_by_callback": false, "rewritten_by_hook": false } }),
        ),
        (
            "provider_error",
            json!({ "code": "CONTEXT_OVERFLOW", "message": "too long" }),
        ),
        ("continue", json!({ "reason": "tool_turn" })),
        (
            "continue",
            json!({ "reason": "stop_hook_blocking", "hook_reason": "tests fail" }),
        ),
        (
            "usage",
            json!({ "input_tokens": 10, "output_tokens": 5, "model_calls": 2,
                    "tool_calls": 1, "failed_tool_calls": 0 }),
        ),
        ("terminal", json!({ "reason": "end_turn" })),
        ("terminal", json!({ "reason": "cancelled" })),
        (
            "terminal",
            json!({ "reason": "budget_exhausted", "budget": "tokens" }),
        ),
        (
            "terminal",
            json!({ "reason": "error", "code": "LEASE_LOST", "message": "lost" }),
        ),
        (
            "compaction",
            json!({ "summarized_messages": 4, "tokens_before": 9000, "tokens_after": 1200, "forced": false }),
        ),
        (
            "compaction_failed",
            json!({ "code": "PROVIDER_ERROR", "message": "boom" }),
        ),
        (
            "compression",
            json!({ "ranges": [{"archive_id": "a1", "from_ref": "m0", "to_ref": "m6",
                    "messages": 5, "tokens": 900, "kept_refs": ["m3", "m4"]}],
                    "tokens_before": 5000, "tokens_after": 4200 }),
        ),
        (
            "context_pruned",
            json!({ "messages": 2, "tokens_before": 5000, "tokens_after": 3000 }),
        ),
        (
            "context_hidden",
            json!({ "messages": 2, "tokens_before": 3000, "tokens_after": 2900 }),
        ),
        (
            "context_truncated",
            json!({ "messages": 6, "tokens_before": 12000, "tokens_after": 9800 }),
        ),
        (
            "context_nudge",
            json!({ "projected_tokens": 8100, "soft_limit_tokens": 8000 }),
        ),
        (
            "run_resumed",
            json!({ "run_id": "run_1", "replica": "r1", "interrupted": ["tu_1"], "rerun": [] }),
        ),
        (
            "run_parked",
            json!({ "run_id": "run_1", "approval_ids": ["apr_1"] }),
        ),
        (
            "run_handed_off",
            json!({ "run_id": "run_1", "replica": "r1" }),
        ),
        ("approval_requested", json!({ "approval": approval() })),
        ("approval_decided", json!({ "approval": approval() })),
        (
            "approval_webhook_failed",
            json!({ "approval_id": "apr_1", "code": "WEBHOOK_FAILED" }),
        ),
        ("session_expired", json!({ "idle_seconds": 3600 })),
        (
            "forked",
            json!({ "from_session": "ses_0", "messages_copied": 7 }),
        ),
        (
            "egress",
            json!({ "purpose": "web_fetch", "host": "docs.rs", "port": 443,
                    "decision": "allowed", "rule": "domain:docs.rs", "status": 200,
                    "bytes": 5120, "hop": 0, "tool_use_id": "tu_1" }),
        ),
        (
            "egress",
            json!({ "purpose": "web_fetch", "host": "169.254.169.254", "port": 80,
                    "decision": "denied", "reason": "private_address", "bytes": 0, "hop": 1 }),
        ),
        (
            "egress",
            json!({ "purpose": "command", "host": "pypi.org", "port": 443,
                    "decision": "allowed", "bytes": 900, "bytes_out": 300, "hop": 0 }),
        ),
        (
            "subagent_started",
            json!({ "tool_use_id": "tu_1", "agent": "explorer", "session_id": "ses_2",
                    "run_id": "run_2", "depth": 1 }),
        ),
        (
            "subagent_event",
            json!({ "tool_use_id": "tu_1", "agent": "explorer", "session_id": "ses_2",
                    "seq": 4, "kind": "tool_call",
                    "payload": { "tool_use_id": "tu_9", "name": "Read", "input": {} } }),
        ),
        (
            "subagent_finished",
            json!({ "tool_use_id": "tu_1", "agent": "explorer", "session_id": "ses_2",
                    "run_id": "run_2", "terminal": { "reason": "end_turn" },
                    "usage": { "model_calls": 2, "input_tokens": 10, "output_tokens": 5,
                               "cache_read_tokens": 0, "cache_write_tokens": 0,
                               "cost_micros": 0, "unpriced_model_calls": 2 } }),
        ),
        (
            "mcp_sampling",
            json!({ "server": "fx", "tool_use_id": "tu_1", "model": "m", "stop_reason": "end_turn",
                    "usage": {"input_tokens": 5, "output_tokens": 3, "cache_read_tokens": 0,
                              "cache_write_tokens": 0} }),
        ),
        (
            "skill_loaded",
            json!({ "tool_use_id": "tu_1", "name": "pdf-forms", "source": "registered",
                    "unlocked": ["Glob"], "available": ["Read"],
                    "refused": [{"tool": "Write", "reason": "denied"}] }),
        ),
        (
            "skill_loaded",
            json!({ "tool_use_id": "tu_2", "name": "notes", "source": "workspace",
                    "unlocked": [] }),
        ),
    ]
}

#[test]
fn every_variant_round_trips_to_the_exact_json_emitted_before() {
    for (kind, payload) in fixtures() {
        let event = RunEvent::from_parts(kind, payload.clone());
        assert!(
            !matches!(event, RunEvent::Other(_)),
            "{kind} did not parse as a typed event: {payload}"
        );
        assert_eq!(event.to_parts(), (kind.to_owned(), payload), "{kind}");
    }
}

#[test]
fn the_fixture_table_covers_every_variant() {
    let mut seen: Vec<String> = fixtures()
        .into_iter()
        .map(|(kind, payload)| RunEvent::from_parts(kind, payload).to_parts().0)
        .collect();
    seen.dedup();
    // One per typed variant (Other excluded); keep in step with the enum.
    assert_eq!(seen.len(), 36, "{seen:?}");
}

#[test]
fn unknown_kinds_and_misfit_payloads_pass_through_unchanged() {
    for (kind, payload) in [
        ("from_a_newer_server", json!({ "x": 1 })),
        ("tool_result", json!({ "tool_use_id": 5 })),
        ("terminal", json!({ "reason": "exploded" })),
        ("assistant_delta", Value::Null),
    ] {
        let event = RunEvent::from_parts(kind, payload.clone());
        assert!(matches!(event, RunEvent::Other(_)), "{kind}: {event:?}");
        assert_eq!(event.to_parts(), (kind.to_owned(), payload));
    }
}

#[test]
fn rows_carry_the_wire_name_payload_and_run() {
    let row = RunEvent::AssistantDelta(AssistantDelta { text: "x".into() })
        .into_row(Some("run_1".into()));
    assert_eq!(row.kind, "assistant_delta");
    assert_eq!(row.payload, json!({ "text": "x" }));
    assert_eq!(row.run_id.as_deref(), Some("run_1"));
}

#[test]
fn every_variant_is_stored_as_the_payload_text_of_its_json() {
    for (kind, payload) in fixtures() {
        let event = RunEvent::from_parts(kind, payload.clone());
        let row = event.clone().into_row(None);
        assert_eq!(row.kind, kind);
        // The text parses to the payload, and it is the payload's own text: no `type` or
        // `payload` wrapper left around it.
        let parsed: Value = serde_json::from_str(row.payload.as_str()).expect(kind);
        assert_eq!(parsed, payload, "{kind}");
        let tagged = crate::json_text::json_text(&event).unwrap();
        assert_eq!(
            tagged,
            format!(r#"{{"type":"{kind}","payload":{}}}"#, row.payload.as_str())
        );
    }
    // An event of an unknown kind keeps its payload as stored.
    let other = RunEvent::from_parts("from_a_newer_server", json!({ "x": [1] }));
    let row = other.into_row(None);
    assert_eq!(
        (row.kind.as_str(), row.payload.as_str()),
        ("from_a_newer_server", r#"{"x":[1]}"#)
    );
}
