//! Lookup and input schemas: an unknown, hidden or schema-invalid call never runs and never
//! reaches the approver; raw-input tools validate their own input.

use super::*;
use pretty_assertions::assert_eq;

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
