//! The direct tool-call pipeline: ONE function ([`Pipeline::call`]) every caller uses, in
//! exactly SPEC.md's order:
//!
//! 1. registry lookup (deferred tools only when unlocked) → `TOOL_NOT_FOUND`
//! 2. schema validation (skipped for raw-input tools) → `INPUT_SCHEMA_INVALID`
//! 3. permission ([`PermissionGate`]; `Ask` goes to the [`Approver`], or is denied with
//!    [`Stage::NoCallback`] when there is none) → `PERMISSION_DENIED`
//! 4. PreToolUse hooks → `HOOK_BLOCKED` (`HOOK_FAILED` when a fail-closed hook failed); a
//!    rewrite is validated and permission-checked again and can never widen an approval (D3)
//! 5. `call`, under a per-call timeout and the context's cancel token → `TOOL_FAILED`,
//!    `TOOL_TIMEOUT`, `CANCELLED` (a panicking tool is a `TOOL_FAILED`)
//! 6. output cap / spill
//! 7. PostToolUse / PostToolUseFailure hooks
//! 8. the paired tool_result plus extra messages
//!
//! Nothing with a side effect (the tool's call) happens before steps 1–4 pass (N5).

use super::output::{OutputPolicy, Provenance, SpilledOutput, cap_result};
use super::registry::{RegisteredTool, ToolRegistry};
use super::{Tool, ToolContext, ToolError, ToolOutput, codes};
use crate::hooks::{HookEvent, HookEventName, HookPayload, HookRunner};
use crate::message::{MAX_TOOL_INPUT_DEPTH, Message, ToolResultBlock};
use crate::permission::{Reason, Stage, ToolFacts, Verdict};
use async_trait::async_trait;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The per-call timeout when none is configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// The permission step. The production gate calls `crate::permission::decide` with the
/// session's mode, rules, grants and workspace (build the `ToolFacts` with [`tool_facts`]);
/// any `Fn(&dyn Tool, &Value) -> Verdict` is a gate too.
pub trait PermissionGate: Send + Sync {
    /// The ladder's verdict for this tool and input.
    fn evaluate(&self, tool: &dyn Tool, input: &Value) -> Verdict;
}

impl<F> PermissionGate for F
where
    F: Fn(&dyn Tool, &Value) -> Verdict + Send + Sync,
{
    fn evaluate(&self, tool: &dyn Tool, input: &Value) -> Verdict {
        self(tool, input)
    }
}

/// The facts the permission ladder reads about `tool` for this input.
pub fn tool_facts<'a>(tool: &'a dyn Tool, input: &Value) -> ToolFacts<'a> {
    ToolFacts {
        name: tool.name(),
        read_only: tool.is_read_only(input),
        self_decision: tool.self_decision(input),
        file_edit: tool.is_file_edit(),
        subject: tool.permission_subject(),
        rules_as: tool.permission_rules_as(),
        subject_text: tool.permission_subject_text(input),
    }
}

/// One question to the approval callback, bound to exactly this input.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApprovalRequest {
    pub tool_use_id: String,
    pub tool_name: String,
    pub input: Value,
    /// Why approval is needed (human text).
    pub reason: String,
}

/// The approval callback's answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovalAnswer {
    /// Allowed; an `updated_input` replaces the input (it is validated and permission-checked
    /// again, and the approval covers exactly that input).
    Allow {
        updated_input: Option<Value>,
    },
    Deny {
        reason: String,
    },
    /// Nobody answered in time: denied with `APPROVAL_EXPIRED`.
    Expired {
        reason: String,
    },
    /// Still unanswered, and the run parks instead of waiting: the call ends with the
    /// internal `PARKED` code and is run again when the run resumes.
    Parked,
    /// The question could not be asked (e.g. the tenant's cap on pending approvals): the call
    /// is refused with `code` (a tool-result code such as `TENANT_LIMIT`).
    Refused {
        code: &'static str,
        reason: String,
    },
}

/// The approval callback consulted when the ladder answers `Ask`.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Answers one request (may wait for a human or a policy service).
    async fn decide(&self, request: ApprovalRequest) -> ApprovalAnswer;
}

/// Told, durably, that a call is about to run (every check passed), so that a crash while it
/// runs is reported as `INTERRUPTED` afterwards instead of running it a second time.
#[async_trait]
pub trait ExecutionJournal: Send + Sync {
    /// Records that `tool_use_id` starts now; an error keeps the call from running. A
    /// `repeatable` call is read-only — running it again after a crash changes nothing — so
    /// its record may wait for the run's next write: a crash before that write makes the
    /// resumed run call it again instead of answering `INTERRUPTED`.
    async fn executing(
        &self,
        tool_use_id: &str,
        tool_name: &str,
        repeatable: bool,
    ) -> Result<(), String>;
}

/// A quota on what mutating calls may leave behind (the workspace bytes of a tenant): asked
/// before every mutating call that passed its checks, told after it ran.
#[async_trait]
pub trait MutationQuota: Send + Sync {
    /// `Err` (a tool failure with its code) keeps the call from running.
    async fn admit(&self, tool_name: &str) -> Result<(), ToolError>;
    /// Measures what the call left behind.
    async fn account(&self, tool_name: &str);
}

/// Why a call was (or was not) allowed, for events and audit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// The deciding ladder stage; `None` when the call failed before permission.
    pub stage: Option<Stage>,
    /// The rule text that decided, if any.
    pub rule: Option<String>,
    /// The grant that decided, if any.
    pub grant_id: Option<String>,
    /// Human text of the decision.
    pub message: Option<String>,
    /// The approval callback allowed the (final) input.
    pub approved_by_callback: bool,
    /// A PreToolUse hook replaced the input.
    pub rewritten_by_hook: bool,
}

impl DecisionRecord {
    fn record(&mut self, reason: Reason) {
        self.stage = Some(reason.stage);
        self.rule = reason.rule;
        self.grant_id = reason.grant_id;
        self.message = Some(reason.message);
    }
}

/// Everything one call produced.
#[derive(Clone, Debug, PartialEq)]
pub struct CallOutcome {
    /// Always paired with the tool_use id (N4).
    pub result: ToolResultBlock,
    /// The full output when the result was capped (store it with the result, D9).
    pub spill: Option<SpilledOutput>,
    /// Messages to append after the result: the tool's own, then hook context.
    pub extra_messages: Vec<Message>,
    pub decision: DecisionRecord,
}

/// A model-visible failure on the way to the result.
struct Failure {
    code: &'static str,
    message: String,
}

impl Failure {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The pipeline of one session: cheap to clone, safe to call concurrently.
#[derive(Clone)]
pub struct Pipeline {
    /// Shared by the clones, so a registry swapped between turns (an MCP server's tool list
    /// changed) is seen by every holder; each call reads it once, when it is looked up.
    registry: Arc<std::sync::RwLock<ToolRegistry>>,
    gate: Arc<dyn PermissionGate>,
    approver: Option<Arc<dyn Approver>>,
    journal: Option<Arc<dyn ExecutionJournal>>,
    quota: Option<Arc<dyn MutationQuota>>,
    hooks: HookRunner,
    output: OutputPolicy,
    call_timeout: Duration,
}

impl Pipeline {
    /// A pipeline with no approver (every `Ask` is denied), no hooks, the default output cap
    /// and the default call timeout.
    pub fn new(registry: ToolRegistry, gate: Arc<dyn PermissionGate>) -> Self {
        Self {
            registry: Arc::new(std::sync::RwLock::new(registry)),
            gate,
            approver: None,
            journal: None,
            quota: None,
            hooks: HookRunner::new(),
            output: OutputPolicy::default(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// Consults `approver` when the ladder answers `Ask`.
    #[must_use]
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Records every call in `journal` just before it runs.
    #[must_use]
    pub fn with_journal(mut self, journal: Arc<dyn ExecutionJournal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Runs these hooks (PreToolUse, PostToolUse, PostToolUseFailure).
    #[must_use]
    /// Checks `quota` before every mutating call and has it measure after.
    pub fn with_quota(mut self, quota: Arc<dyn MutationQuota>) -> Self {
        self.quota = Some(quota);
        self
    }

    pub fn with_hooks(mut self, hooks: HookRunner) -> Self {
        self.hooks = hooks;
        self
    }

    /// Caps output with this policy.
    #[must_use]
    pub fn with_output_policy(mut self, policy: OutputPolicy) -> Self {
        self.output = policy;
        self
    }

    /// Bounds each call (`TOOL_TIMEOUT` after it).
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The tools this pipeline runs (a cheap copy of the current registry).
    pub fn registry(&self) -> ToolRegistry {
        self.registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the tools this pipeline (and every clone of it) runs from the next lookup
    /// on: the host does it between turns, when an MCP server's tool list changed.
    pub fn set_registry(&self, registry: ToolRegistry) {
        *self.registry.write().unwrap_or_else(|e| e.into_inner()) = registry;
    }

    /// The hooks this pipeline runs.
    pub fn hooks(&self) -> &HookRunner {
        &self.hooks
    }

    /// Runs one tool call (`ctx.tool_use_id` identifies it) through every step. `unlocked`
    /// names the deferred tools this session may run.
    pub async fn call(
        &self,
        name: &str,
        input: Value,
        ctx: &ToolContext,
        unlocked: &HashSet<String>,
    ) -> CallOutcome {
        let span = tracing::info_span!("tool_call", tool_use_id = %ctx.tool_use_id, tool = %name);
        self.run(name, input, ctx, unlocked).instrument(span).await
    }

    async fn run(
        &self,
        name: &str,
        input: Value,
        ctx: &ToolContext,
        unlocked: &HashSet<String>,
    ) -> CallOutcome {
        let mut decision = DecisionRecord::default();
        let mut context = Vec::new();
        let admitted = self
            .admit(name, input, ctx, unlocked, &mut decision, &mut context)
            .await;
        let (entry, input) = match admitted {
            Ok(admitted) => admitted,
            Err(failure) => {
                tracing::info!(code = failure.code, "tool call refused");
                // Refusals carry text from rules, hooks and approvers (a deny reason may be
                // long): they pass the same cap as every other result (N11).
                let mut result =
                    ToolResultBlock::error(&ctx.tool_use_id, failure.code, failure.message);
                let spill = cap_result(&self.output, &mut result, provenance(ctx, name));
                return CallOutcome {
                    result,
                    spill,
                    extra_messages: context_messages(context),
                    decision,
                };
            }
        };
        let tool = entry.tool.as_ref();

        // 5. call
        let post_hooks = self.hooks.has_hooks(HookEventName::PostToolUse, Some(name))
            || self
                .hooks
                .has_hooks(HookEventName::PostToolUseFailure, Some(name));
        let post_input = post_hooks.then(|| input.clone());
        let quota = self.quota.as_ref().filter(|_| !tool.is_read_only(&input));
        if let Some(quota) = quota
            && let Err(error) = quota.admit(name).await
        {
            tracing::info!(code = error.code, "tool call over quota");
            return CallOutcome {
                result: ToolResultBlock::error(&ctx.tool_use_id, error.code, error.message),
                spill: None,
                extra_messages: context_messages(context),
                decision,
            };
        }
        if let Some(journal) = &self.journal
            && let Err(error) = journal
                .executing(&ctx.tool_use_id, name, tool.is_read_only(&input))
                .await
        {
            tracing::error!(%error, "cannot record the call; it does not run");
            return CallOutcome {
                result: ToolResultBlock::error(
                    &ctx.tool_use_id,
                    codes::TOOL_FAILED,
                    format!("the call was not run: it could not be recorded ({error})"),
                ),
                spill: None,
                extra_messages: context_messages(context),
                decision,
            };
        }
        let called = self.invoke(tool, input, ctx).await;
        if let Some(quota) = quota {
            quota.account(name).await;
        }

        // 6. cap / spill
        let (mut result, mut extra_messages) = match called {
            Ok(ToolOutput {
                text,
                extra_messages,
                images,
            }) => (
                ToolResultBlock {
                    images,
                    ..ToolResultBlock::ok(&ctx.tool_use_id, text)
                },
                extra_messages,
            ),
            Err(error) => {
                tracing::info!(code = error.code, "tool call failed");
                (
                    ToolResultBlock::error(&ctx.tool_use_id, error.code, error.message),
                    Vec::new(),
                )
            }
        };
        let spill = cap_result(&self.output, &mut result, provenance(ctx, name));

        // 7. PostToolUse / PostToolUseFailure
        if let Some(tool_input) = post_input {
            let payload = if result.is_error {
                HookPayload::PostToolUseFailure {
                    tool_use_id: ctx.tool_use_id.clone(),
                    tool_name: name.to_owned(),
                    tool_input,
                    error_code: result.code.clone().unwrap_or_default(),
                    error: result.content.clone(),
                }
            } else {
                HookPayload::PostToolUse {
                    tool_use_id: ctx.tool_use_id.clone(),
                    tool_name: name.to_owned(),
                    tool_input,
                    tool_response: result.content.clone(),
                    output_id: result.output_id.clone(),
                }
            };
            let outcome = self.hooks.run(hook_event(ctx, payload)).await;
            context.extend(outcome.additional_context);
            // A post hook cannot undo the call; its objection is feedback for the model.
            if let Some(block) = outcome.block {
                context.push(format!("hook {}: {}", block.hook, block.reason));
            }
        }

        // 8. paired result + extra messages
        extra_messages.extend(context_messages(context));
        CallOutcome {
            result,
            spill,
            extra_messages,
            decision,
        }
    }

    /// Steps 1–4: everything that must pass before the call.
    async fn admit(
        &self,
        name: &str,
        input: Value,
        ctx: &ToolContext,
        unlocked: &HashSet<String>,
        decision: &mut DecisionRecord,
        context: &mut Vec<String>,
    ) -> Result<(Arc<RegisteredTool>, Value), Failure> {
        // 1. lookup: a hidden tool that is not unlocked does not exist for the model.
        let entry = self
            .registry
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .lookup_visible(name, unlocked)
            .cloned()
            .map_err(|_| Failure::new(codes::TOOL_NOT_FOUND, format!("no tool named {name:?}")))?;

        // 2. schema
        validate(&entry, &input, "")?;

        // 3. permission
        let reason = format!("{name} requires approval");
        let mut input = self.permit(&entry, input, ctx, decision, reason).await?;

        // 4. PreToolUse hooks
        if self.hooks.has_hooks(HookEventName::PreToolUse, Some(name)) {
            let payload = HookPayload::PreToolUse {
                tool_use_id: ctx.tool_use_id.clone(),
                tool_name: name.to_owned(),
                tool_input: input.clone(),
            };
            let outcome = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(cancelled()),
                outcome = self.hooks.run(hook_event(ctx, payload)) => outcome,
            };
            context.extend(outcome.additional_context);
            if let Some(block) = outcome.block {
                if block.failed {
                    return Err(Failure::new(
                        codes::HOOK_FAILED,
                        format!(
                            "{}; it is fail-closed, so the call did not run",
                            block.reason
                        ),
                    ));
                }
                return Err(Failure::new(
                    codes::HOOK_BLOCKED,
                    format!("blocked by hook {}: {}", block.hook, block.reason),
                ));
            }
            match outcome.updated_input {
                Some((hook, rewritten)) if rewritten != input => {
                    // D3: the rewrite is a new input; it earns nothing the old one was granted.
                    decision.rewritten_by_hook = true;
                    let prefix = format!("input rewritten by hook {hook}: ");
                    validate_replacement(&entry, &rewritten, &prefix)?;
                    let reason =
                        format!("{name} requires approval for the input rewritten by hook {hook}");
                    input = self
                        .permit(&entry, rewritten, ctx, decision, reason)
                        .await?;
                }
                Some(_) | None => {}
            }
        }
        if ctx.cancel.is_cancelled() {
            return Err(cancelled());
        }
        Ok((entry, input))
    }

    /// Step 3 for one input: the gate, then the approver on `Ask`. Returns the input to use.
    async fn permit(
        &self,
        entry: &RegisteredTool,
        input: Value,
        ctx: &ToolContext,
        decision: &mut DecisionRecord,
        reason: String,
    ) -> Result<Value, Failure> {
        let tool = entry.tool.as_ref();
        decision.approved_by_callback = false;
        match self.gate.evaluate(tool, &input) {
            Verdict::Allow(reason) => {
                decision.record(reason);
                return Ok(input);
            }
            Verdict::Deny(reason) => {
                let failure = denial(tool, &input, &reason);
                decision.record(reason);
                return Err(failure);
            }
            Verdict::Ask => {}
        }
        let Some(approver) = &self.approver else {
            let message = format!("{reason}, and no approver is available");
            decision.record(Reason {
                stage: Stage::NoCallback,
                rule: None,
                grant_id: None,
                message: message.clone(),
            });
            return Err(Failure::new(
                codes::PERMISSION_DENIED,
                format!("permission denied: {message}"),
            ));
        };
        let request = ApprovalRequest {
            tool_use_id: ctx.tool_use_id.clone(),
            tool_name: tool.name().to_owned(),
            input: input.clone(),
            reason,
        };
        let answer = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Err(cancelled()),
            answer = approver.decide(request) => answer,
        };
        let callback = |decision: &mut DecisionRecord, message: String| {
            decision.record(Reason {
                stage: Stage::Callback,
                rule: None,
                grant_id: None,
                message,
            });
        };
        match answer {
            ApprovalAnswer::Deny { reason } => {
                let text = format!("permission denied by the approver: {reason}");
                callback(decision, reason);
                Err(Failure::new(codes::PERMISSION_DENIED, text))
            }
            ApprovalAnswer::Refused { code, reason } => {
                let text = format!("the approval could not be requested: {reason}");
                callback(decision, reason);
                Err(Failure::new(code, text))
            }
            ApprovalAnswer::Parked => Err(Failure::new(
                codes::PARKED,
                "waiting for an approval; the run parked".to_owned(),
            )),
            ApprovalAnswer::Expired { reason } => {
                let text = format!("the approval request expired: {reason}");
                callback(decision, reason);
                Err(Failure::new(codes::APPROVAL_EXPIRED, text))
            }
            ApprovalAnswer::Allow {
                updated_input: None,
            } => {
                callback(decision, "approved".into());
                decision.approved_by_callback = true;
                Ok(input)
            }
            ApprovalAnswer::Allow {
                updated_input: Some(updated),
            } => {
                // The approver's replacement is validated and checked again: deny rules still
                // win; the approval itself covers exactly this input.
                validate_replacement(entry, &updated, "input updated by the approver: ")?;
                match self.gate.evaluate(tool, &updated) {
                    Verdict::Deny(reason) => {
                        let failure = denial(tool, &updated, &reason);
                        decision.record(reason);
                        Err(failure)
                    }
                    Verdict::Allow(reason) => {
                        decision.record(reason);
                        decision.approved_by_callback = true;
                        Ok(updated)
                    }
                    Verdict::Ask => {
                        callback(decision, "approved with an updated input".into());
                        decision.approved_by_callback = true;
                        Ok(updated)
                    }
                }
            }
        }
    }

    /// Step 5: the call itself, bounded by the timeout and the cancel token.
    async fn invoke(
        &self,
        tool: &dyn Tool,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let call = AssertUnwindSafe(tool.call(input, ctx)).catch_unwind();
        let bound = tool.call_timeout(self.call_timeout);
        let bounded = async {
            match bound {
                Some(bound) => tokio::time::timeout(bound, call).await,
                None => Ok(call.await),
            }
        };
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => {
                Err(ToolError::new(codes::CANCELLED, "the tool call was cancelled"))
            }
            finished = bounded => match finished {
                Err(_elapsed) => Err(ToolError::new(
                    codes::TOOL_TIMEOUT,
                    format!(
                        "the tool did not finish within {} s",
                        bound.unwrap_or_default().as_secs_f64()
                    ),
                )),
                Ok(Err(_panic)) => {
                    tracing::error!("tool panicked");
                    Err(ToolError::failed("the tool failed unexpectedly (panic)"))
                }
                Ok(Ok(result)) => result,
            },
        }
    }
}

/// [`validate`] for an input that replaces the model's (a hook's rewrite, an approver's
/// `updated_input`), which no provider bounded: it must also nest at most
/// [`MAX_TOOL_INPUT_DEPTH`] levels, raw-input tools included (it is stored inside events).
fn validate_replacement(
    entry: &RegisteredTool,
    input: &Value,
    prefix: &str,
) -> Result<(), Failure> {
    if !crate::message::tool_input_within_depth(input) {
        return Err(Failure::new(
            codes::INPUT_SCHEMA_INVALID,
            format!("{prefix}nests deeper than {MAX_TOOL_INPUT_DEPTH} levels"),
        ));
    }
    validate(entry, input, prefix)
}

fn validate(entry: &RegisteredTool, input: &Value, prefix: &str) -> Result<(), Failure> {
    if entry.tool.raw_input() {
        return Ok(());
    }
    entry.schema.validate(input).map_err(|violations| {
        Failure::new(codes::INPUT_SCHEMA_INVALID, format!("{prefix}{violations}"))
    })
}

/// Where a result of this call came from, for a spilled output.
fn provenance<'a>(ctx: &'a ToolContext, tool_name: &'a str) -> Provenance<'a> {
    Provenance {
        tenant: &ctx.tenant,
        session_id: &ctx.session_id,
        tool_name,
    }
}

fn cancelled() -> Failure {
    Failure::new(codes::CANCELLED, "the tool call was cancelled")
}

fn hook_event(ctx: &ToolContext, payload: HookPayload) -> HookEvent {
    HookEvent {
        session_id: ctx.session_id.clone(),
        tenant: ctx.tenant.clone(),
        payload,
    }
}

fn context_messages(context: Vec<String>) -> Vec<Message> {
    context.into_iter().map(Message::user_text).collect()
}

/// The failure of a denied call: the tool's own code and reason when the tool itself denied
/// (`COMMAND_DENIED` for a command Bash refuses), otherwise `PERMISSION_DENIED`.
fn denial(tool: &dyn Tool, input: &Value, reason: &Reason) -> Failure {
    if reason.stage == Stage::ToolDeny
        && let Some((code, message)) = tool.self_denial(input)
    {
        return Failure::new(code, message);
    }
    Failure::new(
        codes::PERMISSION_DENIED,
        format!("permission denied: {}", reason.message),
    )
}

#[cfg(test)]
#[path = "pipeline_tests/mod.rs"]
mod tests;
