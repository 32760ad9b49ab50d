//! The property: for any mode, hook, approver and input, the call runs exactly when every
//! stage lets it, with the input the last stage chose.

use super::*;

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
