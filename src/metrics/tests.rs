use super::labels::{ModelNames, RouteNames, tool_label};
use super::*;

#[test]
fn tools_fold_to_builtin_names_mcp_or_other() {
    assert_eq!(tool_label("Bash"), "Bash");
    assert_eq!(tool_label("ExecuteExtraTool"), "ExecuteExtraTool");
    assert_eq!(tool_label("mcp__tenant_server__drop_tables"), "mcp");
    assert_eq!(tool_label("mcp____"), "other", "not an MCP name");
    assert_eq!(tool_label("MadeUpByTheModel"), "other");
}

#[test]
fn only_configured_models_keep_their_name() {
    let models = ModelNames::new(["claude-sonnet-4-5", "gpt-4o", ""]);
    assert_eq!(&*models.label("gpt-4o"), "gpt-4o");
    assert_eq!(&*models.label("tenant-chosen-model"), "other");
    assert_eq!(&*models.label(""), "other");
}

#[test]
fn route_templates_are_bounded() {
    let routes = RouteNames::default();
    assert_eq!(&*routes.label(None), "other");
    let first = routes.label(Some("/v1/sessions/{id}"));
    assert_eq!(&*first, "/v1/sessions/{id}");
    assert!(
        Arc::ptr_eq(&first, &routes.label(Some("/v1/sessions/{id}"))),
        "a known template is shared, not allocated again"
    );
    for n in 0..200 {
        routes.label(Some(&format!("/generated/{n}")));
    }
    assert_eq!(&*routes.label(Some("/one/too/many")), "other");
    assert_eq!(
        &*routes.label(Some("/v1/sessions/{id}")),
        "/v1/sessions/{id}"
    );
}

#[test]
fn stage_labels_are_the_serialized_names() {
    use crate::permission::Stage;
    for stage in [
        Stage::Disallowed,
        Stage::ToolDeny,
        Stage::ModeBypass,
        Stage::ModePlan,
        Stage::Allowed,
        Stage::Grant,
        Stage::AcceptEdits,
        Stage::ReadOnly,
        Stage::ToolAllow,
        Stage::ModeDontAsk,
        Stage::ModeAuto,
        Stage::Callback,
        Stage::NoCallback,
    ] {
        assert_eq!(
            serde_json::to_value(stage).unwrap(),
            serde_json::Value::from(stage.as_str())
        );
    }
}

#[test]
fn the_exposition_has_every_family_with_folded_labels() {
    let metrics = Arc::new(Metrics::new(ModelNames::new(["configured-model"])));
    metrics.http_request(
        &axum::http::Method::GET,
        Some("/v1/sessions/{id}"),
        200,
        Duration::from_millis(3),
    );
    metrics.http_request(&axum::http::Method::PUT, None, 404, Duration::ZERO);
    metrics.run_started();
    metrics.run_ended(
        &crate::run_event::TerminalReason::EndTurn,
        Duration::from_secs(1),
    );
    let configured = metrics.model_instruments("scripted", "configured-model");
    configured.call(ModelOutcome::ok, Duration::from_millis(20));
    configured.tokens(&crate::llm::Usage {
        input_tokens: 10,
        output_tokens: 5,
        ..Default::default()
    });
    metrics
        .model_instruments("scripted", "tenant-model")
        .call(ModelOutcome::error, Duration::ZERO);
    metrics.tool_call(
        "mcp__x__y",
        ToolOutcome::ok,
        Some(crate::permission::Stage::Callback),
        Duration::ZERO,
    );
    {
        let _waiting = metrics.approval_waiting();
        let _stream = metrics.sse_subscribed();
        let text = metrics.render();
        assert!(text.contains("norma_approvals_pending 1\n"), "{text}");
        assert!(text.contains("norma_sse_subscribers 1\n"), "{text}");
    }
    metrics.webhook_delivery(WebhookKind::outbound, DeliveryOutcome::delivered);
    let text = metrics.render();
    for line in [
        "norma_http_requests_total{method=\"GET\",route=\"/v1/sessions/{id}\",status=\"200\"} 1",
        "norma_http_requests_total{method=\"OTHER\",route=\"other\",status=\"404\"} 1",
        "norma_runs_total{status=\"completed\",reason=\"end_turn\"} 1",
        "norma_model_calls_total{provider=\"scripted\",model=\"configured-model\",outcome=\"ok\"} 1",
        "norma_model_calls_total{provider=\"scripted\",model=\"other\",outcome=\"error\"} 1",
        "norma_model_tokens_total{provider=\"scripted\",model=\"configured-model\",kind=\"input\"} 10",
        "norma_tool_calls_total{tool=\"mcp\",outcome=\"ok\"} 1",
        "norma_permission_decisions_total{stage=\"callback\"} 1",
        "norma_webhook_deliveries_total{kind=\"outbound\",outcome=\"delivered\"} 1",
        "norma_approvals_pending 0",
        "norma_sse_subscribers 0",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    assert!(!text.contains("tenant-model"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}
