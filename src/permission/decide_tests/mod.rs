//! Ladder tests: the full conformance table (ported from conformance/permission.json, one row
//! per case with the same name), extra argument-matching cases, grants, and property tests.
//!
//! This module runs the conformance table ([`cases`]) and holds the helpers the others share;
//! [`commands`] tests `Bash` argument rules, [`paths_and_domains`] path and domain rules,
//! [`ladder`] grants, the stage order and the property tests.

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

mod cases;
mod commands;
mod ladder;
mod paths_and_domains;

use cases::{CONFIG_ERRORS, CONFORMANCE};
