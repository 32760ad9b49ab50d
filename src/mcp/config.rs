//! The `mcp_servers` entries of a session configuration, and their checks.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// At most this many MCP servers per session.
pub const MAX_SERVERS: usize = 8;
const MAX_NAME_CHARS: usize = 32;
const MAX_COMMAND_BYTES: usize = 4096;
const MAX_ARGS: usize = 64;
const MAX_ARG_BYTES: usize = 4096;
const MAX_ENV: usize = 32;
const MAX_ENV_VALUE_BYTES: usize = 8192;
const MAX_TOOLS: usize = 256;
/// Tool call timeout bounds (seconds).
const MAX_TIMEOUT_SECONDS: u64 = 3600;

/// How the server is reached. Only `stdio` is built so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A program started in the command sandbox, speaking MCP on its stdin and stdout.
    #[default]
    Stdio,
}

/// One MCP server of a session (`mcp_servers[]`).
#[derive(Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// 1 to 32 characters from `[A-Za-z0-9_-]`, no `__`, not starting or ending with `_`;
    /// unique in the session. Its tools are named `mcp__<name>__<tool>`.
    pub name: String,
    #[serde(default)]
    pub transport: McpTransport,
    /// The program (an absolute path, or a name found on the sandbox's `PATH`).
    pub command: String,
    /// Its arguments (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables given to the program besides the sandbox's `PATH`, `HOME`,
    /// `LANG` and `TERM` (at most 32; names `[A-Za-z_][A-Za-z0-9_]*`, not one of those four).
    /// The values are never returned by the API.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The server's tools offered to the model (its own names, without the prefix); default:
    /// every tool it lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Hide the server's tools behind `SearchExtraTools` / `ExecuteExtraTool`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
    /// Honour the server's `readOnlyHint` annotations (read-only tools then run without
    /// approval and concurrently). Only a token with the `tenant:admin` scope may set it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
    /// Seconds one tool call may take (1..=3600, default 300); then `TOOL_TIMEOUT`.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
}

fn default_timeout() -> u64 {
    300
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("tools", &self.tools)
            .field("deferred", &self.deferred)
            .field("trusted", &self.trusted)
            .finish()
    }
}

/// Whether `name` may name an MCP server (see [`McpServerConfig::name`]).
pub fn is_valid_server_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= 128
}

impl McpServerConfig {
    /// The checks of one entry: `Err((field under the entry, message))`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let err = |field: &str, message: String| Err((field.to_owned(), message));
        if !is_valid_server_name(&self.name) {
            return err(
                "name",
                format!(
                    "use 1 to {MAX_NAME_CHARS} characters from [A-Za-z0-9_-], without `__` \
                     and not starting or ending with `_`"
                ),
            );
        }
        if self.command.is_empty() || self.command.len() > MAX_COMMAND_BYTES {
            return err("command", format!("1 to {MAX_COMMAND_BYTES} bytes"));
        }
        if self.command.contains('\0') || self.args.iter().any(|arg| arg.contains('\0')) {
            return err("command", "NUL bytes are not allowed".into());
        }
        if self.args.len() > MAX_ARGS || self.args.iter().any(|a| a.len() > MAX_ARG_BYTES) {
            return err(
                "args",
                format!("at most {MAX_ARGS} arguments of at most {MAX_ARG_BYTES} bytes"),
            );
        }
        if self.env.len() > MAX_ENV {
            return err("env", format!("at most {MAX_ENV} variables"));
        }
        for (name, value) in &self.env {
            if !is_valid_env_name(name) {
                return err("env", format!("invalid variable name {name:?}"));
            }
            if crate::sandbox::env::ALLOWED_VARS.contains(&name.as_str()) {
                return err("env", format!("{name} is set by the sandbox"));
            }
            if value.len() > MAX_ENV_VALUE_BYTES || value.contains('\0') {
                return err(
                    "env",
                    format!("{name}: at most {MAX_ENV_VALUE_BYTES} bytes, no NUL"),
                );
            }
        }
        if let Some(tools) = &self.tools {
            if tools.len() > MAX_TOOLS {
                return err("tools", format!("at most {MAX_TOOLS} names"));
            }
            if let Some(bad) = tools.iter().find(|t| !is_valid_tool_part(&self.name, t)) {
                return err(
                    "tools",
                    format!("`mcp__{}__{bad}` is not a valid tool name", self.name),
                );
            }
        }
        if !(1..=MAX_TIMEOUT_SECONDS).contains(&self.timeout_seconds) {
            return err(
                "timeout_seconds",
                format!("must be between 1 and {MAX_TIMEOUT_SECONDS}"),
            );
        }
        Ok(())
    }

    /// The configuration as clients see it: environment values are never returned.
    pub fn redacted(mut self) -> Self {
        for value in self.env.values_mut() {
            *value = "<redacted>".into();
        }
        self
    }
}

/// The registry name of `tool` of server `server`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// Whether a server's tool gets a registry name (`mcp__<server>__<tool>` of at most 64
/// characters from `[A-Za-z0-9_-]`).
pub fn is_valid_tool_part(server: &str, tool: &str) -> bool {
    !tool.is_empty() && crate::tools::registry::is_valid_tool_name(&tool_name(server, tool))
}

/// Checks a session's list: each entry, unique names, the count.
pub fn validate_servers(servers: &[McpServerConfig]) -> Result<(), (String, String)> {
    if servers.len() > MAX_SERVERS {
        return Err((
            "mcp_servers".into(),
            format!("at most {MAX_SERVERS} servers"),
        ));
    }
    for (index, server) in servers.iter().enumerate() {
        server
            .validate()
            .map_err(|(field, message)| (format!("mcp_servers[{index}].{field}"), message))?;
        if servers[..index].iter().any(|s| s.name == server.name) {
            return Err((
                format!("mcp_servers[{index}].name"),
                format!("duplicate server name `{}`", server.name),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(value: serde_json::Value) -> McpServerConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn server_names_are_checked() {
        for good in ["github", "my-server", "a_b", "A1"] {
            assert!(is_valid_server_name(good), "{good}");
        }
        for bad in ["", "a__b", "_a", "a_", "a.b", "a b", &"x".repeat(33)] {
            assert!(!is_valid_server_name(bad), "{bad}");
        }
    }

    #[test]
    fn entries_are_checked_with_their_field() {
        let ok = json!({"name": "gh", "command": "/usr/bin/gh-mcp", "env": {"GH_TOKEN": "t"}});
        assert!(validate_servers(&[entry(ok.clone())]).is_ok());
        let cases = [
            (
                json!({"name": "a__b", "command": "x"}),
                "mcp_servers[0].name",
            ),
            (
                json!({"name": "gh", "command": ""}),
                "mcp_servers[0].command",
            ),
            (
                json!({"name": "gh", "command": "x", "env": {"PATH": "/x"}}),
                "mcp_servers[0].env",
            ),
            (
                json!({"name": "gh", "command": "x", "env": {"1X": "v"}}),
                "mcp_servers[0].env",
            ),
            (
                json!({"name": "gh", "command": "x", "tools": ["a b"]}),
                "mcp_servers[0].tools",
            ),
            (
                json!({"name": "gh", "command": "x", "timeout_seconds": 0}),
                "mcp_servers[0].timeout_seconds",
            ),
        ];
        for (value, field) in cases {
            let (got, _) = validate_servers(&[entry(value.clone())]).unwrap_err();
            assert_eq!(got, field, "{value}");
        }
        let (field, message) = validate_servers(&[entry(ok.clone()), entry(ok)]).unwrap_err();
        assert_eq!(field, "mcp_servers[1].name");
        assert!(message.contains("duplicate"));
        let many: Vec<_> = (0..9)
            .map(|i| entry(json!({"name": format!("s{i}"), "command": "x"})))
            .collect();
        assert_eq!(validate_servers(&many).unwrap_err().0, "mcp_servers");
    }

    #[test]
    fn env_values_are_redacted_and_hidden_from_debug() {
        let server = entry(json!({"name": "gh", "command": "x", "env": {"GH_TOKEN": "s3cret"}}));
        assert!(!format!("{server:?}").contains("s3cret"));
        assert_eq!(server.redacted().env["GH_TOKEN"], "<redacted>");
    }
}
