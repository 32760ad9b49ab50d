//! The tool-call scheduler for one model response (SPEC.md N13–N15).
//!
//! It owns ordering only: which call may start when, which events are emitted, and how results
//! are paired and ordered. How one call runs (the tool pipeline) is passed in as `exec`, so the
//! scheduler does not depend on the pipeline.
//!
//! Rules:
//! - Calls queue in arrival order (the order the model's stream completes them).
//! - Concurrency-safe calls at the head of the queue start while fewer than `max_concurrency`
//!   calls of this run are in flight.
//! - An exclusive call starts only when everything before it has finished, and runs alone.
//! - While an exclusive call is at the head, later safe calls wait behind it (no overtaking).
//! - Events are emitted as calls start and finish; the returned results are in arrival order.
//! - On cancellation, running futures are dropped and every call without a result gets a
//!   synthetic `CANCELLED` error result, so every tool_use stays paired (N4, N14).
//!
//! The concurrency bound belongs to one call of [`Scheduler::run`] (one prompt's response), never
//! to the process (N15); global per-tenant limits are layered on top elsewhere.

use crate::message::ToolResultBlock;
use crate::tools::codes;
use futures::FutureExt;
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use serde_json::Value;
use std::any::Any;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use tokio_util::sync::CancellationToken;

/// How many concurrency-safe calls of one response may run at once unless configured otherwise.
pub const DEFAULT_MAX_CONCURRENCY: usize = 10;

/// One tool call the model has finished streaming, ready to be scheduled.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingCall {
    /// The model's tool_use id; the result is paired with it.
    pub tool_use_id: String,
    /// The tool name as the model wrote it.
    pub name: String,
    /// The tool input as the model wrote it.
    pub input: Value,
    /// The tool's `is_concurrency_safe(input)` answer; `false` makes the call exclusive.
    pub concurrency_safe: bool,
}

/// Progress of a batch, emitted as it happens.
///
/// Every call that arrived gets exactly one `Finished` (a synthetic one when cancelled); a call
/// gets a `Started` only if it actually began running.
#[derive(Clone, Debug, PartialEq)]
pub enum SchedulerEvent {
    /// The call began running.
    Started {
        /// The call's tool_use id.
        tool_use_id: String,
    },
    /// The call has its (final) result.
    Finished {
        /// The call's tool_use id.
        tool_use_id: String,
        /// The result, exactly as it appears in the list [`Scheduler::run`] returns.
        result: ToolResultBlock,
    },
}

/// Schedules the tool calls of one model response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduler {
    max_concurrency: usize,
}

impl Default for Scheduler {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_CONCURRENCY)
    }
}

/// Bookkeeping for one arrived call.
struct Slot {
    tool_use_id: String,
    started: bool,
    result: Option<ToolResultBlock>,
}

impl Scheduler {
    /// A scheduler allowing `max_concurrency` safe calls in flight per run. Zero is treated as
    /// one, so a misconfiguration can slow a run down but never stall it.
    pub fn new(max_concurrency: usize) -> Self {
        Self {
            max_concurrency: max_concurrency.max(1),
        }
    }

    /// The bound on safe calls in flight within one [`Scheduler::run`].
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// Runs every call `calls` yields and returns one result per call, in ARRIVAL order.
    ///
    /// `calls` yields calls in arrival order as the model's stream completes each one; it may
    /// still be streaming while earlier calls run. `exec` runs one call (the tool pipeline); its
    /// result is always paired with the call's `tool_use_id`, whatever id it carries, and a
    /// panicking call becomes a `TOOL_FAILED` result. `events` sees starts and finishes as they
    /// happen. When `cancel` fires, running calls are dropped, calls the stream has already
    /// delivered are collected without waiting for more, and every call without a result gets a
    /// synthetic `CANCELLED` result.
    pub async fn run<F, Fut>(
        &self,
        calls: impl Stream<Item = PendingCall> + Send,
        exec: F,
        mut events: impl FnMut(SchedulerEvent) + Send,
        cancel: CancellationToken,
    ) -> Vec<ToolResultBlock>
    where
        F: Fn(PendingCall) -> Fut + Send + Sync,
        Fut: Future<Output = ToolResultBlock> + Send,
    {
        let exec = &exec;
        let mut calls = std::pin::pin!(calls);
        let mut slots: Vec<Slot> = Vec::new();
        let mut queue: VecDeque<(usize, PendingCall)> = VecDeque::new();
        let mut running = FuturesUnordered::new();
        let mut exclusive_running = false;
        let mut stream_open = true;

        loop {
            // Start whatever the head of the queue allows. Only the head is ever considered, so
            // an exclusive head blocks every later call (no overtaking).
            while let Some((_, head)) = queue.front() {
                let may_start = if head.concurrency_safe {
                    !exclusive_running && running.len() < self.max_concurrency
                } else {
                    running.is_empty()
                };
                if !may_start {
                    break;
                }
                let Some((index, call)) = queue.pop_front() else {
                    break;
                };
                let safe = call.concurrency_safe;
                exclusive_running |= !safe;
                slots[index].started = true;
                events(SchedulerEvent::Started {
                    tool_use_id: call.tool_use_id.clone(),
                });
                // The call's spans (`execute_tool`, the pipeline's `tool_call`) are made by
                // whoever executes it, as children of the run's span.
                let tool_use_id = call.tool_use_id.clone();
                running.push(async move {
                    let outcome = AssertUnwindSafe(async move { exec(call).await })
                        .catch_unwind()
                        .await;
                    let result = match outcome {
                        Ok(mut result) => {
                            result.tool_use_id = tool_use_id;
                            result
                        }
                        Err(panic) => ToolResultBlock::error(
                            tool_use_id,
                            codes::TOOL_FAILED,
                            format!("The tool failed unexpectedly: {}", panic_text(&*panic)),
                        ),
                    };
                    (index, safe, result)
                });
            }

            if !stream_open && queue.is_empty() && running.is_empty() {
                break;
            }

            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                Some((index, safe, result)) = running.next(), if !running.is_empty() => {
                    if !safe {
                        exclusive_running = false;
                    }
                    events(SchedulerEvent::Finished {
                        tool_use_id: result.tool_use_id.clone(),
                        result: result.clone(),
                    });
                    slots[index].result = Some(result);
                }
                next = calls.next(), if stream_open => match next {
                    Some(call) => {
                        slots.push(Slot {
                            tool_use_id: call.tool_use_id.clone(),
                            started: false,
                            result: None,
                        });
                        queue.push_back((slots.len() - 1, call));
                    }
                    None => stream_open = false,
                },
            }
        }

        // Only reached with calls outstanding when cancelled: drop running calls first, then
        // pair every call the stream has already delivered.
        drop(running);
        if stream_open {
            while let Some(Some(call)) = calls.next().now_or_never() {
                slots.push(Slot {
                    tool_use_id: call.tool_use_id,
                    started: false,
                    result: None,
                });
            }
        }

        slots
            .into_iter()
            .map(|slot| match slot.result {
                Some(result) => result,
                None => {
                    let result = cancelled_result(&slot);
                    events(SchedulerEvent::Finished {
                        tool_use_id: slot.tool_use_id,
                        result: result.clone(),
                    });
                    result
                }
            })
            .collect()
    }
}

/// The synthetic result of a call that the run's cancellation left without one.
fn cancelled_result(slot: &Slot) -> ToolResultBlock {
    let text = if slot.started {
        "Cancelled: the run was cancelled while this tool call was running."
    } else {
        "Cancelled: the run was cancelled before this tool call started."
    };
    ToolResultBlock::error(slot.tool_use_id.clone(), codes::CANCELLED, text)
}

/// The message of a panic payload, when it has one.
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "panic"
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
