//! Output: a large output is capped and spilled, refusal texts pass the common cap, and a
//! pre-hook's context follows the result.

use super::*;
use pretty_assertions::assert_eq;

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
