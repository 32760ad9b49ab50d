use super::*;
use serde_json::json;

fn config(body: serde_json::Value) -> Result<SessionConfig, ConfigViolation> {
    SessionConfig::from_json(body)
}

fn reason(body: serde_json::Value) -> (String, &'static str) {
    let violation = config(body).expect_err("refused");
    (violation.field, violation.reason.expect("a reason code"))
}

fn link(depth: u8) -> SubagentLink {
    SubagentLink {
        parent_session_id: "ses_p".into(),
        parent_run_id: "run_p".into(),
        tool_use_id: "tu_1".into(),
        agent: "explorer".into(),
        depth,
        workspace_session_id: "ses_p".into(),
    }
}

#[test]
fn modes_are_ordered_from_the_strictest() {
    use PermissionMode::*;
    let order = [Plan, DontAsk, Auto, Default, AcceptEdits, Bypass];
    for (i, a) in order.iter().enumerate() {
        for b in &order[i..] {
            assert_eq!(stricter(*a, *b), *a);
            assert_eq!(stricter(*b, *a), *a);
        }
    }
}

#[test]
fn widening_definitions_are_refused_with_stable_codes() {
    let cases = [
        (
            json!({"tools": ["Read", "Grep"], "agents": {"a": {"description": "d", "tools": ["Bash"]}}}),
            "agents.a.tools[0]",
            reasons::TOOL_NOT_IN_PARENT,
        ),
        (
            json!({"permission": {"mode": "default"},
                   "agents": {"a": {"description": "d", "permission": {"mode": "bypass"}}}}),
            "agents.a.permission.mode",
            reasons::MODE_LOOSER,
        ),
        (
            json!({"permission": {"mode": "plan"},
                   "agents": {"a": {"description": "d", "permission": {"mode": "dontAsk"}}}}),
            "agents.a.permission.mode",
            reasons::MODE_LOOSER,
        ),
        (
            json!({"permission": {"allow": ["Read"]},
                   "agents": {"a": {"description": "d", "permission": {"allow": ["Read", "Bash"]}}}}),
            "agents.a.permission.allow[1]",
            reasons::ALLOW_NOT_IN_PARENT,
        ),
        (
            json!({"budgets": {"max_turns": 5},
                   "agents": {"a": {"description": "d", "budgets": {"max_turns": 6}}}}),
            "agents.a.budgets.max_turns",
            reasons::BUDGET_EXCEEDS_PARENT,
        ),
        (
            json!({"budgets": {"max_tokens": 5000},
                   "agents": {"a": {"description": "d", "budgets": {"max_tokens": 6000}}}}),
            "agents.a.budgets.max_tokens",
            reasons::BUDGET_EXCEEDS_PARENT,
        ),
        (
            json!({"agents": {"a b": {"description": "d"}}}),
            "agents",
            reasons::NAME_INVALID,
        ),
        (
            json!({"agents": {"a": {"description": ""}}}),
            "agents.a.description",
            reasons::DEFINITION_INVALID,
        ),
        (
            json!({"agents": {"a": {"description": "d", "permission": {"deny": ["bash(rm:*)"]}}}}),
            "agents.a.permission.deny[0]",
            reasons::DEFINITION_INVALID,
        ),
        (
            json!({"agent_max_depth": 4, "agents": {"a": {"description": "d"}}}),
            "agent_max_depth",
            reasons::DEPTH_INVALID,
        ),
    ];
    for (body, field, code) in cases {
        assert_eq!(reason(body.clone()), (field.to_owned(), code), "{body}");
    }
    // Unknown fields in a definition are refused like anywhere in the config.
    assert!(config(json!({"agents": {"a": {"description": "d", "sandbox": "off"}}})).is_err());
}

#[test]
fn narrowing_definitions_are_accepted() {
    config(json!({
        "tools": ["Read", "Grep", "Bash"],
        "permission": {"mode": "acceptEdits", "allow": ["Read", "Bash(git status:*)"], "deny": ["Bash(rm:*)"]},
        "budgets": {"max_turns": 10, "max_tokens": 50000},
        "agents": {
            "explorer": {"description": "reads", "tools": ["Read", "Grep"],
                         "permission": {"mode": "plan", "allow": ["Read"], "deny": ["Read(secret/**)"]},
                         "budgets": {"max_turns": 3, "max_tokens": 10000}},
            "helper": {"description": "anything the parent may do"}
        }
    }))
    .expect("accepted");
}

#[test]
fn the_child_config_only_narrows() {
    let parent = config(json!({
        "tools": ["Read", "Grep", "Bash", "Write"],
        "deferred_tools": ["Write"],
        "permission": {"mode": "acceptEdits", "allow": ["Read", "Bash(git status:*)"], "deny": ["Bash(rm:*)"]},
        "budgets": {"max_turns": 10, "max_tokens": 50000},
        "hooks": [],
        "agents": {
            "explorer": {"description": "reads", "tools": ["Read", "Bash", "Write"],
                         "permission": {"allow": ["Read"], "deny": ["Read(secret/**)"]},
                         "budgets": {"max_turns": 3}}
        }
    }))
    .unwrap();
    let agent = &parent.agents["explorer"];
    // The parent entered plan mode: the child starts in plan mode.
    let child = child_config(&parent, agent, PermissionMode::Plan, link(1));
    assert_eq!(child.permission.mode, PermissionMode::Plan);
    assert_eq!(
        child.tools.as_deref(),
        Some(&["Read".to_owned(), "Bash".into(), "Write".into()][..])
    );
    assert_eq!(child.deferred_tools, vec!["Write".to_owned()]);
    assert_eq!(child.permission.allow, vec!["Read".to_owned()]);
    assert_eq!(
        child.permission.deny,
        vec!["Bash(rm:*)".to_owned(), "Read(secret/**)".into()]
    );
    assert_eq!(child.budgets.max_turns, 3);
    assert_eq!(child.budgets.max_tokens, Some(50000));
    assert!(child.agents.is_empty(), "its tools do not name Agent");
    // With the parent in its configured mode, the child keeps it.
    let child = child_config(&parent, agent, PermissionMode::AcceptEdits, link(1));
    assert_eq!(child.permission.mode, PermissionMode::AcceptEdits);
    assert!(!offers_agent_tool(&child));
}

#[test]
fn nesting_stops_at_the_depth_bound() {
    let parent = config(json!({
        "agent_max_depth": 2,
        "agents": {"a": {"description": "d"}}
    }))
    .unwrap();
    assert!(offers_agent_tool(&parent));
    let child = child_config(
        &parent,
        &parent.agents["a"],
        PermissionMode::Default,
        link(1),
    );
    assert!(offers_agent_tool(&child), "depth 1 of 2");
    let grandchild = child_config(&child, &child.agents["a"], PermissionMode::Default, link(2));
    assert!(!offers_agent_tool(&grandchild), "depth 2 of 2");
}
