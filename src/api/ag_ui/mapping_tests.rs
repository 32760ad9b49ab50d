//! The AG-UI mapping, table-tested: each row is a sequence of our events (wire form) and the
//! AG-UI events it must become.

use super::mapping::Mapper;
use crate::run_event::RunEvent;
use serde_json::{Value, json};

fn ev(kind: &str, payload: Value) -> RunEvent {
    let event = RunEvent::from_parts(kind, payload);
    assert!(
        !matches!(event, RunEvent::Other(_)) || kind.starts_with("future_"),
        "{kind} must parse as a known event"
    );
    event
}

fn assistant(text: &str) -> Value {
    json!({
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0},
    })
}

/// Runs `events` through a fresh mapper; returns every AG-UI event.
fn run(events: &[RunEvent]) -> Vec<Value> {
    let mut mapper = Mapper::new("s1", "r1");
    events
        .iter()
        .enumerate()
        .flat_map(|(i, event)| mapper.map(i as i64 + 1, event))
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[test]
fn the_mapping_table() {
    let table: Vec<(&str, Vec<RunEvent>, Vec<&str>)> = vec![
        (
            "streamed text in one turn",
            vec![
                ev("run_started", json!({"run_id": "x", "prompt": "hi"})),
                ev(
                    "model_request",
                    json!({"request": 1, "main_turn": 1, "reason": null, "messages": 1}),
                ),
                ev("assistant_delta", json!({"text": "Hel"})),
                ev("assistant_delta", json!({"text": "lo"})),
                ev("assistant_message", assistant("Hello")),
                ev(
                    "usage",
                    json!({"input_tokens": 3, "output_tokens": 4, "model_calls": 1, "tool_calls": 0, "failed_tool_calls": 0}),
                ),
                ev("terminal", json!({"reason": "end_turn"})),
            ],
            vec![
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "STEP_FINISHED",
                "RUN_FINISHED",
            ],
        ),
        (
            "a response that was not streamed",
            vec![
                ev(
                    "model_request",
                    json!({"request": 1, "main_turn": 1, "reason": null, "messages": 1}),
                ),
                ev("assistant_message", assistant("whole")),
                ev("terminal", json!({"reason": "max_turns"})),
            ],
            vec![
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "STEP_FINISHED",
                "RUN_FINISHED",
            ],
        ),
        (
            "a tool call, its decision and result, two turns",
            vec![
                ev(
                    "model_request",
                    json!({"request": 1, "main_turn": 1, "reason": null, "messages": 1}),
                ),
                ev("assistant_delta", json!({"text": "Writing."})),
                ev(
                    "tool_call",
                    json!({"tool_use_id": "t1", "name": "Write", "input": {"file_path": "a"}}),
                ),
                ev("tool_started", json!({"tool_use_id": "t1"})),
                ev(
                    "tool_executing",
                    json!({"tool_use_id": "t1", "name": "Write"}),
                ),
                ev(
                    "tool_result",
                    json!({"tool_use_id": "t1", "result": {"tool_use_id": "t1", "content": "ok"}}),
                ),
                ev("tool_results", json!({"count": 1})),
                ev("continue", json!({"reason": "tool_turn"})),
                ev(
                    "model_request",
                    json!({"request": 2, "main_turn": 2, "reason": "tool_turn", "messages": 3}),
                ),
                ev("terminal", json!({"reason": "cancelled"})),
            ],
            vec![
                "STEP_STARTED",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "STEP_FINISHED",
                "STEP_STARTED",
                "STEP_FINISHED",
                "RUN_FINISHED",
            ],
        ),
        (
            "todos and plan mode become state deltas",
            vec![
                ev(
                    "tool_call",
                    json!({"tool_use_id": "p", "name": "EnterPlanMode", "input": {}}),
                ),
                ev(
                    "tool_result",
                    json!({"tool_use_id": "p", "result": {"tool_use_id": "p", "content": "in plan mode"}}),
                ),
                ev(
                    "tool_progress",
                    json!({"tool_use_id": "t", "data": {"kind": "todos", "todos": [{"id": "1"}]}}),
                ),
                ev(
                    "tool_progress",
                    json!({"tool_use_id": "t", "data": {"kind": "other"}}),
                ),
            ],
            vec![
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "STATE_DELTA",
                "STATE_DELTA",
                "CUSTOM",
            ],
        ),
        (
            "what AG-UI has no form for is CUSTOM; an error is RUN_ERROR",
            vec![
                ev(
                    "egress",
                    json!({"purpose": "web_fetch", "host": "a.example", "port": 443, "decision": "denied", "bytes": 0}),
                ),
                ev("compaction_failed", json!({"code": "X", "message": "m"})),
                ev(
                    "terminal",
                    json!({"reason": "error", "code": "PROVIDER_ERROR", "message": "boom"}),
                ),
                ev("assistant_delta", json!({"text": "after the end"})),
            ],
            vec!["CUSTOM", "CUSTOM", "RUN_ERROR"],
        ),
        (
            "bookkeeping events and empty deltas map to nothing",
            vec![
                ev("run_parked", json!({"run_id": "x", "approval_ids": ["a"]})),
                ev("assistant_delta", json!({"text": ""})),
                ev("terminal", json!({"reason": "parked"})),
            ],
            vec![],
        ),
    ];
    for (name, events, expected) in table {
        let out = run(&events);
        assert_eq!(types(&out), expected, "{name}: {out:#?}");
    }
}

#[test]
fn fields_of_the_mapped_events() {
    let out = run(&[
        ev(
            "model_request",
            json!({"request": 1, "main_turn": 1, "reason": null, "messages": 1}),
        ),
        ev("assistant_delta", json!({"text": "Hi"})),
        ev(
            "tool_call",
            json!({"tool_use_id": "t1", "name": "Write", "input": {"file_path": "a"}}),
        ),
        ev(
            "tool_result",
            json!({"tool_use_id": "t1", "result": {"tool_use_id": "t1", "content": "done"}}),
        ),
        ev(
            "permission_decision",
            json!({"tool_use_id": "t1", "tool": "Write", "decision": {
            "stage": "allowed", "rule": "Write", "grant_id": null, "message": "allowed",
            "approved_by_callback": false, "rewritten_by_hook": false}}),
        ),
        ev(
            "usage",
            json!({"input_tokens": 3, "output_tokens": 4, "model_calls": 1, "tool_calls": 1, "failed_tool_calls": 0}),
        ),
        ev("terminal", json!({"reason": "end_turn"})),
    ]);
    assert_eq!(
        out[0],
        json!({"type": "STEP_STARTED", "stepName": "turn-1"})
    );
    assert_eq!(
        out[1],
        json!({"type": "TEXT_MESSAGE_START", "messageId": "r1-msg-2", "role": "assistant"})
    );
    assert_eq!(
        out[2],
        json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "r1-msg-2", "delta": "Hi"})
    );
    assert_eq!(out[3]["type"], "TEXT_MESSAGE_END");
    assert_eq!(
        out[4],
        json!({"type": "TOOL_CALL_START", "toolCallId": "t1", "toolCallName": "Write"})
    );
    assert_eq!(
        out[5],
        json!({"type": "TOOL_CALL_ARGS", "toolCallId": "t1", "delta": "{\"file_path\":\"a\"}"})
    );
    assert_eq!(
        out[7],
        json!({"type": "TOOL_CALL_RESULT", "messageId": "r1-result-t1", "toolCallId": "t1", "content": "done", "role": "tool"})
    );
    assert_eq!(out[8]["type"], "CUSTOM");
    assert_eq!(out[8]["name"], "norma.permission_decision");
    assert_eq!(out[8]["value"]["decision"]["rule"], "Write");
    let finished = out.last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED");
    assert_eq!(finished["threadId"], "s1");
    assert_eq!(finished["runId"], "r1");
    assert_eq!(finished["result"], json!({"reason": "end_turn"}));
    assert_eq!(
        finished["usage"],
        json!([{"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}])
    );
    assert!(
        finished.get("outcome").is_none(),
        "absent outcome = success"
    );
}

#[test]
fn pending_approvals_end_the_run_with_one_interrupt_each() {
    let approval = |id: &str, tool: &str| -> crate::store::ApprovalRecord {
        serde_json::from_value(json!({
            "id": id, "session_id": "s1", "run_id": "x", "tool_use_id": format!("tu-{id}"),
            "tool_name": tool, "input": {"command": "rm -rf /tmp/x"}, "input_sha256": "h",
            "reason": "ask rule Bash(rm:*)", "status": "pending",
            "expires_at": "2026-12-01T00:00:00Z", "created_at": "2026-12-01T00:00:00Z",
        }))
        .unwrap()
    };
    let mut mapper = Mapper::new("s1", "r1");
    let mut out = mapper.map(1, &ev("assistant_delta", json!({"text": "Let me"})));
    out.extend(mapper.interrupt(&[approval("a1", "Bash"), approval("a2", "Write")]));
    assert_eq!(
        types(&out),
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    let outcome = &out[3]["outcome"];
    assert_eq!(outcome["type"], "interrupt");
    let interrupts = outcome["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 2);
    assert_eq!(interrupts[0]["id"], "a1");
    assert_eq!(interrupts[0]["toolCallId"], "tu-a1");
    assert_eq!(interrupts[0]["metadata"]["tool"], "Bash");
    assert_eq!(
        interrupts[0]["metadata"]["input"]["command"],
        "rm -rf /tmp/x"
    );
    assert_eq!(interrupts[0]["metadata"]["reason"], "ask rule Bash(rm:*)");
    assert!(mapper.finished());
    assert!(
        mapper
            .map(2, &ev("terminal", json!({"reason": "end_turn"})))
            .is_empty()
    );
    // The next AG-UI run re-announces the resumed call before its result.
    let mut next = Mapper::new("s1", "r2");
    let mut out = next.resumed_calls(&[approval("a1", "Bash")]);
    out.extend(next.map(
        3,
        &ev(
            "tool_result",
            json!({"tool_use_id": "tu-a1", "result": {"tool_use_id": "tu-a1", "content": "ok"}}),
        ),
    ));
    assert_eq!(
        types(&out),
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT"
        ]
    );
    assert_eq!(out[0]["toolCallName"], "Bash");
    // A result of a call nobody announced still gets a START/END first.
    let mut other = Mapper::new("s1", "r3");
    let out = other.map(
        1,
        &ev(
            "tool_result",
            json!({"tool_use_id": "x", "result": {"tool_use_id": "x", "content": "ok"}}),
        ),
    );
    assert_eq!(
        types(&out),
        ["TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    );
    // Nothing pending: no interrupt.
    assert!(Mapper::new("s1", "r1").interrupt(&[]).is_empty());
}

#[test]
fn a_resumed_turns_message_is_not_repeated_by_the_next_run() {
    // The next AG-UI run starts after the approval: the turn's text was streamed before.
    let mut mapper = Mapper::new("s1", "r2");
    let out = mapper.map(7, &ev("assistant_message", assistant("Writing the file.")));
    assert!(types(&out).is_empty(), "{out:?}");
    // A turn of this run without deltas still shows its text.
    let mut out = mapper.map(
        8,
        &ev(
            "model_request",
            json!({"request": 2, "main_turn": 2, "reason": "tool_turn", "messages": 3}),
        ),
    );
    out.extend(mapper.map(9, &ev("assistant_message", assistant("Done."))));
    assert!(types(&out).contains(&"TEXT_MESSAGE_CONTENT"), "{out:?}");
}
