use super::*;
use crate::hooks::{FailurePolicy, Hook, HookError, HookRegistration, HookResponse};
use crate::permission::{PermissionMode, SelfDecision};
use crate::tools::builder::ToolBuilder;
use pretty_assertions::assert_eq;
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

fn code(outcome: &CallOutcome) -> Option<&str> {
    outcome.result.code.as_deref()
}

// ---------------------------------------------------------------- every branch

#[tokio::test]
async fn all_gates_pass_and_call_runs_exactly_once() {
    let probe = Probe::default();
    let outcome = run(&pipeline(&probe, TestGate::allow_all()), json!({"n": 50})).await;
    assert_eq!(probe.calls(), 1);
    assert_eq!(outcome.result, ToolResultBlock::ok("tu_1", "n=50"));
    assert_eq!(outcome.spill, None);
    assert_eq!(
        outcome.decision,
        DecisionRecord {
            stage: Some(Stage::Allowed),
            rule: Some("Counter".into()),
            grant_id: None,
            message: Some("Allowed".into()),
            approved_by_callback: false,
            rewritten_by_hook: false,
        }
    );
}

#[tokio::test]
async fn unknown_tool_never_calls() {
    let probe = Probe::default();
    let pipeline = pipeline(&probe, TestGate::allow_all());
    let outcome = pipeline
        .call("Nope", json!({"n": 1}), &ctx(), &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::TOOL_NOT_FOUND));
    assert_eq!(outcome.result.tool_use_id, "tu_1");
    assert!(outcome.result.is_error);
    assert_eq!(outcome.decision.stage, None);
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn hidden_tools_run_only_when_unlocked() {
    let probe = Probe::default();
    let mut registry = ToolRegistry::new();
    registry.register_deferred(counter(&probe)).unwrap();
    let pipeline = Pipeline::new(registry, Arc::new(TestGate::allow_all()));
    let outcome = pipeline
        .call("Counter", json!({"n": 1}), &ctx(), &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::TOOL_NOT_FOUND));
    assert_eq!(probe.calls(), 0);
    let unlocked = HashSet::from(["Counter".to_owned()]);
    let outcome = pipeline
        .call("Counter", json!({"n": 1}), &ctx(), &unlocked)
        .await;
    assert!(!outcome.result.is_error);
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn schema_failure_never_calls_and_names_the_field() {
    let probe = Probe::default();
    let pipeline = pipeline(&probe, TestGate::allow_all());
    let outcome = run(&pipeline, json!({"n": 500})).await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert!(
        outcome.result.content.contains("/n:"),
        "{}",
        outcome.result.content
    );
    let outcome = run(&pipeline, json!({})).await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert_eq!(probe.calls(), 0);
}

/// N5: an input that fails its schema never reaches the approval step (and so never a
/// webhook, a persisted approval or a human): validation comes first.
#[tokio::test]
async fn schema_failure_never_reaches_the_approver() {
    let probe = Probe::default();
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: None,
    });
    let pipeline = pipeline(&probe, TestGate::ask()).with_approver(approver.clone());
    let outcome = run(&pipeline, json!({"n": "not a number"})).await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert!(approver.requests().is_empty());
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn raw_input_tools_skip_central_validation() {
    let probe = Probe::default();
    let counter = probe.calls.clone();
    let raw: DynTool = Arc::new(
        ToolBuilder::new("Raw")
            .schema(json!({"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}))
            .raw_input()
            .self_decision(SelfDecision::Allow)
            .handler(move |input, _| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok(ToolOutput::text(input.to_string()))
                }
            })
            .build()
            .unwrap(),
    );
    let gate = |tool: &dyn Tool, input: &Value| match tool.self_decision(input) {
        SelfDecision::Allow => Verdict::Allow(reason(Stage::ToolAllow, None)),
        _ => Verdict::Ask,
    };
    let pipeline = Pipeline::new(registry(vec![raw]), Arc::new(gate));
    let outcome = pipeline
        .call("Raw", json!("not even an object"), &ctx(), &HashSet::new())
        .await;
    assert_eq!(outcome.result.content, "\"not even an object\"");
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn permission_deny_never_calls_and_records_the_rule() {
    let probe = Probe::default();
    let gate = TestGate {
        deny: vec!["Counter".into()],
        ..TestGate::allow_all()
    };
    let outcome = run(&pipeline(&probe, gate), json!({"n": 1})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert_eq!(outcome.decision.stage, Some(Stage::Disallowed));
    assert_eq!(outcome.decision.rule.as_deref(), Some("deny"));
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn ask_without_an_approver_is_denied_with_no_callback() {
    let probe = Probe::default();
    let outcome = run(&pipeline(&probe, TestGate::ask()), json!({"n": 50})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert_eq!(outcome.decision.stage, Some(Stage::NoCallback));
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn approver_deny_never_calls() {
    let probe = Probe::default();
    let approver = ScriptedApprover::answering(ApprovalAnswer::Deny {
        reason: "not today".into(),
    });
    let pipeline = pipeline(&probe, TestGate::ask()).with_approver(approver.clone());
    let outcome = run(&pipeline, json!({"n": 50})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert!(outcome.result.content.contains("not today"));
    assert_eq!(outcome.decision.stage, Some(Stage::Callback));
    assert_eq!(probe.calls(), 0);
    assert_eq!(
        approver.requests(),
        vec![ApprovalRequest {
            tool_use_id: "tu_1".into(),
            tool_name: "Counter".into(),
            input: json!({"n": 50}),
            reason: "Counter requires approval".into(),
        }]
    );
}

#[tokio::test]
async fn approver_allow_calls_once() {
    let probe = Probe::default();
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: None,
    });
    let pipeline = pipeline(&probe, TestGate::ask()).with_approver(approver);
    let outcome = run(&pipeline, json!({"n": 50})).await;
    assert!(!outcome.result.is_error);
    assert!(outcome.decision.approved_by_callback);
    assert_eq!(outcome.decision.stage, Some(Stage::Callback));
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn approver_updated_input_is_validated_and_rechecked() {
    // Invalid replacement.
    let probe = Probe::default();
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: Some(json!({"n": "fifty"})),
    });
    let outcome = run(
        &pipeline(&probe, TestGate::ask()).with_approver(approver),
        json!({"n": 50}),
    )
    .await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert!(
        outcome
            .result
            .content
            .starts_with("input updated by the approver")
    );
    assert_eq!(probe.calls(), 0);

    // A replacement a deny rule matches.
    let gate = TestGate {
        deny_n: Some(66),
        ..TestGate::ask()
    };
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: Some(json!({"n": 66})),
    });
    let outcome = run(
        &pipeline(&probe, gate).with_approver(approver),
        json!({"n": 50}),
    )
    .await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert_eq!(probe.calls(), 0);

    // A valid replacement runs with exactly that input.
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: Some(json!({"n": 51})),
    });
    let outcome = run(
        &pipeline(&probe, TestGate::ask()).with_approver(approver),
        json!({"n": 50}),
    )
    .await;
    assert_eq!(outcome.result.content, "n=51");
    assert_eq!(probe.calls(), 1);
    assert_eq!(probe.last_input(), Some(json!({"n": 51})));
}

#[tokio::test]
async fn hook_block_never_calls() {
    let probe = Probe::default();
    let pipeline = pipeline(&probe, TestGate::allow_all())
        .with_hooks(hooks(vec![Ok(HookResponse::block("policy says no"))]));
    let outcome = run(&pipeline, json!({"n": 5})).await;
    assert_eq!(code(&outcome), Some(codes::HOOK_BLOCKED));
    assert_eq!(outcome.result.content, "blocked by hook h0: policy says no");
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn fail_closed_hook_failure_blocks_and_fail_open_continues() {
    let probe = Probe::default();
    let failing = || Err(HookError::Failed("down".into()));
    let closed = pipeline(&probe, TestGate::allow_all()).with_hooks(hooks(vec![failing()]));
    let outcome = run(&closed, json!({"n": 5})).await;
    assert_eq!(code(&outcome), Some(codes::HOOK_FAILED));
    // The failure's detail ("down") is for the log, never the model or the tenant.
    assert_eq!(
        outcome.result.content,
        "hook h0 failed (HOOK_FAILED); it is fail-closed, so the call did not run"
    );
    assert_eq!(probe.calls(), 0);

    let mut open = HookRunner::new();
    open.register(
        HookRegistration::new(
            "h",
            HookEventName::PreToolUse,
            Arc::new(FixedHook(failing())),
        )
        .failure(FailurePolicy::FailOpen),
    );
    let open = pipeline(&probe, TestGate::allow_all()).with_hooks(open);
    assert!(!run(&open, json!({"n": 5})).await.result.is_error);
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn hook_rewrite_is_revalidated() {
    let probe = Probe::default();
    let pipeline = pipeline(&probe, TestGate::allow_all())
        .with_hooks(hooks(vec![Ok(HookResponse::rewrite(json!({"n": 1000})))]));
    let outcome = run(&pipeline, json!({"n": 5})).await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert!(
        outcome
            .result
            .content
            .starts_with("input rewritten by hook h0")
    );
    assert!(outcome.decision.rewritten_by_hook);
    assert_eq!(probe.calls(), 0);
}

/// `{"n": 5, "deep": …}` whose `deep` makes the whole input nest `levels` levels.
fn deep_input(levels: usize) -> Value {
    let deep = (0..levels - 1).fold(json!(1), |inner, _| json!([inner]));
    json!({"n": 5, "deep": deep})
}

#[tokio::test]
async fn a_replacement_input_nested_past_the_bound_never_runs() {
    let bound = crate::message::MAX_TOOL_INPUT_DEPTH;
    let probe = Probe::default();
    // A hook's rewrite.
    let hooked = pipeline(&probe, TestGate::allow_all()).with_hooks(hooks(vec![Ok(
        HookResponse::rewrite(deep_input(bound + 1)),
    )]));
    let outcome = run(&hooked, json!({"n": 5})).await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert_eq!(
        outcome.result.content,
        format!("input rewritten by hook h0: nests deeper than {bound} levels")
    );
    // An approver's replacement.
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: Some(deep_input(bound + 1)),
    });
    let approved = pipeline(&probe, TestGate::ask()).with_approver(approver);
    let outcome = run(&approved, json!({"n": 50})).await;
    assert_eq!(code(&outcome), Some(codes::INPUT_SCHEMA_INVALID));
    assert_eq!(
        outcome.result.content,
        format!("input updated by the approver: nests deeper than {bound} levels")
    );
    assert_eq!(probe.calls(), 0);
    // At the bound the depth is no objection (the schema judges the rest).
    let hooked = pipeline(&probe, TestGate::allow_all())
        .with_hooks(hooks(vec![Ok(HookResponse::rewrite(deep_input(bound)))]));
    let outcome = run(&hooked, json!({"n": 5})).await;
    assert!(
        !outcome.result.content.contains("nests deeper"),
        "{}",
        outcome.result.content
    );
}

#[tokio::test]
async fn hook_rewrite_is_rechecked_by_permission() {
    let probe = Probe::default();
    let gate = TestGate {
        deny_n: Some(13),
        ..TestGate::allow_all()
    };
    let pipeline =
        pipeline(&probe, gate).with_hooks(hooks(vec![Ok(HookResponse::rewrite(json!({"n": 13})))]));
    let outcome = run(&pipeline, json!({"n": 5})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert_eq!(outcome.decision.rule.as_deref(), Some("Counter(n)"));
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn a_rewrite_never_widens_what_was_allowed() {
    // n=5 is read-only (allowed without asking); the rewrite to n=50 needs approval.
    let probe = Probe::default();
    let rewrite = || hooks(vec![Ok(HookResponse::rewrite(json!({"n": 50})))]);
    let no_approver = pipeline(&probe, TestGate::ask()).with_hooks(rewrite());
    let outcome = run(&no_approver, json!({"n": 5})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert_eq!(outcome.decision.stage, Some(Stage::NoCallback));
    assert_eq!(probe.calls(), 0);

    // With an approver, the rewritten input is a new request bound to the new input.
    let approver = ScriptedApprover::answering(ApprovalAnswer::Allow {
        updated_input: None,
    });
    let with_approver = pipeline(&probe, TestGate::ask())
        .with_hooks(rewrite())
        .with_approver(approver.clone());
    let outcome = run(&with_approver, json!({"n": 5})).await;
    assert!(!outcome.result.is_error);
    assert_eq!(probe.last_input(), Some(json!({"n": 50})));
    let requests = approver.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].input, json!({"n": 50}));
    assert!(requests[0].reason.contains("rewritten by hook h0"));
    assert!(outcome.decision.approved_by_callback);
    assert!(outcome.decision.rewritten_by_hook);
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn an_approval_does_not_carry_over_to_a_rewritten_input() {
    let probe = Probe::default();
    let approver = Arc::new(SequenceApprover::default());
    let pipeline = pipeline(&probe, TestGate::ask())
        .with_hooks(hooks(vec![Ok(HookResponse::rewrite(json!({"n": 99})))]))
        .with_approver(approver.clone());
    let outcome = run(&pipeline, json!({"n": 50})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    let inputs: Vec<_> = approver.seen.lock().unwrap().clone();
    assert_eq!(inputs, vec![json!({"n": 50}), json!({"n": 99})]);
    assert_eq!(probe.calls(), 0);
}

/// Allows the first request, denies every later one.
#[derive(Default)]
struct SequenceApprover {
    seen: Mutex<Vec<Value>>,
}

#[async_trait]
impl Approver for SequenceApprover {
    async fn decide(&self, request: ApprovalRequest) -> ApprovalAnswer {
        let mut seen = self.seen.lock().unwrap();
        seen.push(request.input);
        if seen.len() == 1 {
            ApprovalAnswer::Allow {
                updated_input: None,
            }
        } else {
            ApprovalAnswer::Deny {
                reason: "only the original".into(),
            }
        }
    }
}

#[tokio::test]
async fn the_last_rewrite_is_what_runs() {
    let probe = Probe::default();
    let pipeline = pipeline(&probe, TestGate::allow_all()).with_hooks(hooks(vec![
        Ok(HookResponse::rewrite(json!({"n": 7}))),
        Ok(HookResponse::rewrite(json!({"n": 8}))),
    ]));
    let outcome = run(&pipeline, json!({"n": 5})).await;
    assert_eq!(outcome.result.content, "n=8");
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn tool_errors_are_paired_and_post_failure_hooks_see_them() {
    let failing: DynTool = Arc::new(
        ToolBuilder::new("Fail")
            .schema(json!({"type": "object"}))
            .handler(|_, _| async { Err(ToolError::new("EDIT_NOT_UNIQUE", "two matches")) })
            .build()
            .unwrap(),
    );
    let recorder = Arc::new(Recorder::default());
    let mut runner = HookRunner::new();
    runner.register(HookRegistration::new(
        "post",
        HookEventName::PostToolUseFailure,
        recorder.clone(),
    ));
    let gate = |_: &dyn Tool, _: &Value| Verdict::Allow(reason(Stage::Allowed, None));
    let pipeline = Pipeline::new(registry(vec![failing]), Arc::new(gate)).with_hooks(runner);
    let outcome = pipeline
        .call("Fail", json!({}), &ctx(), &HashSet::new())
        .await;
    assert_eq!(
        outcome.result,
        ToolResultBlock::error("tu_1", "EDIT_NOT_UNIQUE", "two matches")
    );
    assert_eq!(
        outcome.extra_messages,
        vec![Message::user_text("post context")]
    );
    let events = recorder.0.lock().unwrap();
    assert!(matches!(
        &events[0].payload,
        HookPayload::PostToolUseFailure { error_code, .. } if error_code == "EDIT_NOT_UNIQUE"
    ));
}

#[tokio::test]
async fn a_panicking_tool_is_a_tool_failure() {
    let panicking: DynTool = Arc::new(
        ToolBuilder::new("Panic")
            .schema(json!({"type": "object"}))
            .handler(|_, _| async { panic!("tool bug") })
            .build()
            .unwrap(),
    );
    let gate = |_: &dyn Tool, _: &Value| Verdict::Allow(reason(Stage::Allowed, None));
    let pipeline = Pipeline::new(registry(vec![panicking]), Arc::new(gate));
    let outcome = pipeline
        .call("Panic", json!({}), &ctx(), &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::TOOL_FAILED));
}

fn sleeper(secs: u64) -> DynTool {
    Arc::new(
        ToolBuilder::new("Sleep")
            .schema(json!({"type": "object"}))
            .handler(move |_, _| async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(ToolOutput::text("woke"))
            })
            .build()
            .unwrap(),
    )
}

fn allow_everything() -> Arc<dyn PermissionGate> {
    Arc::new(|_: &dyn Tool, _: &Value| Verdict::Allow(reason(Stage::Allowed, None)))
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_times_out() {
    let pipeline = Pipeline::new(registry(vec![sleeper(60)]), allow_everything())
        .with_call_timeout(Duration::from_secs(10));
    let outcome = pipeline
        .call("Sleep", json!({}), &ctx(), &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::TOOL_TIMEOUT));
}

/// Waits 60 s and opts out of the pipeline's time bound, as the `Agent` tool does.
struct Patient(Value);

#[async_trait]
impl Tool for Patient {
    fn name(&self) -> &str {
        "Patient"
    }
    fn description(&self) -> &str {
        "waits for its work"
    }
    fn input_schema(&self) -> &Value {
        &self.0
    }
    fn call_timeout(&self, _default: Duration) -> Option<Duration> {
        None
    }
    async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(ToolOutput::text("done waiting"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_tool_without_a_time_bound_outlasts_the_pipelines() {
    let pipeline = Pipeline::new(
        registry(vec![Arc::new(Patient(json!({"type": "object"})))]),
        allow_everything(),
    )
    .with_call_timeout(Duration::from_secs(10));
    let outcome = pipeline
        .call("Patient", json!({}), &ctx(), &HashSet::new())
        .await;
    assert_eq!(code(&outcome), None);
}

#[tokio::test(start_paused = true)]
async fn cancellation_interrupts_a_running_call() {
    let pipeline = Pipeline::new(registry(vec![sleeper(60)]), allow_everything());
    let ctx = ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let outcome = pipeline
        .call("Sleep", json!({}), &ctx, &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::CANCELLED));
}

#[tokio::test]
async fn a_cancelled_context_never_calls() {
    let probe = Probe::default();
    let ctx = ctx();
    ctx.cancel.cancel();
    let outcome = pipeline(&probe, TestGate::allow_all())
        .call("Counter", json!({"n": 1}), &ctx, &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::CANCELLED));
    assert_eq!(probe.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn cancellation_while_waiting_for_approval_never_calls() {
    let probe = Probe::default();
    let pending = Arc::new(ScriptedApprover::default());
    let pipeline = pipeline(&probe, TestGate::ask()).with_approver(pending);
    let ctx = ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    let outcome = pipeline
        .call("Counter", json!({"n": 50}), &ctx, &HashSet::new())
        .await;
    assert_eq!(code(&outcome), Some(codes::CANCELLED));
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn large_output_is_capped_spilled_and_post_hooks_see_the_capped_text() {
    let big: DynTool = Arc::new(
        ToolBuilder::new("Big")
            .schema(json!({"type": "object"}))
            .handler(|_, _| async {
                Ok(ToolOutput {
                    text: "x".repeat(100),
                    extra_messages: vec![Message::user_text("from the tool")],
                    images: Vec::new(),
                })
            })
            .build()
            .unwrap(),
    );
    let recorder = Arc::new(Recorder::default());
    let mut runner = HookRunner::new();
    runner.register(HookRegistration::new(
        "post",
        HookEventName::PostToolUse,
        recorder.clone(),
    ));
    let pipeline = Pipeline::new(registry(vec![big]), allow_everything())
        .with_hooks(runner)
        .with_output_policy(OutputPolicy {
            head_chars: 10,
            spill: true,
        });
    let ctx = ctx();
    let outcome = pipeline.call("Big", json!({}), &ctx, &HashSet::new()).await;
    let spill = outcome.spill.unwrap();
    assert_eq!(spill.content, "x".repeat(100));
    assert_eq!(spill.tool_name, "Big");
    assert_eq!(spill.tool_use_id, "tu_1");
    assert_eq!(spill.session_id, ctx.session_id);
    assert!(outcome.result.capped);
    assert_eq!(outcome.result.output_id.as_deref(), Some(spill.id.as_str()));
    assert_eq!(
        outcome.extra_messages,
        vec![
            Message::user_text("from the tool"),
            Message::user_text("post context")
        ]
    );
    let events = recorder.0.lock().unwrap();
    let HookPayload::PostToolUse {
        tool_response,
        output_id,
        ..
    } = &events[0].payload
    else {
        panic!("expected PostToolUse");
    };
    assert_eq!(tool_response, &outcome.result.content);
    assert_eq!(output_id.as_deref(), Some(spill.id.as_str()));
}

/// A refusal (a long deny reason from an approver, or a hook's block reason) passes the same
/// cap as a tool's own output (N11): the model reads the head, the rest is spilled.
#[tokio::test]
async fn refusal_texts_pass_the_common_cap() {
    let policy = OutputPolicy {
        head_chars: 50,
        spill: true,
    };
    let long_reason = "no ".repeat(10_000);
    let probe = Probe::default();
    let approver = ScriptedApprover::answering(ApprovalAnswer::Deny {
        reason: long_reason.clone(),
    });
    let denied = pipeline(&probe, TestGate::ask())
        .with_approver(approver)
        .with_output_policy(policy);
    let outcome = run(&denied, json!({"n": 50})).await;
    assert_eq!(code(&outcome), Some(codes::PERMISSION_DENIED));
    assert!(outcome.result.capped);
    assert!(outcome.result.content.chars().count() < 200);
    let spill = outcome.spill.expect("the full refusal is kept");
    assert!(spill.content.contains(&long_reason));
    assert_eq!(outcome.result.output_id.as_deref(), Some(spill.id.as_str()));

    let blocked = pipeline(&probe, TestGate::allow_all())
        .with_hooks(hooks(vec![Ok(HookResponse::block(long_reason.clone()))]))
        .with_output_policy(policy);
    let outcome = run(&blocked, json!({"n": 50})).await;
    assert_eq!(code(&outcome), Some(codes::HOOK_BLOCKED));
    assert!(outcome.result.capped);
    assert!(outcome.spill.is_some());
    assert_eq!(probe.calls(), 0);
}

#[tokio::test]
async fn pre_hook_context_is_appended_after_the_result() {
    let probe = Probe::default();
    let pipeline = pipeline(&probe, TestGate::allow_all()).with_hooks(hooks(vec![Ok(
        HookResponse::proceed().with_context("remember X"),
    )]));
    let outcome = run(&pipeline, json!({"n": 5})).await;
    assert_eq!(
        outcome.extra_messages,
        vec![Message::user_text("remember X")]
    );
}

// ---------------------------------------------------------------- property

#[derive(Clone, Debug)]
enum HookScript {
    None,
    Continue,
    Block,
    Rewrite(i64),
    FailOpen,
    FailClosed,
}

#[derive(Clone, Debug)]
enum ApproverScript {
    None,
    Allow,
    AllowWith(i64),
    Deny,
}

fn mode() -> impl Strategy<Value = PermissionMode> {
    prop_oneof![
        Just(PermissionMode::Default),
        Just(PermissionMode::AcceptEdits),
        Just(PermissionMode::Plan),
        Just(PermissionMode::Bypass),
        Just(PermissionMode::DontAsk),
        Just(PermissionMode::Auto),
    ]
}

fn n() -> impl Strategy<Value = i64> {
    prop_oneof![0i64..=100, -5i64..=-1, 101i64..=120]
}

fn hook_script() -> impl Strategy<Value = HookScript> {
    prop_oneof![
        Just(HookScript::None),
        Just(HookScript::Continue),
        Just(HookScript::Block),
        n().prop_map(HookScript::Rewrite),
        Just(HookScript::FailOpen),
        Just(HookScript::FailClosed),
    ]
}

fn approver_script() -> impl Strategy<Value = ApproverScript> {
    prop_oneof![
        Just(ApproverScript::None),
        Just(ApproverScript::Allow),
        n().prop_map(ApproverScript::AllowWith),
        Just(ApproverScript::Deny),
    ]
}

/// The expected ladder answer, written independently of `TestGate`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Expect {
    Allow,
    Deny,
    Ask,
}

fn expected_verdict(
    mode: PermissionMode,
    allow: bool,
    deny: bool,
    deny_n: Option<i64>,
    n: i64,
) -> Expect {
    let read_only = n < 10;
    if deny || deny_n == Some(n) {
        Expect::Deny
    } else if mode == PermissionMode::Bypass {
        Expect::Allow
    } else if mode == PermissionMode::Plan {
        if read_only {
            Expect::Allow
        } else {
            Expect::Deny
        }
    } else if allow || read_only {
        Expect::Allow
    } else if matches!(mode, PermissionMode::DontAsk | PermissionMode::Auto) {
        Expect::Deny
    } else {
        Expect::Ask
    }
}

struct World {
    mode: PermissionMode,
    allow: bool,
    deny: bool,
    deny_n: Option<i64>,
    approver: ApproverScript,
}

fn valid(n: i64) -> bool {
    (0..=100).contains(&n)
}

/// Permission for one input; `Some(final input)` when allowed.
fn expected_permit(world: &World, n: i64) -> Option<i64> {
    match expected_verdict(world.mode, world.allow, world.deny, world.deny_n, n) {
        Expect::Allow => Some(n),
        Expect::Deny => None,
        Expect::Ask => match world.approver {
            ApproverScript::None | ApproverScript::Deny => None,
            ApproverScript::Allow => Some(n),
            ApproverScript::AllowWith(m) => {
                let verdict =
                    expected_verdict(world.mode, world.allow, world.deny, world.deny_n, m);
                (valid(m) && verdict != Expect::Deny).then_some(m)
            }
        },
    }
}

fn expected_call(world: &World, input: i64, hook: &HookScript) -> Option<i64> {
    if !valid(input) {
        return None;
    }
    let n = expected_permit(world, input)?;
    match hook {
        HookScript::None | HookScript::Continue | HookScript::FailOpen => Some(n),
        HookScript::Block | HookScript::FailClosed => None,
        HookScript::Rewrite(m) if *m == n => Some(n),
        HookScript::Rewrite(m) => {
            if !valid(*m) {
                return None;
            }
            expected_permit(world, *m)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn call_runs_only_when_every_gate_passed(
        input in n(),
        mode in mode(),
        allow in any::<bool>(),
        deny in any::<bool>(),
        deny_n in proptest::option::of(0i64..=100),
        approver in approver_script(),
        hook in hook_script(),
    ) {
        let world = World { mode, allow, deny, deny_n, approver: approver.clone() };
        let expected = expected_call(&world, input, &hook);

        let probe = Probe::default();
        let gate = TestGate {
            mode,
            allow: if allow { vec!["Counter".into()] } else { vec![] },
            deny: if deny { vec!["*".into()] } else { vec![] },
            deny_n,
        };
        let mut pipeline = pipeline(&probe, gate);
        match approver {
            ApproverScript::None => {}
            ApproverScript::Allow => {
                pipeline = pipeline.with_approver(ScriptedApprover::answering(
                    ApprovalAnswer::Allow { updated_input: None }));
            }
            ApproverScript::AllowWith(m) => {
                pipeline = pipeline.with_approver(ScriptedApprover::answering(
                    ApprovalAnswer::Allow { updated_input: Some(json!({"n": m})) }));
            }
            ApproverScript::Deny => {
                pipeline = pipeline.with_approver(ScriptedApprover::answering(
                    ApprovalAnswer::Deny { reason: "no".into() }));
            }
        }
        let failing = || Err(HookError::Failed("down".into()));
        let registration = |answer| HookRegistration::new(
            "h", HookEventName::PreToolUse, Arc::new(FixedHook(answer)));
        let mut runner = HookRunner::new();
        match hook {
            HookScript::None => {}
            HookScript::Continue => runner.register(registration(Ok(HookResponse::proceed()))),
            HookScript::Block => runner.register(registration(Ok(HookResponse::block("no")))),
            HookScript::Rewrite(m) => {
                runner.register(registration(Ok(HookResponse::rewrite(json!({"n": m})))));
            }
            HookScript::FailOpen => {
                runner.register(registration(failing()).failure(FailurePolicy::FailOpen));
            }
            HookScript::FailClosed => {
                runner.register(registration(failing()).failure(FailurePolicy::FailClosed));
            }
        }
        let pipeline = pipeline.with_hooks(runner);

        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = runtime.block_on(run(&pipeline, json!({"n": input})));

        match expected {
            Some(n) => {
                prop_assert_eq!(probe.calls(), 1, "{:?}", outcome.result);
                prop_assert_eq!(probe.last_input(), Some(json!({"n": n})));
                prop_assert!(!outcome.result.is_error);
            }
            None => {
                prop_assert_eq!(probe.calls(), 0, "{:?}", outcome.result);
                prop_assert!(outcome.result.is_error);
            }
        }
        prop_assert_eq!(outcome.result.tool_use_id.as_str(), "tu_1");
    }
}

// ---------------------------------------------------------------- the execution journal

/// Remembers what the pipeline journaled: `(tool_use_id, repeatable)`; refuses when `refuse`.
#[derive(Default)]
struct RecordingJournal {
    entries: Mutex<Vec<(String, bool)>>,
    refuse: bool,
}

#[async_trait]
impl ExecutionJournal for RecordingJournal {
    async fn executing(
        &self,
        tool_use_id: &str,
        _tool_name: &str,
        repeatable: bool,
    ) -> Result<(), String> {
        if self.refuse {
            return Err("store down".into());
        }
        self.entries
            .lock()
            .unwrap()
            .push((tool_use_id.to_owned(), repeatable));
        Ok(())
    }
}

#[tokio::test]
async fn every_call_is_journaled_before_it_runs_and_only_read_only_ones_as_repeatable() {
    let probe = Probe::default();
    let journal = Arc::new(RecordingJournal::default());
    let journaled = pipeline(&probe, TestGate::allow_all()).with_journal(journal.clone());
    // `Counter` is read-only below 10.
    run(&journaled, json!({"n": 3})).await;
    run(&journaled, json!({"n": 50})).await;
    assert_eq!(probe.calls(), 2);
    assert_eq!(
        *journal.entries.lock().unwrap(),
        vec![("tu_1".to_string(), true), ("tu_1".to_string(), false)]
    );

    // A call that cannot be journaled never runs.
    let refusing = Arc::new(RecordingJournal {
        refuse: true,
        ..Default::default()
    });
    let probe = Probe::default();
    let refused = pipeline(&probe, TestGate::allow_all()).with_journal(refusing);
    let outcome = run(&refused, json!({"n": 50})).await;
    assert_eq!(probe.calls(), 0);
    assert_eq!(code(&outcome), Some(codes::TOOL_FAILED));
}
