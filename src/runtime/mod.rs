//! The session runtime: turns prompts into runs of the agent loop.
//!
//! A session costs a row while idle. When a prompt arrives, the runtime persists a run (a row
//! with a lease held by this replica), builds the session's run (provider, tools, pipeline,
//! store-backed host) and drives the loop in a task; the run's events are persisted before
//! they are published to live subscribers, and every write checks the run's lease. A busy
//! session follows the policy the client chose: reject, enqueue (a queued run row), or
//! interrupt. Runs left unfinished by a crash are resumed from the store (see [`resume`]).
//!
//! **Where each approval decision is written:** only in [`Approvals::decide`]
//! ([`decisions`]). Its callers: the REST answer (`api::approvals::answer_approval`), the policy
//! webhook's synchronous answer and the expiry timeout / cancellation of a waiting call
//! (`approvals::RunApprover`), and the `deny` policy for pending approvals on a new prompt or a
//! cancelled parked run (`parking::deny_approvals`). It writes once (conditional update; racing
//! answers get the decision that stands), makes an added grant live, and wakes the waiting or
//! parked run here; other replicas are woken by the store's `ApprovalDecided` signal, sent once
//! the decision is committed (advisory: a lost one is caught up by their reconcile).
//!
//! **Layout:** this file holds the runtime's state (the sessions with a run in flight, parked
//! runs, live session environments) and its accessors; [`prompts`] turns prompts into runs
//! and cancels and closes; [`drive`] runs each claimed run in a task and starts the next
//! queued one; [`run_factory`] builds a run (gate, pipeline, host, engine) and drives it, from
//! the session's live environment ([`session_env`]), its tools ([`run_tools`]) and its provider
//! ([`run_provider`]);
//! [`parking`], [`resume`] and [`handoff`] are what happens when a run waits, crashed, or its
//! replica stops.

pub mod approvals;
pub mod budget_gate;
pub mod bus;
pub mod decisions;
mod drive;
mod expiry;
pub mod fencing;
pub mod handoff;
pub mod host;
mod mcp_sampling;
pub mod outbox;
mod parking;
mod prompts;
mod reconcile;
mod replicas;
pub mod resume;
mod run_factory;
mod run_journal;
mod run_provider;
mod run_tools;
mod session_env;
pub mod session_writer;
mod skills;
mod snapshots;
pub mod subagent;
mod subagent_close;
pub mod subagent_usage;
pub mod task_inbox;
pub mod webhook;
pub mod workspace_quota;

pub use decisions::{Approvals, DecideError};
pub use expiry::expire_idle_sessions;

use crate::egress::EgressClient;
use crate::harness::engine::{Engine, EngineConfig, RunHistory};
use crate::harness::ledger::RunLedger;
use crate::harness::turn::TurnLimits;
use crate::hooks::runner::{HookCatalog, HookRunner};
use crate::ids::{RunId, SessionId, TenantId};
use crate::llm::{self, Provider, ProviderConfig};
use crate::message::Message;
use crate::permission::RuleSet;
use crate::run_event::{self, RunEvent, TerminalReason};
use crate::sandbox::{Sandbox, SandboxConfig};
use crate::session_config::SessionConfig;
use crate::store::{NewMessage, NewRun, RunLease, SessionRecord, Store, StoreError};
use crate::tools::builtin::{self, SessionShells};
use crate::tools::pipeline::Pipeline;
use crate::tools::registry::ToolRegistry;
use crate::workspace::Workspace;
use bus::EventBus;
use host::{StoreHost, history_of};
use run_journal::{EgressSlot, RunJournal};
use serde::{Deserialize, Serialize};
use session_writer::SessionWriter;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

/// What a prompt does when the session is already running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BusyPolicy {
    /// Answer `409 SESSION_BUSY`.
    #[default]
    Reject,
    /// Run after the current (and already queued) runs.
    Enqueue,
    /// Cancel the current run, then start.
    Interrupt,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("the session is busy with run {0}")]
    Busy(String),
    #[error("the session is closed")]
    Closed,
    #[error("the session's run waits on approvals {0:?}")]
    ApprovalPending(Vec<String>),
    #[error("a UserPromptSubmit hook blocked the prompt: {}", .0.reason)]
    PromptBlocked(crate::hooks::HookBlock),
    #[error("no such run")]
    NoSuchRun,
    #[error("this replica is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
    /// One of the tenant's spend budgets is spent.
    #[error(transparent)]
    BudgetExceeded(crate::budgets::BudgetExceeded),
    /// The tenant has a cost budget and the session's model has no price.
    #[error(
        "the model {provider}/{model} has no price in the price table, and this tenant has a \
         cost budget: its calls could not be counted (the operator adds it to `[[prices]]`)"
    )]
    ModelNotPriced { provider: String, model: String },
    #[error("cannot prepare the run: {0}")]
    Setup(String),
    #[error(
        "the session's model script is not allowed on this server (scripted model turns are a \
         development and test feature, enabled by the operator with `allow_session_scripts`)"
    )]
    ScriptsNotAllowed,
}

impl RuntimeError {
    /// A failed write of a run's writer: transient when the store was unavailable (the run is
    /// then resumed once the store answers), a setup failure otherwise.
    pub(crate) fn from_write(
        writer: &SessionWriter,
        error: crate::harness::engine::HostError,
    ) -> Self {
        if writer.store_unavailable() {
            Self::Store(StoreError::Unavailable(error.0))
        } else {
            Self::Setup(error.0)
        }
    }

    /// Whether the run may succeed once the store answers again: it is then never failed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Store(error) if error.is_transient())
    }

    /// The `code` of the `terminal` event of a run that ended with this error.
    fn terminal_code(&self) -> &'static str {
        match self {
            Self::ScriptsNotAllowed => "SCRIPTS_NOT_ALLOWED",
            Self::ModelNotPriced { .. } => "MODEL_NOT_PRICED",
            _ => "RUN_FAILED",
        }
    }
}

impl From<budget_gate::BudgetRefusal> for RuntimeError {
    fn from(refusal: budget_gate::BudgetRefusal) -> Self {
        match refusal {
            budget_gate::BudgetRefusal::Exceeded(exceeded) => Self::BudgetExceeded(exceeded),
            budget_gate::BudgetRefusal::NotPriced { provider, model } => {
                Self::ModelNotPriced { provider, model }
            }
            budget_gate::BudgetRefusal::Store(error) => Self::Store(error),
        }
    }
}

/// Where a prompt goes when the session is busy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    Reject,
    Back,
    Front { interrupt: bool },
}

impl From<BusyPolicy> for Placement {
    fn from(policy: BusyPolicy) -> Self {
        match policy {
            BusyPolicy::Reject => Self::Reject,
            BusyPolicy::Enqueue => Self::Back,
            BusyPolicy::Interrupt => Self::Front { interrupt: true },
        }
    }
}

/// Whether a prompt started now or waits in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PromptStatus {
    Started,
    Queued,
}

/// A session that has a run in flight (or queued). Queued runs are rows in the store; the
/// queue here keeps their order for this replica.
struct Active {
    current: RunId,
    cancel: CancellationToken,
    /// Set when the current run committed its end (its task is finishing).
    ended: Arc<std::sync::atomic::AtomicBool>,
    queue: VecDeque<RunId>,
}

impl Active {
    /// `current` is about to run; `queue` waits behind it (and may start with it: `advance`
    /// pops the next run to claim).
    fn new(current: RunId, queue: VecDeque<RunId>) -> Self {
        Self {
            current,
            cancel: CancellationToken::new(),
            ended: Arc::default(),
            queue,
        }
    }
}

/// Server-wide runtime settings.
#[derive(Clone, Debug)]
pub struct RuntimeSettings {
    pub provider: ProviderConfig,
    pub workspaces_dir: PathBuf,
    /// Holds `tasks/<session>` (background-task logs): the data dir, or the shared root
    /// with `workspace.storage = "shared"`, beside the workspaces.
    pub files_root: PathBuf,
    /// How workspaces are stored; `shared` turns on self-fencing (see [`fencing`]).
    pub workspace_storage: crate::config::WorkspaceStorage,
    /// `snapshot` storage: the object store workspaces are snapshotted to.
    pub snapshots: Option<Arc<crate::workspace_snapshot::SnapshotStore>>,
    /// The command sandbox (probed once when the runtime is built).
    pub sandbox: SandboxConfig,
    /// Tenant limits: runs and queued prompts are checked by the store when a run is
    /// created or claimed; tasks, shells and streams are holds.
    pub limits: crate::limits::TenantLimits,
    pub output_head_chars: usize,
    pub tenant_providers: std::collections::BTreeMap<String, ProviderConfig>,
    /// This replica's name in run leases.
    pub replica_id: String,
    /// How long a run's lease lasts without a heartbeat.
    pub run_lease: std::time::Duration,
    /// How long a call waits in process for an approval before its run parks (`None`: never).
    pub approval_park_after: Option<std::time::Duration>,
    /// Whether sessions may run their own model script (`model.script`). A stored session
    /// whose script is no longer allowed fails its next run with `SCRIPTS_NOT_ALLOWED`.
    pub allow_session_scripts: bool,
    /// The bounds of one WebFetch (`[egress]`).
    pub fetch_limits: crate::egress::FetchLimits,
    /// The WebSearch backends of the server and of tenants (checked at start-up).
    pub search: crate::search::SearchBackends,
    /// The price table: every model call's usage ledger row is priced from it.
    pub prices: Vec<crate::usage::Price>,
    /// MCP servers of sessions (`[mcp]`).
    pub mcp: crate::mcp::McpSettings,
    /// The server's metrics (served on `metrics_bind` when set).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Record prompts, outputs and tool content on the GenAI spans
    /// (`telemetry.capture_content`).
    pub capture_content: bool,
}

/// A run parked on approvals: what it takes to resume it.
struct ParkedRun {
    tenant: TenantId,
    session: SessionId,
    lease: RunLease,
    prompt: String,
    /// Stops the expiry timer when the run resumes earlier.
    timer: CancellationToken,
}

/// How `run_one` ended.
enum Ended {
    /// The run wrote its terminal event.
    Finished,
    /// The run parked on these approvals (id, expiry).
    Parked(Vec<(String, chrono::DateTime<chrono::Utc>)>),
}

/// Per-session resources that outlive one run (background tasks, PTY shells).
struct SessionEnv {
    shells: SessionShells,
    workspace: PathBuf,
    /// WebFetch answers of this session, reused for a short while.
    web_cache: Arc<builtin::web_fetch::WebCache>,
    /// Where the egress proxy records commands' connections (the current run's journal).
    egress_journal: EgressSlot,
    /// Notifications of finished background tasks, waiting for the loop.
    notifications: Arc<task_inbox::TaskInbox>,
    /// `snapshot` storage: the workspace's snapshots.
    snapshots: Option<Arc<crate::workspace_snapshot::SessionSnapshots>>,
    /// The session's MCP servers (started with its first run, stopped when it ends).
    mcp: Arc<crate::mcp::SessionMcp>,
}

pub struct SessionRuntime {
    store: Arc<dyn Store>,
    bus: Arc<EventBus>,
    settings: RuntimeSettings,
    /// The model providers' HTTP client: the egress client's (checked, pinned, bounded).
    http: reqwest::Client,
    /// The outbound client of remote hooks and approval webhooks.
    egress: EgressClient,
    /// The egress broker of tool traffic (WebFetch).
    broker: crate::egress::EgressBroker,
    sandbox: Arc<Sandbox>,
    hook_catalog: HookCatalog,
    active: Mutex<HashMap<SessionId, Active>>,
    hub: Arc<approvals::ApprovalHub>,
    /// Runs the hub asks to resume (their approval was answered, or expired).
    resumes: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<RunId>>>,
    /// Runs parked on approvals: no task runs them until an answer (or expiry) comes.
    parked: Mutex<HashMap<RunId, ParkedRun>>,
    /// The single writer of approval decisions, and the live grants of running sessions.
    approvals: Arc<Approvals>,
    envs: Mutex<HashMap<SessionId, Arc<SessionEnv>>>,
    /// Noa sessions' view caches between their runs (bounded; see `noa::kept`).
    noa_views: Arc<crate::noa::kept::KeptViews>,
    /// This replica's holds (streams, tasks, shells) counted against tenant limits.
    holds: crate::limits::Holds,
    /// The tenants' spend budgets, checked in the store before every prompt and turn.
    budgets: budget_gate::BudgetGate,
    /// Cancelled when this replica starts shutting down: runs hand off (see [`handoff`]).
    shutdown: CancellationToken,
    /// The tasks driving runs, so a shutdown can wait for them (and stop them past the grace).
    run_tasks: tokio_util::task::TaskTracker,
    /// How to stop each run task still going when the grace period ends.
    run_aborts: Mutex<HashMap<RunId, tokio::task::AbortHandle>>,
    /// How many `replica_started` signals of other replicas were heard (see `replicas`).
    replicas_started: std::sync::atomic::AtomicU64,
    /// This runtime, for the `Agent` tools of its runs (they start subagent runs).
    me: std::sync::Weak<SessionRuntime>,
}

/// A tool this server cannot offer a tenant's sessions, and why (`absent_tools` of a session).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AbsentTool {
    pub name: String,
    pub reason: String,
}

impl SessionRuntime {
    /// The state of each MCP server of a session (`not_started` before its first run).
    pub fn mcp_statuses(
        &self,
        session: &SessionId,
        config: &crate::session_config::SessionConfig,
    ) -> Vec<crate::mcp::McpServerStatus> {
        let envs = self.envs.lock().unwrap_or_else(|e| e.into_inner());
        match envs.get(session) {
            Some(env) => env.mcp.statuses(),
            None => config
                .mcp_servers
                .iter()
                .map(|server| crate::mcp::McpServerStatus::not_started(&server.name))
                .collect(),
        }
    }

    /// The tools left out of `tenant`'s sessions by the server's configuration, with the
    /// reason (WebSearch without a search backend).
    pub fn absent_tools(&self, tenant: &TenantId) -> Vec<AbsentTool> {
        match self.settings.search.for_tenant(tenant.as_str()) {
            Ok(_) => Vec::new(),
            Err(reason) => vec![AbsentTool {
                name: "WebSearch".into(),
                reason: reason.into(),
            }],
        }
    }
}

impl SessionRuntime {
    /// A runtime whose remote hooks and approval webhooks go out through `egress`.
    pub fn new(
        store: Arc<dyn Store>,
        settings: RuntimeSettings,
        egress: EgressClient,
        broker: crate::egress::EgressBroker,
    ) -> Arc<Self> {
        let sandbox = Arc::new(
            Sandbox::probe(settings.sandbox.clone()).with_metrics(settings.metrics.clone()),
        );
        let (hub, resumes) = approvals::ApprovalHub::new();
        let hub = Arc::new(hub);
        let approvals = Arc::new(
            Approvals::new(store.clone(), hub.clone()).with_metrics(settings.metrics.clone()),
        );
        let holds = crate::limits::Holds::new(
            store.clone(),
            settings.limits.clone(),
            settings.replica_id.clone(),
            settings.run_lease,
        );
        let budgets = budget_gate::BudgetGate::new(store.clone(), settings.limits.budget);
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            holds,
            budgets,
            store,
            bus: Arc::new(EventBus::default()),
            settings,
            http: egress.provider_http(),
            sandbox,
            hook_catalog: HookCatalog::new().with_egress(egress.clone()),
            egress,
            broker,
            active: Mutex::new(HashMap::new()),
            hub,
            resumes: Mutex::new(Some(resumes)),
            parked: Mutex::new(HashMap::new()),
            approvals,
            envs: Mutex::new(HashMap::new()),
            noa_views: Arc::default(),
            shutdown: CancellationToken::new(),
            run_tasks: tokio_util::task::TaskTracker::new(),
            run_aborts: Mutex::new(HashMap::new()),
            replicas_started: Default::default(),
        })
    }

    /// The tenants' spend budgets (the operator API reads and sets them through the store).
    pub fn budgets(&self) -> &budget_gate::BudgetGate {
        &self.budgets
    }

    /// Refuses a session config whose model has no price when the tenant has a cost budget
    /// (`MODEL_NOT_PRICED`); a config that cannot name its model yet passes (its runs fail).
    pub async fn ensure_model_priced(
        &self,
        tenant: &TenantId,
        config: &crate::session_config::SessionConfig,
    ) -> Result<(), RuntimeError> {
        let Ok(meter) = self.usage_meter(tenant, config) else {
            return Ok(());
        };
        Ok(self.budgets.ensure_priced(tenant, &meter).await?)
    }

    /// The budget check of a new prompt: `BUDGET_EXCEEDED` once a budget is spent,
    /// `MODEL_NOT_PRICED` for an unpriced model under a cost budget.
    async fn admit_budget(&self, session: &SessionRecord) -> Result<(), RuntimeError> {
        // The config is parsed only for a tenant with a budget (to find the model's price).
        let meter = || {
            serde_json::from_value::<crate::session_config::SessionConfig>(session.config.clone())
                .ok()
                .and_then(|config| self.usage_meter(&session.tenant, &config).ok())
        };
        Ok(self
            .budgets
            .check(&session.tenant, meter, Default::default())
            .await?)
    }

    /// What session hook configurations resolve against (in-process hooks, outbound client).
    pub fn hook_catalog(&self) -> &HookCatalog {
        &self.hook_catalog
    }

    pub fn bus(&self) -> &Arc<EventBus> {
        &self.bus
    }

    /// The shared outbound client (address checks, no proxies or redirects, bounds).
    pub fn egress(&self) -> &EgressClient {
        &self.egress
    }

    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// This replica's holds on tenant limits (streams, tasks, shells).
    pub fn holds(&self) -> &crate::limits::Holds {
        &self.holds
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.settings.metrics
    }

    /// Prompts queued on this replica behind their session's running run.
    pub fn queued_runs(&self) -> usize {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|active| active.queue.len())
            .sum()
    }

    /// The single writer of approval decisions (see the module doc).
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    /// Runs the session's hooks for a session-level event (SessionStart, SessionEnd,
    /// UserPromptSubmit) and returns what they decided.
    pub async fn session_hooks(
        &self,
        session: &SessionRecord,
        payload: crate::hooks::HookPayload,
    ) -> crate::hooks::runner::HookOutcome {
        // A session without hooks (the stored config omits an empty `hooks`) has nothing to
        // run: no config parse, no hook compilation.
        if session
            .config
            .get("hooks")
            .is_none_or(|hooks| hooks.is_null() || hooks.as_array().is_some_and(Vec::is_empty))
        {
            return Default::default();
        }
        let Ok(config) = serde_json::from_value::<SessionConfig>(session.config.clone()) else {
            return Default::default();
        };
        let Ok((hooks, _)) = HookRunner::from_config(&config.hooks, &self.hook_catalog) else {
            return Default::default();
        };
        if !hooks.has_hooks(payload.event_name(), None) {
            return Default::default();
        }
        hooks
            .run(crate::hooks::HookEvent {
                session_id: session.id.clone(),
                tenant: session.tenant.clone(),
                payload,
            })
            .await
    }
}
