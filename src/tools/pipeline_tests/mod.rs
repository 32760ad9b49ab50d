//! The pipeline's tests, one module per stage; the fixtures every stage uses are here.

use super::*;
use crate::hooks::{FailurePolicy, Hook, HookError, HookRegistration, HookResponse};
use crate::permission::{PermissionMode, SelfDecision};
use crate::tools::builder::ToolBuilder;
use proptest::prelude::*;
use serde_json::json;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------- fixtures

/// Counts calls and remembers the last input: the side effect every test watches.
#[derive(Clone, Default)]
struct Probe {
    calls: Arc<AtomicUsize>,
    last_input: Arc<Mutex<Option<Value>>>,
}

impl Probe {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    fn last_input(&self) -> Option<Value> {
        self.last_input.lock().unwrap().clone()
    }
}

/// `Counter`: input `{"n": 0..=100}`; read-only when `n < 10`; answers `n=<n>`.
fn counter(probe: &Probe) -> DynTool {
    let probe = probe.clone();
    Arc::new(
        ToolBuilder::new("Counter")
            .schema(json!({
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 100}},
                "required": ["n"],
                "additionalProperties": false
            }))
            .read_only_when(|input| input["n"].as_i64().is_some_and(|n| n < 10))
            .handler(move |input, _ctx| {
                let probe = probe.clone();
                async move {
                    probe.calls.fetch_add(1, Ordering::SeqCst);
                    *probe.last_input.lock().unwrap() = Some(input.clone());
                    Ok(ToolOutput::text(format!("n={}", input["n"])))
                }
            })
            .build()
            .unwrap(),
    )
}

use crate::tools::DynTool;

fn reason(stage: Stage, rule: Option<&str>) -> Reason {
    Reason {
        stage,
        rule: rule.map(str::to_owned),
        grant_id: None,
        message: format!("{stage:?}"),
    }
}

/// A small stand-in for the permission ladder (the real one lives in `crate::permission`):
/// deny names, mode, allow names, read-only, ask.
#[derive(Clone, Debug)]
struct TestGate {
    mode: PermissionMode,
    allow: Vec<String>,
    deny: Vec<String>,
    /// Inputs with this `n` are denied by a rule (argument-aware deny).
    deny_n: Option<i64>,
}

impl TestGate {
    fn ask() -> Self {
        Self {
            mode: PermissionMode::Default,
            allow: vec![],
            deny: vec![],
            deny_n: None,
        }
    }
    fn allow_all() -> Self {
        Self {
            allow: vec!["Counter".into()],
            ..Self::ask()
        }
    }
}

impl PermissionGate for TestGate {
    fn evaluate(&self, tool: &dyn Tool, input: &Value) -> Verdict {
        let facts = tool_facts(tool, input);
        let listed = |rules: &[String]| rules.iter().any(|r| r == "*" || r == facts.name);
        if listed(&self.deny) || facts.self_decision == SelfDecision::Deny {
            return Verdict::Deny(reason(Stage::Disallowed, Some("deny")));
        }
        if self.deny_n.is_some() && input["n"].as_i64() == self.deny_n {
            return Verdict::Deny(reason(Stage::Disallowed, Some("Counter(n)")));
        }
        match self.mode {
            PermissionMode::Bypass => return Verdict::Allow(reason(Stage::ModeBypass, None)),
            PermissionMode::Plan if facts.read_only => {
                return Verdict::Allow(reason(Stage::ModePlan, None));
            }
            PermissionMode::Plan => return Verdict::Deny(reason(Stage::ModePlan, None)),
            _ => {}
        }
        if listed(&self.allow) {
            return Verdict::Allow(reason(Stage::Allowed, Some("Counter")));
        }
        if facts.read_only {
            return Verdict::Allow(reason(Stage::ReadOnly, None));
        }
        match self.mode {
            PermissionMode::DontAsk => Verdict::Deny(reason(Stage::ModeDontAsk, None)),
            PermissionMode::Auto => Verdict::Deny(reason(Stage::ModeAuto, None)),
            _ => Verdict::Ask,
        }
    }
}

/// An approver with a fixed answer that records every request.
#[derive(Default)]
struct ScriptedApprover {
    answer: Mutex<Option<ApprovalAnswer>>,
    requests: Mutex<Vec<ApprovalRequest>>,
}

impl ScriptedApprover {
    fn answering(answer: ApprovalAnswer) -> Arc<Self> {
        Arc::new(Self {
            answer: Mutex::new(Some(answer)),
            requests: Mutex::default(),
        })
    }
    fn requests(&self) -> Vec<ApprovalRequest> {
        self.requests.lock().unwrap().clone()
    }
}

#[async_trait]
impl Approver for ScriptedApprover {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalAnswer {
        self.requests.lock().unwrap().push(request);
        let answer = self.answer.lock().unwrap().clone();
        match answer {
            Some(answer) => answer,
            None => std::future::pending().await,
        }
    }
}

struct FixedHook(Result<HookResponse, HookError>);

#[async_trait]
impl Hook for FixedHook {
    async fn handle(&self, _event: &crate::hooks::HookEvent) -> Result<HookResponse, HookError> {
        self.0.clone()
    }
}

/// Records the events it sees.
#[derive(Default)]
struct Recorder(Mutex<Vec<crate::hooks::HookEvent>>);

#[async_trait]
impl Hook for Recorder {
    async fn handle(&self, event: &crate::hooks::HookEvent) -> Result<HookResponse, HookError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(HookResponse::proceed().with_context("post context"))
    }
}

fn hooks(answers: Vec<Result<HookResponse, HookError>>) -> HookRunner {
    let mut runner = HookRunner::new();
    for (i, answer) in answers.into_iter().enumerate() {
        runner.register(HookRegistration::new(
            format!("h{i}"),
            HookEventName::PreToolUse,
            Arc::new(FixedHook(answer)),
        ));
    }
    runner
}

fn registry(tools: Vec<DynTool>) -> ToolRegistry {
    let mut registry = ToolRegistry::new();
    for tool in tools {
        registry.register(tool).unwrap();
    }
    registry
}

fn pipeline(probe: &Probe, gate: TestGate) -> Pipeline {
    Pipeline::new(registry(vec![counter(probe)]), Arc::new(gate))
}

fn ctx() -> ToolContext {
    ToolContext {
        tool_use_id: "tu_1".into(),
        ..ToolContext::for_tests()
    }
}

async fn run(pipeline: &Pipeline, input: Value) -> CallOutcome {
    pipeline
        .call("Counter", input, &ctx(), &HashSet::new())
        .await
}

/// A gate that allows every call.
fn allow_everything() -> Arc<dyn PermissionGate> {
    Arc::new(|_: &dyn Tool, _: &Value| Verdict::Allow(reason(Stage::Allowed, None)))
}

fn code(outcome: &CallOutcome) -> Option<&str> {
    outcome.result.code.as_deref()
}

mod execution;
mod hooks;
mod journal;
mod lookup;
mod output;
mod permission;
mod properties;
