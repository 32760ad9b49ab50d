//! Subagents (issue 17): named agent types a session defines in `agents`, started by the
//! model through the `Agent` tool as durable child sessions (see `crate::runtime::subagent`).
//!
//! This module holds what is pure: the configuration types, the creation-time checks that a
//! definition can only narrow the parent's policy (each refusal a `422` with a stable reason
//! code), and the derivation of a child session's configuration from its parent's at the
//! moment the `Agent` call starts it.
//!
//! Policy only narrows:
//! - tools: the definition's list must be a subset of the parent's (`tools`, or every built-in
//!   tool when the parent lists none); deferred tools stay deferred (the parent's schema
//!   filter), and the parent's unlock set is copied to the child when it starts;
//! - permission mode: never looser than the parent's (strictest first: plan, dontAsk, auto,
//!   default, acceptEdits, bypass), checked at creation against the configured mode and again
//!   when the child starts against the parent's live mode (plan mode entered meanwhile);
//! - allow rules: each must be one of the parent's; deny rules are the parent's plus the
//!   definition's; hooks, egress rules, command network, approvals and MCP servers are the
//!   parent's;
//! - budgets: at most the parent's turns and tokens.

#[cfg(test)]
mod tests;

use crate::permission::PermissionMode;
use crate::session_config::{
    BUILTIN_TOOLS, Budgets, ConfigViolation, ModelConfig, PermissionConfig, SessionConfig,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The tool that starts a subagent.
pub const AGENT_TOOL: &str = "Agent";
/// At most this many agent types per session.
pub const MAX_AGENTS: usize = 16;
/// The deepest nesting a session may allow (`agent_max_depth`).
pub const MAX_DEPTH: u8 = 3;
const MAX_DESCRIPTION_CHARS: usize = 1000;
const MAX_SYSTEM_PROMPT_CHARS: usize = 200_000;

/// Stable reason codes of the `422`s a session configuration gets for its `agents`
/// (`details.reason`).
pub mod reasons {
    /// An agent name is empty, too long or has characters other than `A-Za-z0-9_-`.
    pub const NAME_INVALID: &str = "SUBAGENT_NAME_INVALID";
    /// A definition is malformed (description, system prompt, rule syntax, script).
    pub const DEFINITION_INVALID: &str = "SUBAGENT_DEFINITION_INVALID";
    /// A definition lists a tool the parent session does not offer.
    pub const TOOL_NOT_IN_PARENT: &str = "SUBAGENT_TOOL_NOT_IN_PARENT";
    /// A definition's permission mode is looser than the parent's.
    pub const MODE_LOOSER: &str = "SUBAGENT_MODE_LOOSER";
    /// A definition's allow rule is not one of the parent's.
    pub const ALLOW_NOT_IN_PARENT: &str = "SUBAGENT_ALLOW_NOT_IN_PARENT";
    /// A definition's budget exceeds the parent's.
    pub const BUDGET_EXCEEDS_PARENT: &str = "SUBAGENT_BUDGET_EXCEEDS_PARENT";
    /// `agent_max_depth` is out of range.
    pub const DEPTH_INVALID: &str = "SUBAGENT_DEPTH_INVALID";
    /// `subagent` is set by the server on a subagent's own session, never by a client.
    pub const LINK_RESERVED: &str = "SUBAGENT_LINK_RESERVED";
}

/// A named subagent type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentDefinition {
    /// What the agent is for: shown to the model in the `Agent` tool (1..=1000 characters).
    pub description: String,
    /// The subagent's system prompt (at most 200,000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Its model name (default: the parent's) or, where scripts are allowed, a script.
    #[serde(default)]
    pub model: ModelConfig,
    /// Built-in tools it may use: a subset of the parent's (default: the parent's tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Its permission settings: only narrower than the parent's.
    #[serde(default)]
    pub permission: AgentPermission,
    /// Its run budgets: at most the parent's.
    #[serde(default)]
    pub budgets: AgentBudgets,
}

/// A subagent's permission settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentPermission {
    /// Default: the parent's mode (its live mode when the subagent starts). Never looser.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    /// Allow rules, each one of the parent's (default: the parent's allow rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Deny rules added to the parent's (which always apply).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// A subagent's run budgets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentBudgets {
    /// Main turns of the subagent's run (default and maximum: the parent's `max_turns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Tokens of the subagent's run (default: the parent's `max_tokens`; at most it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Set by the server on a subagent's own session: where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentLink {
    pub parent_session_id: String,
    pub parent_run_id: String,
    /// The parent's `Agent` call.
    pub tool_use_id: String,
    /// The agent type.
    pub agent: String,
    /// 1 for a subagent of a top-level session.
    pub depth: u8,
    /// The session whose workspace the subagent works in (the top-level session's).
    pub workspace_session_id: String,
}

/// How strict a mode is: 0 is the strictest.
pub fn strictness(mode: PermissionMode) -> u8 {
    match mode {
        PermissionMode::Plan => 0,
        PermissionMode::DontAsk => 1,
        PermissionMode::Auto => 2,
        PermissionMode::Default => 3,
        PermissionMode::AcceptEdits => 4,
        PermissionMode::Bypass => 5,
    }
}

/// The stricter of two modes.
pub fn stricter(a: PermissionMode, b: PermissionMode) -> PermissionMode {
    if strictness(a) <= strictness(b) { a } else { b }
}

/// The session's nesting bound (`agent_max_depth`, default 1).
pub fn max_depth(config: &SessionConfig) -> u8 {
    config.agent_max_depth.unwrap_or(1)
}

/// The depth of a session: 0 for a top-level one.
pub fn depth(config: &SessionConfig) -> u8 {
    config.subagent.as_ref().map_or(0, |link| link.depth)
}

/// Whether a stored session configuration defines agent types: only then can its runs have
/// started subagents (a cheap look at the JSON, no parse).
pub fn defines_agents(config: &serde_json::Value) -> bool {
    config
        .get("agents")
        .and_then(serde_json::Value::as_object)
        .is_some_and(|agents| !agents.is_empty())
}

/// Whether a session of this configuration is offered the `Agent` tool.
pub fn offers_agent_tool(config: &SessionConfig) -> bool {
    !config.agents.is_empty() && depth(config) < max_depth(config)
}

/// The built-in tools a session offers (its `tools`, or all of them).
fn parent_tools(config: &SessionConfig) -> Vec<String> {
    config.tools.clone().unwrap_or_else(|| {
        BUILTIN_TOOLS
            .iter()
            .map(|name| (*name).to_owned())
            .collect()
    })
}

fn violation(field: String, message: impl Into<String>, reason: &'static str) -> ConfigViolation {
    ConfigViolation {
        field,
        message: message.into(),
        reason: Some(reason),
    }
}

/// Creation-time checks of `agents` and `agent_max_depth` against the session itself.
pub fn validate(config: &SessionConfig) -> Result<(), ConfigViolation> {
    if let Some(depth) = config.agent_max_depth
        && !(1..=MAX_DEPTH).contains(&depth)
    {
        return Err(violation(
            "agent_max_depth".into(),
            format!("must be between 1 and {MAX_DEPTH}"),
            reasons::DEPTH_INVALID,
        ));
    }
    if config.agents.len() > MAX_AGENTS {
        return Err(violation(
            "agents".into(),
            format!("at most {MAX_AGENTS} agent types"),
            reasons::DEFINITION_INVALID,
        ));
    }
    let tools = parent_tools(config);
    for (name, agent) in &config.agents {
        let field = |rest: &str| format!("agents.{name}{rest}");
        let well_formed = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !well_formed {
            return Err(violation(
                "agents".into(),
                "agent names are 1..=64 characters of A-Za-z0-9_-",
                reasons::NAME_INVALID,
            ));
        }
        let chars = agent.description.chars().count();
        if !(1..=MAX_DESCRIPTION_CHARS).contains(&chars) {
            return Err(violation(
                field(".description"),
                format!("1 to {MAX_DESCRIPTION_CHARS} characters"),
                reasons::DEFINITION_INVALID,
            ));
        }
        if agent
            .system_prompt
            .as_ref()
            .is_some_and(|p| p.chars().count() > MAX_SYSTEM_PROMPT_CHARS)
        {
            return Err(violation(
                field(".system_prompt"),
                format!("at most {MAX_SYSTEM_PROMPT_CHARS} characters"),
                reasons::DEFINITION_INVALID,
            ));
        }
        if agent
            .model
            .max_tokens
            .is_some_and(|n| !(1..=128_000).contains(&n))
        {
            return Err(violation(
                field(".model.max_tokens"),
                "must be between 1 and 128000",
                reasons::DEFINITION_INVALID,
            ));
        }
        if let Some(script) = &agent.model.script {
            crate::llm::scripted::ScriptedProvider::new(Some(script)).map_err(|error| {
                violation(
                    field(".model.script"),
                    error.to_string(),
                    reasons::DEFINITION_INVALID,
                )
            })?;
        }
        if let Some(listed) = &agent.tools {
            for (index, tool) in listed.iter().enumerate() {
                if tool == AGENT_TOOL {
                    continue;
                }
                if !tools.iter().any(|t| t == tool) {
                    return Err(violation(
                        field(&format!(".tools[{index}]")),
                        format!("`{tool}` is not a tool of the parent session"),
                        reasons::TOOL_NOT_IN_PARENT,
                    ));
                }
            }
        }
        if let Some(mode) = agent.permission.mode
            && strictness(mode) > strictness(config.permission.mode)
        {
            return Err(violation(
                field(".permission.mode"),
                format!(
                    "a subagent's mode cannot be looser than the session's ({:?})",
                    config.permission.mode
                ),
                reasons::MODE_LOOSER,
            ));
        }
        if let Some(allow) = &agent.permission.allow {
            for (index, rule) in allow.iter().enumerate() {
                if !config.permission.allow.contains(rule) {
                    return Err(violation(
                        field(&format!(".permission.allow[{index}]")),
                        format!("`{rule}` is not an allow rule of the parent session"),
                        reasons::ALLOW_NOT_IN_PARENT,
                    ));
                }
            }
        }
        if agent.permission.deny.len() > 256 {
            return Err(violation(
                field(".permission.deny"),
                "at most 256 rules",
                reasons::DEFINITION_INVALID,
            ));
        }
        crate::permission::RuleSet::parse_located(&[], &agent.permission.deny)
            .and_then(|rules| rules.check_targets(crate::tools::builtin::rule_targets::rule_target))
            .map_err(|(_, index, error)| {
                violation(
                    field(&format!(".permission.deny[{index}]")),
                    error.to_string(),
                    reasons::DEFINITION_INVALID,
                )
            })?;
        if let Some(turns) = agent.budgets.max_turns
            && !(1..=config.budgets.max_turns).contains(&turns)
        {
            return Err(violation(
                field(".budgets.max_turns"),
                format!(
                    "must be between 1 and the session's max_turns ({})",
                    config.budgets.max_turns
                ),
                reasons::BUDGET_EXCEEDS_PARENT,
            ));
        }
        if let Some(tokens) = agent.budgets.max_tokens {
            if tokens < 1000 {
                return Err(violation(
                    field(".budgets.max_tokens"),
                    "must be at least 1000",
                    reasons::DEFINITION_INVALID,
                ));
            }
            if config
                .budgets
                .max_tokens
                .is_some_and(|parent| tokens > parent)
            {
                return Err(violation(
                    field(".budgets.max_tokens"),
                    "must be at most the session's max_tokens",
                    reasons::BUDGET_EXCEEDS_PARENT,
                ));
            }
        }
    }
    Ok(())
}

/// The configuration of a subagent's session, derived from its parent's when the `Agent`
/// call starts it. `live_mode` is the parent's mode at that moment; `link` says where it
/// comes from.
pub fn child_config(
    parent: &SessionConfig,
    agent: &AgentDefinition,
    live_mode: PermissionMode,
    link: SubagentLink,
) -> SessionConfig {
    let parent_mode = stricter(parent.permission.mode, live_mode);
    let mode = agent
        .permission
        .mode
        .map_or(parent_mode, |mode| stricter(mode, parent_mode));
    let offered = parent_tools(parent);
    let tools: Vec<String> = match &agent.tools {
        Some(listed) => listed
            .iter()
            .filter(|tool| offered.contains(tool))
            .cloned()
            .collect(),
        None => offered,
    };
    // An MCP server's tools reach a subagent only when its definition names no tool list
    // (it then has everything the parent has).
    let mcp_servers = if agent.tools.is_none() {
        parent.mcp_servers.clone()
    } else {
        Vec::new()
    };
    let allow = agent
        .permission
        .allow
        .clone()
        .unwrap_or_else(|| parent.permission.allow.clone())
        .into_iter()
        .filter(|rule| parent.permission.allow.contains(rule))
        .collect();
    let mut deny = parent.permission.deny.clone();
    deny.extend(
        agent
            .permission
            .deny
            .iter()
            .filter(|rule| !parent.permission.deny.contains(rule))
            .cloned(),
    );
    let max_tokens = match (agent.budgets.max_tokens, parent.budgets.max_tokens) {
        (Some(own), Some(parent)) => Some(own.min(parent)),
        (own, parent) => own.or(parent),
    };
    SessionConfig {
        title: Some(format!(
            "subagent {} of {}",
            link.agent, link.parent_session_id
        )),
        system_prompt: agent.system_prompt.clone(),
        model: ModelConfig {
            name: agent
                .model
                .name
                .clone()
                .or_else(|| parent.model.name.clone()),
            max_tokens: agent.model.max_tokens.or(parent.model.max_tokens),
            script: agent.model.script.clone(),
        },
        deferred_tools: parent
            .deferred_tools
            .iter()
            .filter(|name| tools.contains(name))
            .cloned()
            .collect(),
        tools: Some(tools),
        permission: PermissionConfig { mode, allow, deny },
        hooks: parent.hooks.clone(),
        budgets: Budgets {
            max_turns: agent
                .budgets
                .max_turns
                .unwrap_or(parent.budgets.max_turns)
                .min(parent.budgets.max_turns),
            max_tokens,
        },
        context: Default::default(),
        approvals: parent.approvals.clone(),
        egress: parent.egress.clone(),
        network: parent.network,
        mcp_servers,
        use_mcp_servers: Vec::new(),
        // A subagent loads no skills of its own (the parent's unlocks reach it through the
        // copied unlock set).
        skills: Vec::new(),
        workspace_skills: false,
        metadata: Default::default(),
        // Nested subagents see the same definitions, under the same depth bound; the
        // `Agent` tool is offered only while `depth < agent_max_depth`.
        agents: if agent
            .tools
            .as_ref()
            .is_none_or(|t| t.iter().any(|t| t == AGENT_TOOL))
        {
            parent.agents.clone()
        } else {
            BTreeMap::new()
        },
        agent_max_depth: parent.agent_max_depth,
        subagent: Some(link),
    }
}

/// The agent types as the `Agent` tool describes them to the model.
pub fn describe(agents: &BTreeMap<String, AgentDefinition>) -> String {
    let mut text = String::from(
        "Start a subagent: a separate agent with its own context that works on the task in \
         `prompt` with a narrower set of tools and permissions, and answers with its final \
         message (the result of this call). Agent types:\n",
    );
    for (name, agent) in agents {
        text.push_str(&format!("- {name}: {}\n", agent.description));
    }
    text
}
