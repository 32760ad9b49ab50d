//! The MCP server entries (a session configuration's `mcp_servers`, the tenant's registry
//! `/v1/mcp-servers`), and their checks.

use super::secret::McpSecret;
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
const MAX_URL_BYTES: usize = 2048;
const MAX_HEADERS: usize = 16;
const MAX_HEADER_VALUE_BYTES: usize = 8192;
const MAX_TOKEN_BYTES: usize = 8192;
/// Headers the transport sets itself (a tenant cannot replace them).
const RESERVED_HEADERS: [&str; 10] = [
    "accept",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "transfer-encoding",
];

/// How the server is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A program started in the command sandbox, speaking MCP on its stdin and stdout.
    #[default]
    Stdio,
    /// A Streamable HTTP endpoint (`url`), reached through the egress client.
    Http,
}

/// One MCP server of a session (`mcp_servers[]`).
#[derive(Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// 1 to 32 characters from `[A-Za-z0-9_-]`, no `__`, not starting or ending with `_`;
    /// unique in the session. Its tools are named `mcp__<name>__<tool>`.
    pub name: String,
    /// `stdio` (the default: `command`, `args`, `env`) or `http` (`url`, `headers`,
    /// `bearer_token`).
    #[serde(default)]
    pub transport: McpTransport,
    /// `stdio`: the program (an absolute path, or a name found on the sandbox's `PATH`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// Its arguments (at most 64).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables given to the program besides the sandbox's `PATH`, `HOME`,
    /// `LANG` and `TERM` (at most 32; names `[A-Za-z_][A-Za-z0-9_]*`, not one of those four).
    /// The values are never returned by the API.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `http`: the Streamable HTTP endpoint (`http` or `https`, at most 2048 bytes, no
    /// user info). Reached through the egress client: a host that is not public is refused
    /// unless the operator lists its block in `egress.allow_private_cidrs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `http`: headers sent with every request (at most 16; not `Authorization` or a header
    /// the transport sets). The values are secrets: never returned by the API.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, String>)]
    pub headers: BTreeMap<String, McpSecret>,
    /// `http`: sent as `Authorization: Bearer <token>`. A secret: never returned by the API
    /// (shown as `<redacted>` when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub bearer_token: Option<McpSecret>,
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
    /// Lets the server ask the session's model (`sampling/createMessage`) during its tool
    /// calls, within these bounds; absent (the default): sampling is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<super::sampling::McpSampling>,
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
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("bearer_token", &self.bearer_token.is_some())
            .field("tools", &self.tools)
            .field("deferred", &self.deferred)
            .field("trusted", &self.trusted)
            .field("sampling", &self.sampling)
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

/// 1 to `max` bytes of visible ASCII or spaces (a header value that cannot split a header).
fn is_header_value(value: &str, max: usize) -> bool {
    (1..=max).contains(&value.len()) && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
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
        match self.transport {
            McpTransport::Stdio => self.validate_stdio()?,
            McpTransport::Http => self.validate_http()?,
        }
        self.validate_common()
    }

    fn validate_stdio(&self) -> Result<(), (String, String)> {
        let err = |field: &str, message: String| Err((field.to_owned(), message));
        let http_only = "only for the `http` transport".to_owned();
        if self.url.is_some() {
            return err("url", http_only);
        }
        if !self.headers.is_empty() {
            return err("headers", http_only);
        }
        if self.bearer_token.is_some() {
            return err("bearer_token", http_only);
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
        Ok(())
    }

    fn validate_http(&self) -> Result<(), (String, String)> {
        let err = |field: &str, message: String| Err((field.to_owned(), message));
        let stdio_only = "only for the `stdio` transport".to_owned();
        if !self.command.is_empty() {
            return err("command", stdio_only);
        }
        if !self.args.is_empty() {
            return err("args", stdio_only);
        }
        if !self.env.is_empty() {
            return err("env", stdio_only);
        }
        let Some(url) = &self.url else {
            return err("url", "required for the `http` transport".into());
        };
        if url.len() > MAX_URL_BYTES {
            return err("url", format!("at most {MAX_URL_BYTES} bytes"));
        }
        let parsed = match url::Url::parse(url) {
            Ok(parsed) => parsed,
            Err(error) => return err("url", format!("not a URL: {error}")),
        };
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return err("url", "an http or https URL with a host".into());
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return err(
                "url",
                "no user info in the URL: use `bearer_token` or `headers`".into(),
            );
        }
        if self.headers.len() > MAX_HEADERS {
            return err("headers", format!("at most {MAX_HEADERS} headers"));
        }
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return err("headers", format!("invalid header name {name:?}"));
            }
            if RESERVED_HEADERS.contains(&lower.as_str()) {
                return err(
                    "headers",
                    format!("{name} is set by the transport (use `bearer_token` for auth)"),
                );
            }
            if !is_header_value(value.expose(), MAX_HEADER_VALUE_BYTES) {
                return err(
                    "headers",
                    format!("{name}: 1 to {MAX_HEADER_VALUE_BYTES} visible ASCII characters"),
                );
            }
        }
        if let Some(token) = &self.bearer_token
            && !is_header_value(token.expose(), MAX_TOKEN_BYTES)
        {
            return err(
                "bearer_token",
                format!("1 to {MAX_TOKEN_BYTES} visible ASCII characters"),
            );
        }
        Ok(())
    }

    fn validate_common(&self) -> Result<(), (String, String)> {
        let err = |field: &str, message: String| Err((field.to_owned(), message));
        let placeholder = || {
            format!(
                "`{}` stands for a stored secret: send the value",
                super::secret::REDACTED
            )
        };
        if self.env.values().any(|v| v == super::secret::REDACTED) {
            return err("env", placeholder());
        }
        if self.headers.values().any(McpSecret::is_placeholder) {
            return err("headers", placeholder());
        }
        if self
            .bearer_token
            .as_ref()
            .is_some_and(McpSecret::is_placeholder)
        {
            return err("bearer_token", placeholder());
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
        if let Some(sampling) = &self.sampling {
            sampling
                .validate()
                .map_err(|(field, message)| (format!("sampling.{field}"), message))?;
        }
        Ok(())
    }

    /// The configuration as clients see it: environment values, header values and the
    /// bearer token are never returned (each shows as `<redacted>`).
    pub fn redacted(mut self) -> Self {
        for value in self.env.values_mut() {
            *value = super::secret::REDACTED.into();
        }
        for value in self.headers.values_mut() {
            *value = McpSecret::redacted();
        }
        if self.bearer_token.is_some() {
            self.bearer_token = Some(McpSecret::redacted());
        }
        self
    }

    /// `self` with every secret the client sent back as `<redacted>` replaced by the value
    /// `stored` has for it (a replace after a read); `Err(field)` when `stored` has none.
    pub fn keep_secrets_of(mut self, stored: &Self) -> Result<Self, String> {
        for (name, value) in &mut self.env {
            if value == super::secret::REDACTED {
                *value = stored
                    .env
                    .get(name)
                    .cloned()
                    .ok_or_else(|| "env".to_owned())?;
            }
        }
        for (name, value) in &mut self.headers {
            if value.is_placeholder() {
                *value = stored
                    .headers
                    .get(name)
                    .cloned()
                    .ok_or_else(|| "headers".to_owned())?;
            }
        }
        if self
            .bearer_token
            .as_ref()
            .is_some_and(McpSecret::is_placeholder)
        {
            self.bearer_token = Some(
                stored
                    .bearer_token
                    .clone()
                    .ok_or_else(|| "bearer_token".to_owned())?,
            );
        }
        Ok(self)
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

    #[test]
    fn http_entries_are_checked_and_their_secrets_redacted() {
        let ok = json!({"name": "docs", "transport": "http", "url": "https://mcp.example.com/mcp",
                        "bearer_token": "tok", "headers": {"X-Team": "t1"}});
        let server = entry(ok.clone());
        assert!(server.validate().is_ok());
        let debug = format!("{server:?}");
        assert!(!debug.contains("tok\"") && !debug.contains("t1"), "{debug}");
        let shown = server.clone().redacted();
        assert_eq!(shown.bearer_token.as_ref().unwrap().expose(), "<redacted>");
        assert_eq!(shown.headers["X-Team"].expose(), "<redacted>");
        // Sent back as shown, the secrets keep their stored values.
        assert_eq!(shown.keep_secrets_of(&server).unwrap(), server);
        let mut without = server.clone();
        without.bearer_token = None;
        assert_eq!(
            server
                .clone()
                .redacted()
                .keep_secrets_of(&without)
                .unwrap_err(),
            "bearer_token"
        );
        let with = |extra: serde_json::Value| {
            let mut value = ok.clone();
            value
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            entry(value)
        };
        for (extra, field) in [
            (json!({"url": "file:///etc/passwd"}), "url"),
            (json!({"url": "https://a:b@x.example/"}), "url"),
            (json!({"command": "x"}), "command"),
            (json!({"env": {"A": "b"}}), "env"),
            (json!({"headers": {"Mcp-Session-Id": "x"}}), "headers"),
            (json!({"headers": {"X-A": "a\nb"}}), "headers"),
            (json!({"bearer_token": "<redacted>"}), "bearer_token"),
        ] {
            assert_eq!(
                with(extra.clone()).validate().unwrap_err().0,
                field,
                "{extra}"
            );
        }
        let stdio_with_url =
            entry(json!({"name": "s", "command": "x", "url": "https://x.example"}));
        assert_eq!(stdio_with_url.validate().unwrap_err().0, "url");
    }
}
