use super::*;
use crate::hooks::HookPayload;
use crate::ids::{SessionId, TenantId};
use async_trait::async_trait;
use pretty_assertions::assert_eq;
use serde_json::json;
use std::sync::Mutex;

/// A scripted in-process hook that records when it runs.
struct Scripted {
    name: &'static str,
    log: Arc<Mutex<Vec<&'static str>>>,
    behaviour: Behaviour,
}

#[derive(Clone)]
enum Behaviour {
    Answer(HookResponse),
    Error,
    Panic,
    Hang,
}

#[async_trait]
impl Hook for Scripted {
    async fn handle(&self, _event: &HookEvent) -> Result<HookResponse, HookError> {
        self.log.lock().unwrap().push(self.name);
        match &self.behaviour {
            Behaviour::Answer(answer) => Ok(answer.clone()),
            Behaviour::Error => Err(HookError::Failed("scripted failure".into())),
            Behaviour::Panic => panic!("scripted panic"),
            Behaviour::Hang => std::future::pending().await,
        }
    }
}

struct Harness {
    runner: HookRunner,
    log: Arc<Mutex<Vec<&'static str>>>,
}

impl Harness {
    fn new() -> Self {
        Self {
            runner: HookRunner::new(),
            log: Arc::default(),
        }
    }

    fn add(&mut self, name: &'static str, event: HookEventName, behaviour: Behaviour) -> &mut Self {
        self.add_with(name, event, behaviour, |r| r)
    }

    fn add_with(
        &mut self,
        name: &'static str,
        event: HookEventName,
        behaviour: Behaviour,
        edit: impl FnOnce(HookRegistration) -> HookRegistration,
    ) -> &mut Self {
        let hook = Arc::new(Scripted {
            name,
            log: self.log.clone(),
            behaviour,
        });
        self.runner
            .register(edit(HookRegistration::new(name, event, hook)));
        self
    }

    fn ran(&self) -> Vec<&'static str> {
        self.log.lock().unwrap().clone()
    }
}

fn pre(tool: &str) -> HookEvent {
    HookEvent {
        session_id: SessionId::generate(),
        tenant: TenantId::new("t"),
        payload: HookPayload::PreToolUse {
            tool_use_id: "tu".into(),
            tool_name: tool.into(),
            tool_input: json!({"n": 1}),
        },
    }
}

fn stop() -> HookEvent {
    HookEvent {
        session_id: SessionId::generate(),
        tenant: TenantId::new("t"),
        payload: HookPayload::Stop {
            stop_hook_active: false,
        },
    }
}

use Behaviour::{Answer, Error, Hang, Panic};
use HookEventName::{PreToolUse, Stop};

#[tokio::test]
async fn hooks_run_in_registration_order() {
    let mut h = Harness::new();
    h.add(
        "first",
        PreToolUse,
        Answer(HookResponse::proceed().with_context("one")),
    )
    .add("second", PreToolUse, Answer(HookResponse::proceed()))
    .add(
        "third",
        PreToolUse,
        Answer(HookResponse::proceed().with_context("three")),
    )
    .add("other-event", Stop, Answer(HookResponse::block("never")));
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(h.ran(), vec!["first", "second", "third"]);
    assert_eq!(outcome.block, None);
    assert_eq!(outcome.ran, 3);
    assert_eq!(outcome.additional_context, vec!["one", "three"]);
}

#[tokio::test]
async fn the_first_block_wins_and_stops_the_chain() {
    let mut h = Harness::new();
    h.add("a", PreToolUse, Answer(HookResponse::proceed()))
        .add("b", PreToolUse, Answer(HookResponse::block("b says no")))
        .add("c", PreToolUse, Answer(HookResponse::block("c says no")));
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(h.ran(), vec!["a", "b"]);
    assert_eq!(
        outcome.block,
        Some(HookBlock {
            hook: "b".into(),
            reason: "b says no".into(),
            prevent: false,
            failed: false
        })
    );
}

#[tokio::test]
async fn a_block_without_reason_names_the_hook() {
    let mut h = Harness::new();
    let mut answer = HookResponse::block("");
    answer.reason = None;
    h.add("quiet", PreToolUse, Answer(answer));
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(outcome.block.unwrap().reason, "blocked by hook quiet");
}

#[tokio::test]
async fn the_last_non_empty_rewrite_wins() {
    let mut h = Harness::new();
    h.add(
        "a",
        PreToolUse,
        Answer(HookResponse::rewrite(json!({"n": 2}))),
    )
    .add(
        "b",
        PreToolUse,
        Answer(HookResponse::rewrite(json!({"n": 3}))),
    )
    .add("c", PreToolUse, Answer(HookResponse::rewrite(json!({}))))
    .add("d", PreToolUse, Answer(HookResponse::rewrite(json!(null))));
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(outcome.updated_input, Some(("b".into(), json!({"n": 3}))));
}

#[tokio::test]
async fn matchers_select_tools_by_exact_name_or_star() {
    let mut h = Harness::new();
    h.add_with(
        "bash-only",
        PreToolUse,
        Answer(HookResponse::proceed()),
        |r| r.matcher("Bash"),
    )
    .add_with("star", PreToolUse, Answer(HookResponse::proceed()), |r| {
        r.matcher("*")
    })
    .add("any", PreToolUse, Answer(HookResponse::proceed()));
    h.runner.run(pre("Read")).await;
    assert_eq!(h.ran(), vec!["star", "any"]);
    assert!(h.runner.has_hooks(PreToolUse, Some("Bash")));
    assert!(!h.runner.has_hooks(Stop, None));

    let mut only = Harness::new();
    only.add_with(
        "bash-only",
        PreToolUse,
        Answer(HookResponse::proceed()),
        |r| r.matcher("Bash"),
    );
    assert!(!only.runner.has_hooks(PreToolUse, Some("Bashful")));
    only.runner.run(pre("Bashful")).await;
    assert!(only.ran().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_hanging_hook_times_out() {
    let mut h = Harness::new();
    h.add_with("slow", PreToolUse, Hang, |r| {
        r.timeout(Duration::from_secs(2))
            .failure(FailurePolicy::FailOpen)
    })
    .add("next", PreToolUse, Answer(HookResponse::proceed()));
    let started = tokio::time::Instant::now();
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(
        outcome.failures,
        vec![("slow".into(), HookError::Timeout(Duration::from_secs(2)))]
    );
    assert_eq!(h.ran(), vec!["slow", "next"]);
    assert_eq!(outcome.block, None);
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_is_five_seconds_and_fail_closed_blocks() {
    let mut h = Harness::new();
    h.add("slow", PreToolUse, Hang);
    let started = tokio::time::Instant::now();
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(started.elapsed(), DEFAULT_HOOK_TIMEOUT);
    assert_eq!(DEFAULT_HOOK_TIMEOUT, Duration::from_secs(5));
    let block = outcome.block.unwrap();
    assert!(block.failed);
    assert!(!block.prevent);
    // The tenant-visible reason is generic; the timeout is in the log only.
    assert_eq!(block.reason, "hook slow failed (HOOK_FAILED)");
}

#[tokio::test]
async fn a_panicking_hook_is_contained() {
    let mut h = Harness::new();
    h.add_with("boom", PreToolUse, Panic, |r| {
        r.failure(FailurePolicy::FailOpen)
    })
    .add("after", PreToolUse, Answer(HookResponse::proceed()));
    let outcome = h.runner.run(pre("Bash")).await;
    assert_eq!(outcome.failures, vec![("boom".into(), HookError::Panicked)]);
    assert_eq!(outcome.block, None);
    assert_eq!(h.ran(), vec!["boom", "after"]);

    let mut closed = Harness::new();
    closed.add("boom", PreToolUse, Panic);
    let outcome = closed.runner.run(pre("Bash")).await;
    assert_eq!(
        outcome.block.unwrap().reason,
        "hook boom failed (HOOK_FAILED)"
    );
}

#[tokio::test]
async fn fail_open_continues_and_fail_closed_blocks() {
    let mut open = Harness::new();
    open.add_with("flaky", PreToolUse, Error, |r| {
        r.failure(FailurePolicy::FailOpen)
    })
    .add(
        "next",
        PreToolUse,
        Answer(HookResponse::rewrite(json!({"n": 9}))),
    );
    let outcome = open.runner.run(pre("Bash")).await;
    assert_eq!(outcome.block, None);
    assert_eq!(
        outcome.updated_input,
        Some(("next".into(), json!({"n": 9})))
    );
    assert_eq!(outcome.failures.len(), 1);

    let mut closed = Harness::new();
    closed
        .add_with("flaky", PreToolUse, Error, |r| {
            r.failure(FailurePolicy::FailClosed)
        })
        .add("next", PreToolUse, Answer(HookResponse::proceed()));
    let outcome = closed.runner.run(pre("Bash")).await;
    assert_eq!(closed.ran(), vec!["flaky"]);
    let block = outcome.block.unwrap();
    assert!(block.failed);
    assert_eq!(block.hook, "flaky");
}

#[tokio::test]
async fn stop_distinguishes_hard_prevent_from_blocking_continuation() {
    let mut h = Harness::new();
    h.add(
        "keep-going",
        Stop,
        Answer(HookResponse::block("tests still fail")),
    );
    assert_eq!(
        h.runner.run(stop()).await.stop_outcome(),
        StopOutcome::Continue {
            hook: "keep-going".into(),
            reason: "tests still fail".into()
        }
    );

    let mut h = Harness::new();
    h.add("halt", Stop, Answer(HookResponse::prevent("budget policy")));
    assert_eq!(
        h.runner.run(stop()).await.stop_outcome(),
        StopOutcome::Prevent {
            hook: "halt".into(),
            reason: "budget policy".into()
        }
    );

    let mut h = Harness::new();
    h.add("fine", Stop, Answer(HookResponse::proceed()));
    assert_eq!(h.runner.run(stop()).await.stop_outcome(), StopOutcome::Stop);

    // A failed fail-closed Stop hook ends the run instead of forcing another turn.
    let mut h = Harness::new();
    h.add("broken", Stop, Error);
    assert!(matches!(
        h.runner.run(stop()).await.stop_outcome(),
        StopOutcome::Prevent { .. }
    ));

    // Outside Stop, prevent is a plain block.
    let mut h = Harness::new();
    h.add("p", PreToolUse, Answer(HookResponse::prevent("no")));
    let block = h.runner.run(pre("Bash")).await.block.unwrap();
    assert!(!block.prevent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_do_not_interfere() {
    struct EchoCount;
    #[async_trait]
    impl Hook for EchoCount {
        async fn handle(&self, event: &HookEvent) -> Result<HookResponse, HookError> {
            let HookPayload::PreToolUse { tool_input, .. } = &event.payload else {
                return Err(HookError::Failed("wrong event".into()));
            };
            tokio::task::yield_now().await;
            Ok(HookResponse::rewrite(
                json!({"n": tool_input["n"].as_i64().unwrap() * 10}),
            ))
        }
    }
    let mut runner = HookRunner::new();
    runner.register(HookRegistration::new(
        "x10",
        PreToolUse,
        Arc::new(EchoCount),
    ));
    let runs = (0..64).map(|n| {
        let runner = runner.clone();
        tokio::spawn(async move {
            let mut event = pre("Bash");
            if let HookPayload::PreToolUse { tool_input, .. } = &mut event.payload {
                *tool_input = json!({"n": n});
            }
            (n, runner.run(event).await)
        })
    });
    for run in futures::future::join_all(runs).await {
        let (n, outcome) = run.unwrap();
        assert_eq!(
            outcome.updated_input,
            Some(("x10".into(), json!({"n": n * 10})))
        );
    }
}

struct PreOnly;
#[async_trait]
impl Hook for PreOnly {
    async fn handle(&self, _event: &HookEvent) -> Result<HookResponse, HookError> {
        Ok(HookResponse::proceed())
    }
    fn supports(&self, event: HookEventName) -> bool {
        event == PreToolUse
    }
}

fn config(name: &str, event: HookEventName, handler: HookHandlerConfig) -> HookConfig {
    HookConfig {
        name: name.into(),
        event,
        matcher: None,
        handler,
        timeout_ms: None,
        failure: FailurePolicy::FailClosed,
        enabled: true,
    }
}

fn in_process(hook: &str) -> HookHandlerConfig {
    HookHandlerConfig::InProcess { hook: hook.into() }
}

#[test]
fn configuration_reports_a_status_per_hook() {
    let egress = crate::egress::EgressClient::new(crate::egress::AddressPolicy::PublicOnly)
        .expect("outbound client");
    let mut catalog = HookCatalog::new().with_egress(egress);
    catalog.insert("pre-only", Arc::new(PreOnly));
    let configs = vec![
        config("ok", PreToolUse, in_process("pre-only")),
        HookConfig {
            enabled: false,
            ..config("off", PreToolUse, in_process("pre-only"))
        },
        config("ghost", PreToolUse, in_process("nobody")),
        config("wrong-event", Stop, in_process("pre-only")),
        config(
            "remote",
            Stop,
            HookHandlerConfig::Remote {
                url: "https://policy.example/hook".into(),
                secret: "whsec_c2VjcmV0".into(),
            },
        ),
    ];
    let (runner, statuses) = HookRunner::from_config(&configs, &catalog).unwrap();
    let tokens: Vec<_> = statuses
        .iter()
        .map(|s| (s.name.as_str(), s.status_token, s.missing_reason))
        .collect();
    assert_eq!(
        tokens,
        vec![
            ("ok", HookStatusToken::HookInstalledOk, None),
            ("off", HookStatusToken::HookConfigDisabled, None),
            (
                "ghost",
                HookStatusToken::HookMissing,
                Some(MissingReason::NotRegistered)
            ),
            ("wrong-event", HookStatusToken::HookUnsupported, None),
            ("remote", HookStatusToken::HookInstalledOk, None),
        ]
    );
    assert!(runner.has_hooks(PreToolUse, Some("Bash")));
    assert!(runner.has_hooks(Stop, None));
    assert_eq!(runner.hooks.len(), 2);

    let value = serde_json::to_value(&statuses[2]).unwrap();
    assert_eq!(value["status_token"], "HOOK_MISSING");
    assert_eq!(value["missing_reason"], "not_registered");
    assert_eq!(value["kind"], "in_process");
    assert!(value["status_label"].is_string());
}

#[test]
fn malformed_configuration_is_an_error() {
    let catalog = HookCatalog::new();
    let dup = vec![
        config("x", PreToolUse, in_process("a")),
        config("x", Stop, in_process("b")),
    ];
    assert!(matches!(
        HookRunner::from_config(&dup, &catalog),
        Err(HookConfigError::DuplicateName(name)) if name == "x"
    ));
    let zero = vec![HookConfig {
        timeout_ms: Some(0),
        ..config("z", PreToolUse, in_process("a"))
    }];
    assert!(matches!(
        HookRunner::from_config(&zero, &catalog),
        Err(HookConfigError::BadTimeout(_))
    ));
    let bad_url = vec![config(
        "r",
        PreToolUse,
        HookHandlerConfig::Remote {
            url: "file:///etc/passwd".into(),
            secret: "s".into(),
        },
    )];
    assert!(matches!(
        HookRunner::from_config(&bad_url, &catalog),
        Err(HookConfigError::Remote { .. })
    ));
    let bad_secret = vec![config(
        "r",
        PreToolUse,
        HookHandlerConfig::Remote {
            url: "https://x.example".into(),
            secret: String::new(),
        },
    )];
    assert!(matches!(
        HookRunner::from_config(&bad_secret, &catalog),
        Err(HookConfigError::Remote { .. })
    ));
}

#[test]
fn configs_deserialize_with_defaults_and_hide_secrets() {
    let config: HookConfig = serde_json::from_value(json!({
        "name": "policy",
        "event": "PreToolUse",
        "matcher": "Bash",
        "handler": {"type": "remote", "url": "https://p.example/h", "secret": "whsec_c2VjcmV0"}
    }))
    .unwrap();
    assert_eq!(config.failure, FailurePolicy::FailClosed);
    assert!(config.enabled);
    assert_eq!(config.timeout_ms, None);
    assert!(!format!("{config:?}").contains("whsec_c2VjcmV0"));
}
