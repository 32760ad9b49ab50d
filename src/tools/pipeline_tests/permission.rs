//! Permission and approval: a deny never runs, an ask with no approver is denied, an approver
//! allows, denies or replaces the input (validated and judged again).

use super::*;
use pretty_assertions::assert_eq;

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
