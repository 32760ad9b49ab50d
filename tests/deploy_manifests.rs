//! The deployment files are valid and set what the two-replica tests run with.
//!
//! No cluster here: `deploy/kubernetes/norma.yaml` is checked against the Kubernetes schemas
//! with `kubernetes-validate --strict` (PyPI, schemas bundled offline) and `deploy/compose.yaml`
//! against the compose-spec schema with `check-jsonschema --builtin-schema
//! vendor.compose-spec` (PyPI, schema bundled). `.ci/run` installs both when missing; a
//! missing validator fails under `CI=true` and is skipped loudly otherwise.
//!
//! tests/replicas_workspace.rs runs two replicas with `NORMA_WORKSPACE__STORAGE=shared`, a
//! shared root and distinct `NORMA_REPLICA_ID`s; the manifests must set the same.

use std::path::Path;
use std::process::Command;

fn manifest(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs a validator; `None` when it is not installed (outside CI only).
fn validate(program: &str, args: &[&str]) -> Option<String> {
    let output = match Command::new(program)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    {
        Ok(output) => output,
        Err(error) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{program} is required in CI (.ci/run installs it): {error}");
            }
            eprintln!("\n!!!!!!!! SKIPPING: {program} is not installed ({error}) !!!!!!!!\n");
            return None;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{program} {args:?} failed:\n{text}"
    );
    Some(text)
}

#[test]
fn kubernetes_manifests_pass_the_kubernetes_schemas() {
    if let Some(report) = validate(
        "kubernetes-validate",
        &["--strict", "deploy/kubernetes/norma.yaml"],
    ) {
        for kind in [
            "deployment/norma",
            "persistentvolumeclaim/norma-workspaces",
            "poddisruptionbudget/norma",
            "service/norma",
        ] {
            assert!(
                report.contains(&format!("passed for resource {kind}")),
                "{report}"
            );
        }
    }
}

#[test]
fn compose_file_passes_the_compose_spec_schema() {
    validate(
        "check-jsonschema",
        &[
            "--builtin-schema",
            "vendor.compose-spec",
            "deploy/compose.yaml",
        ],
    );
}

#[test]
fn kubernetes_runs_several_replicas_on_a_shared_workspace_named_by_pod() {
    let yaml = manifest("deploy/kubernetes/norma.yaml");
    for needle in [
        "replicas: 2",
        "enableServiceLinks: false",
        "hostUsers: false",
        "name: NORMA_REPLICA_ID\n              valueFrom: { fieldRef: { fieldPath: metadata.name } }",
        "{ name: NORMA_WORKSPACE__STORAGE, value: \"shared\" }",
        "{ name: NORMA_WORKSPACE__SHARED_ROOT, value: \"/var/lib/norma-shared\" }",
        "{ name: workspaces, mountPath: /var/lib/norma-shared }",
        "accessModes: [\"ReadWriteMany\"]",
        "kind: PodDisruptionBudget",
        "terminationGracePeriodSeconds: 30",
        "{ name: NORMA_SHUTDOWN_GRACE_SECONDS, value: \"10\" }",
        "readinessProbe:",
        "livenessProbe:",
    ] {
        assert!(yaml.contains(needle), "norma.yaml lacks {needle:?}");
    }
}

#[test]
fn compose_runs_two_replicas_behind_a_proxy_on_one_workspace_volume() {
    let yaml = manifest("deploy/compose.yaml");
    for needle in [
        "NORMA_WORKSPACE__STORAGE: shared",
        "NORMA_WORKSPACE__SHARED_ROOT: /var/lib/norma-shared",
        "NORMA_REPLICA_ID: norma-a",
        "NORMA_REPLICA_ID: norma-b",
        "volumes: [data-a:/var/lib/norma, workspaces:/var/lib/norma-shared]",
        "volumes: [data-b:/var/lib/norma, workspaces:/var/lib/norma-shared]",
        "\"--to\", \"norma-a:8080\", \"--to\", \"norma-b:8080\"",
    ] {
        assert!(yaml.contains(needle), "compose.yaml lacks {needle:?}");
    }
}

/// `deploy/grafana/norma.json` is a Grafana dashboard whose every query names only metrics
/// the server exposes (the exposition of a real [`norma::metrics::Metrics`]), so the
/// dashboard cannot drift from the metrics.
#[test]
fn grafana_dashboard_queries_only_metrics_the_server_exposes() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&manifest("deploy/grafana/norma.json")).expect("dashboard JSON");
    assert_eq!(dashboard["uid"], "norma-server");
    // One sample in every family (a labelled family without samples is not exposed).
    use norma::metrics::*;
    let metrics = Metrics::new(labels::ModelNames::none());
    let now = std::time::Duration::ZERO;
    metrics.http_request(&axum::http::Method::GET, None, 200, now);
    metrics.run_ended(&norma::run_event::TerminalReason::EndTurn, now);
    let model = metrics.model_instruments("scripted", "m");
    model.call(ModelOutcome::ok, now);
    model.first_token(now);
    model.tokens(&Default::default());
    metrics.tool_call(
        "Read",
        ToolOutcome::ok,
        Some(norma::permission::Stage::Allowed),
        now,
    );
    metrics.webhook_delivery(WebhookKind::approval, DeliveryOutcome::delivered);
    metrics.store_transaction(StoreOp::append, now);
    metrics.sandbox_spawn(SpawnKind::command, SpawnOutcome::launched);
    let exposed = metrics.render();
    let families: Vec<&str> = exposed
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split(' ').next())
        .collect();
    assert!(families.len() >= 15, "{exposed}");
    // The family a sample name belongs to (`None`: not exposed).
    let family_of = |name: &str| {
        families.iter().copied().find(|family| {
            ["", "_total", "_bucket", "_count", "_sum"]
                .iter()
                .any(|suffix| name == format!("{family}{suffix}"))
        })
    };
    let mut queried = std::collections::BTreeSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{panel}");
        for target in targets {
            let expr = target["expr"].as_str().expect("expr");
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("norma_"))
                .collect();
            assert!(!names.is_empty(), "a query without a norma metric: {expr}");
            for name in names {
                let family = family_of(name)
                    .unwrap_or_else(|| panic!("`{name}` is not exposed (in `{expr}`)"));
                queried.insert(family);
            }
        }
    }
    for family in &families {
        assert!(queried.contains(family), "no panel shows {family}");
    }
}
