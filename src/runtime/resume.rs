//! Resuming a run after a crash or restart, from what the store holds.
//!
//! A run's history is committed turn by turn, and the turn in flight leaves a trail of
//! events: `tool_call` (the model asked for a call), `tool_executing` (written durably just
//! before the call's code ran), `tool_result` (the call finished). Resuming a run looks at the
//! calls of the interrupted turn that history does not hold yet:
//! - a call with a recorded result keeps it;
//! - a call that started executing but has no result gets an `INTERRUPTED` error result: it
//!   may have had effects, so it is never silently run again (the model decides);
//! - a call that never started (parked on an approval, or waiting its turn) goes through the
//!   pipeline now; a still-pending approval is reused, so it stays answerable.
//!
//! The interrupted turn is then committed (its streamed text, its calls and their results) and
//! the loop continues with a fresh model request. A run that was mid model-call has no
//! calls in flight and simply re-issues the request.

use super::RuntimeError;
use super::host::StoreHost;
use crate::harness::engine::{HistoryAppend, LoopHost, RunHistory};
use crate::harness::scheduler::PendingCall;
use crate::ids::{RunId, SessionId, TenantId};
use crate::message::{ContentBlock, Message, Role, ToolResultBlock};
use crate::run_event::{self, RunEvent, TerminalReason, kinds};
use crate::store::{EventRecord, MessageRecord, Store};
use crate::tools::codes;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What the resumed run needs.
pub struct Resumed<'a> {
    pub store: &'a dyn Store,
    pub host: &'a StoreHost,
    pub tenant: &'a TenantId,
    pub session: &'a SessionId,
    pub run_id: &'a RunId,
    pub replica: &'a str,
}

/// How to go on after recovery.
#[derive(Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Run the loop; the next response is main turn `main_turn`.
    Continue { main_turn: u32 },
    /// The run had already ended; its end is now recorded.
    Finished,
    /// A call of the interrupted turn still waits on its approval: the run parks again.
    Parked,
}

/// A call of the interrupted turn, as the `tool_call` event recorded it.
struct Call {
    id: String,
    name: String,
    input: Value,
}

/// The events of a run that resuming reads: whether it started, and the trail of its
/// interrupted turn. (A run whose `terminal` event was written is not resumed: the event and
/// the run's end are one transaction.)
pub const TRAIL_KINDS: &[&str] = &[
    kinds::RUN_STARTED,
    kinds::MODEL_REQUEST,
    kinds::ASSISTANT_DELTA,
    kinds::TOOL_CALL,
    kinds::TOOL_EXECUTING,
    kinds::TOOL_RESULT,
];

/// Whether the run wrote its prompt (`run_started`) before it was interrupted.
pub fn started(trail: &[EventRecord]) -> bool {
    trail
        .iter()
        .any(|event| matches!(RunEvent::from_row(event), RunEvent::RunStarted(_)))
}

/// Brings the run's history up to date and tells how to continue. `events` are the run's
/// events of [`TRAIL_KINDS`], in order.
pub async fn recover(
    run: &Resumed<'_>,
    events: &[EventRecord],
    records: &[MessageRecord],
    history: &mut RunHistory,
    cancel: &CancellationToken,
) -> Result<Recovery, RuntimeError> {
    let of_run = |record: &&MessageRecord| record.run_id.as_deref() == Some(run.run_id.as_str());
    let tool_turns_done = records
        .iter()
        .filter(of_run)
        .filter(|r| r.role == Role::Assistant && r.to_message().tool_uses().next().is_some())
        .count() as u32;
    let known: HashSet<String> = history
        .messages
        .iter()
        .flat_map(|m| m.tool_uses().map(|(id, _, _)| id.to_owned()))
        .collect();

    // The interrupted turn: calls history does not hold, their results and starts.
    let mut calls: Vec<Call> = Vec::new();
    let mut results: HashMap<String, ToolResultBlock> = HashMap::new();
    let mut executing: HashSet<String> = HashSet::new();
    let mut text = String::new();
    for event in events {
        match RunEvent::from_row(event) {
            // Streamed text belongs to the last request's response.
            RunEvent::ModelRequest(_) => text.clear(),
            RunEvent::AssistantDelta(delta) => text.push_str(&delta.text),
            RunEvent::ToolCall(call)
                if !known.contains(&call.tool_use_id)
                    && !calls.iter().any(|c| c.id == call.tool_use_id) =>
            {
                calls.push(Call {
                    id: call.tool_use_id,
                    name: call.name,
                    input: call.input,
                });
            }
            RunEvent::ToolExecuting(started) => {
                executing.insert(started.tool_use_id);
            }
            RunEvent::ToolResult(done) => {
                results.insert(done.tool_use_id, done.result);
            }
            _ => {}
        }
    }

    if calls.is_empty() {
        let last_is_answer = records.last().filter(of_run).is_some_and(|r| {
            r.role == Role::Assistant && r.to_message().tool_uses().next().is_none()
        });
        if last_is_answer {
            // The final answer was committed; only the terminal event was missing.
            run.host
                .commit(vec![], vec![RunEvent::Terminal(TerminalReason::EndTurn)])
                .await
                .map_err(|error| RuntimeError::from_write(&run.host.writer, error))?;
            return Ok(Recovery::Finished);
        }
        run.host
            .commit(vec![], vec![resumed_event(run, &[], &[])])
            .await
            .map_err(|error| RuntimeError::from_write(&run.host.writer, error))?;
        return Ok(Recovery::Continue {
            main_turn: tool_turns_done + 1,
        });
    }

    let interrupted: Vec<&str> = calls
        .iter()
        .filter(|c| !results.contains_key(&c.id) && executing.contains(&c.id))
        .filter(|c| !super::subagent::reattaches(&c.name))
        .map(|c| c.id.as_str())
        .collect();
    let rerun: Vec<&str> = calls
        .iter()
        .filter(|c| {
            !results.contains_key(&c.id)
                && (!executing.contains(&c.id) || super::subagent::reattaches(&c.name))
        })
        .map(|c| c.id.as_str())
        .collect();
    run.host
        .commit(vec![], vec![resumed_event(run, &interrupted, &rerun)])
        .await
        .map_err(|error| RuntimeError::from_write(&run.host.writer, error))?;

    let mut paired = Vec::with_capacity(calls.len());
    let mut new_results = Vec::new();
    for call in &calls {
        let result = match results.remove(&call.id) {
            Some(result) => result,
            // An `Agent` call re-attaches to its subagent run, which resumes on its own.
            None if executing.contains(&call.id) && !super::subagent::reattaches(&call.name) => {
                let result = ToolResultBlock::error(
                    &call.id,
                    codes::INTERRUPTED,
                    "The server stopped while this call was running; it may or may not have \
                     taken effect, and it was not run again.",
                );
                new_results.push(result.clone());
                result
            }
            None => {
                // It never started: run it now (a pending approval is reused).
                let pending = PendingCall {
                    tool_use_id: call.id.clone(),
                    name: call.name.clone(),
                    input: call.input.clone(),
                    concurrency_safe: false,
                };
                let result = run.host.execute_tool(pending, cancel.child_token()).await;
                new_results.push(result.clone());
                result
            }
        };
        paired.push(result);
    }

    if run.host.parked() {
        return Ok(Recovery::Parked);
    }
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(ContentBlock::Text { text });
    }
    content.extend(calls.iter().map(|call| ContentBlock::ToolUse {
        id: call.id.clone(),
        name: call.name.clone(),
        input: call.input.clone(),
    }));
    let assistant = Message {
        role: Role::Assistant,
        content,
    };
    let answers = Message {
        role: Role::User,
        content: paired.into_iter().map(ContentBlock::ToolResult).collect(),
    };
    let mut events: Vec<RunEvent> = new_results
        .into_iter()
        .map(|result| {
            RunEvent::ToolResult(run_event::ToolResult {
                tool_use_id: result.tool_use_id.clone(),
                result,
                workspace_snapshot: None,
            })
        })
        .collect();
    events.push(RunEvent::ToolResults(run_event::ToolResults {
        count: answers.content.len(),
    }));
    history.messages.push(Arc::new(assistant.clone()));
    history.messages.push(Arc::new(answers.clone()));
    run.host
        .commit(
            vec![
                HistoryAppend {
                    message: assistant,
                    compaction_boundary: false,
                },
                HistoryAppend {
                    message: answers,
                    compaction_boundary: false,
                },
            ],
            events,
        )
        .await
        .map_err(|error| RuntimeError::from_write(&run.host.writer, error))?;
    Ok(Recovery::Continue {
        main_turn: tool_turns_done + 2,
    })
}

fn resumed_event(run: &Resumed<'_>, interrupted: &[&str], rerun: &[&str]) -> RunEvent {
    let owned = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect();
    RunEvent::RunResumed(run_event::RunResumed {
        run_id: run.run_id.to_string(),
        replica: run.replica.to_owned(),
        interrupted: owned(interrupted),
        rerun: owned(rerun),
    })
}
