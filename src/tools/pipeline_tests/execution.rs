//! Execution: tool errors and panics are paired failures, calls time out, cancellation stops
//! a running or waiting call and a cancelled context never calls.

use super::*;
use pretty_assertions::assert_eq;

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
