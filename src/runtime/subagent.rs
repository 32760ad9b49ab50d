//! The `Agent` tool: starts a subagent as a durable child session and waits on its run.
//!
//! A subagent is a session of its own (`config.subagent` links it to the parent session, run
//! and `Agent` call), whose id is derived from the parent session, run and `tool_use_id`: the
//! call finds its child again after a crash. Its configuration is derived from the parent's
//! by [`crate::subagents::child_config`] (policy only narrows) and it works in the parent's
//! workspace. Its run is an ordinary run — persisted, leased, parked on approvals, resumed
//! after a crash — so the `Agent` call is a durable wait on it, not an execution: resuming a
//! parent whose `Agent` call was executing runs the call again ([`reattaches`]), and the call
//! re-attaches to the child run instead of reporting `INTERRUPTED`.
//!
//! While it waits, the call copies the child's events (except text deltas) into the parent's
//! transcript as `subagent_event`s, from the last one copied; the call's result is the
//! child's final answer (no pipeline time bound: the child's own budgets bound it). A
//! cancelled call cancels the child run, and closes the child session when the parent's
//! session was closed (see `subagent_close`) — unless the replica is shutting down, when the
//! child hands off like any run. The child's usage, with its own subagents', is recorded in
//! `subagent_finished` and counted into the parent's (see `subagent_usage`).

use super::SessionRuntime;
use super::session_writer::SessionWriter;
pub use super::subagent_usage::{DelegatedUsage, restore_delegated};
use crate::ids::{RunId, SessionId, TenantId};
use crate::message::Role;
use crate::permission::PermissionMode;
use crate::run_event::{self, RunEvent};
use crate::session_config::SessionConfig;
use crate::store::{NewSession, RunStatus};
use crate::subagents::{self, AGENT_TOOL, SubagentLink};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, codes};
use async_trait::async_trait;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;
use tokio::sync::broadcast;

/// The subagent run ended without an answer (turn or token budget, error, cancel).
pub const SUBAGENT_FAILED: &str = "SUBAGENT_FAILED";
/// How many child events are read per store query.
const PAGE: u32 = 500;
/// Re-reads the child's events at least this often (signals are advisory).
const POLL: Duration = Duration::from_millis(500);

/// Whether a call of `tool` executing when its run stopped re-attaches on resume instead of
/// getting `INTERRUPTED`.
pub fn reattaches(tool: &str) -> bool {
    tool == AGENT_TOOL
}

/// The id of the subagent session an `Agent` call starts: derived from the (random) parent
/// session id, the run and the call, so a resumed call finds it again.
pub fn child_session_id(parent: &SessionId, run: &RunId, tool_use_id: &str) -> SessionId {
    let digest = Sha256::new()
        .chain_update(parent.as_str())
        .chain_update([0])
        .chain_update(run.as_str())
        .chain_update([0])
        .chain_update(tool_use_id)
        .finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    SessionId::from_string(format!("{}{hex}", SessionId::PREFIX))
}

/// What the `Agent` tool of one run needs.
pub struct AgentSetup {
    pub runtime: Weak<SessionRuntime>,
    pub tenant: TenantId,
    pub session: SessionId,
    pub run_id: RunId,
    pub config: SessionConfig,
    /// The parent run's live permission mode.
    pub mode: Arc<RwLock<PermissionMode>>,
    pub unlocked: crate::tools::deferred::UnlockSet,
    /// Names of the parent's read-only tools.
    pub read_only: HashSet<String>,
    pub writer: Arc<SessionWriter>,
    pub delegated: DelegatedUsage,
}

pub struct AgentTool {
    setup: AgentSetup,
    description: String,
    schema: Value,
    /// Agent types whose every tool is read-only (or whose mode is plan): safe to run
    /// concurrently, and allowed in plan mode.
    read_only_agents: HashSet<String>,
}

impl AgentTool {
    pub fn new(setup: AgentSetup) -> Self {
        let names: Vec<&String> = setup.config.agents.keys().collect();
        let schema = json!({
            "type": "object",
            "properties": {
                "subagent_type": {"type": "string", "enum": names,
                                  "description": "Which agent type to start."},
                "prompt": {"type": "string", "minLength": 1, "maxLength": 100_000,
                           "description": "The task: everything the subagent needs to know."},
                "description": {"type": "string", "maxLength": 200,
                                "description": "A few words on the task (shown to users)."}
            },
            "required": ["subagent_type", "prompt"],
            "additionalProperties": false
        });
        let offered: Vec<String> = setup.config.tools.clone().unwrap_or_else(|| {
            crate::session_config::BUILTIN_TOOLS
                .map(String::from)
                .to_vec()
        });
        let read_only_agents = setup
            .config
            .agents
            .iter()
            .filter(|(_, agent)| {
                agent.permission.mode == Some(PermissionMode::Plan)
                    || agent
                        .tools
                        .as_ref()
                        .unwrap_or(&offered)
                        .iter()
                        .all(|tool| setup.read_only.contains(tool) || !offered.contains(tool))
            })
            .map(|(name, _)| name.clone())
            .collect();
        Self {
            description: subagents::describe(&setup.config.agents),
            schema,
            read_only_agents,
            setup,
        }
    }

    fn agent_of<'a>(&self, input: &'a Value) -> &'a str {
        input["subagent_type"].as_str().unwrap_or_default()
    }
}

#[async_trait]
impl Tool for AgentTool {
    fn name(&self) -> &str {
        AGENT_TOOL
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn is_read_only(&self, input: &Value) -> bool {
        self.read_only_agents.contains(self.agent_of(input))
    }

    fn is_concurrency_safe(&self, input: &Value) -> bool {
        self.read_only_agents.contains(self.agent_of(input))
    }

    /// No pipeline time bound: the call lasts as long as the subagent's run, which its own
    /// turn and token budgets bound (and which is cancelled with the parent's).
    fn call_timeout(&self, _default: Duration) -> Option<Duration> {
        None
    }

    /// Starting a subagent needs no approval of its own: everything it does is judged by its
    /// own (narrower) policy. Deny rules naming `Agent` still apply.
    fn self_decision(&self, _input: &Value) -> crate::permission::SelfDecision {
        crate::permission::SelfDecision::Allow
    }

    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let runtime = self
            .setup
            .runtime
            .upgrade()
            .ok_or_else(|| ToolError::failed("the server is stopping"))?;
        let name = self.agent_of(&input).to_owned();
        let prompt = input["prompt"].as_str().unwrap_or_default().to_owned();
        let description = input["description"].as_str().unwrap_or_default().to_owned();
        let mut guard = ChildGuard {
            runtime: Arc::downgrade(&runtime),
            tenant: self.setup.tenant.clone(),
            parent: self.setup.session.clone(),
            session: None,
            run: None,
            done: false,
        };
        let child = Child::start_or_attach(
            &runtime,
            &self.setup,
            ctx,
            (&name, prompt, description),
            &mut guard,
        )
        .await?;
        let outcome = child.wait(&runtime, &self.setup, ctx).await;
        guard.done = true;
        outcome
    }
}

/// Acts when the `Agent` call is dropped before the child ended (the parent was cancelled or
/// its session closed): cancels the child run, and closes the child session (and its own
/// subagents) when the parent's session is closed — a close racing a starting subagent, whose
/// `subagent_started` the close may not have found. Nothing when the replica shuts down (the
/// child hands off and the resumed parent re-attaches).
struct ChildGuard {
    runtime: Weak<SessionRuntime>,
    tenant: TenantId,
    parent: SessionId,
    /// The child session, once this call created or found it.
    session: Option<SessionId>,
    run: Option<RunId>,
    done: bool,
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let Some(session) = self.session.take() else {
            return;
        };
        let Some(runtime) = self.runtime.upgrade() else {
            return;
        };
        if runtime.shutdown.is_cancelled() {
            return;
        }
        let (tenant, parent, run) = (self.tenant.clone(), self.parent.clone(), self.run.take());
        tokio::spawn(async move {
            let parent_closed = runtime
                .store
                .get_session(&tenant, &parent)
                .await
                .ok()
                .flatten()
                .is_some_and(|record| record.status == crate::store::SessionStatus::Closed);
            if parent_closed {
                runtime
                    .close_subagent(&tenant, &session, run.as_ref())
                    .await;
            } else if let Some(run) = run
                && let Err(error) = runtime.cancel(&tenant, &session, &run).await
            {
                tracing::debug!(%error, run_id = %run, "subagent run already over");
            }
        });
    }
}

/// One started (or re-attached) subagent run.
struct Child {
    agent: String,
    session: SessionId,
    run: RunId,
    /// The last child event already nested in the parent's transcript.
    cursor: i64,
}

/// The subagent's prompt was refused.
fn refused(error: super::RuntimeError) -> ToolError {
    match error {
        super::RuntimeError::PromptBlocked(block) => ToolError::new(
            codes::HOOK_BLOCKED,
            format!("UserPromptSubmit hook: {}", block.reason),
        ),
        super::RuntimeError::Store(crate::store::StoreError::TenantLimit(limit)) => ToolError::new(
            codes::TENANT_LIMIT,
            format!("the subagent could not be started: {limit}"),
        ),
        other => ToolError::failed(format!("the subagent could not be started: {other}")),
    }
}

fn store_failure(error: impl std::fmt::Display) -> ToolError {
    ToolError::failed(format!("the subagent could not be started: {error}"))
}

impl Child {
    async fn start_or_attach(
        runtime: &Arc<SessionRuntime>,
        setup: &AgentSetup,
        ctx: &ToolContext,
        (name, prompt, description): (&str, String, String),
        guard: &mut ChildGuard,
    ) -> Result<Self, ToolError> {
        let agent = setup.config.agents.get(name).ok_or_else(|| {
            ToolError::new(
                codes::INPUT_SCHEMA_INVALID,
                format!("no agent type `{name}`"),
            )
        })?;
        let store = &runtime.store;
        let tenant = &setup.tenant;
        let id = child_session_id(&setup.session, &setup.run_id, &ctx.tool_use_id);
        let existing = store
            .get_session(tenant, &id)
            .await
            .map_err(store_failure)?;
        let (record, reattached) = match existing {
            Some(record) => {
                guard.session = Some(id.clone());
                (record, true)
            }
            None => {
                let parent = store
                    .get_session(tenant, &setup.session)
                    .await
                    .map_err(store_failure)?
                    .ok_or_else(|| ToolError::failed("the session is gone"))?;
                if parent.status == crate::store::SessionStatus::Closed {
                    return Err(ToolError::new(
                        codes::CANCELLED,
                        "the session is closed: it starts no subagent",
                    ));
                }
                let outcome = runtime
                    .session_hooks(
                        &parent,
                        crate::hooks::HookPayload::SubagentStart {
                            agent_type: name.to_owned(),
                            description: description.clone(),
                        },
                    )
                    .await;
                if let Some(block) = outcome.block {
                    return Err(ToolError::new(
                        if block.failed {
                            codes::HOOK_FAILED
                        } else {
                            codes::HOOK_BLOCKED
                        },
                        format!("SubagentStart hook: {}", block.reason),
                    ));
                }
                let live = *setup.mode.read().unwrap_or_else(|e| e.into_inner());
                let link = SubagentLink {
                    parent_session_id: setup.session.to_string(),
                    parent_run_id: setup.run_id.to_string(),
                    tool_use_id: ctx.tool_use_id.clone(),
                    agent: name.to_owned(),
                    depth: subagents::depth(&setup.config) + 1,
                    workspace_session_id: setup.config.subagent.as_ref().map_or_else(
                        || setup.session.to_string(),
                        |l| l.workspace_session_id.clone(),
                    ),
                };
                let config = subagents::child_config(&setup.config, agent, live, link);
                let config = serde_json::to_value(&config).map_err(store_failure)?;
                let record = store
                    .create_session_keyed(
                        NewSession {
                            id: id.clone(),
                            tenant: tenant.clone(),
                            config,
                        },
                        runtime.settings.limits.sessions,
                        None,
                    )
                    .await
                    .map_err(|error| match error {
                        crate::store::StoreError::TenantLimit(_) => ToolError::new(
                            codes::TENANT_LIMIT,
                            "the tenant has as many open sessions as it may: a subagent is a \
                             session",
                        ),
                        other => store_failure(other),
                    })?;
                guard.session = Some(id.clone());
                // D6: the child inherits the parent's unlock set (its schema filter came
                // with the configuration).
                let unlocked: Vec<String> = setup.unlocked.snapshot().into_iter().collect();
                if !unlocked.is_empty() {
                    store
                        .unlock_tools(tenant, &id, &unlocked)
                        .await
                        .map_err(store_failure)?;
                }
                (record, false)
            }
        };
        let first = store
            .list_runs(tenant, &id, None, 1)
            .await
            .map_err(store_failure)?;
        let run = match first.first() {
            Some(run) => RunId::from_string(run.id.clone()),
            None => {
                let submitted = runtime
                    .submit(&record, prompt, super::BusyPolicy::Enqueue, None)
                    .await;
                match submitted {
                    Ok((run, _)) => run,
                    Err(error) => {
                        // Nobody would wait on it: the session goes (its slot freed).
                        if !reattached {
                            runtime.close_subagent(tenant, &id, None).await;
                        }
                        return Err(refused(error));
                    }
                }
            }
        };
        guard.run = Some(run.clone());
        let mut cursor = 0;
        if reattached {
            // Nested events already copied before the restart are not copied again.
            for event in store
                .list_run_events(tenant, &setup.session, &setup.run_id, &["subagent_event"])
                .await
                .map_err(store_failure)?
            {
                if let RunEvent::SubagentEvent(nested) = RunEvent::from_row(&event)
                    && nested.tool_use_id == ctx.tool_use_id
                {
                    cursor = cursor.max(nested.seq);
                }
            }
        }
        setup
            .writer
            .write(
                vec![],
                vec![RunEvent::SubagentStarted(run_event::SubagentStarted {
                    tool_use_id: ctx.tool_use_id.clone(),
                    agent: name.to_owned(),
                    session_id: id.to_string(),
                    run_id: run.to_string(),
                    depth: subagents::depth(&setup.config) + 1,
                    reattached,
                })],
            )
            .await
            .map_err(|error| ToolError::failed(error.0))?;
        Ok(Self {
            agent: name.to_owned(),
            session: id,
            run,
            cursor,
        })
    }

    /// Copies the child's events into the parent's transcript until its run ends, then
    /// answers with its final message.
    async fn wait(
        mut self,
        runtime: &Arc<SessionRuntime>,
        setup: &AgentSetup,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let store = &runtime.store;
        let tenant = &setup.tenant;
        let mut live = runtime.bus.subscribe_for(tenant, &self.session);
        let terminal = loop {
            let page = match store
                .list_events(tenant, &self.session, self.cursor, PAGE)
                .await
            {
                Ok(page) => page,
                // The store is the truth and the child goes on: wait for it to answer.
                Err(error) if error.is_transient() => {
                    tokio::time::sleep(POLL).await;
                    continue;
                }
                Err(error) => return Err(ToolError::failed(format!("subagent events: {error}"))),
            };
            let mut nested = Vec::new();
            let mut ended = None;
            for event in &page {
                self.cursor = event.seq;
                if event.kind == "assistant_delta" {
                    continue;
                }
                if event.kind == "terminal" && event.run_id.as_deref() == Some(self.run.as_str()) {
                    ended = Some(event.payload.value());
                }
                nested.push(RunEvent::SubagentEvent(run_event::SubagentEvent {
                    tool_use_id: ctx.tool_use_id.clone(),
                    agent: self.agent.clone(),
                    session_id: self.session.to_string(),
                    seq: event.seq,
                    kind: event.kind.clone(),
                    payload: event.payload.value(),
                }));
            }
            if !nested.is_empty() {
                setup
                    .writer
                    .write(vec![], nested)
                    .await
                    .map_err(|error| ToolError::failed(error.0))?;
            }
            if let Some(terminal) = ended {
                break terminal;
            }
            if !page.is_empty() {
                continue;
            }
            // Nothing new: a run whose terminal event was copied before a restart, or that
            // ended without one (cancelled while queued), is over by its record.
            if let Ok(Some(run)) = store.get_run(tenant, &self.session, &self.run).await
                && matches!(
                    run.status,
                    RunStatus::Completed | RunStatus::Cancelled | RunStatus::Failed
                )
                && store
                    .list_events(tenant, &self.session, self.cursor, 1)
                    .await
                    .is_ok_and(|rest| rest.is_empty())
            {
                break run.terminal.unwrap_or(Value::Null);
            }
            tokio::select! {
                received = live.recv() => {
                    if matches!(received, Err(broadcast::error::RecvError::Closed)) {
                        tokio::time::sleep(POLL).await;
                        live = runtime.bus.subscribe_for(tenant, &self.session);
                    }
                    // One store read for everything published meanwhile.
                    while live.try_recv().is_ok() {}
                }
                () = tokio::time::sleep(POLL) => {}
            }
        };
        // Its own calls and its own subagents' (nested ones reported in its events).
        let usage =
            super::subagent_usage::run_usage(store.as_ref(), tenant, &self.session, &self.run)
                .await
                .unwrap_or_default();
        setup.delegated.record(&ctx.tool_use_id, usage);
        setup
            .writer
            .write(
                vec![],
                vec![RunEvent::SubagentFinished(run_event::SubagentFinished {
                    tool_use_id: ctx.tool_use_id.clone(),
                    agent: self.agent.clone(),
                    session_id: self.session.to_string(),
                    run_id: self.run.to_string(),
                    terminal: terminal.clone(),
                    usage,
                })],
            )
            .await
            .map_err(|error| ToolError::failed(error.0))?;
        let answer = self.final_answer(runtime, tenant).await;
        let reason = terminal["reason"].as_str().unwrap_or("unknown");
        if reason == "end_turn" {
            return Ok(ToolOutput::text(answer));
        }
        Err(ToolError::new(
            SUBAGENT_FAILED,
            format!(
                "subagent `{}` (session {}) ended with `{reason}` before answering{}",
                self.agent,
                self.session,
                if answer.is_empty() {
                    String::new()
                } else {
                    format!("; its last message: {answer}")
                }
            ),
        ))
    }

    /// The text of the child's last assistant message of its run.
    async fn final_answer(&self, runtime: &SessionRuntime, tenant: &TenantId) -> String {
        let Ok(messages) = runtime
            .store
            .list_messages(tenant, &self.session, 0, u32::MAX)
            .await
        else {
            return String::new();
        };
        messages
            .iter()
            .rev()
            .filter(|m| m.run_id.as_deref() == Some(self.run.as_str()))
            .find(|m| m.role == Role::Assistant)
            .map(|m| {
                m.to_message()
                    .content
                    .iter()
                    .filter_map(|block| match block {
                        crate::message::ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}
