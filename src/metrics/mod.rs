//! Prometheus metrics (`metrics_bind`, see [`serve`]): one [`Metrics`] per server, built from
//! the configuration and passed to the parts that count (no global registry).
//!
//! **Label discipline.** Every label value comes from the operator's configuration or from a
//! fixed set: route templates of the router (never the raw path), HTTP status codes, built-in
//! tool names, provider kinds and the model names the configuration mentions (the server's
//! and tenants' providers and the price table), and the reason and outcome enums below.
//! Anything a tenant chooses folds into a fixed value: an MCP tool is `mcp`, an unknown tool
//! or a session-chosen model name is `other` ([`labels`]). So the number of series is bounded
//! by the configuration, whatever tenants send.
//!
//! **Hot path.** Families are registered once; the model-call handles of a run are resolved
//! once per run ([`ModelInstruments`]); label sets are `&'static str`s, small enums and
//! shared `Arc<str>`s, so an increment hashes a label set under a read lock and allocates
//! nothing.

pub mod labels;
pub mod serve;

use labels::{ModelNames, RouteNames};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

/// Latency buckets (seconds) of requests, store transactions and tool calls: 1 ms … 60 s.
const FAST_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];
/// Buckets (seconds) of model calls, runs and approval answers: 50 ms … 1 h.
const SLOW_BUCKETS: [f64; 14] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0,
];

fn fast_histogram() -> Histogram {
    Histogram::new(FAST_BUCKETS)
}

fn slow_histogram() -> Histogram {
    Histogram::new(SLOW_BUCKETS)
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: Method,
    route: Arc<str>,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: Method,
    route: Arc<str>,
}

/// The request method, folded to the methods the API uses.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(clippy::upper_case_acronyms)]
enum Method {
    GET,
    POST,
    DELETE,
    OPTIONS,
    OTHER,
}

impl From<&axum::http::Method> for Method {
    fn from(method: &axum::http::Method) -> Self {
        match *method {
            axum::http::Method::GET => Self::GET,
            axum::http::Method::POST => Self::POST,
            axum::http::Method::DELETE => Self::DELETE,
            axum::http::Method::OPTIONS => Self::OPTIONS,
            _ => Self::OTHER,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    status: RunStatus,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunStatusLabels {
    status: RunStatus,
}

/// How a run (or one stretch of it on this replica) ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RunStatus {
    completed,
    failed,
    cancelled,
    /// Waiting on approvals (resumed later, counted again when it ends).
    parked,
}

impl RunStatus {
    /// The status of a run that ended with `terminal`.
    pub fn of(terminal: &crate::run_event::TerminalReason) -> Self {
        use crate::run_event::TerminalReason as T;
        match terminal {
            T::Cancelled => Self::cancelled,
            T::Error { .. } => Self::failed,
            T::Parked => Self::parked,
            _ => Self::completed,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: &'static str,
    model: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOutcomeLabels {
    provider: &'static str,
    model: Arc<str>,
    outcome: ModelOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: &'static str,
    model: Arc<str>,
    kind: TokenKind,
}

/// How one model call ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ModelOutcome {
    ok,
    error,
    cancelled,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum TokenKind {
    input,
    output,
    cache_read,
    cache_write,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: &'static str,
    outcome: ToolOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolNameLabels {
    tool: &'static str,
}

/// How one tool call ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ToolOutcome {
    ok,
    error,
    /// The permission ladder (or the approver) refused it.
    denied,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    kind: WebhookKind,
    outcome: DeliveryOutcome,
}

/// Which webhook delivered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum WebhookKind {
    /// The approval policy webhook of a session (`approvals.webhook`).
    approval,
    /// An outbound event subscription (run and session notifications).
    outbound,
}

/// How one webhook delivery attempt ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum DeliveryOutcome {
    /// A 2xx answer.
    delivered,
    /// A non-2xx answer, an unreadable answer or a transport error.
    failed,
    /// The outbound address checks refused the destination.
    refused,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StoreLabels {
    op: StoreOp,
}

/// Which store transaction was timed.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum StoreOp {
    /// A run's batch of events, history and usage rows.
    append,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SpawnLabels {
    kind: SpawnKind,
    outcome: SpawnOutcome,
}

/// What the sandbox was asked to start.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum SpawnKind {
    /// A command, shell or stdio MCP server.
    command,
    /// A built-in job on untrusted data (PDF text).
    job,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum SpawnOutcome {
    launched,
    /// A required sandbox part is not enforced: nothing ran.
    refused,
}

/// Every metric of one server, registered once.
pub struct Metrics {
    registry: Registry,
    routes: RouteNames,
    models: ModelNames,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Histograms<RouteLabels>,
    runs: Family<RunLabels, Counter>,
    runs_started: Counter,
    run_duration: Histograms<RunStatusLabels>,
    model_calls: Family<ModelOutcomeLabels, Counter>,
    model_duration: Histograms<ModelLabels>,
    model_ttft: Histograms<ModelLabels>,
    model_tokens: Family<TokenLabels, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    tool_duration: Histograms<ToolNameLabels>,
    permission_decisions: Family<StageLabels, Counter>,
    approvals_pending: Gauge,
    approval_answer: Histogram,
    webhook_deliveries: Family<WebhookLabels, Counter>,
    sse_subscribers: Gauge,
    runs_queued: Gauge,
    store_duration: Histograms<StoreLabels>,
    sandbox_spawns: Family<SpawnLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// The metrics of a server whose configured model names are `settings`'.
    pub fn from_settings(settings: &crate::config::Settings) -> Arc<Self> {
        Arc::new(Self::new(ModelNames::from_settings(settings)))
    }

    pub fn new(models: ModelNames) -> Self {
        let mut registry = Registry::with_prefix("norma");
        let http_requests = Family::default();
        registry.register(
            "http_requests",
            "HTTP requests by route template, method and status",
            http_requests.clone(),
        );
        let http_duration = Histograms::new_with_constructor(fast_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "http_request_duration",
            "Time to the response head, by route template and method",
            prometheus_client::registry::Unit::Seconds,
            http_duration.clone(),
        );
        let runs = Family::default();
        registry.register(
            "runs",
            "Runs (or stretches of a run on this replica) ended, by status and terminal reason",
            runs.clone(),
        );
        let runs_started = Counter::default();
        registry.register(
            "runs_started",
            "Runs started or resumed on this replica",
            runs_started.clone(),
        );
        let run_duration = Histograms::new_with_constructor(slow_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "run_duration",
            "Time a run ran on this replica until it ended or parked, by status",
            prometheus_client::registry::Unit::Seconds,
            run_duration.clone(),
        );
        let model_calls = Family::default();
        registry.register(
            "model_calls",
            "Model calls by provider kind, configured model (other: not configured) and outcome",
            model_calls.clone(),
        );
        let model_duration = Histograms::new_with_constructor(slow_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "model_call_duration",
            "Time from sending a model request to the end of its stream",
            prometheus_client::registry::Unit::Seconds,
            model_duration.clone(),
        );
        let model_ttft = Histograms::new_with_constructor(slow_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "model_time_to_first_token",
            "Time from sending a model request to its first streamed item",
            prometheus_client::registry::Unit::Seconds,
            model_ttft.clone(),
        );
        let model_tokens = Family::default();
        registry.register(
            "model_tokens",
            "Tokens reported by providers, by kind (input is uncached input)",
            model_tokens.clone(),
        );
        let tool_calls = Family::default();
        registry.register(
            "tool_calls",
            "Tool calls by built-in tool (mcp: any MCP tool, other: unknown) and outcome",
            tool_calls.clone(),
        );
        let tool_duration = Histograms::new_with_constructor(fast_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "tool_call_duration",
            "Time of one tool call through the pipeline (permission, hooks, approval, run)",
            prometheus_client::registry::Unit::Seconds,
            tool_duration.clone(),
        );
        let permission_decisions = Family::default();
        registry.register(
            "permission_decisions",
            "Permission decisions by the ladder stage that decided",
            permission_decisions.clone(),
        );
        let approvals_pending = Gauge::default();
        registry.register(
            "approvals_pending",
            "Tool calls waiting in process on this replica for an approval answer",
            approvals_pending.clone(),
        );
        let approval_answer = slow_histogram();
        registry.register_with_unit(
            "approval_answer_duration",
            "Time from an approval request to its decision (answered, expired or denied)",
            prometheus_client::registry::Unit::Seconds,
            approval_answer.clone(),
        );
        let webhook_deliveries = Family::default();
        registry.register(
            "webhook_deliveries",
            "Webhook delivery attempts by kind and outcome",
            webhook_deliveries.clone(),
        );
        let sse_subscribers = Gauge::default();
        registry.register(
            "sse_subscribers",
            "Open event streams (SSE and AG-UI) on this replica",
            sse_subscribers.clone(),
        );
        let runs_queued = Gauge::default();
        registry.register(
            "runs_queued",
            "Prompts queued behind a running run of their session on this replica",
            runs_queued.clone(),
        );
        let store_duration = Histograms::new_with_constructor(fast_histogram as fn() -> Histogram);
        registry.register_with_unit(
            "store_transaction_duration",
            "Store transactions of runs, by operation (retries of one write included)",
            prometheus_client::registry::Unit::Seconds,
            store_duration.clone(),
        );
        let sandbox_spawns = Family::default();
        registry.register(
            "sandbox_spawns",
            "Sandboxed processes asked for, by kind and outcome",
            sandbox_spawns.clone(),
        );
        Self {
            registry,
            routes: RouteNames::default(),
            models,
            http_requests,
            http_duration,
            runs,
            runs_started,
            run_duration,
            model_calls,
            model_duration,
            model_ttft,
            model_tokens,
            tool_calls,
            tool_duration,
            permission_decisions,
            approvals_pending,
            approval_answer,
            webhook_deliveries,
            sse_subscribers,
            runs_queued,
            store_duration,
            sandbox_spawns,
        }
    }

    /// The exposition text (OpenMetrics 1.0).
    pub fn render(&self) -> String {
        let mut text = String::with_capacity(16 * 1024);
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "cannot encode the metrics");
        }
        text
    }

    /// One answered HTTP request; `route` is the matched route template (`None`: no route
    /// matched, counted as `other`).
    pub fn http_request(
        &self,
        method: &axum::http::Method,
        route: Option<&str>,
        status: u16,
        elapsed: Duration,
    ) {
        let route = self.routes.label(route);
        let method = Method::from(method);
        self.http_duration
            .get_or_create(&RouteLabels {
                method,
                route: route.clone(),
            })
            .observe(elapsed.as_secs_f64());
        self.http_requests
            .get_or_create(&HttpLabels {
                method,
                route,
                status,
            })
            .inc();
    }

    pub fn run_started(&self) {
        self.runs_started.inc();
    }

    /// A run that ended (or parked) after `elapsed` on this replica.
    pub fn run_ended(&self, terminal: &crate::run_event::TerminalReason, elapsed: Duration) {
        let status = RunStatus::of(terminal);
        self.runs
            .get_or_create(&RunLabels {
                status,
                reason: terminal.code(),
            })
            .inc();
        self.run_duration
            .get_or_create(&RunStatusLabels { status })
            .observe(elapsed.as_secs_f64());
    }

    /// The handles of one provider kind and model (folded to `other` unless configured),
    /// resolved once per run.
    pub fn model_instruments(&self, provider: &'static str, model: &str) -> ModelInstruments {
        let model = self.models.label(model);
        let key = ModelLabels {
            provider,
            model: model.clone(),
        };
        let outcome = |outcome| {
            self.model_calls.get_or_create_owned(&ModelOutcomeLabels {
                provider,
                model: model.clone(),
                outcome,
            })
        };
        let tokens = |kind| {
            self.model_tokens.get_or_create_owned(&TokenLabels {
                provider,
                model: model.clone(),
                kind,
            })
        };
        ModelInstruments {
            ok: outcome(ModelOutcome::ok),
            error: outcome(ModelOutcome::error),
            cancelled: outcome(ModelOutcome::cancelled),
            duration: self.model_duration.get_or_create_owned(&key),
            ttft: self.model_ttft.get_or_create_owned(&key),
            input: tokens(TokenKind::input),
            output: tokens(TokenKind::output),
            cache_read: tokens(TokenKind::cache_read),
            cache_write: tokens(TokenKind::cache_write),
        }
    }

    /// One tool call through the pipeline. `name` is the called name (folded by
    /// [`labels::tool_label`]); `stage` the permission stage that decided, if any.
    pub fn tool_call(
        &self,
        name: &str,
        outcome: ToolOutcome,
        stage: Option<crate::permission::Stage>,
        elapsed: Duration,
    ) {
        let tool = labels::tool_label(name);
        self.tool_calls
            .get_or_create(&ToolLabels { tool, outcome })
            .inc();
        self.tool_duration
            .get_or_create(&ToolNameLabels { tool })
            .observe(elapsed.as_secs_f64());
        if let Some(stage) = stage {
            self.permission_decisions
                .get_or_create(&StageLabels {
                    stage: stage.as_str(),
                })
                .inc();
        }
    }

    /// A call starts waiting in process for an approval; the pending gauge falls again when
    /// the returned guard drops.
    pub fn approval_waiting(self: &Arc<Self>) -> PendingApproval {
        self.approvals_pending.inc();
        PendingApproval(self.clone())
    }

    /// An approval was decided `elapsed` after it was requested.
    pub fn approval_answered(&self, elapsed: Duration) {
        self.approval_answer.observe(elapsed.as_secs_f64());
    }

    /// One webhook delivery attempt (the outbound webhooks' deliverer calls this with
    /// [`WebhookKind::outbound`]).
    pub fn webhook_delivery(&self, kind: WebhookKind, outcome: DeliveryOutcome) {
        self.webhook_deliveries
            .get_or_create(&WebhookLabels { kind, outcome })
            .inc();
    }

    /// An event stream opened; the gauge falls again when the returned guard drops.
    pub fn sse_subscribed(self: &Arc<Self>) -> SseSubscriber {
        self.sse_subscribers.inc();
        SseSubscriber(self.clone())
    }

    /// Sets the queued-runs gauge (sampled when scraped).
    pub fn set_runs_queued(&self, queued: usize) {
        self.runs_queued
            .set(i64::try_from(queued).unwrap_or(i64::MAX));
    }

    /// One store transaction of `op` that took `elapsed`.
    pub fn store_transaction(&self, op: StoreOp, elapsed: Duration) {
        self.store_duration
            .get_or_create(&StoreLabels { op })
            .observe(elapsed.as_secs_f64());
    }

    pub fn sandbox_spawn(&self, kind: SpawnKind, outcome: SpawnOutcome) {
        self.sandbox_spawns
            .get_or_create(&SpawnLabels { kind, outcome })
            .inc();
    }
}

/// The model-call handles of one provider kind and model.
#[derive(Clone, Debug)]
pub struct ModelInstruments {
    ok: Counter,
    error: Counter,
    cancelled: Counter,
    duration: Histogram,
    ttft: Histogram,
    input: Counter,
    output: Counter,
    cache_read: Counter,
    cache_write: Counter,
}

impl ModelInstruments {
    /// One model call that ended with `outcome` after `elapsed`.
    pub fn call(&self, outcome: ModelOutcome, elapsed: Duration) {
        match outcome {
            ModelOutcome::ok => &self.ok,
            ModelOutcome::error => &self.error,
            ModelOutcome::cancelled => &self.cancelled,
        }
        .inc();
        self.duration.observe(elapsed.as_secs_f64());
    }

    /// The first streamed item came `elapsed` after the request.
    pub fn first_token(&self, elapsed: Duration) {
        self.ttft.observe(elapsed.as_secs_f64());
    }

    pub fn tokens(&self, usage: &crate::llm::Usage) {
        self.input.inc_by(usage.input_tokens);
        self.output.inc_by(usage.output_tokens);
        self.cache_read.inc_by(usage.cache_read_tokens);
        self.cache_write.inc_by(usage.cache_write_tokens);
    }
}

/// Holds the pending-approvals gauge up while a call waits.
pub struct PendingApproval(Arc<Metrics>);

impl Drop for PendingApproval {
    fn drop(&mut self) {
        self.0.approvals_pending.dec();
    }
}

/// Holds the SSE-subscribers gauge up while a stream is open.
pub struct SseSubscriber(Arc<Metrics>);

impl Drop for SseSubscriber {
    fn drop(&mut self) {
        self.0.sse_subscribers.dec();
    }
}

#[cfg(test)]
mod tests;
