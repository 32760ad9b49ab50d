//! The production [`PermissionGate`]: a session's permission mode, rules, grants and
//! workspace, evaluated by the ladder in [`crate::permission::decide`].

use super::Tool;
use super::pipeline::{PermissionGate, tool_facts};
use crate::permission::{DecisionInput, GrantRule, PermissionMode, RuleSet, Verdict, decide};
use serde_json::Value;
use std::path::PathBuf;

/// What one session's permission step reads.
#[derive(Clone, Debug, Default)]
pub struct RulesGate {
    pub mode: PermissionMode,
    pub rules: RuleSet,
    pub grants: Vec<GrantRule>,
    pub workspace: Option<PathBuf>,
}

impl PermissionGate for RulesGate {
    fn evaluate(&self, tool: &dyn Tool, input: &Value) -> Verdict {
        let facts = tool_facts(tool, input);
        decide(&DecisionInput {
            mode: self.mode,
            rules: &self.rules,
            grants: &self.grants,
            tool: &facts,
            input,
            workspace: self.workspace.as_deref(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::{Stage, Subject};
    use crate::tools::ToolOutput;
    use crate::tools::builder::ToolBuilder;
    use serde_json::json;

    #[test]
    fn the_gate_runs_the_ladder_on_the_tool_facts() {
        let bash = ToolBuilder::new("Bash")
            .schema(json!({"type": "object"}))
            .subject(Subject::Command { field: "command" })
            .handler(|_, _| async { Ok(ToolOutput::default()) })
            .build()
            .unwrap();
        let gate = RulesGate {
            rules: RuleSet::parse(&["Bash(git status:*)".into()], &["Bash(rm:*)".into()]).unwrap(),
            ..RulesGate::default()
        };
        let verdict = gate.evaluate(&bash, &json!({"command": "git status"}));
        assert!(
            matches!(verdict, Verdict::Allow(ref r) if r.stage == Stage::Allowed),
            "{verdict:?}"
        );
        let verdict = gate.evaluate(&bash, &json!({"command": "git status; rm -rf /"}));
        assert!(
            matches!(verdict, Verdict::Deny(ref r) if r.stage == Stage::Disallowed),
            "{verdict:?}"
        );
        assert_eq!(
            gate.evaluate(&bash, &json!({"command": "make"})),
            Verdict::Ask
        );
    }
}
