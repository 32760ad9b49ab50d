//! Running hooks (N8–N10, D4): hooks of an event run one after another in registration order,
//! filtered by an optional tool-name matcher (exact name or `*`). Each runs in its own task
//! under a timeout (default 5 s), so a hang is a timeout and a panic is a failure, never a
//! crash. A failed hook follows its policy: `fail_closed` turns the failure into a block (a
//! hard prevent for Stop), `fail_open` logs it and goes on. The first block stops the chain;
//! the last non-empty input rewrite wins. The runner is immutable once built and safe to call
//! concurrently.
//!
//! A failed hook's detail (status codes, addresses, error text) goes to the server log with the
//! session and hook name; what the tenant sees — a block reason, a tool result, an API error —
//! says only that the hook failed ([`HOOK_FAILED`]), so a remote hook cannot be used to probe
//! which internal addresses or ports answer.
//!
//! Sessions configure hooks with [`HookConfig`]s resolved against a [`HookCatalog`] of
//! in-process hooks (and the outbound client remote hooks use); the result comes with a
//! per-hook [`HookStatus`] report.

use super::remote::{RemoteHook, RemoteHookError, RemoteTarget};
use super::{Hook, HookDecision, HookError, HookEvent, HookEventName, HookResponse};
use crate::egress::EgressClient;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

/// The per-hook timeout when none is configured.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest per-hook timeout a configuration may ask for.
pub const MAX_HOOK_TIMEOUT: Duration = Duration::from_secs(600);
/// The only thing a tenant learns of a failed hook (error, timeout, panic, refused address).
pub const HOOK_FAILED: &str = "HOOK_FAILED";

/// What a failed (errored, panicked, timed-out) hook means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Log and continue as if the hook had said `continue`.
    FailOpen,
    /// Treat the failure as a block (for Stop: a hard prevent). The closed default.
    #[default]
    FailClosed,
}

/// One hook bound to an event.
#[derive(Clone)]
pub struct HookRegistration {
    pub name: String,
    pub event: HookEventName,
    /// Tool events only: `None` or `*` match every tool, anything else one exact name.
    pub matcher: Option<String>,
    pub timeout: Duration,
    pub failure: FailurePolicy,
    pub hook: Arc<dyn Hook>,
}

impl fmt::Debug for HookRegistration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookRegistration")
            .field("name", &self.name)
            .field("event", &self.event)
            .field("matcher", &self.matcher)
            .field("timeout", &self.timeout)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl HookRegistration {
    /// A registration with no matcher, the default timeout and the fail-closed policy.
    pub fn new(name: impl Into<String>, event: HookEventName, hook: Arc<dyn Hook>) -> Self {
        Self {
            name: name.into(),
            event,
            matcher: None,
            timeout: DEFAULT_HOOK_TIMEOUT,
            failure: FailurePolicy::default(),
            hook,
        }
    }

    /// Restricts a tool event to one tool name (`*` for all).
    #[must_use]
    pub fn matcher(mut self, matcher: impl Into<String>) -> Self {
        self.matcher = Some(matcher.into());
        self
    }

    /// Sets the per-hook timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the failure policy.
    #[must_use]
    pub fn failure(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    fn matches(&self, event: &HookEvent) -> bool {
        if self.event != event.event_name() {
            return false;
        }
        match (self.matcher.as_deref(), event.payload.tool_name()) {
            (None | Some("*"), _) | (Some(_), None) => true,
            (Some(wanted), Some(tool)) => wanted == tool,
        }
    }
}

/// The first block (or prevent) of a chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookBlock {
    pub hook: String,
    pub reason: String,
    /// A hard prevent (Stop), rather than a block.
    pub prevent: bool,
    /// The block comes from a fail-closed failure, not from the hook's answer (the reason is
    /// then the generic [`HOOK_FAILED`] text).
    pub failed: bool,
}

/// What a chain of hooks decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookOutcome {
    /// The first block; hooks after it did not run.
    pub block: Option<HookBlock>,
    /// The last non-empty rewrite (PreToolUse), with the hook that made it.
    pub updated_input: Option<(String, Value)>,
    /// Additional context, in hook order.
    pub additional_context: Vec<String>,
    /// Hooks that failed under `fail_open` (already logged).
    pub failures: Vec<(String, HookError)>,
    /// How many hooks ran.
    pub ran: usize,
}

/// What Stop hooks decided (N10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// Nothing objected: the run may end.
    Stop,
    /// Blocking continuation: inject `reason` and make one more request.
    Continue { hook: String, reason: String },
    /// Hard prevent: end now, no continuation.
    Prevent { hook: String, reason: String },
}

impl HookOutcome {
    /// Reads this outcome as a Stop event's.
    pub fn stop_outcome(&self) -> StopOutcome {
        match &self.block {
            None => StopOutcome::Stop,
            Some(block) if block.prevent => StopOutcome::Prevent {
                hook: block.hook.clone(),
                reason: block.reason.clone(),
            },
            Some(block) => StopOutcome::Continue {
                hook: block.hook.clone(),
                reason: block.reason.clone(),
            },
        }
    }
}

/// Hooks in registration order. Cheap to clone; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct HookRunner {
    hooks: Arc<Vec<HookRegistration>>,
}

impl HookRunner {
    /// An empty runner: every event passes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a hook after the ones already registered.
    pub fn register(&mut self, registration: HookRegistration) {
        Arc::make_mut(&mut self.hooks).push(registration);
    }

    /// True when some hook would run for `event` (and, for tool events, `tool_name`); lets
    /// callers skip building an event nobody listens to.
    pub fn has_hooks(&self, event: HookEventName, tool_name: Option<&str>) -> bool {
        self.hooks.iter().any(|hook| {
            hook.event == event
                && match (hook.matcher.as_deref(), tool_name) {
                    (None | Some("*"), _) | (Some(_), None) => true,
                    (Some(wanted), Some(tool)) => wanted == tool,
                }
        })
    }

    /// Runs the hooks of the event in order until the first block.
    pub async fn run(&self, event: HookEvent) -> HookOutcome {
        let mut outcome = HookOutcome::default();
        let event_name = event.event_name();
        let event = Arc::new(event);
        for registration in self.hooks.iter().filter(|hook| hook.matches(&event)) {
            outcome.ran += 1;
            let answer = match run_one(registration, &event).await {
                Ok(answer) => answer,
                Err(error) => match registration.failure {
                    FailurePolicy::FailOpen => {
                        tracing::warn!(session = %event.session_id, tenant = %event.tenant,
                            hook = %registration.name, event = %event_name, %error,
                            "hook failed; fail_open, continuing");
                        outcome.failures.push((registration.name.clone(), error));
                        continue;
                    }
                    FailurePolicy::FailClosed => {
                        tracing::warn!(session = %event.session_id, tenant = %event.tenant,
                            hook = %registration.name, event = %event_name, %error,
                            "hook failed; fail_closed, blocking");
                        outcome.block = Some(HookBlock {
                            hook: registration.name.clone(),
                            reason: failed_reason(&registration.name),
                            // A failed Stop hook ends the run rather than forcing a turn.
                            prevent: event_name == HookEventName::Stop,
                            failed: true,
                        });
                        break;
                    }
                },
            };
            if let Some(context) = answer.additional_context.as_ref().filter(|c| !c.is_empty()) {
                outcome.additional_context.push(context.clone());
            }
            if let Some(input) = answer.rewritten_input() {
                outcome.updated_input = Some((registration.name.clone(), input.clone()));
            }
            let prevent = match answer.decision {
                HookDecision::Continue => continue,
                HookDecision::Block => false,
                HookDecision::Prevent => event_name == HookEventName::Stop,
            };
            let reason = answer
                .reason
                .filter(|reason| !reason.is_empty())
                .unwrap_or_else(|| format!("blocked by hook {}", registration.name));
            outcome.block = Some(HookBlock {
                hook: registration.name.clone(),
                reason,
                prevent,
                failed: false,
            });
            break;
        }
        outcome
    }

    /// Builds a runner from session configuration: unknown in-process names and unsupported
    /// events are reported (not errors); malformed entries are configuration errors.
    pub fn from_config(
        configs: &[HookConfig],
        catalog: &HookCatalog,
    ) -> Result<(Self, Vec<HookStatus>), HookConfigError> {
        let mut runner = Self::new();
        let mut statuses = Vec::with_capacity(configs.len());
        let mut names = HashSet::new();
        for config in configs {
            if config.name.is_empty() {
                return Err(HookConfigError::EmptyName);
            }
            if !names.insert(config.name.as_str()) {
                return Err(HookConfigError::DuplicateName(config.name.clone()));
            }
            let timeout = match config.timeout_ms {
                None => DEFAULT_HOOK_TIMEOUT,
                Some(0) => return Err(HookConfigError::BadTimeout(config.name.clone())),
                Some(ms) => Duration::from_millis(ms),
            };
            if timeout > MAX_HOOK_TIMEOUT {
                return Err(HookConfigError::BadTimeout(config.name.clone()));
            }
            if config.matcher.as_deref().is_some_and(str::is_empty) {
                return Err(HookConfigError::EmptyMatcher(config.name.clone()));
            }
            let hook: Option<Arc<dyn Hook>> = match &config.handler {
                HookHandlerConfig::InProcess { hook } => catalog.get(hook),
                HookHandlerConfig::Remote { url, secret } => {
                    let target = RemoteTarget::parse(url, secret).map_err(|source| {
                        HookConfigError::Remote {
                            name: config.name.clone(),
                            source,
                        }
                    })?;
                    catalog.egress.as_ref().map(|client| -> Arc<dyn Hook> {
                        Arc::new(RemoteHook::new(target, client.clone(), timeout))
                    })
                }
            };
            let status = match hook {
                _ if !config.enabled => {
                    HookStatus::new(config, HookStatusToken::HookConfigDisabled)
                }
                None => HookStatus {
                    missing_reason: Some(match config.handler {
                        HookHandlerConfig::InProcess { .. } => MissingReason::NotRegistered,
                        HookHandlerConfig::Remote { .. } => MissingReason::NoOutboundClient,
                    }),
                    ..HookStatus::new(config, HookStatusToken::HookMissing)
                },
                Some(hook) if !hook.supports(config.event) => {
                    HookStatus::new(config, HookStatusToken::HookUnsupported)
                }
                Some(hook) => {
                    runner.register(HookRegistration {
                        name: config.name.clone(),
                        event: config.event,
                        matcher: config.matcher.clone(),
                        timeout,
                        failure: config.failure,
                        hook,
                    });
                    HookStatus::new(config, HookStatusToken::HookInstalledOk)
                }
            };
            statuses.push(status);
        }
        Ok((runner, statuses))
    }
}

/// The block reason of a failed fail-closed hook: its name and [`HOOK_FAILED`], nothing else.
pub fn failed_reason(hook: &str) -> String {
    format!("hook {hook} failed ({HOOK_FAILED})")
}

/// Runs one hook in its own task under its timeout.
async fn run_one(
    registration: &HookRegistration,
    event: &Arc<HookEvent>,
) -> Result<HookResponse, HookError> {
    let hook = registration.hook.clone();
    let event = event.clone();
    let span = tracing::debug_span!("hook", hook = %registration.name);
    let mut task = AbortOnDropHandle::new(tokio::spawn(
        async move { hook.handle(&event).await }.instrument(span),
    ));
    match tokio::time::timeout(registration.timeout, &mut task).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(join)) if join.is_panic() => Err(HookError::Panicked),
        Ok(Err(join)) => Err(HookError::Failed(join.to_string())),
        // Dropping the handle aborts the task.
        Err(_elapsed) => Err(HookError::Timeout(registration.timeout)),
    }
}

/// What a session's hook configuration can bind to: named in-process hooks, and the outbound
/// client remote hooks post through (without one, remote hooks are reported `HOOK_MISSING`).
#[derive(Clone, Default)]
pub struct HookCatalog {
    hooks: HashMap<String, Arc<dyn Hook>>,
    egress: Option<EgressClient>,
}

impl HookCatalog {
    /// An empty catalog with no outbound client.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets remote hooks post through `client` (which decides what addresses they reach).
    #[must_use]
    pub fn with_egress(mut self, client: EgressClient) -> Self {
        self.egress = Some(client);
        self
    }

    /// Adds (or replaces) a named hook.
    pub fn insert(&mut self, name: impl Into<String>, hook: Arc<dyn Hook>) {
        self.hooks.insert(name.into(), hook);
    }

    /// The hook registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Hook>> {
        self.hooks.get(name).cloned()
    }
}

impl fmt::Debug for HookCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookCatalog")
            .field("hooks", &self.hooks.keys().collect::<Vec<_>>())
            .field("egress", &self.egress.as_ref().map(EgressClient::policy))
            .finish()
    }
}

/// One hook as a session configures it (unknown fields are refused).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// Unique within the session; used in logs, block reasons and the status report.
    #[schema(min_length = 1)]
    pub name: String,
    pub event: HookEventName,
    /// Tool events only: an exact tool name or `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1)]
    pub matcher: Option<String>,
    pub handler: HookHandlerConfig,
    /// Per-hook timeout in milliseconds (default 5000, at most 600000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 600_000)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub failure: FailurePolicy,
    #[serde(default = "enabled_default")]
    pub enabled: bool,
}

fn enabled_default() -> bool {
    true
}

/// How a configured hook runs: `in_process` (a hook the server registered under `hook`) or
/// `remote` (the event POSTed to `url`, an `http(s)://` URL checked at creation, signed with
/// `secret`: `whsec_<base64>` or raw text, never returned by the API).
#[derive(Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum HookHandlerConfig {
    /// A hook the server registered in its [`HookCatalog`] under this name.
    InProcess { hook: String },
    /// POST the event to `url`, signed with `secret` (`whsec_<base64>` or raw).
    Remote { url: String, secret: String },
}

impl fmt::Debug for HookHandlerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InProcess { hook } => f.debug_struct("InProcess").field("hook", hook).finish(),
            Self::Remote { url, secret: _ } => f
                .debug_struct("Remote")
                .field("url", url)
                .field("secret", &"<redacted>")
                .finish(),
        }
    }
}

impl HookHandlerConfig {
    fn kind(&self) -> &'static str {
        match self {
            Self::InProcess { .. } => "in_process",
            Self::Remote { .. } => "remote",
        }
    }
}

/// A hook configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HookConfigError {
    #[error("a hook has an empty name")]
    EmptyName,
    #[error("hook name {0:?} is used twice")]
    DuplicateName(String),
    #[error("hook {0:?}: timeout_ms must be between 1 and 600000")]
    BadTimeout(String),
    #[error("hook {0:?}: matcher must be a tool name or `*`, not empty")]
    EmptyMatcher(String),
    #[error("hook {name:?}: {source}")]
    Remote {
        name: String,
        #[source]
        source: RemoteHookError,
    },
}

/// Machine-readable hook status (seed 003 tokens).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HookStatusToken {
    HookInstalledOk,
    HookConfigDisabled,
    HookMissing,
    HookUnsupported,
}

/// Why a hook is `HOOK_MISSING`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MissingReason {
    /// The in-process hook name is not in the server's catalog.
    NotRegistered,
    /// A remote hook, resolved without an outbound client (never on a running server).
    NoOutboundClient,
}

/// The status of one configured hook. Clients branch on `status_token`; `status_label` is
/// for display only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookStatus {
    pub name: String,
    pub event: HookEventName,
    /// `in_process` or `remote`.
    pub kind: String,
    pub status_token: HookStatusToken,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_reason: Option<MissingReason>,
    pub status_label: String,
}

impl HookStatus {
    fn new(config: &HookConfig, token: HookStatusToken) -> Self {
        let label = match token {
            HookStatusToken::HookInstalledOk => "installed",
            HookStatusToken::HookConfigDisabled => "disabled in configuration",
            HookStatusToken::HookMissing => "in-process hook not registered on this server",
            HookStatusToken::HookUnsupported => "this hook cannot serve this event",
        };
        Self {
            name: config.name.clone(),
            event: config.event,
            kind: config.handler.kind().to_owned(),
            status_token: token,
            missing_reason: None,
            status_label: format!("{} ({}): {label}", config.name, config.event),
        }
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
