//! The permission ladder (SPEC.md "Permission decision", N6, D2): first match wins.
//!
//! 1. a deny rule matches, or the tool denies itself → Deny (`disallowed` / `tool_deny`)
//! 2. bypass → Allow (`mode_bypass`)
//! 3. plan → read-only Allow, mutating Deny (`mode_plan`)
//! 4. allow rules cover the input → Allow (`allowed`)
//! 5. grants (with the allow rules) cover the input → Allow (`grant`, with the grant id)
//! 6. acceptEdits and a file-edit tool → Allow (`accept_edits`)
//! 7. read-only → Allow (`read_only`); tool self-allow → Allow (`tool_allow`)
//! 8. dontAsk → Deny (`mode_dont_ask`); auto → Deny (`mode_auto`)
//! 9. otherwise [`Verdict::Ask`]: the caller consults the approval callback.
//!
//! Argument matching: a deny rule matches a command if ANY simple command matches it, a
//! program is dynamic or an option runs a program we cannot see, or the text is unparsable; allow rules cover a command only if EVERY
//! simple command is matched by some rule and none is dynamic, writes files by redirection or
//! changes the environment. A path that escapes the workspace, a URL without a host and a
//! missing or non-string subject field are never allowed by a rule with an argument and match
//! every deny rule of the tool that has an argument of the right kind.
//!
//! Rules bind to a tool by name, `*`, or the name the tool answers to ([`ToolFacts::rules_as`]):
//! ShellStart and ShellWrite are judged by the session's `Bash(...)` rules as well as their own,
//! on the command they start or the line they complete (earlier unsubmitted text plus the typed
//! text), so `deny: ["Bash(rm:*)"]` cannot be sidestepped by typing `rm` into a shell.

use super::rules::{self, Rule, RuleSet};
use super::shell::{self, ParsedCommand};
use super::{PermissionMode, Reason, SelfDecision, Stage, Subject, ToolFacts, Verdict};
use std::path::Path;

/// An allow rule added by an earlier approval ("always allow this").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantRule {
    pub grant_id: String,
    pub rule: Rule,
}

/// Everything the ladder reads for one call.
#[derive(Clone, Copy, Debug)]
pub struct DecisionInput<'a> {
    pub mode: PermissionMode,
    pub rules: &'a RuleSet,
    pub grants: &'a [GrantRule],
    pub tool: &'a ToolFacts<'a>,
    pub input: &'a serde_json::Value,
    /// The session workspace, for absolute paths inside it.
    pub workspace: Option<&'a Path>,
}

/// The tool input's subject value, computed once per decision.
enum SubjectValue {
    /// The tool has no argument subject.
    None,
    /// Missing or non-string field: unknown.
    Unknown,
    Command(ParsedCommand),
    /// `None` when the path escapes the workspace.
    Path(Option<String>),
    /// `None` when the URL has no usable host.
    Host(Option<String>),
}

impl SubjectValue {
    fn of(input: &DecisionInput<'_>) -> SubjectValue {
        let field = match &input.tool.subject {
            Subject::Name => return SubjectValue::None,
            Subject::Command { field } | Subject::Path { field } | Subject::Url { field } => *field,
        };
        let text = match &input.tool.subject_text {
            Some(text) => text.as_str(),
            None => match input.input.get(field).and_then(|v| v.as_str()) {
                Some(text) => text,
                None => return SubjectValue::Unknown,
            },
        };
        match &input.tool.subject {
            Subject::Name => SubjectValue::None,
            Subject::Command { .. } => SubjectValue::Command(shell::parse_command(text)),
            Subject::Path { .. } => {
                SubjectValue::Path(rules::normalize_path(text, input.workspace))
            }
            Subject::Url { .. } => SubjectValue::Host(rules::url_host(text)),
        }
    }
}

/// Whether the rule names this tool, `*`, or the tool whose rules this tool answers to.
fn names(rule: &Rule, facts: &ToolFacts<'_>) -> bool {
    rule.names_tool(facts.name) || facts.rules_as.is_some_and(|alias| rule.tool() == alias)
}

/// Whether a deny rule matches this call.
fn deny_matches(rule: &Rule, facts: &ToolFacts<'_>, value: &SubjectValue) -> bool {
    if !names(rule, facts) {
        return false;
    }
    if !rule.has_spec() {
        return true;
    }
    if !rule.spec_fits(&facts.subject) {
        return false;
    }
    match value {
        SubjectValue::None => false,
        SubjectValue::Unknown => true,
        SubjectValue::Command(ParsedCommand::Unparsable(_)) => true,
        SubjectValue::Command(ParsedCommand::Commands(commands)) => commands.iter().any(|c| {
            c.has_dynamic_program()
                || c.runs_unknown_program()
                || rule.matches_simple_command(c, true)
        }),
        SubjectValue::Path(None) | SubjectValue::Host(None) => true,
        SubjectValue::Path(Some(path)) => rule.matches_path(path),
        SubjectValue::Host(Some(host)) => rule.matches_host(host),
    }
}

/// Whether a rule with an argument part applies to this tool and may match by argument.
fn arg_rule_applies(rule: &Rule, facts: &ToolFacts<'_>) -> bool {
    names(rule, facts) && rule.has_spec() && rule.spec_fits(&facts.subject)
}

/// The indices of the rules that together cover this call, if they do.
fn covering(rules: &[&Rule], facts: &ToolFacts<'_>, value: &SubjectValue) -> Option<Vec<usize>> {
    if let Some(index) = rules.iter().position(|r| names(r, facts) && !r.has_spec()) {
        return Some(vec![index]);
    }
    let candidates: Vec<usize> = (0..rules.len())
        .filter(|&i| arg_rule_applies(rules[i], facts))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    match value {
        SubjectValue::Command(ParsedCommand::Commands(commands)) => {
            let mut used: Vec<usize> = Vec::new();
            let mut judged = 0;
            for command in commands.iter().filter(|c| !c.wrapper && !c.deny_only) {
                if command.program().is_none() || command.writes_files || command.sets_env {
                    return None;
                }
                let index = candidates
                    .iter()
                    .copied()
                    .find(|&i| rules[i].matches_simple_command(command, false))?;
                if !used.contains(&index) {
                    used.push(index);
                }
                judged += 1;
            }
            (judged > 0).then_some(used)
        }
        SubjectValue::Path(Some(path)) => candidates
            .iter()
            .copied()
            .find(|&i| rules[i].matches_path(path))
            .map(|i| vec![i]),
        SubjectValue::Host(Some(host)) => candidates
            .iter()
            .copied()
            .find(|&i| rules[i].matches_host(host))
            .map(|i| vec![i]),
        _ => None,
    }
}

/// Why an argument rule matched conservatively, for the human message.
fn unknown_detail(rule: &Rule, value: &SubjectValue) -> &'static str {
    if !rule.has_spec() {
        return "";
    }
    match value {
        SubjectValue::Unknown => " (the input field it checks is missing)",
        SubjectValue::Command(ParsedCommand::Unparsable(_)) => {
            " (the command cannot be analysed, so it counts as matching)"
        }
        SubjectValue::Command(ParsedCommand::Commands(commands))
            if commands.iter().any(|c| c.has_dynamic_program()) =>
        {
            " (a program name cannot be determined, so it counts as matching)"
        }
        SubjectValue::Command(ParsedCommand::Commands(commands))
            if commands.iter().any(|c| c.runs_unknown_program()) =>
        {
            " (an option or script runs a program that cannot be seen, so it counts as matching)"
        }
        SubjectValue::Path(None) => " (the path leaves the workspace)",
        SubjectValue::Host(None) => " (the URL has no host, so it counts as matching)",
        _ => "",
    }
}

fn reason(stage: Stage, message: impl Into<String>) -> Reason {
    Reason::new(stage, message)
}

fn join<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    parts.collect::<Vec<_>>().join(", ")
}

/// Runs the ladder for one call.
pub fn decide(input: &DecisionInput<'_>) -> Verdict {
    let facts = input.tool;
    let name = facts.name;
    let value = SubjectValue::of(input);

    if let Some(rule) = input
        .rules
        .deny
        .iter()
        .find(|r| deny_matches(r, facts, &value))
    {
        return Verdict::Deny(Reason {
            rule: Some(rule.as_str().to_owned()),
            ..reason(
                Stage::Disallowed,
                format!(
                    "{name} is denied by the rule `{rule}`{}",
                    unknown_detail(rule, &value)
                ),
            )
        });
    }
    if facts.self_decision == SelfDecision::Deny {
        return Verdict::Deny(reason(
            Stage::ToolDeny,
            format!("{name} refused this input"),
        ));
    }
    match input.mode {
        PermissionMode::Bypass => {
            return Verdict::Allow(reason(
                Stage::ModeBypass,
                format!("{name} allowed: permission checks are bypassed"),
            ));
        }
        PermissionMode::Plan if facts.read_only => {
            return Verdict::Allow(reason(
                Stage::ModePlan,
                format!("{name} allowed in plan mode: read-only"),
            ));
        }
        PermissionMode::Plan => {
            return Verdict::Deny(reason(
                Stage::ModePlan,
                format!("{name} denied in plan mode: it can change things"),
            ));
        }
        _ => {}
    }

    let allow: Vec<&Rule> = input.rules.allow.iter().collect();
    if let Some(used) = covering(&allow, facts, &value) {
        let text = join(used.iter().map(|&i| allow[i].as_str()));
        return Verdict::Allow(Reason {
            rule: Some(text.clone()),
            ..reason(Stage::Allowed, format!("{name} allowed by `{text}`"))
        });
    }
    if !input.grants.is_empty() {
        let mut combined = allow.clone();
        combined.extend(input.grants.iter().map(|g| &g.rule));
        if let Some(used) = covering(&combined, facts, &value) {
            let grants: Vec<&GrantRule> = used
                .iter()
                .filter_map(|&i| i.checked_sub(allow.len()))
                .map(|i| &input.grants[i])
                .collect();
            let text = join(used.iter().map(|&i| combined[i].as_str()));
            let ids = join(grants.iter().map(|g| g.grant_id.as_str()));
            return Verdict::Allow(Reason {
                stage: Stage::Grant,
                rule: Some(text.clone()),
                grant_id: Some(ids.clone()),
                message: format!("{name} allowed by the earlier approval {ids} (`{text}`)"),
            });
        }
    }
    if input.mode == PermissionMode::AcceptEdits && facts.file_edit {
        return Verdict::Allow(reason(
            Stage::AcceptEdits,
            format!("{name} allowed: file edits are accepted in this mode"),
        ));
    }
    if facts.read_only {
        return Verdict::Allow(reason(
            Stage::ReadOnly,
            format!("{name} allowed: read-only for this input"),
        ));
    }
    if facts.self_decision == SelfDecision::Allow {
        return Verdict::Allow(reason(
            Stage::ToolAllow,
            format!("{name} allowed by the tool itself"),
        ));
    }
    match input.mode {
        PermissionMode::DontAsk => Verdict::Deny(reason(
            Stage::ModeDontAsk,
            format!("{name} needs approval, and this session never asks"),
        )),
        PermissionMode::Auto => Verdict::Deny(reason(
            Stage::ModeAuto,
            format!("{name} needs approval, which auto mode never asks for"),
        )),
        _ => Verdict::Ask,
    }
}

#[cfg(test)]
#[path = "decide_tests/mod.rs"]
mod tests;
