//! Ladder tests: the full conformance table (ported from conformance/permission.json, one row
//! per case with the same name), extra argument-matching cases, grants, and property tests.

use super::*;
use crate::permission::{PermissionMode, Reason, SelfDecision, Stage, Subject, ToolFacts, Verdict};
use proptest::prelude::*;
use serde_json::{Value, json};

/// What the emulated approval callback answers (`None` in a case = no callback).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Callback {
    Allow,
    Deny,
    /// Records that the callback was consulted, without deciding.
    Ask,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Allow,
    Deny,
    Ask,
}

struct Case {
    name: &'static str,
    mode: PermissionMode,
    tool: &'static str,
    read_only: bool,
    self_decision: SelfDecision,
    file_edit: bool,
    allowed: &'static [&'static str],
    disallowed: &'static [&'static str],
    callback: Option<Callback>,
    input: &'static str,
    expect: Outcome,
    stage: Option<Stage>,
}

/// The subject each tool name in the conformance file has in Norma.
fn subject_for(tool: &str) -> Subject {
    match tool {
        "Bash" => Subject::Command { field: "command" },
        "Read" | "Write" | "Edit" | "MultiEdit" => Subject::Path { field: "file_path" },
        "NotebookEdit" => Subject::Path {
            field: "notebook_path",
        },
        "WebFetch" => Subject::Url { field: "url" },
        _ => Subject::Name,
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Resolves a verdict the way the pipeline does, with the emulated callback: `Ask` consults
/// the callback (stage `callback`), or denies with `no_callback` when there is none.
fn resolve(verdict: Verdict, callback: Option<Callback>, tool: &str) -> (Outcome, Stage, Reason) {
    match verdict {
        Verdict::Allow(r) => (Outcome::Allow, r.stage, r),
        Verdict::Deny(r) => (Outcome::Deny, r.stage, r),
        Verdict::Ask => match callback {
            None => {
                let r = Reason::no_callback(tool);
                (Outcome::Deny, r.stage, r)
            }
            Some(answer) => {
                let r = Reason::new(Stage::Callback, "the approval callback decided");
                let outcome = match answer {
                    Callback::Allow => Outcome::Allow,
                    Callback::Deny => Outcome::Deny,
                    Callback::Ask => Outcome::Ask,
                };
                (outcome, Stage::Callback, r)
            }
        },
    }
}

fn run_case(case: &Case) -> (Outcome, Stage, Reason) {
    let rules = RuleSet::parse(&strings(case.allowed), &strings(case.disallowed))
        .unwrap_or_else(|e| panic!("{}: rules do not parse: {e}", case.name));
    let facts = ToolFacts {
        rules_as: None,
        subject_text: None,
        name: case.tool,
        read_only: case.read_only,
        self_decision: case.self_decision,
        file_edit: case.file_edit,
        subject: subject_for(case.tool),
    };
    let input: Value = serde_json::from_str(case.input).expect("case input is JSON");
    let verdict = decide(&DecisionInput {
        mode: case.mode,
        rules: &rules,
        grants: &[],
        tool: &facts,
        input: &input,
        workspace: None,
    });
    resolve(verdict, case.callback, case.tool)
}

#[test]
fn conformance_table() {
    assert_eq!(CONFORMANCE.len(), 52, "every conformance case is ported");
    let mut failures = Vec::new();
    for case in CONFORMANCE {
        let (outcome, stage, reason) = run_case(case);
        let want_stage = case.stage.unwrap_or(Stage::Callback);
        if outcome != case.expect || stage != want_stage {
            failures.push(format!(
                "{}: got {outcome:?}/{stage:?} ({}), want {:?}/{want_stage:?}",
                case.name, reason.message, case.expect
            ));
        }
        assert!(!reason.message.is_empty(), "{}: empty message", case.name);
        if stage == Stage::Disallowed || stage == Stage::Allowed {
            assert!(
                reason.rule.is_some(),
                "{}: a rule decided but is not named",
                case.name
            );
        }
    }
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
}

#[test]
fn conformance_config_errors() {
    for text in CONFIG_ERRORS {
        let err = Rule::parse(text).expect_err(text);
        assert!(err.to_string().contains(text.trim()), "{text}: {err}");
        let err = RuleSet::parse(&[], &[(*text).to_owned()]).expect_err(text);
        assert!(err.to_string().contains(text.trim()), "{text}: {err}");
    }
}

/// Every case of conformance/permission.json, in file order.
const CONFORMANCE: &[Case] = &[
    Case {
        name: "deny rule beats bypass",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash"],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "tool hard-deny beats bypass",
        mode: PermissionMode::Bypass,
        tool: "Danger",
        read_only: false,
        self_decision: SelfDecision::Deny,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::ToolDeny),
    },
    Case {
        name: "deny * beats read-only",
        mode: PermissionMode::Default,
        tool: "Read",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["*"],
        callback: None,
        input: r#"{"file_path": "a"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "deny beats allow of the same name",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash"],
        disallowed: &["Bash"],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "bypass allows mutating",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ModeBypass),
    },
    Case {
        name: "plan denies mutating even when allowed by rule",
        mode: PermissionMode::Plan,
        tool: "Write",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &["Write"],
        disallowed: &[],
        callback: None,
        input: r#"{"file_path": "a", "content": "x"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::ModePlan),
    },
    Case {
        name: "plan denies mutating tool that self-allows",
        mode: PermissionMode::Plan,
        tool: "Deploy",
        read_only: false,
        self_decision: SelfDecision::Allow,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::ModePlan),
    },
    Case {
        name: "plan allows read-only",
        mode: PermissionMode::Plan,
        tool: "Read",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{"file_path": "a"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ModePlan),
    },
    Case {
        name: "allow rule by exact name",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash"],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "allow rule *",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["*"],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "acceptEdits allows Write",
        mode: PermissionMode::AcceptEdits,
        tool: "Write",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::AcceptEdits),
    },
    Case {
        name: "acceptEdits allows Edit",
        mode: PermissionMode::AcceptEdits,
        tool: "Edit",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::AcceptEdits),
    },
    Case {
        name: "acceptEdits allows MultiEdit",
        mode: PermissionMode::AcceptEdits,
        tool: "MultiEdit",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::AcceptEdits),
    },
    Case {
        name: "acceptEdits allows NotebookEdit",
        mode: PermissionMode::AcceptEdits,
        tool: "NotebookEdit",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::AcceptEdits),
    },
    Case {
        name: "acceptEdits does not allow Bash; callback decides",
        mode: PermissionMode::AcceptEdits,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: Some(Callback::Allow),
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Callback),
    },
    Case {
        name: "acceptEdits does not allow Bash; no callback denies",
        mode: PermissionMode::AcceptEdits,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::NoCallback),
    },
    Case {
        name: "read-only allowed in default",
        mode: PermissionMode::Default,
        tool: "Read",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{"file_path": "a"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ReadOnly),
    },
    Case {
        name: "tool self-allow in default",
        mode: PermissionMode::Default,
        tool: "Todo",
        read_only: false,
        self_decision: SelfDecision::Allow,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ToolAllow),
    },
    Case {
        name: "dontAsk denies what would ask, even with a callback",
        mode: PermissionMode::DontAsk,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: Some(Callback::Allow),
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::ModeDontAsk),
    },
    Case {
        name: "dontAsk still allows read-only",
        mode: PermissionMode::DontAsk,
        tool: "Read",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{"file_path": "a"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ReadOnly),
    },
    Case {
        name: "auto honours tool self-allow",
        mode: PermissionMode::Auto,
        tool: "Todo",
        read_only: false,
        self_decision: SelfDecision::Allow,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ToolAllow),
    },
    Case {
        name: "auto denies approval-required without asking",
        mode: PermissionMode::Auto,
        tool: "Deploy",
        read_only: false,
        self_decision: SelfDecision::Ask,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: Some(Callback::Allow),
        input: r#"{}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::ModeAuto),
    },
    Case {
        name: "default asks the callback: allow",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: Some(Callback::Allow),
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Callback),
    },
    Case {
        name: "default asks the callback: deny",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: Some(Callback::Deny),
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Callback),
    },
    Case {
        name: "default without callback denies",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "ls"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::NoCallback),
    },
    Case {
        name: "prefix rule allows its command",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "git status"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "prefix rule allows command with args",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "git status --short"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "prefix rule is not a string prefix",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "git statusx"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "compound: second command not covered",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "git status; rm -rf /"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "compound: && not covered",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "git status && curl http://x"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "compound: pipe not covered",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "git status | sh"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "compound: newline not covered",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "git status\nrm -rf /"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "command substitution not covered",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "git status $(rm -rf /)"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "compound: every part covered",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(git status:*)", "Bash(git log:*)"],
        disallowed: &[],
        callback: None,
        input: r#"{"command": "git status && git log -1"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "unparsable command is never allowed by a rule",
        mode: PermissionMode::Default,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["Bash(echo:*)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"command": "echo 'unterminated"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "deny prefix rule beats bypass in a compound",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "echo ok; rm -rf x"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "deny prefix rule does not touch other commands",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "echo ok"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::ModeBypass),
    },
    Case {
        name: "deny rule sees inside command substitution",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "echo $(rm -rf x)"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "deny rule sees inside sh -c",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "sh -c 'rm -rf x'"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "deny rule sees through env/xargs wrappers",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "find . | xargs rm"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "deny rule: absolute program path",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "/bin/rm -rf x"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "deny rule: unresolvable command counts as matching",
        mode: PermissionMode::Bypass,
        tool: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Bash(rm:*)"],
        callback: None,
        input: r#"{"command": "$CMD -rf x"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "path rule allows inside its glob",
        mode: PermissionMode::Default,
        tool: "Edit",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &["Edit(docs/**)"],
        disallowed: &[],
        callback: None,
        input: r#"{"file_path": "docs/a.md", "old_string": "a", "new_string": "b"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "path rule does not allow outside",
        mode: PermissionMode::Default,
        tool: "Edit",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &["Edit(docs/**)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"file_path": "src/a.rs", "old_string": "a", "new_string": "b"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "path rule normalises ..",
        mode: PermissionMode::Default,
        tool: "Edit",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: true,
        allowed: &["Edit(docs/**)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"file_path": "docs/../src/a.rs", "old_string": "a", "new_string": "b"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "path deny rule beats read-only",
        mode: PermissionMode::Default,
        tool: "Read",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Read(secrets/**)"],
        callback: None,
        input: r#"{"file_path": "secrets/key"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "path deny rule normalises ./ and //",
        mode: PermissionMode::Default,
        tool: "Read",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["Read(secrets/**)"],
        callback: None,
        input: r#"{"file_path": ".//secrets/./key"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "domain rule allows its host",
        mode: PermissionMode::Default,
        tool: "WebFetch",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["WebFetch(domain:docs.rs)"],
        disallowed: &[],
        callback: None,
        input: r#"{"url": "https://docs.rs/serde"}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
    Case {
        name: "domain rule is not a suffix match",
        mode: PermissionMode::Default,
        tool: "WebFetch",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["WebFetch(domain:docs.rs)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"url": "https://docs.rs.evil.example/"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "domain rule ignores userinfo tricks",
        mode: PermissionMode::Default,
        tool: "WebFetch",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["WebFetch(domain:docs.rs)"],
        disallowed: &[],
        callback: Some(Callback::Ask),
        input: r#"{"url": "https://docs.rs@evil.example/"}"#,
        expect: Outcome::Ask,
        stage: None,
    },
    Case {
        name: "domain deny rule",
        mode: PermissionMode::Default,
        tool: "WebFetch",
        read_only: true,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &[],
        disallowed: &["WebFetch(domain:evil.example)"],
        callback: None,
        input: r#"{"url": "https://EVIL.example./x"}"#,
        expect: Outcome::Deny,
        stage: Some(Stage::Disallowed),
    },
    Case {
        name: "mcp tool exact name",
        mode: PermissionMode::Default,
        tool: "mcp__github__get_issue",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        allowed: &["mcp__github__get_issue"],
        disallowed: &[],
        callback: None,
        input: r#"{}"#,
        expect: Outcome::Allow,
        stage: Some(Stage::Allowed),
    },
];

/// The `config_errors` list of conformance/permission.json.
const CONFIG_ERRORS: &[&str] = &[
    "Bash(",
    "Bash(git status:*",
    "(x)",
    "Read(",
    "WebFetch(domain:)",
    "Bash(git status:*)trailing",
];

fn bash_facts() -> ToolFacts<'static> {
    ToolFacts {
        rules_as: None,
        subject_text: None,
        name: "Bash",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        subject: Subject::Command { field: "command" },
    }
}

fn run(
    mode: PermissionMode,
    facts: &ToolFacts<'_>,
    allow: &[&str],
    deny: &[&str],
    input: Value,
) -> Verdict {
    let rules = RuleSet::parse(&strings(allow), &strings(deny)).expect("rules parse");
    decide(&DecisionInput {
        mode,
        rules: &rules,
        grants: &[],
        tool: facts,
        input: &input,
        workspace: None,
    })
}

fn bash(allow: &[&str], deny: &[&str], command: &str) -> Verdict {
    let mode = if deny.is_empty() {
        PermissionMode::Default
    } else {
        PermissionMode::Bypass
    };
    run(
        mode,
        &bash_facts(),
        allow,
        deny,
        json!({ "command": command }),
    )
}

fn stage(verdict: &Verdict) -> Option<Stage> {
    match verdict {
        Verdict::Allow(r) | Verdict::Deny(r) => Some(r.stage),
        Verdict::Ask => None,
    }
}

fn is_allowed_by_rule(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Allow(r) if r.stage == Stage::Allowed)
}

fn is_denied_by_rule(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Deny(r) if r.stage == Stage::Disallowed)
}

#[test]
fn tricky_commands_are_not_covered_by_an_allow_rule() {
    let git = ["Bash(git status:*)"];
    for command in [
        "git status; rm -rf /",
        "git status && curl x",
        "git status || curl x",
        "git status $(rm -rf /)",
        "git status `rm -rf /`",
        "git status \"$(rm -rf /)\"",
        "git status\nrm -rf /",
        "git status | sh",
        "git status <(rm x)",
        "git status > out.txt",
        "git status >> out.txt",
        "git status &> out.txt",
        "FOO=1 git status",
        "LD_PRELOAD=x.so git status",
        "PATH=/tmp; git status",
        "git statusx",
        "git",
        "$GIT status",
        "g* status",
        "git status & rm x",
        "if true; then rm x; fi; git status",
        "git status; f() { rm x; }",
        "for i in $(rm x); do git status; done",
        "git status ${X:-$(rm x)}",
        "echo 'unterminated",
    ] {
        assert_eq!(bash(&git, &[], command), Verdict::Ask, "{command:?}");
    }
}

#[test]
fn allow_rule_covers_commands_that_only_run_what_it_names() {
    let git = ["Bash(git status:*)"];
    for command in [
        "git status",
        "git status --short",
        "\"git\" status",
        "'git' 'status'",
        "g\\it status",
        "git status 'a;b'",
        "git status \"a && rm x\"",
        "/usr/bin/git status",
        "git status 2>/dev/null",
        "git status > /dev/null 2>&1",
        "git status 2>&1",
        "git status $HOME",
        "git status && git status -s",
        "nohup git status &",
        "timeout 5 git status",
        "time git status",
        "bash -c 'git status; git status -v'",
        "eval 'git status'",
        "git status # ; rm -rf /",
    ] {
        let verdict = bash(&git, &[], command);
        assert!(is_allowed_by_rule(&verdict), "{command:?}: {verdict:?}");
    }
}

#[test]
fn every_part_must_be_covered_but_not_by_the_same_rule() {
    let rules = ["Bash(git status:*)", "Bash(echo:*)", "Bash(cat)"];
    let verdict = bash(&rules, &[], "git status | cat && echo done");
    match verdict {
        Verdict::Allow(reason) => {
            assert_eq!(reason.stage, Stage::Allowed);
            let rule = reason.rule.expect("rule named");
            assert!(rule.contains("Bash(git status:*)") && rule.contains("Bash(cat)"));
        }
        other => panic!("not allowed: {other:?}"),
    }
    // Exact rules match the whole command only.
    assert_eq!(bash(&rules, &[], "cat /etc/shadow"), Verdict::Ask);
}

#[test]
fn redirection_to_a_file_is_never_covered() {
    let echo = ["Bash(echo:*)"];
    assert_eq!(bash(&echo, &[], "echo ok > /etc/passwd"), Verdict::Ask);
    assert_eq!(bash(&echo, &[], "{ echo ok; } > /etc/passwd"), Verdict::Ask);
    assert_eq!(bash(&echo, &[], "echo ok >& out"), Verdict::Ask);
    assert!(is_allowed_by_rule(&bash(&echo, &[], "echo ok > /dev/null")));
    assert!(is_allowed_by_rule(&bash(&echo, &[], "echo ok >&2")));
}

#[test]
fn deny_rule_sees_through_wrapping() {
    let rm = ["Bash(rm:*)"];
    for command in [
        "git status; rm -rf /",
        "git status $(rm -rf /)",
        "echo `rm -rf /`",
        "echo \"$(rm -rf /)\"",
        "echo ok\nrm -rf /",
        "bash -c \"rm -rf x\"",
        "sh -ec 'rm -rf x'",
        "bash -o pipefail -c 'rm x'",
        "env -i FOO=1 rm x",
        "env -u HOME -- rm x",
        "env -S 'rm -rf x'",
        "timeout 5 rm x",
        "timeout -s KILL 5 rm x",
        "nohup rm x &",
        "xargs -0 rm",
        "find . -print0 | xargs -0 -n 1 rm -f",
        "xargs -I{} rm {}",
        "eval \"rm x\"",
        "eval rm x",
        "nice -n 5 rm x",
        "stdbuf -oL rm x",
        "command rm x",
        "exec rm x",
        "builtin eval rm x",
        "( rm x )",
        "{ rm x; }",
        "cat <<EOF\n$(rm x)\nEOF",
        "cat <<< \"$(rm x)\"",
        "diff <(rm x) y",
        "echo $(( $(rm x) + 1 ))",
        "if true; then rm x; fi",
        "while false; do rm x; done",
        "case a in a) rm x;; esac",
        "f() { rm x; }",
        "/bin/rm -rf x",
        "\"/bin/rm\" x",
        "r\\m x",
        "find . -name '*.o' -exec rm {} \\;",
        "$CMD -rf x",
        "$(echo rm) x",
        "trap 'rm x' EXIT",
        "alias ls='rm x'",
        "sudo -u root rm x",
        "sudo FOO=1 rm x",
        "coproc rm x",
        "! rm x",
        "[[ $(rm x) ]]",
        "a=$(rm x) ls",
        "exec 3>$(rm x)",
        "env $X",
        "sh -c \"$SCRIPT\"",
        "echo ${X:-$(rm x)}",
        "echo 'unterminated",
        "rm",
    ] {
        let verdict = bash(&[], &rm, command);
        assert!(is_denied_by_rule(&verdict), "{command:?}: {verdict:?}");
    }
}

#[test]
fn deny_rule_leaves_other_commands_alone() {
    let rm = ["Bash(rm:*)"];
    for command in [
        "echo rm",
        "echo 'rm -rf x'",
        "git rm x",
        "rmdir x",
        "cat <<'EOF'\n$(rm x)\nEOF",
        "cat <<EOF\nrm x\nEOF",
        "sh script.sh",
        "echo $HOME",
        "trap - EXIT",
        "alias",
    ] {
        let verdict = bash(&[], &rm, command);
        assert_eq!(stage(&verdict), Some(Stage::ModeBypass), "{command:?}");
    }
}

#[test]
fn deny_rule_with_dynamic_arguments_is_conservative() {
    let push = ["Bash(git push:*)"];
    assert!(is_denied_by_rule(&bash(&[], &push, "git $ACTION origin")));
    assert!(is_denied_by_rule(&bash(&[], &push, "git push --force")));
    assert_eq!(
        stage(&bash(&[], &push, "git pull")),
        Some(Stage::ModeBypass)
    );
    let exact = ["Bash(rm -rf /)"];
    assert!(is_denied_by_rule(&bash(&[], &exact, "rm -rf $X")));
    assert!(is_denied_by_rule(&bash(&[], &exact, "rm -rf / $EMPTY")));
    assert_eq!(
        stage(&bash(&[], &exact, "rm -rf /tmp/x")),
        Some(Stage::ModeBypass)
    );
}

#[test]
fn wrappers_are_judged_by_what_they_run() {
    let rm = ["Bash(rm:*)"];
    assert!(is_allowed_by_rule(&bash(&rm, &[], "timeout 5 rm x")));
    assert!(is_allowed_by_rule(&bash(&rm, &[], "bash -c 'rm x'")));
    // env assignments change what the program does: never covered.
    assert_eq!(bash(&rm, &[], "env -i FOO=1 rm x"), Verdict::Ask);
    // The wrapper itself can still be denied.
    assert!(is_denied_by_rule(&bash(
        &[],
        &["Bash(timeout:*)"],
        "timeout 5 ls"
    )));
    assert!(is_denied_by_rule(&bash(
        &[],
        &["Bash(bash:*)"],
        "bash -c ls"
    )));
}

#[test]
fn missing_subject_field_is_unknown() {
    let facts = bash_facts();
    let deny = run(
        PermissionMode::Bypass,
        &facts,
        &[],
        &["Bash(rm:*)"],
        json!({}),
    );
    assert!(is_denied_by_rule(&deny));
    let allow = run(
        PermissionMode::Default,
        &facts,
        &["Bash(ls:*)"],
        &[],
        json!({ "command": 5 }),
    );
    assert_eq!(allow, Verdict::Ask);
    // A bare-name rule does not look at the input.
    let named = run(PermissionMode::Default, &facts, &["Bash"], &[], json!({}));
    assert!(is_allowed_by_rule(&named));
}

fn path_facts(name: &'static str, read_only: bool) -> ToolFacts<'static> {
    ToolFacts {
        rules_as: None,
        subject_text: None,
        name,
        read_only,
        self_decision: SelfDecision::None,
        file_edit: !read_only,
        subject: Subject::Path { field: "file_path" },
    }
}

fn path_decision(
    mode: PermissionMode,
    allow: &[&str],
    deny: &[&str],
    path: &str,
    workspace: Option<&std::path::Path>,
) -> Verdict {
    let rules = RuleSet::parse(&strings(allow), &strings(deny)).expect("rules parse");
    let facts = path_facts("Edit", false);
    let input = json!({ "file_path": path });
    decide(&DecisionInput {
        mode,
        rules: &rules,
        grants: &[],
        tool: &facts,
        input: &input,
        workspace,
    })
}

#[test]
fn path_rules_normalise_and_confine() {
    let ws = std::path::Path::new("/srv/ws/s1");
    let allow = ["Edit(docs/**)"];
    let d = PermissionMode::Default;
    for path in [
        "docs/a.md",
        "./docs/a.md",
        "docs//x/y.md",
        "/srv/ws/s1/docs/a.md",
        "src/../docs/a",
    ] {
        assert!(
            is_allowed_by_rule(&path_decision(d, &allow, &[], path, Some(ws))),
            "{path}"
        );
    }
    for path in [
        "src/a.rs",
        "docs",
        "docs/../src/a.rs",
        "../s1/docs/a.md",
        "/srv/ws/s2/docs/a.md",
        "/srv/ws/s1/../s1x/docs/a.md",
        "/etc/passwd",
    ] {
        assert_eq!(
            path_decision(d, &allow, &[], path, Some(ws)),
            Verdict::Ask,
            "{path}"
        );
    }
    // Without a workspace, absolute paths are never allowed by a rule.
    assert_eq!(
        path_decision(d, &allow, &[], "/srv/ws/s1/docs/a.md", None),
        Verdict::Ask
    );
    // `*` does not cross directories; `**` does.
    assert_eq!(
        path_decision(d, &["Edit(docs/*)"], &[], "docs/x/y.md", Some(ws)),
        Verdict::Ask
    );
    assert!(is_allowed_by_rule(&path_decision(
        d,
        &["Edit(docs/*)"],
        &[],
        "docs/y.md",
        Some(ws)
    )));
}

#[test]
fn escaping_path_matches_every_path_deny_rule() {
    let ws = std::path::Path::new("/srv/ws/s1");
    let deny = ["Edit(secrets/**)"];
    let b = PermissionMode::Bypass;
    for path in ["../x", "a/../../x", "/etc/passwd", "/srv/ws/s1/../other"] {
        assert!(
            is_denied_by_rule(&path_decision(b, &[], &deny, path, Some(ws))),
            "{path}"
        );
    }
    assert!(is_denied_by_rule(&path_decision(
        b,
        &[],
        &deny,
        "/srv/ws/s1/secrets/k",
        Some(ws)
    )));
    assert_eq!(
        stage(&path_decision(
            b,
            &[],
            &deny,
            "/srv/ws/s1/public/k",
            Some(ws)
        )),
        Some(Stage::ModeBypass)
    );
}

fn fetch(allow: &[&str], deny: &[&str], url: &str) -> Verdict {
    let facts = ToolFacts {
        rules_as: None,
        subject_text: None,
        name: "WebFetch",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        subject: Subject::Url { field: "url" },
    };
    let mode = if deny.is_empty() {
        PermissionMode::Default
    } else {
        PermissionMode::Bypass
    };
    run(mode, &facts, allow, deny, json!({ "url": url }))
}

#[test]
fn domain_rules() {
    let exact = ["WebFetch(domain:docs.rs)"];
    assert!(is_allowed_by_rule(&fetch(
        &exact,
        &[],
        "https://DOCS.rs./serde"
    )));
    assert!(is_allowed_by_rule(&fetch(
        &exact,
        &[],
        "https://user:pw@docs.rs/"
    )));
    assert!(is_allowed_by_rule(&fetch(
        &exact,
        &[],
        "http://docs.rs:8080/x"
    )));
    for url in [
        "https://api.docs.rs/",
        "https://docs.rs.evil.example/",
        "https://docs.rs@evil.example/",
        "https://evil.example/?u=https://docs.rs/",
        "not a url",
        "file:///etc/passwd",
    ] {
        assert_eq!(fetch(&exact, &[], url), Verdict::Ask, "{url}");
    }
    let sub = ["WebFetch(domain:*.docs.rs)"];
    assert!(is_allowed_by_rule(&fetch(
        &sub,
        &[],
        "https://api.docs.rs/"
    )));
    assert_eq!(fetch(&sub, &[], "https://docs.rs/"), Verdict::Ask);
    assert_eq!(fetch(&sub, &[], "https://xdocs.rs/"), Verdict::Ask);
    let deny = ["WebFetch(domain:evil.example)"];
    assert!(is_denied_by_rule(&fetch(&[], &deny, "not a url")));
    assert!(is_denied_by_rule(&fetch(
        &[],
        &deny,
        "https://a@EVIL.example/"
    )));
    assert_eq!(
        stage(&fetch(&[], &deny, "https://ok.example/")),
        Some(Stage::ModeBypass)
    );
}

#[test]
fn argument_rules_never_match_other_subjects() {
    let todo = ToolFacts {
        rules_as: None,
        subject_text: None,
        name: "Todo",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        subject: Subject::Name,
    };
    let v = run(PermissionMode::Bypass, &todo, &[], &["Todo(x)"], json!({}));
    assert_eq!(stage(&v), Some(Stage::ModeBypass));
    let v = run(PermissionMode::Default, &todo, &["Todo(x)"], &[], json!({}));
    assert_eq!(v, Verdict::Ask);
    // A command rule does not match a path tool of the same name.
    let custom = path_facts("Custom", false);
    let v = run(
        PermissionMode::Bypass,
        &custom,
        &[],
        &["Custom(rm:*)"],
        json!({ "file_path": "rm" }),
    );
    assert_eq!(stage(&v), Some(Stage::ModeBypass));
}

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
