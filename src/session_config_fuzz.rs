//! Property test of the session-config validator ([`SessionConfig::from_json`], which runs
//! `validate`): random JSON and mutations of valid configs — wrong types, deep nesting, huge
//! strings, NUL characters, unknown keys. A FIXED seed and a small case count keep it
//! deterministic and a few seconds long in CI.
//!
//! Properties: it never panics; an accepted config round-trips (serialized and parsed again
//! it is accepted and equal); every refusal names a field that is `(root)` or starts with a
//! key the input actually has.

use super::SessionConfig;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

/// The fixed seed: a failure reproduces on every machine.
const SEED: [u8; 32] = *b"norma-session-config-fuzz-seed-1";
const CASES: u32 = 384;

/// Keys a config uses at any level, so random objects often hit real fields.
const KEYS: [&str; 24] = [
    "title",
    "system_prompt",
    "model",
    "name",
    "max_tokens",
    "script",
    "turns",
    "text",
    "tool_calls",
    "input",
    "tools",
    "deferred_tools",
    "permission",
    "mode",
    "allow",
    "deny",
    "hooks",
    "budgets",
    "max_turns",
    "approvals",
    "timeout_seconds",
    "metadata",
    "x\u{0}",
    "",
];

/// Strings: short real values, NULs, rule-like text, and now and then a huge one.
fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-zA-Z0-9 ():*_./-]{0,24}",
        2 => proptest::sample::select(&[
            "Read", "Bash", "Bash(git status:*)", "Bash(( ( true ) ))", "bypass", "default",
            "deny", "allow", "end_turn", "\u{0}", "a\u{0}b", "Read(src/**)", "*",
        ][..]).prop_map(str::to_owned),
        1 => (0usize..300_000).prop_map(|n| "x".repeat(n)),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u64..2_000).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(
                (
                    proptest::sample::select(&KEYS[..]).prop_map(str::to_owned),
                    inner
                ),
                0..6
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Valid configs to mutate.
fn valid_configs() -> Vec<Value> {
    vec![
        json!({}),
        json!({"title": "t", "system_prompt": "be brief", "metadata": {"a": [1, {"b": null}]}}),
        json!({"model": {"name": "m", "max_tokens": 1000,
                         "script": {"turns": [{"text": "hi", "tool_calls": [
                             {"name": "Read", "input": {"file_path": "a"}}]}]}}}),
        json!({"tools": ["Read", "Bash"], "deferred_tools": ["Grep"],
               "permission": {"mode": "acceptEdits", "allow": ["Read", "Bash(git status:*)"],
                              "deny": ["Bash(rm:*)"]}}),
        json!({"budgets": {"max_turns": 3, "max_tokens": 5000},
               "approvals": {"timeout_seconds": 60, "on_timeout": "deny", "on_new_prompt": "deny"}}),
    ]
}

/// Replaces the value at a pseudo-random path (chosen by `steps`) with `replacement`, or
/// adds it under `key` to the object reached.
fn mutate(config: &mut Value, steps: &[usize], key: &str, replacement: Value) {
    // Find the path first (shared borrows), then change the value there.
    let mut pointer = String::new();
    let mut at: &Value = config;
    for step in steps {
        let next = match at {
            Value::Object(map) if !map.is_empty() => map
                .iter()
                .nth(step % map.len())
                .map(|(k, v)| (k.replace('~', "~0").replace('/', "~1"), v)),
            Value::Array(items) if !items.is_empty() => {
                let index = step % items.len();
                Some((index.to_string(), &items[index]))
            }
            _ => None,
        };
        match next {
            Some((segment, value)) => {
                pointer.push('/');
                pointer.push_str(&segment);
                at = value;
            }
            None => break,
        }
    }
    match config.pointer_mut(&pointer) {
        Some(Value::Object(map)) if steps.len().is_multiple_of(2) => {
            map.insert(key.to_owned(), replacement);
        }
        Some(other) => *other = replacement,
        None => {}
    }
}

/// `depth` nested arrays around a NUL string, under a real or unknown key.
fn deep(depth: usize) -> Value {
    let mut value = json!("\u{0}");
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

fn check(input: Value) -> Result<(), TestCaseError> {
    match SessionConfig::from_json(input.clone()) {
        Ok(config) => {
            let stored = serde_json::to_value(&config).expect("serializes");
            let again = SessionConfig::from_json(stored.clone());
            prop_assert!(again.is_ok(), "stored form refused: {stored} -> {again:?}");
            prop_assert_eq!(again.unwrap(), config);
        }
        Err(violation) => {
            prop_assert!(!violation.field.is_empty(), "no field: {violation}");
            if violation.field != "(root)" {
                let top = violation.field.split(['.', '[']).next().unwrap_or_default();
                let keys = input.as_object().map(|m| m.contains_key(top));
                prop_assert_eq!(
                    keys,
                    Some(true),
                    "field {} names no key of the input: {}",
                    violation.field,
                    violation
                );
            }
        }
    }
    Ok(())
}

fn runner() -> TestRunner {
    TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &SEED),
    )
}

#[test]
fn random_json_never_panics_and_refusals_name_a_field() {
    runner()
        .run(&arb_json(), check)
        .unwrap_or_else(|failure| panic!("{failure}"));
}

#[test]
fn mutated_valid_configs_never_panic_and_round_trip_when_accepted() {
    let configs = valid_configs();
    let strategy = (
        0..configs.len(),
        proptest::collection::vec(any::<usize>(), 0..5),
        proptest::sample::select(&KEYS[..]),
        prop_oneof![
            4 => arb_json(),
            1 => (0usize..120).prop_map(deep),
        ],
    );
    runner()
        .run(&strategy, |(index, steps, key, replacement)| {
            let mut config = configs[index].clone();
            mutate(&mut config, &steps, key, replacement);
            check(config)
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
}

#[test]
fn the_valid_seeds_are_valid() {
    for config in valid_configs() {
        SessionConfig::from_json(config.clone()).unwrap_or_else(|e| panic!("{config}: {e}"));
    }
}
