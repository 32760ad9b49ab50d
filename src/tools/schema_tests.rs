use super::*;
use serde_json::json;

fn schema() -> CompiledSchema {
    CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {
            "mode": {"enum": ["fast", "slow"]},
            "count": {"type": "integer", "minimum": 1, "maximum": 10},
            "name": {"type": "string", "pattern": "^[a-z]+$"},
            "email": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"id": {"type": "integer"}},
                    "required": ["id"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["mode"],
        "additionalProperties": false
    }))
    .unwrap()
}

fn failing_paths(input: serde_json::Value) -> Vec<String> {
    let violations = schema().validate(&input).unwrap_err();
    violations
        .violations
        .into_iter()
        .map(|v| v.instance_path)
        .collect()
}

#[test]
fn a_valid_input_passes() {
    let input = json!({
        "mode": "fast", "count": 3, "name": "abc", "email": "a@example.com",
        "site": "https://docs.rs/x", "items": [{"id": 1}, {"id": 2}]
    });
    assert_eq!(schema().validate(&input), Ok(()));
}

#[test]
fn enum_bounds_and_pattern_are_enforced() {
    assert_eq!(failing_paths(json!({"mode": "medium"})), vec!["/mode"]);
    assert_eq!(
        failing_paths(json!({"mode": "fast", "count": 0})),
        vec!["/count"]
    );
    assert_eq!(
        failing_paths(json!({"mode": "fast", "count": 11})),
        vec!["/count"]
    );
    assert_eq!(
        failing_paths(json!({"mode": "fast", "count": 2.5})),
        vec!["/count"]
    );
    assert_eq!(
        failing_paths(json!({"mode": "fast", "name": "ABC"})),
        vec!["/name"]
    );
}

#[test]
fn required_and_additional_properties_are_enforced() {
    let violations = schema().validate(&json!({"extra": 1})).unwrap_err();
    assert_eq!(violations.total, 2);
    let text = violations.to_string();
    assert!(text.contains("\"mode\" is a required property"), "{text}");
    assert!(text.contains("'extra' was unexpected"), "{text}");
}

#[test]
fn nested_array_items_are_checked_with_their_path() {
    let paths = failing_paths(json!({"mode": "fast", "items": [{"id": 1}, {"id": "x"}]}));
    assert_eq!(paths, vec!["/items/1/id"]);
    let paths = failing_paths(json!({"mode": "fast", "items": [{"id": 1, "more": true}]}));
    assert_eq!(paths, vec!["/items/0"]);
}

#[test]
fn formats_are_asserted() {
    assert_eq!(
        failing_paths(json!({"mode": "fast", "email": "not an email"})),
        vec!["/email"]
    );
    assert_eq!(
        failing_paths(json!({"mode": "fast", "site": "no scheme here"})),
        vec!["/site"]
    );
}

#[test]
fn the_error_text_lists_every_field_and_why_without_echoing_values() {
    let secret = "S".repeat(50);
    let violations = schema()
        .validate(&json!({"mode": "x", "count": 99, "name": secret}))
        .unwrap_err();
    let text = violations.to_string();
    assert!(text.contains("- /mode:"), "{text}");
    assert!(
        text.contains("- /count: the value is greater than the maximum of 10"),
        "{text}"
    );
    assert!(text.contains("- /name:"), "{text}");
    assert!(!text.contains(&secret), "{text}");
}

#[test]
fn the_listing_is_bounded_but_counts_everything() {
    let schema = CompiledSchema::compile(&json!({
        "type": "object",
        "additionalProperties": {"type": "integer"}
    }))
    .unwrap();
    let input: serde_json::Map<String, serde_json::Value> =
        (0..30).map(|i| (format!("k{i}"), json!("x"))).collect();
    let violations = schema
        .validate(&serde_json::Value::Object(input))
        .unwrap_err();
    assert_eq!(violations.total, 30);
    assert_eq!(violations.violations.len(), MAX_LISTED);
    assert!(violations.to_string().contains("… and 10 more"));
}

#[test]
fn the_count_stops_past_its_bound() {
    let schema = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "integer"}}}
    }))
    .unwrap();
    let input = json!({"items": vec!["x"; 100_000]});
    let violations = schema.validate(&input).unwrap_err();
    assert_eq!(violations.total, MAX_COUNTED + 1);
    assert_eq!(violations.violations.len(), MAX_LISTED);
    let text = violations.to_string();
    assert!(text.contains("… and more than 980 more"), "{text}");
}

#[test]
fn patterns_run_on_the_linear_engine_within_a_size_limit() {
    // A pattern that backtracks catastrophically on a backtracking engine is linear here.
    let schema = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}
    }))
    .unwrap();
    let input = json!({"s": format!("{}!", "a".repeat(10_000))});
    assert!(schema.validate(&input).is_err());
    // Look-around (a backtracking feature) does not compile: the schema is refused.
    let error = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "^(?!admin).*$"}}
    }))
    .unwrap_err();
    assert!(matches!(error, SchemaError::Invalid { .. }), "{error}");
    // A pattern that compiles past the size limit is refused, not built (the crate's default
    // limits take it).
    let big = json!({
        "type": "object",
        "properties": {"s": {"type": "string", "pattern": "(a{1000}){70}"}}
    });
    assert!(jsonschema::options().offline().build(&big).is_ok());
    let error = CompiledSchema::compile(&big).unwrap_err();
    assert!(matches!(error, SchemaError::Invalid { .. }), "{error}");
}
