//! A session's configuration, validated strictly when the session is created: unknown fields,
//! wrong types and out-of-range values are refused with a field path.

use crate::egress::AddressPolicy;
use crate::permission::PermissionMode;
use crate::signing::WebhookSecret;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::net::IpAddr;
use utoipa::ToSchema;

/// Why a session configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{field}: {message}")]
pub struct ConfigViolation {
    /// Dotted path of the offending field (e.g. `budgets.max_turns`).
    pub field: String,
    pub message: String,
    /// A stable reason code, for the checks that have one (`context`: `NOA_…`).
    pub reason: Option<&'static str>,
}

impl ConfigViolation {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
            reason: None,
        }
    }
}

/// What a client may configure for a session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionConfig {
    /// A display title (at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200)]
    pub title: Option<String>,
    /// The system prompt sent with every model request (at most 200,000 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 200_000)]
    pub system_prompt: Option<String>,
    /// Model settings; the provider itself (kind, endpoint, key) is server configuration.
    #[serde(default)]
    pub model: ModelConfig,
    /// Built-in tools offered to the model (default: every built-in tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = optional_tool_names)]
    pub tools: Option<Vec<String>>,
    /// Built-in tools whose schemas are hidden from the model; it finds them with
    /// `SearchExtraTools` and runs them with `ExecuteExtraTool`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(schema_with = tool_names)]
    pub deferred_tools: Vec<String>,
    #[serde(default)]
    pub permission: PermissionConfig,
    /// Hooks (in-process by catalog name, or remote signed webhooks), at most the server's
    /// `limits.hooks_per_session`; names unique in the session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::hooks::runner::HookConfig>,
    #[serde(default)]
    pub budgets: Budgets,
    /// The context policy of the session's runs: the built-in compaction (default) or Noa
    /// (`{"policy": "noa", …}`; see README "Noa").
    #[serde(
        default,
        skip_serializing_if = "crate::noa::ContextSettings::is_default"
    )]
    pub context: crate::noa::ContextSettings,
    #[serde(default)]
    pub approvals: ApprovalConfig,
    /// Outbound requests of this session's tools (WebFetch).
    #[serde(default, skip_serializing_if = "SessionEgress::is_default")]
    pub egress: SessionEgress,
    /// The network of the session's commands (Bash, background tasks, shells): `none` (the
    /// default) or `egress` — only the session's egress proxy, which decides every
    /// destination (`HTTP_PROXY`/`HTTPS_PROXY` are set; nothing else leaves). Any other value
    /// is `422 INVALID_REQUEST`.
    #[serde(default, skip_serializing_if = "is_no_network")]
    pub network: crate::sandbox::CommandNetwork,
    /// MCP servers whose tools the session offers as `mcp__<server>__<tool>` (at most 8; see
    /// README "MCP servers"). `trusted` needs a token with the `tenant:admin` scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 8)]
    pub mcp_servers: Vec<crate::mcp::McpServerConfig>,
    /// Names of MCP servers the tenant registered (`/v1/mcp-servers`) that the session uses.
    /// At creation each one's entry is copied into `mcp_servers` (so the stored and shown
    /// configuration lists it there); an unknown name, or one `mcp_servers` also declares,
    /// is `422` naming `use_mcp_servers[i]`. At most 8 servers in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub use_mcp_servers: Vec<String>,
    /// Named subagent types the model may start with the `Agent` tool (at most 16; see
    /// README "Subagents"). Each one can only narrow this session's policy: a definition
    /// that would widen it is `422 INVALID_REQUEST` with `details.reason` =
    /// `SUBAGENT_…`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub agents: std::collections::BTreeMap<String, crate::subagents::AgentDefinition>,
    /// How deep subagents may nest: 1 (default) lets this session start subagents that
    /// cannot start their own; at most 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 3)]
    pub agent_max_depth: Option<u8>,
    /// Set by the server on a subagent's own session (its parent session, run and `Agent`
    /// call); a client that sends it gets `422` (`SUBAGENT_LINK_RESERVED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<crate::subagents::SubagentLink>,
    /// Skills the tenant registered (`/v1/skills`) that the model may load with the `Skill`
    /// tool: names (each must be registered when the session is created: else `422` naming
    /// `skills[i]`), or `["*"]` for every skill the tenant has registered when a run starts.
    /// At most 64. See README "Skills".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 64)]
    pub skills: Vec<String>,
    /// Also offer the skills shipped in the session's workspace
    /// (`.norma/skills/<name>/SKILL.md`), read when each run starts.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workspace_skills: bool,
    /// Free-form client data kept with the session (at most 16 KiB as JSON).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
}

/// A session's egress rules: `domain:HOST`, `domain:*.HOST`, optionally `:PORT`. Deny wins
/// over every allow (the server's and the tenant's included); an allowed host is fetched
/// without asking, a host no rule names goes up the permission ladder (`WebFetch(domain:…)`).
/// A malformed rule is `422 INVALID_REQUEST` (`details.field` = `egress.allow` / `egress.deny`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionEgress {
    /// At most 256 rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 256)]
    pub allow: Vec<String>,
    /// At most 256 rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 256)]
    pub deny: Vec<String>,
    /// Lets WebFetch fetch URLs that appear nowhere in the conversation (by default it only
    /// fetches URLs the user, the model or an earlier tool result wrote: an exfiltration
    /// guard, refused with `EGRESS_DENIED` reason `url_not_in_context`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fetch_any_url: bool,
}

impl SessionEgress {
    fn is_default(&self) -> bool {
        self == &Self::default()
    }
}

fn is_no_network(network: &crate::sandbox::CommandNetwork) -> bool {
    *network == crate::sandbox::CommandNetwork::None
}

/// Per-session model settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Overrides the server's model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Output tokens per request (1..=128000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 128_000)]
    pub max_tokens: Option<u32>,
    /// A script for the scripted provider (offline demos and tests): `{"turns": [{"text",
    /// "tool_calls": [{"name", "input"}], "when_last_tool_result_contains", "delay_ms"}],
    /// "per_prompt"}` (`delay_ms` at most 10000)
    /// (README "Configuration, development mode and scripted turns"), checked at creation.
    /// Only where the server allows scripts (development mode or `allow_session_scripts`);
    /// elsewhere `422 INVALID_REQUEST` with `details.field` = `model.script`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub script: Option<Value>,
}

/// Permission mode and rules (SPEC.md N5–N7, D2).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionConfig {
    #[serde(default)]
    pub mode: PermissionMode,
    /// Allow rules (at most 256): `*`, `Name`, or `Name(spec)`. `Name` must be a built-in
    /// tool, `WebFetch` or `mcp__<server>__<tool>` (case-sensitive), and `spec` must fit it
    /// (none for tools that only match by name; a path glob for file tools, a command prefix
    /// `Bash(git status:*)` or pattern for Bash, `domain:HOST` for WebFetch); otherwise
    /// `422 INVALID_REQUEST` with `details.field` = `permission.allow[i]`. `Bash(...)` rules
    /// also judge ShellStart and ShellWrite.
    #[serde(default)]
    #[schema(max_items = 256)]
    pub allow: Vec<String>,
    /// Deny rules (at most 256; same syntax and checks); they beat every mode, including
    /// bypass.
    #[serde(default)]
    #[schema(max_items = 256)]
    pub deny: Vec<String>,
}

/// How approval requests of this session behave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Seconds an approval request waits for an answer (1..=86400, default 600).
    #[serde(default = "default_approval_timeout")]
    #[schema(minimum = 1, maximum = 86_400)]
    pub timeout_seconds: u64,
    /// The decision when nobody answers in time (default `deny`, reported as `APPROVAL_EXPIRED`).
    #[serde(default)]
    pub on_timeout: TimeoutDecision,
    /// The policy service approval requests are POSTed to (signed); answers may come in its
    /// response or over REST.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookConfig>,
    /// What a new prompt does while the session's run waits on an approval: `reject` it
    /// (`409 APPROVAL_PENDING`, default) or `deny` the pending calls and go on with the new
    /// prompt (the run reads the denial and finishes; the new prompt runs next, ahead of
    /// anything queued).
    #[serde(default)]
    pub on_new_prompt: PendingPromptPolicy,
}

/// What a new prompt does while an approval is pending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PendingPromptPolicy {
    #[default]
    Reject,
    Deny,
}

fn default_approval_timeout() -> u64 {
    600
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: default_approval_timeout(),
            on_timeout: Default::default(),
            webhook: None,
            on_new_prompt: Default::default(),
        }
    }
}

/// Limits of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// Main (tool-use) turns per run, 1..=1000 (default 50).
    #[serde(default = "default_max_turns")]
    #[schema(minimum = 1, maximum = 1000)]
    pub max_turns: u32,
    /// Total input + output tokens per run, when set (at least 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1000)]
    pub max_tokens: Option<u64>,
}

fn default_max_turns() -> u32 {
    50
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            max_turns: default_max_turns(),
            max_tokens: None,
        }
    }
}

/// Names of the built-in tools a session may enable.
pub const BUILTIN_TOOLS: [&str; 25] = [
    "AskUserQuestion",
    "TodoWrite",
    "EnterPlanMode",
    "ExitPlanMode",
    "Memory",
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "LS",
    "Glob",
    "Grep",
    "Bash",
    "TaskOutput",
    "TaskStop",
    "TaskList",
    "Monitor",
    "ShellStart",
    "ShellWrite",
    "ShellRead",
    "ShellResize",
    "ShellClose",
    "WebFetch",
    "WebSearch",
];

/// The schema of a list of built-in tool names (each one of [`BUILTIN_TOOLS`]).
fn tool_names() -> utoipa::openapi::schema::Array {
    let names = utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(BUILTIN_TOOLS));
    utoipa::openapi::schema::Array::new(names)
}

/// [`tool_names`], or `null`.
fn optional_tool_names() -> utoipa::openapi::schema::Array {
    let mut array = tool_names();
    array.schema_type = utoipa::openapi::schema::SchemaType::from_iter([
        utoipa::openapi::Type::Array,
        utoipa::openapi::Type::Null,
    ]);
    array
}

impl SessionConfig {
    /// The configuration as clients see it: hook secrets and MCP server environment values
    /// are never returned.
    pub fn redacted(mut self) -> Self {
        self.mcp_servers = std::mem::take(&mut self.mcp_servers)
            .into_iter()
            .map(crate::mcp::McpServerConfig::redacted)
            .collect();
        if let Some(webhook) = &mut self.approvals.webhook {
            webhook.secret = "<redacted>".into();
        }
        for hook in &mut self.hooks {
            if let crate::hooks::runner::HookHandlerConfig::Remote { secret, .. } =
                &mut hook.handler
            {
                *secret = "<redacted>".into();
            }
        }
        self
    }
}

const MAX_TITLE_CHARS: usize = 200;
const MAX_SYSTEM_PROMPT_CHARS: usize = 200_000;
const MAX_METADATA_BYTES: usize = 16 * 1024;
const MAX_RULES: usize = 256;

impl SessionConfig {
    /// Parses a JSON body, naming the field that failed.
    pub fn from_json(value: Value) -> Result<Self, ConfigViolation> {
        if !value.is_object() {
            return Err(ConfigViolation::new("(root)", "must be a JSON object"));
        }
        let config: SessionConfig = serde_path_to_error::deserialize(value).map_err(|error| {
            let path = error.path().to_string();
            ConfigViolation::new(
                // An unknown empty key has an empty path: name the object it is in.
                if path == "." || path.is_empty() {
                    "(root)".into()
                } else {
                    path
                },
                error.into_inner().to_string(),
            )
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Range and consistency checks that types cannot express.
    pub fn validate(&self) -> Result<(), ConfigViolation> {
        if let Some(title) = &self.title
            && title.chars().count() > MAX_TITLE_CHARS
        {
            return Err(ConfigViolation::new(
                "title",
                format!("at most {MAX_TITLE_CHARS} characters"),
            ));
        }
        if let Some(prompt) = &self.system_prompt
            && prompt.chars().count() > MAX_SYSTEM_PROMPT_CHARS
        {
            return Err(ConfigViolation::new(
                "system_prompt",
                format!("at most {MAX_SYSTEM_PROMPT_CHARS} characters"),
            ));
        }
        if !(1..=86_400).contains(&self.approvals.timeout_seconds) {
            return Err(ConfigViolation::new(
                "approvals.timeout_seconds",
                "must be between 1 and 86400",
            ));
        }
        if !(1..=1000).contains(&self.budgets.max_turns) {
            return Err(ConfigViolation::new(
                "budgets.max_turns",
                "must be between 1 and 1000",
            ));
        }
        if let Err(violation) = self.context.noa() {
            return Err(ConfigViolation {
                field: violation.field.into(),
                message: violation.message,
                reason: Some(violation.reason),
            });
        }
        if self.budgets.max_tokens.is_some_and(|tokens| tokens < 1000) {
            return Err(ConfigViolation::new(
                "budgets.max_tokens",
                "must be at least 1000",
            ));
        }
        for (field, rules) in [
            ("permission.allow", &self.permission.allow),
            ("permission.deny", &self.permission.deny),
        ] {
            if rules.len() > MAX_RULES {
                return Err(ConfigViolation::new(
                    field,
                    format!("at most {MAX_RULES} rules"),
                ));
            }
        }
        for (field, rules) in [
            ("egress.allow", &self.egress.allow),
            ("egress.deny", &self.egress.deny),
        ] {
            if rules.len() > MAX_RULES {
                return Err(ConfigViolation::new(
                    field,
                    format!("at most {MAX_RULES} rules"),
                ));
            }
            crate::egress::DomainLists::parse(rules, &[])
                .map_err(|error| ConfigViolation::new(field, error))?;
        }
        if self
            .model
            .max_tokens
            .is_some_and(|n| !(1..=128_000).contains(&n))
        {
            return Err(ConfigViolation::new(
                "model.max_tokens",
                "must be between 1 and 128000",
            ));
        }
        if let Some(script) = &self.model.script {
            crate::llm::scripted::ScriptedProvider::new(Some(script))
                .map_err(|error| ConfigViolation::new("model.script", error.to_string()))?;
        }
        if let Some(tools) = &self.tools
            && let Some(unknown) = tools
                .iter()
                .find(|name| !BUILTIN_TOOLS.contains(&name.as_str()))
        {
            return Err(ConfigViolation::new(
                "tools",
                format!("unknown tool `{unknown}`"),
            ));
        }
        if let Some(unknown) = self
            .deferred_tools
            .iter()
            .find(|name| !BUILTIN_TOOLS.contains(&name.as_str()))
        {
            return Err(ConfigViolation::new(
                "deferred_tools",
                format!("unknown tool `{unknown}`"),
            ));
        }
        crate::hooks::runner::HookRunner::from_config(
            &self.hooks,
            &crate::hooks::runner::HookCatalog::new(),
        )
        .map_err(|error| ConfigViolation::new("hooks", error.to_string()))?;
        crate::permission::RuleSet::parse_located(&self.permission.allow, &self.permission.deny)
            .and_then(|rules| rules.check_targets(crate::tools::builtin::rule_targets::rule_target))
            .map_err(|(list, index, error)| {
                ConfigViolation::new(format!("permission.{list}[{index}]"), error.to_string())
            })?;
        crate::mcp::config::validate_servers(&self.mcp_servers)
            .map_err(|(field, message)| ConfigViolation::new(field, message))?;
        crate::mcp::registry::validate_uses(&self.use_mcp_servers)
            .map_err(|(field, message)| ConfigViolation::new(field, message))?;
        crate::subagents::validate(self)?;
        crate::skills::validate_session_skills(&self.skills)
            .map_err(|(field, message)| ConfigViolation::new(field, message))?;
        let metadata_size = serde_json::to_vec(&self.metadata).map_or(usize::MAX, |v| v.len());
        if metadata_size > MAX_METADATA_BYTES {
            return Err(ConfigViolation::new(
                "metadata",
                format!("at most {MAX_METADATA_BYTES} bytes as JSON"),
            ));
        }
        Ok(())
    }
}

/// What to do when nobody answers in time.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutDecision {
    #[default]
    Deny,
    Allow,
}

/// Where a session's approval requests are posted.
#[derive(Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `https://…` (or `http://…`) endpoint of the policy service.
    pub url: String,
    /// Signing secret, `whsec_<base64>` or raw text. Never returned by the API.
    pub secret: String,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl WebhookConfig {
    /// Checks what can be checked without the network: scheme, host, secret, and literal IPs
    /// against `policy` (a host name is checked when it is resolved, at delivery).
    pub fn validate(&self, policy: &AddressPolicy) -> Result<(), String> {
        let url = url::Url::parse(&self.url).map_err(|e| format!("invalid url: {e}"))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err("the url must be http(s)".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("the url must not carry credentials".into());
        }
        WebhookSecret::parse(&self.secret).map_err(|e| format!("invalid secret: {e}"))?;
        let literal = match url.host() {
            None => return Err("the url has no host".into()),
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            Some(url::Host::Domain(_)) => return Ok(()),
        };
        policy
            .check(literal)
            .map_err(|range| format!("{literal} is not a public address ({range})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_apply_to_an_empty_object() {
        let config = SessionConfig::from_json(json!({})).unwrap();
        assert_eq!(config.budgets.max_turns, 50);
        assert_eq!(config.permission.mode, PermissionMode::Default);
    }

    #[test]
    fn known_rule_targets_are_accepted() {
        for rule in [
            "*",
            "Memory",
            "TodoWrite",
            "Bash(git status:*)",
            "Read(src/**)",
            "Grep(**/*.rs)",
            "WebFetch(domain:*.docs.rs)",
            "ShellStart(rm:*)",
            "ShellWrite(git status:*)",
            "SearchExtraTools",
            "ExecuteExtraTool",
            "AskUserQuestion",
            "mcp__github__create_issue",
            "mcp__github__create_issue(anything)",
        ] {
            let body = json!({"permission": {"allow": [rule], "deny": [rule]}});
            SessionConfig::from_json(body).unwrap_or_else(|e| panic!("{rule}: {e}"));
        }
    }

    #[test]
    fn violations_name_the_field() {
        let cases = [
            (json!({"titel": "x"}), "titel"),
            (
                json!({"budgets": {"max_turns": "ten"}}),
                "budgets.max_turns",
            ),
            (json!({"budgets": {"max_turns": 0}}), "budgets.max_turns"),
            (json!({"budgets": {"max_tokens": 5}}), "budgets.max_tokens"),
            (json!({"permission": {"mode": "yolo"}}), "permission.mode"),
            (json!({"permission": {"allow": [1]}}), "permission.allow[0]"),
            (json!({"title": "t".repeat(201)}), "title"),
            (json!({"metadata": {"big": "x".repeat(17_000)}}), "metadata"),
            (json!([]), "(root)"),
            (json!({"": 1}), "(root)"),
            (
                json!({"permission": {"allow": ["Bash(git status:*"]}}),
                "permission.allow[0]",
            ),
            (
                json!({"permission": {"deny": ["Bash(ls)", "WebFetch(domain:)"]}}),
                "permission.deny[1]",
            ),
            (
                json!({"permission": {"deny": ["(x)"]}}),
                "permission.deny[0]",
            ),
            // D2: unknown tools and arguments on tools that only match by name.
            (
                json!({"permission": {"deny": ["bash(rm:*)"]}}),
                "permission.deny[0]",
            ),
            (
                json!({"permission": {"allow": ["Read", "Memory(x)"]}}),
                "permission.allow[1]",
            ),
            (
                json!({"permission": {"deny": ["TodoWrite(x)"]}}),
                "permission.deny[0]",
            ),
            (
                json!({"permission": {"allow": ["mcp__srv__"]}}),
                "permission.allow[0]",
            ),
            (
                json!({"permission": {"allow": ["ShellStart(src/**)"]}}),
                "permission.allow[0]",
            ),
            (
                json!({"permission": {"allow": ["Bash", "Deploy"]}}),
                "permission.allow[1]",
            ),
        ];
        for (body, field) in cases {
            let error = SessionConfig::from_json(body.clone()).unwrap_err();
            assert_eq!(error.field, field, "{body} -> {error}");
        }
    }
}

#[cfg(test)]
#[path = "session_config_fuzz.rs"]
mod fuzz;
