//! Our events as AG-UI 1.0 events: a pure fold over [`RunEvent`]s (no I/O), so the whole
//! mapping is table-tested in `mapping_tests.rs`.
//!
//! | our event | AG-UI |
//! |---|---|
//! | `model_request` | `STEP_FINISHED` (previous turn) + `STEP_STARTED` `turn-<n>` |
//! | `assistant_delta` | `TEXT_MESSAGE_START` (first) + `TEXT_MESSAGE_CONTENT` |
//! | `assistant_message` | `TEXT_MESSAGE_END` (or START/CONTENT/END when nothing streamed and its `model_request` was in this run) |
//! | `tool_call` | `TOOL_CALL_START` + `TOOL_CALL_ARGS` (the input as JSON) + `TOOL_CALL_END` |
//! | `tool_result` | (`TOOL_CALL_START/END` for a call this run did not start) `TOOL_CALL_RESULT` (+ `STATE_DELTA` `/planMode` for EnterPlanMode / ExitPlanMode) |
//! | `tool_progress` `{"kind": "todos"}` | `STATE_DELTA` `/todos` |
//! | `usage` | kept for `RUN_FINISHED.usage` |
//! | `terminal` | `RUN_FINISHED` (success, or `cancelled`), `RUN_ERROR` for `error` |
//! | `run_started`, `tool_started`, `tool_executing`, `tool_results`, `continue`, `run_parked` | nothing (bookkeeping) |
//! | everything else (`permission_decision`, `egress`, `approval_*`, `compaction*`, …) | `CUSTOM` named `norma.<kind>` with our payload |
//!
//! A pending approval ends the AG-UI run with [`Mapper::interrupt`]: `RUN_FINISHED` with
//! `outcome: {"type": "interrupt", "interrupts": [...]}`, one interrupt per approval.

use crate::message::ContentBlock;
use crate::run_event::{RunEvent, TerminalReason};
use crate::store::ApprovalRecord;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};

/// Folds our events of one run into AG-UI events.
#[derive(Debug, Clone)]
pub struct Mapper {
    thread_id: String,
    run_id: String,
    /// The streamed text message still open.
    open_text: Option<String>,
    /// The step (model request) still open.
    open_step: Option<String>,
    /// Tool names by call id (a result only carries the id).
    tool_names: HashMap<String, String>,
    /// Calls whose `TOOL_CALL_START` this run sent.
    started_calls: HashSet<String>,
    usage: Option<crate::run_event::Usage>,
    finished: bool,
}

impl Mapper {
    pub fn new(thread_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        Self {
            thread_id: thread_id.into(),
            run_id: run_id.into(),
            open_text: None,
            open_step: None,
            tool_names: HashMap::new(),
            started_calls: HashSet::new(),
            usage: None,
            finished: false,
        }
    }

    /// Whether a `RUN_FINISHED` or `RUN_ERROR` was produced.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// `RUN_STARTED`, then the session state as `STATE_SNAPSHOT`.
    pub fn start(&self, input: Value, state: Value) -> Vec<Value> {
        vec![
            json!({
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "input": input,
            }),
            json!({ "type": "STATE_SNAPSHOT", "snapshot": state }),
        ]
    }

    /// The AG-UI events of our event number `seq`.
    pub fn map(&mut self, seq: i64, event: &RunEvent) -> Vec<Value> {
        if self.finished {
            return Vec::new();
        }
        let mut out = Vec::new();
        match event {
            RunEvent::ModelRequest(request) => {
                self.close_text(&mut out);
                self.close_step(&mut out);
                let name = format!("turn-{}", request.request);
                out.push(json!({ "type": "STEP_STARTED", "stepName": name }));
                self.open_step = Some(name);
            }
            RunEvent::AssistantDelta(delta) if !delta.text.is_empty() => {
                let id = self.open_text(seq, &mut out);
                out.push(json!({
                    "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": delta.text,
                }));
            }
            RunEvent::AssistantDelta(_) => {}
            RunEvent::AssistantMessage(message) => {
                // A message whose model request came before this AG-UI run (a turn resumed
                // after its approval) was streamed by the earlier run: not repeated.
                if self.open_text.is_none() && self.open_step.is_some() {
                    let text: String = message
                        .message
                        .content
                        .iter()
                        .filter_map(|block| match block {
                            ContentBlock::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect();
                    if !text.is_empty() {
                        let id = self.open_text(seq, &mut out);
                        out.push(json!({
                            "type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text,
                        }));
                    }
                }
                self.close_text(&mut out);
            }
            RunEvent::ToolCall(call) => {
                self.close_text(&mut out);
                self.call(&call.tool_use_id, &call.name, Some(&call.input), &mut out);
            }
            RunEvent::ToolResult(result) => {
                self.close_text(&mut out);
                if !self.started_calls.contains(&result.tool_use_id) {
                    // A call of an earlier AG-UI run (resumed after its approval).
                    let name = self
                        .tool_names
                        .get(&result.tool_use_id)
                        .cloned()
                        .unwrap_or_else(|| "unknown".into());
                    self.call(&result.tool_use_id, &name, None, &mut out);
                }
                out.push(json!({
                    "type": "TOOL_CALL_RESULT",
                    "messageId": format!("{}-result-{}", self.run_id, result.tool_use_id),
                    "toolCallId": result.tool_use_id,
                    "content": result.result.content,
                    "role": "tool",
                }));
                let plan_mode = match self.tool_names.get(&result.tool_use_id).map(String::as_str) {
                    Some("EnterPlanMode") => Some(true),
                    Some("ExitPlanMode") => Some(false),
                    _ => None,
                };
                if let Some(on) = plan_mode.filter(|_| !result.result.is_error) {
                    out.push(json!({
                        "type": "STATE_DELTA",
                        "delta": [{ "op": "add", "path": "/planMode", "value": on }],
                    }));
                }
            }
            RunEvent::ToolProgress(progress) if progress.data["kind"] == "todos" => {
                out.push(json!({
                    "type": "STATE_DELTA",
                    "delta": [{
                        "op": "add", "path": "/todos",
                        "value": progress.data.get("todos").cloned().unwrap_or(json!([])),
                    }],
                }));
            }
            RunEvent::Usage(usage) => self.usage = Some(*usage),
            RunEvent::Terminal(reason) => self.terminal(reason, &mut out),
            RunEvent::RunStarted(_)
            | RunEvent::ToolStarted(_)
            | RunEvent::ToolExecuting(_)
            | RunEvent::ToolResults(_)
            | RunEvent::Continue(_)
            | RunEvent::RunParked(_) => {}
            other => {
                self.close_text(&mut out);
                let (kind, payload) = other.to_parts();
                out.push(json!({
                    "type": "CUSTOM", "name": format!("norma.{kind}"), "value": payload,
                }));
            }
        }
        out
    }

    /// Ends the run on approvals waiting for an answer: `RUN_FINISHED` with the interrupt
    /// outcome (one interrupt per approval, answered by `resume[].interruptId`).
    pub fn interrupt(&mut self, pending: &[ApprovalRecord]) -> Vec<Value> {
        let mut out = Vec::new();
        if self.finished || pending.is_empty() {
            return out;
        }
        self.close_text(&mut out);
        self.close_step(&mut out);
        let interrupts: Vec<Value> = pending
            .iter()
            .map(|approval| {
                json!({
                    "id": approval.id,
                    "reason": "tool_approval",
                    "message": format!("{} needs approval: {}", approval.tool_name, approval.reason),
                    "toolCallId": approval.tool_use_id,
                    "expiresAt": approval.expires_at.to_rfc3339(),
                    "metadata": {
                        "tool": approval.tool_name,
                        "input": approval.input,
                        "reason": approval.reason,
                    },
                    "responseSchema": RESUME_PAYLOAD_SCHEMA.clone(),
                })
            })
            .collect();
        out.push(json!({
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": { "type": "interrupt", "interrupts": interrupts },
        }));
        self.finished = true;
        out
    }

    /// Ends the run on an error that is not one of our events (the store failed, …).
    pub fn error(&mut self, code: &str, message: &str) -> Vec<Value> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.close_text(&mut out);
        self.close_step(&mut out);
        out.push(json!({ "type": "RUN_ERROR", "message": message, "code": code }));
        self.finished = true;
        out
    }

    fn terminal(&mut self, reason: &TerminalReason, out: &mut Vec<Value>) {
        if matches!(reason, TerminalReason::Parked) {
            return;
        }
        self.close_text(out);
        self.close_step(out);
        if let TerminalReason::Error { code, message } = reason {
            out.push(json!({ "type": "RUN_ERROR", "message": message, "code": code }));
        } else {
            let mut finished = json!({
                "type": "RUN_FINISHED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "result": reason,
            });
            if matches!(reason, TerminalReason::Cancelled) {
                finished["outcome"] = json!({ "type": "cancelled" });
            }
            if let Some(usage) = self.usage {
                finished["usage"] = json!([{
                    "inputTokens": usage.input_tokens,
                    "outputTokens": usage.output_tokens,
                    "totalTokens": usage.input_tokens + usage.output_tokens,
                }]);
            }
            out.push(finished);
        }
        self.finished = true;
    }

    /// Announces the calls a resumed run goes on with (their `TOOL_CALL_START` was in the
    /// AG-UI run that ended with the interrupt): `TOOL_CALL_START/ARGS/END` again, so this
    /// run's `TOOL_CALL_RESULT`s refer to calls it started.
    pub fn resumed_calls(&mut self, approvals: &[ApprovalRecord]) -> Vec<Value> {
        let mut out = Vec::new();
        for approval in approvals {
            if !self.started_calls.contains(&approval.tool_use_id) {
                let input = approval.updated_input.as_ref().unwrap_or(&approval.input);
                self.call(
                    &approval.tool_use_id,
                    &approval.tool_name,
                    Some(input),
                    &mut out,
                );
            }
        }
        out
    }

    fn call(&mut self, id: &str, name: &str, input: Option<&Value>, out: &mut Vec<Value>) {
        self.tool_names.insert(id.to_owned(), name.to_owned());
        self.started_calls.insert(id.to_owned());
        out.push(json!({ "type": "TOOL_CALL_START", "toolCallId": id, "toolCallName": name }));
        if let Some(input) = input {
            out.push(json!({
                "type": "TOOL_CALL_ARGS", "toolCallId": id, "delta": input.to_string(),
            }));
        }
        out.push(json!({ "type": "TOOL_CALL_END", "toolCallId": id }));
    }

    fn open_text(&mut self, seq: i64, out: &mut Vec<Value>) -> String {
        if let Some(id) = &self.open_text {
            return id.clone();
        }
        let id = format!("{}-msg-{seq}", self.run_id);
        out.push(json!({ "type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant" }));
        self.open_text = Some(id.clone());
        id
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.open_text.take() {
            out.push(json!({ "type": "TEXT_MESSAGE_END", "messageId": id }));
        }
    }

    fn close_step(&mut self, out: &mut Vec<Value>) {
        if let Some(name) = self.open_step.take() {
            out.push(json!({ "type": "STEP_FINISHED", "stepName": name }));
        }
    }
}

/// What `resume[].payload` may hold for an approval interrupt (the REST answer's body).
static RESUME_PAYLOAD_SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {
            "decision": { "enum": ["allow", "deny"] },
            "reason": { "type": "string" },
            "updated_input": { "type": "object" },
            "grant": { "type": "object" },
        },
    })
});
