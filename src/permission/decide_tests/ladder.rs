//! Grants, the order of the ladder's stages, property tests over random rule sets, and the
//! messages of conservative denials.

use super::*;

#[test]
fn grants_allow_after_rules_and_carry_their_id() {
    let rules = RuleSet::parse(&strings(&["Bash(git status:*)"]), &[]).expect("rules");
    let grants = vec![GrantRule {
        grant_id: "grant_1".into(),
        rule: Rule::parse("Bash(cargo test:*)").expect("rule"),
    }];
    let facts = bash_facts();
    let decide_with = |mode: PermissionMode, command: &str| {
        let input = json!({ "command": command });
        decide(&DecisionInput {
            mode,
            rules: &rules,
            grants: &grants,
            tool: &facts,
            input: &input,
            workspace: None,
        })
    };
    match decide_with(PermissionMode::Default, "git status && cargo test -q") {
        Verdict::Allow(reason) => {
            assert_eq!(reason.stage, Stage::Grant);
            assert_eq!(reason.grant_id.as_deref(), Some("grant_1"));
        }
        other => panic!("{other:?}"),
    }
    assert!(is_allowed_by_rule(&decide_with(
        PermissionMode::Default,
        "git status"
    )));
    assert_eq!(
        decide_with(PermissionMode::Default, "cargo build"),
        Verdict::Ask
    );
    assert_eq!(
        stage(&decide_with(PermissionMode::Plan, "cargo test")),
        Some(Stage::ModePlan)
    );
    assert_eq!(
        stage(&decide_with(PermissionMode::DontAsk, "cargo build")),
        Some(Stage::ModeDontAsk)
    );
}

#[test]
fn ladder_order_for_self_deny_and_rules() {
    // A deny rule is reported before the tool's own denial.
    let facts = ToolFacts {
        rules_as: None,
        subject_text: None,
        self_decision: SelfDecision::Deny,
        ..bash_facts()
    };
    let v = run(
        PermissionMode::Default,
        &facts,
        &["Bash"],
        &["*"],
        json!({ "command": "ls" }),
    );
    assert!(is_denied_by_rule(&v));
    let v = run(
        PermissionMode::Default,
        &facts,
        &["Bash"],
        &[],
        json!({ "command": "ls" }),
    );
    assert_eq!(stage(&v), Some(Stage::ToolDeny));
    // An allow rule wins over acceptEdits/read-only stages (it comes first).
    let edit = path_facts("Edit", false);
    let v = run(
        PermissionMode::AcceptEdits,
        &edit,
        &["Edit"],
        &[],
        json!({ "file_path": "a" }),
    );
    assert_eq!(stage(&v), Some(Stage::Allowed));
}

const MODES: [PermissionMode; 6] = [
    PermissionMode::Default,
    PermissionMode::AcceptEdits,
    PermissionMode::Plan,
    PermissionMode::Bypass,
    PermissionMode::DontAsk,
    PermissionMode::Auto,
];
const TOOLS: [&str; 6] = [
    "Bash",
    "Read",
    "Edit",
    "WebFetch",
    "Todo",
    "mcp__gh__get_issue",
];
const RULE_POOL: [&str; 12] = [
    "*",
    "Bash",
    "Read",
    "Todo",
    "mcp__gh__get_issue",
    "Bash(git status:*)",
    "Bash(rm:*)",
    "Bash(ls)",
    "Read(src/**)",
    "Edit(docs/*.md)",
    "WebFetch(domain:docs.rs)",
    "WebFetch(domain:*.example)",
];
const INPUTS: [&str; 8] = [
    "git status",
    "rm -rf /",
    "ls",
    "src/a.rs",
    "../x",
    "docs/a.md",
    "https://docs.rs/x",
    "$(rm x)",
];
const SELF: [SelfDecision; 4] = [
    SelfDecision::None,
    SelfDecision::Allow,
    SelfDecision::Deny,
    SelfDecision::Ask,
];

fn rule_subset() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(proptest::sample::select(&RULE_POOL[..]), 0..4)
        .prop_map(|v| v.into_iter().map(str::to_owned).collect())
}

prop_compose! {
    fn scenario()(
        mode in proptest::sample::select(&MODES[..]),
        tool in proptest::sample::select(&TOOLS[..]),
        read_only in any::<bool>(),
        self_decision in proptest::sample::select(&SELF[..]),
        file_edit in any::<bool>(),
        allow in rule_subset(),
        deny in rule_subset(),
        text in proptest::sample::select(&INPUTS[..]),
        field in proptest::sample::select(&["command", "file_path", "url", "other"][..]),
    ) -> (PermissionMode, &'static str, bool, SelfDecision, bool, Vec<String>, Vec<String>, Value) {
        (mode, tool, read_only, self_decision, file_edit, allow, deny, json!({ field: text }))
    }
}

proptest! {
    #[test]
    fn ladder_invariants(
        (mode, tool, read_only, self_decision, file_edit, allow, deny, input) in scenario()
    ) {
        let rules = RuleSet::parse(&allow, &deny).expect("pool rules parse");
        let facts = ToolFacts { rules_as: None, subject_text: None, name: tool, read_only, self_decision, file_edit, subject: subject_for(tool) };
        let verdict = decide(&DecisionInput {
            mode, rules: &rules, grants: &[], tool: &facts, input: &input, workspace: None,
        });
        if deny.iter().any(|r| r == "*" || r == tool) {
            prop_assert!(is_denied_by_rule(&verdict), "{verdict:?}");
        }
        if self_decision == SelfDecision::Deny {
            prop_assert!(matches!(verdict, Verdict::Deny(_)), "{verdict:?}");
        }
        if mode == PermissionMode::Bypass {
            prop_assert!(verdict != Verdict::Ask);
        }
        if mode == PermissionMode::Plan && !read_only {
            prop_assert!(!matches!(verdict, Verdict::Allow(_)), "{verdict:?}");
        }
        if matches!(mode, PermissionMode::DontAsk | PermissionMode::Auto) {
            prop_assert!(verdict != Verdict::Ask);
        }
    }
}

#[test]
fn deny_messages_explain_conservative_matches() {
    let message = |command: &str| match bash(&[], &["Bash(rm:*)"], command) {
        Verdict::Deny(reason) => {
            assert_eq!(reason.rule.as_deref(), Some("Bash(rm:*)"));
            reason.message
        }
        other => panic!("{command:?}: {other:?}"),
    };
    assert!(message("echo 'x").contains("cannot be analysed"));
    assert!(message("$CMD x").contains("program name cannot be determined"));
    assert!(!message("rm x").contains("counts as matching"));
}
