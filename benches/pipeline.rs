//! Pipeline overhead: one allowed no-op tool call through every step (lookup, schema
//! validation, the permission ladder with a real rule set, hooks, output cap), without and with
//! one in-process PreToolUse hook, no spill. Run: `cargo bench --bench pipeline`.

use async_trait::async_trait;
use norma::hooks::runner::{HookRegistration, HookRunner};
use norma::hooks::{Hook, HookError, HookEvent, HookEventName, HookResponse};
use norma::permission::{PermissionMode, RuleSet};
use norma::tools::builder::ToolBuilder;
use norma::tools::gate::RulesGate;
use norma::tools::pipeline::Pipeline;
use norma::tools::registry::ToolRegistry;
use norma::tools::{DynTool, ToolContext, ToolOutput};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct PassThrough;

#[async_trait]
impl Hook for PassThrough {
    async fn handle(&self, _event: &HookEvent) -> Result<HookResponse, HookError> {
        Ok(HookResponse::proceed())
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p) as usize]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let noop: DynTool = Arc::new(
            ToolBuilder::new("Noop")
                .schema(json!({"type": "object", "properties": {"path": {"type": "string", "maxLength": 100}}, "required": ["path"], "additionalProperties": false}))
                .read_only(true)
                .concurrency_safe(true)
                .handler(|_, _| async { Ok(ToolOutput::text("ok")) })
                .build()
                .expect("tool"),
        );
        let mut registry = ToolRegistry::new();
        registry.register(noop).expect("register");
        let gate = RulesGate {
            mode: PermissionMode::Default,
            rules: RuleSet::parse(&["Noop".into(), "Bash(git status:*)".into()], &["Bash(rm:*)".into()]).expect("rules"),
            grants: Vec::new(),
            workspace: None,
        };
        let plain = Pipeline::new(registry, Arc::new(gate));
        let mut hooks = HookRunner::new();
        hooks.register(HookRegistration::new("pass", HookEventName::PreToolUse, Arc::new(PassThrough)));
        let hooked = plain.clone().with_hooks(hooks);
        let ctx = ToolContext::for_tests();
        let unlocked = HashSet::new();
        println!("pipeline overhead per allowed no-op call (20,000 calls after 2,000 warm-up)");
        for (label, pipeline) in [("no hooks", &plain), ("one in-process PreToolUse hook", &hooked)] {
            for _ in 0..2_000 {
                pipeline.call("Noop", json!({"path": "a"}), &ctx, &unlocked).await;
            }
            let mut samples = Vec::with_capacity(20_000);
            for _ in 0..20_000 {
                let started = Instant::now();
                let outcome = pipeline.call("Noop", json!({"path": "a"}), &ctx, &unlocked).await;
                samples.push(started.elapsed());
                assert!(!outcome.result.is_error, "{:?}", outcome.result);
            }
            let p50 = percentile(&mut samples, 0.5);
            let p99 = percentile(&mut samples, 0.99);
            println!("  {label:<32} median {:>7.2} µs   p99 {:>7.2} µs", p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6);
        }
    });
}
