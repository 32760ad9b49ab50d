//! ShellStart and ShellWrite are judged by the session's `Bash(...)` rules (D5): the ladder
//! binds a rule to a tool by name, `*`, or the name the tool answers to (`rules_as`).

use super::{DecisionInput, PermissionMode, RuleSet, SelfDecision, Stage, Subject, ToolFacts};
use super::{Verdict, decide};
use serde_json::{Value, json};

#[derive(Debug, PartialEq, Eq)]
enum E {
    Allow(String),
    Deny(String),
    Ask,
}

/// The facts of a PTY tool as the pipeline builds them; `subject_text` is what ShellWrite
/// computes (unsubmitted text plus the typed text) or ShellStart's empty command.
fn facts(tool: &'static str, subject_text: Option<&str>) -> ToolFacts<'static> {
    ToolFacts {
        name: tool,
        read_only: false,
        self_decision: SelfDecision::Ask,
        file_edit: false,
        subject: Subject::Command { field: "command" },
        rules_as: Some("Bash"),
        subject_text: subject_text.map(str::to_owned),
    }
}

/// Tool, allow rules, deny rules, input, computed subject text, expected verdict.
type Row = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    Value,
    Option<&'static str>,
    E,
);

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn run(tool: &'static str, allow: &[&str], deny: &[&str], input: Value, text: Option<&str>) -> E {
    let rules = RuleSet::parse(&strings(allow), &strings(deny)).expect("rules parse");
    let verdict = decide(&DecisionInput {
        mode: PermissionMode::Default,
        rules: &rules,
        grants: &[],
        tool: &facts(tool, text),
        input: &input,
        workspace: None,
    });
    match verdict {
        Verdict::Allow(r) if r.stage == Stage::Allowed => E::Allow(r.rule.expect("rule")),
        Verdict::Deny(r) if r.stage == Stage::Disallowed => E::Deny(r.rule.expect("rule")),
        Verdict::Ask => E::Ask,
        other => panic!("unexpected verdict {other:?}"),
    }
}

#[test]
fn shell_tools_obey_bash_rules() {
    let deny_rm: &[&str] = &["Bash(rm:*)"];
    let allow_git: &[&str] = &["Bash(git status:*)"];
    let deny = |r: &str| E::Deny(r.to_owned());
    let allow = |r: &str| E::Allow(r.to_owned());
    #[rustfmt::skip]
    let rows: Vec<Row> = vec![
        // ShellStart: its `command` is judged like a Bash command.
        ("ShellStart", &[], deny_rm, json!({"command": "rm -rf x"}), None, deny("Bash(rm:*)")),
        ("ShellStart", &[], deny_rm, json!({"command": "ls && rm x"}), None, deny("Bash(rm:*)")),
        ("ShellStart", &[], deny_rm, json!({"command": "ls"}), None, E::Ask),
        ("ShellStart", allow_git, &[], json!({"command": "git status"}), None, allow("Bash(git status:*)")),
        ("ShellStart", allow_git, &[], json!({"command": "git push"}), None, E::Ask),
        // Without a command nothing runs yet: no argument rule matches, a bare rule still does.
        ("ShellStart", &[], deny_rm, json!({}), Some(""), E::Ask),
        ("ShellStart", allow_git, &[], json!({}), Some(""), E::Ask),
        ("ShellStart", &[], &["Bash"], json!({}), Some(""), deny("Bash")),
        ("ShellStart", &["Bash"], &[], json!({}), Some(""), allow("Bash")),
        // Rules naming the shell tool itself keep working.
        ("ShellStart", &[], &["ShellStart(rm:*)"], json!({"command": "rm x"}), None, deny("ShellStart(rm:*)")),
        ("ShellStart", &[], &["ShellStart"], json!({"command": "ls"}), None, deny("ShellStart")),
        // Other tools' rules do not apply.
        ("ShellStart", &[], &["Read(**)"], json!({"command": "rm x"}), None, E::Ask),
        ("ShellStart", &[], &["ShellWrite(rm:*)"], json!({"command": "rm x"}), None, E::Ask),
        // ShellWrite: the line the write completes is judged.
        ("ShellWrite", &[], deny_rm, json!({"shell_id": "s", "command": "rm -rf x"}), Some("rm -rf x\n"), deny("Bash(rm:*)")),
        ("ShellWrite", &[], deny_rm, json!({"shell_id": "s", "command": "m -rf x"}), Some("rm -rf x\n"), deny("Bash(rm:*)")),
        ("ShellWrite", &[], deny_rm, json!({"shell_id": "s", "command": "rm x", "submit": false}), Some("rm x"), deny("Bash(rm:*)")),
        ("ShellWrite", &[], deny_rm, json!({"shell_id": "s", "command": "ls"}), Some("ls\n"), E::Ask),
        ("ShellWrite", allow_git, &[], json!({"shell_id": "s", "command": "git status"}), Some("git status\n"), allow("Bash(git status:*)")),
        ("ShellWrite", allow_git, &[], json!({"shell_id": "s", "command": "status"}), Some("git status\n"), allow("Bash(git status:*)")),
        ("ShellWrite", allow_git, &[], json!({"shell_id": "s", "command": "git status; rm x"}), Some("git status; rm x\n"), E::Ask),
        ("ShellWrite", allow_git, deny_rm, json!({"shell_id": "s", "command": "git status && rm x"}), Some("git status && rm x\n"), deny("Bash(rm:*)")),
        // The computed text wins over the field: the field alone would look harmless.
        ("ShellWrite", allow_git, &[], json!({"shell_id": "s", "command": " status"}), Some("rm -rf / ; git status\n"), E::Ask),
    ];
    let failures: Vec<String> = rows
        .into_iter()
        .filter_map(|(tool, allow, deny, input, text, want)| {
            let got = run(tool, allow, deny, input.clone(), text);
            (got != want).then(|| format!("{tool} {input} ({text:?}): got {got:?}, want {want:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_tool_without_an_alias_ignores_bash_rules() {
    let rules = RuleSet::parse(&[], &strings(&["Bash(rm:*)"])).expect("rules parse");
    let mut tool = facts("Monitor", None);
    tool.rules_as = None;
    let input = json!({"command": "rm x"});
    let verdict = decide(&DecisionInput {
        mode: PermissionMode::Default,
        rules: &rules,
        grants: &[],
        tool: &tool,
        input: &input,
        workspace: None,
    });
    assert_eq!(verdict, Verdict::Ask);
}
