use super::*;
use serde_json::json;

fn echo() -> ToolBuilder {
    ToolBuilder::new("Echo")
        .schema(json!({"type": "object", "properties": {"text": {"type": "string"}}}))
        .handler(|input, _ctx| async move {
            Ok(ToolOutput::text(input["text"].as_str().unwrap_or_default()))
        })
}

#[test]
fn omitted_security_fields_close_safe() {
    let tool = echo().build().unwrap();
    let input = json!({"text": "hi"});
    assert!(!tool.is_read_only(&input));
    assert!(!tool.is_concurrency_safe(&input));
    assert!(!tool.is_file_edit());
    assert_eq!(tool.self_decision(&input), SelfDecision::Ask);
    assert_eq!(tool.permission_subject(), Subject::Name);
    assert!(!tool.raw_input());
}

#[test]
fn set_fields_are_reported() {
    let tool = echo()
        .description("Echoes")
        .prompt("Use it to echo.")
        .read_only(true)
        .concurrency_safe(true)
        .file_edit()
        .raw_input()
        .self_decision(SelfDecision::Allow)
        .subject(Subject::Path { field: "path" })
        .build()
        .unwrap();
    let input = json!({});
    assert!(tool.is_read_only(&input));
    assert!(tool.is_concurrency_safe(&input));
    assert!(tool.is_file_edit());
    assert!(tool.raw_input());
    assert_eq!(tool.self_decision(&input), SelfDecision::Allow);
    assert_eq!(tool.permission_subject(), Subject::Path { field: "path" });
    assert_eq!(tool.description(), "Echoes");
    assert_eq!(tool.prompt(), "Use it to echo.");
}

#[test]
fn input_dependent_fields_see_the_input() {
    let tool = echo()
        .read_only_when(|input| input["text"] == "look")
        .concurrency_safe_when(|input| input["text"] == "look")
        .self_decision_when(|input| {
            if input["text"] == "bad" {
                SelfDecision::Deny
            } else {
                SelfDecision::None
            }
        })
        .build()
        .unwrap();
    assert!(tool.is_read_only(&json!({"text": "look"})));
    assert!(!tool.is_read_only(&json!({"text": "touch"})));
    assert!(tool.is_concurrency_safe(&json!({"text": "look"})));
    assert_eq!(
        tool.self_decision(&json!({"text": "bad"})),
        SelfDecision::Deny
    );
    assert_eq!(
        tool.self_decision(&json!({"text": "ok"})),
        SelfDecision::None
    );
}

#[tokio::test]
async fn the_handler_runs_on_call() {
    let tool = echo().build().unwrap();
    let output = tool
        .call(json!({"text": "hello"}), &ToolContext::for_tests())
        .await
        .unwrap();
    assert_eq!(output.text, "hello");
}

#[test]
fn build_errors_are_clear() {
    let no_schema = ToolBuilder::new("X")
        .handler(|_, _| async { Ok(ToolOutput::default()) })
        .build();
    assert_eq!(
        no_schema.err(),
        Some(ToolBuildError::MissingSchema("X".into()))
    );

    let no_handler = ToolBuilder::new("X")
        .schema(json!({"type": "object"}))
        .build();
    assert_eq!(
        no_handler.err(),
        Some(ToolBuildError::MissingHandler("X".into()))
    );

    let bad_name = echo();
    let bad_name = ToolBuilder {
        name: "has space".into(),
        ..bad_name
    }
    .build();
    assert_eq!(
        bad_name.err(),
        Some(ToolBuildError::InvalidName("has space".into()))
    );

    let bad_schema = echo()
        .schema(json!({"type": "object", "properties": {"n": {"maximum": "ten"}}}))
        .build();
    assert!(matches!(
        bad_schema,
        Err(ToolBuildError::InvalidSchema { .. })
    ));
}
