//! Hooks: a block never runs, a failing hook blocks or not by its policy, a rewrite is
//! validated and judged again and never widens what was allowed; the last rewrite runs.

use super::*;
use pretty_assertions::assert_eq;

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
