//! What permission rules may name (D2): every tool the runtime can register, with the subject
//! its `Name(...)` rules are matched against, so a session's rules are checked when the session
//! is created rather than silently never matching.
//!
//! A rule's tool is known when it is `*`, a tool in [`BUILTIN_RULE_TARGETS`] (built-in tools
//! plus `WebFetch`, whose `domain:` rules are part of the documented rule syntax), or has the MCP
//! shape `mcp__<server>__<tool>` with non-empty parts (its subject is only known once the
//! server is connected, so any argument is accepted). The table mirrors each tool's
//! [`crate::tools::Tool::permission_subject`]; a unit test builds the real tools and checks
//! that the two agree, so a new tool or a changed subject cannot drift silently.

use crate::permission::Subject;

/// Built-in rule targets and the subject their argument rules match.
pub const BUILTIN_RULE_TARGETS: &[(&str, Subject)] = &[
    ("Read", Subject::Path { field: "file_path" }),
    ("Write", Subject::Path { field: "file_path" }),
    ("Edit", Subject::Path { field: "file_path" }),
    ("MultiEdit", Subject::Path { field: "file_path" }),
    (
        "NotebookEdit",
        Subject::Path {
            field: "notebook_path",
        },
    ),
    ("LS", Subject::Path { field: "path" }),
    ("Glob", Subject::Path { field: "path" }),
    ("Grep", Subject::Path { field: "path" }),
    ("Bash", Subject::Command { field: "command" }),
    ("TaskOutput", Subject::Name),
    ("TaskStop", Subject::Name),
    ("TaskList", Subject::Name),
    ("Monitor", Subject::Name),
    ("ShellStart", Subject::Command { field: "command" }),
    ("ShellWrite", Subject::Command { field: "command" }),
    ("ShellRead", Subject::Name),
    ("ShellResize", Subject::Name),
    ("ShellClose", Subject::Name),
    ("TodoWrite", Subject::Name),
    ("EnterPlanMode", Subject::Name),
    ("ExitPlanMode", Subject::Name),
    ("Memory", Subject::Name),
    ("AskUserQuestion", Subject::Name),
    ("SearchExtraTools", Subject::Name),
    ("ExecuteExtraTool", Subject::Name),
    ("Skill", Subject::Name),
    ("WebFetch", Subject::Url { field: "url" }),
    ("WebSearch", Subject::Name),
    ("Agent", Subject::Name),
];

/// Whether `name` has the MCP shape `mcp__<server>__<tool>` with non-empty parts.
pub fn is_mcp_name(name: &str) -> bool {
    name.strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
        .is_some_and(|(server, tool)| !server.is_empty() && !tool.is_empty())
}

/// What rules naming `tool` may say: `Some(Some(subject))` for a built-in target,
/// `Some(None)` for an MCP tool (any argument), `None` for an unknown tool.
pub fn rule_target(tool: &str) -> Option<Option<Subject>> {
    if let Some((_, subject)) = BUILTIN_RULE_TARGETS.iter().find(|(name, _)| *name == tool) {
        return Some(Some(subject.clone()));
    }
    is_mcp_name(tool).then_some(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SessionId;
    use crate::sandbox::{Sandbox, SandboxConfig};
    use crate::tools::DynTool;
    use crate::tools::builtin::{SessionShells, file_tools, pty, shell_tools, tasks};
    use std::sync::Arc;

    #[test]
    fn the_table_agrees_with_the_real_tools() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let env = SessionShells {
            sandbox: Arc::new(Sandbox::probe(SandboxConfig::new("/nonexistent/launcher"))),
            network: Default::default(),
            tasks: tasks::TaskRegistry::new(tmp.path(), &SessionId::generate()).expect("tasks"),
            shells: pty::ShellRegistry::new(),
        };
        let mut tools: Vec<DynTool> = file_tools();
        tools.extend(shell_tools(&env));
        tools.push(crate::tools::builtin::ask_user::ask_user_tool());
        tools.push(crate::tools::deferred::execute_tool(Vec::new()));
        for tool in &tools {
            let target = rule_target(tool.name());
            assert_eq!(
                target,
                Some(Some(tool.permission_subject())),
                "{} is missing from the table or has another subject",
                tool.name()
            );
        }
        // Every tool a session may enable is a rule target.
        for name in crate::session_config::BUILTIN_TOOLS {
            assert!(rule_target(name).is_some(), "{name}");
        }
    }

    #[test]
    fn rule_targets() {
        let rows: &[(&str, Option<Option<Subject>>)] = &[
            ("Bash", Some(Some(Subject::Command { field: "command" }))),
            ("bash", None),
            ("Memory", Some(Some(Subject::Name))),
            ("WebFetch", Some(Some(Subject::Url { field: "url" }))),
            ("mcp__github__create_issue", Some(None)),
            ("mcp__a__b__c", Some(None)),
            ("mcp__srv__", None),
            ("mcp____tool", None),
            ("mcp__srv", None),
            ("Deploy", None),
        ];
        for (name, want) in rows {
            assert_eq!(&rule_target(name), want, "{name}");
        }
    }
}
