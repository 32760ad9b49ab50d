use super::*;
use crate::permission::{DecisionInput, PermissionMode, RuleSet, Verdict, decide};
use crate::tools::pipeline::tool_facts;
use crate::tools::registry::ToolRegistry;

/// The ladder's verdict in `mode` for `tool` with `input`, with no rules.
fn verdict(mode: PermissionMode, tool: &DynTool, input: &Value) -> Verdict {
    let rules = RuleSet::parse(&[], &[]).expect("no rules");
    decide(&DecisionInput {
        mode,
        rules: &rules,
        grants: &[],
        tool: &tool_facts(tool.as_ref(), input),
        input,
        workspace: None,
    })
}

/// The wrappers over every built-in file tool, all hidden.
fn wrappers() -> (DynTool, DynTool) {
    let mut registry = ToolRegistry::new();
    for tool in crate::tools::builtin::file_tools() {
        registry.register_deferred(tool).expect("register");
    }
    let hidden = registry.deferred_tools();
    let inner = hidden
        .iter()
        .filter_map(|tool| registry.lookup(&tool.name))
        .map(|entry| entry.tool.clone())
        .collect();
    (
        search_tool(hidden, UnlockSet::default()),
        execute_tool(inner),
    )
}

#[test]
fn search_is_allowed_in_plan_mode() {
    let (search, _) = wrappers();
    let input = json!({"query": "read"});
    assert!(search.is_read_only(&input));
    assert!(matches!(
        verdict(PermissionMode::Plan, &search, &input),
        Verdict::Allow(_)
    ));
}

#[test]
fn execute_is_judged_by_its_inner_tool() {
    let (_, execute) = wrappers();
    let read = json!({"name": "Read", "input": {"file_path": "a.txt"}});
    let write = json!({"name": "Write", "input": {"file_path": "a.txt", "content": "x"}});
    let unknown = json!({"name": "Nope", "input": {}});

    assert!(execute.is_read_only(&read));
    assert!(execute.is_concurrency_safe(&read));
    assert!(!execute.is_read_only(&write));
    assert!(!execute.is_concurrency_safe(&write));
    assert!(!execute.is_read_only(&unknown));
    assert!(!execute.is_concurrency_safe(&unknown));

    assert!(matches!(
        verdict(PermissionMode::Plan, &execute, &read),
        Verdict::Allow(_)
    ));
    assert!(matches!(
        verdict(PermissionMode::Plan, &execute, &write),
        Verdict::Deny(_)
    ));
}
