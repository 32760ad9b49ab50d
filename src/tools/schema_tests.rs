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
fn invalid_schemas_are_rejected() {
    let error = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {"count": {"type": "integer", "minimum": "one"}}
    }))
    .unwrap_err();
    assert!(matches!(error, SchemaError::Invalid { .. }), "{error}");
    assert!(
        error.to_string().contains("/properties/count/minimum"),
        "{error}"
    );

    let error = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": "(unclosed"}}
    }))
    .unwrap_err();
    assert!(matches!(error, SchemaError::Invalid { .. }), "{error}");

    assert_eq!(
        CompiledSchema::compile(&json!({"type": "string"})).unwrap_err(),
        SchemaError::NotAnObjectSchema
    );
    assert_eq!(
        CompiledSchema::compile(&json!(true)).unwrap_err(),
        SchemaError::NotAnObjectSchema
    );
}

#[test]
fn remote_references_are_not_fetched() {
    let error = CompiledSchema::compile(&json!({
        "type": "object",
        "properties": {"x": {"$ref": "https://example.com/schema.json"}}
    }))
    .unwrap_err();
    assert!(matches!(error, SchemaError::Invalid { .. }), "{error}");
}

#[test]
fn compiled_schemas_are_shared_and_the_cache_stays_bounded() {
    let schema = json!({
        "type": "object",
        "properties": {"cache_probe": {"type": "integer", "minimum": 1}},
        "required": ["cache_probe"]
    });
    let first = CompiledSchema::compile(&schema).unwrap();
    let second = CompiledSchema::compile(&schema).unwrap();
    assert!(
        first.shares_validator_with(&second),
        "the same schema is compiled once"
    );
    assert!(second.validate(&json!({"cache_probe": 0})).is_err());

    // A flood of distinct schemas (as a hostile tenant could bring) never grows the cache
    // past its bound, and every one of them still validates.
    for index in 0..CACHE_ENTRIES + 20 {
        let compiled = CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {format!("flood_{index}"): {"type": "string"}}
        }))
        .unwrap();
        assert!(
            compiled
                .validate(&json!({format!("flood_{index}"): 1}))
                .is_err()
        );
        assert!(cached_schemas() <= CACHE_ENTRIES);
    }

    // A schema longer than the cached maximum is compiled, not kept.
    let long = "x".repeat(CACHE_MAX_SCHEMA_BYTES);
    let big = json!({"type": "object", "description": long});
    let a = CompiledSchema::compile(&big).unwrap();
    let b = CompiledSchema::compile(&big).unwrap();
    assert!(!a.shares_validator_with(&b));
}
