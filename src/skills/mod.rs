//! Skills: named bundles of instructions (a `SKILL.md`: Markdown with front matter), optional
//! files, and the deferred tools they unlock. A tenant's administrator registers them over
//! REST (`/v1/skills`, [`crate::api::skills`]) or a session ships them in its workspace
//! (`.norma/skills/<name>/SKILL.md`, [`workspace`]); the model loads one with the `Skill`
//! tool ([`tool`]).
//!
//! A skill never adds power: loading it only unlocks tools the session already has as
//! deferred tools (through the session's durable unlock set, like `SearchExtraTools`), never
//! a tool the session's rules deny by name, and every call still goes through the whole
//! pipeline (schema, permission, hooks, approvals).
//!
//! Everything a tenant controls is bounded here: the `SKILL.md` size, the front matter (see
//! [`front_matter`]), the name, the description, the tool list, the files (count, paths,
//! sizes) and the bundle's total.

pub mod front_matter;
pub mod tool;
pub mod workspace;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The most bytes of a `SKILL.md` (front matter and instructions): its instructions are the
/// `Skill` tool's result, which the model sees whole under the default output cap.
pub const MAX_SKILL_BYTES: usize = 24 * 1024;
/// The most bytes of one file of a skill.
pub const MAX_FILE_BYTES: usize = 24 * 1024;
/// The most files of a skill.
pub const MAX_FILES: usize = 16;
/// The most bytes of a skill's `SKILL.md` and files together.
pub const MAX_BUNDLE_BYTES: usize = 256 * 1024;
/// The most characters of a skill's name.
pub const MAX_NAME_CHARS: usize = 64;
/// The most characters of a skill's description.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The most tools one skill unlocks.
pub const MAX_TOOLS: usize = 32;
/// The most bytes of a file path of a skill.
pub const MAX_PATH_BYTES: usize = 256;
/// The most skills a session names in `skills`.
pub const MAX_SESSION_SKILLS: usize = 64;

/// The `SKILL.md` of a workspace skill, and where they live.
pub const SKILL_FILE: &str = "SKILL.md";
pub const WORKSPACE_SKILLS_DIR: &str = ".norma/skills";

/// Stable reason codes of a refused skill (`details.reason` of a `422`, or the text of a
/// `SKILL_INVALID` tool result for a workspace skill).
pub mod reasons {
    /// The front matter is missing, malformed, or has an unknown or missing key.
    pub const FRONT_MATTER: &str = "SKILL_FRONT_MATTER_INVALID";
    /// The name is not 1–64 characters of `a-z`, `0-9` and single inner `-`.
    pub const NAME: &str = "SKILL_NAME_INVALID";
    /// The description is empty, longer than 1,024 characters, or has a line break.
    pub const DESCRIPTION: &str = "SKILL_DESCRIPTION_INVALID";
    /// A tool in `tools` is not a tool a session can have (or is a wrapper or `Skill`).
    pub const UNKNOWN_TOOL: &str = "SKILL_UNKNOWN_TOOL";
    /// The `SKILL.md`, a file, or the whole bundle is over its size.
    pub const TOO_LARGE: &str = "SKILL_TOO_LARGE";
    /// More than 16 files, or more than 32 tools.
    pub const TOO_MANY: &str = "SKILL_TOO_MANY";
    /// A file path is not a relative path of plain names, or is given twice.
    pub const FILE_PATH: &str = "SKILL_FILE_PATH_INVALID";
}

/// The name of the tool that loads skills.
pub const SKILL_TOOL: &str = "Skill";

/// Why a skill was refused: a stable reason, the field, and a message for people.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SkillError {
    pub reason: &'static str,
    pub field: String,
    pub message: String,
}

impl SkillError {
    fn new(reason: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason,
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A parsed and checked `SKILL.md`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillDefinition {
    pub name: String,
    pub description: String,
    /// The deferred tools the skill unlocks when loaded.
    pub tools: Vec<String>,
    /// The Markdown after the front matter.
    pub instructions: String,
}

/// One file of a skill, as registered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillFile {
    /// A relative path of plain names separated by `/` (at most 256 bytes; no `.`, `..`,
    /// empty or hidden parts; not `SKILL.md`).
    #[schema(min_length = 1, max_length = 256)]
    pub path: String,
    /// UTF-8 text, at most 24 KiB.
    #[schema(max_length = 24576)]
    pub content: String,
}

/// What `POST /v1/skills` takes: the `SKILL.md` text and the skill's files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSkillBody {
    /// The `SKILL.md`: front matter (`name`, `description`, `tools`) between `---` lines,
    /// then the instructions in Markdown. At most 24 KiB.
    #[schema(min_length = 1, max_length = 24576)]
    pub content: String,
    /// Files the model can read with `Skill {"name", "file"}` (at most 16; the bundle at
    /// most 256 KiB).
    #[serde(default)]
    #[schema(max_items = 16)]
    pub files: Vec<SkillFile>,
}

/// Whether `name` is a valid skill name: 1–64 of `a-z`, `0-9`, `-`, not starting or ending
/// with `-`, no `--`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Whether a skill may list `tool`: a tool a session can have (a built-in rule target or an
/// MCP tool name), other than the deferred-tool wrappers and `Skill` itself.
pub fn is_unlockable_tool(tool: &str) -> bool {
    tool.len() <= 128
        && !matches!(
            tool,
            crate::tools::deferred::SEARCH_EXTRA_TOOLS
                | crate::tools::deferred::EXECUTE_EXTRA_TOOL
                | SKILL_TOOL
        )
        && crate::tools::builtin::rule_targets::rule_target(tool).is_some()
}

/// Parses and checks a `SKILL.md` (`field` names it in errors: `content` for a registered
/// skill).
pub fn parse_skill_md(text: &str, field: &str) -> Result<SkillDefinition, SkillError> {
    use front_matter::Value;
    if text.len() > MAX_SKILL_BYTES {
        return Err(SkillError::new(
            reasons::TOO_LARGE,
            field,
            format!(
                "SKILL.md is {} bytes, at most {MAX_SKILL_BYTES}",
                text.len()
            ),
        ));
    }
    let parsed = front_matter::parse(text)
        .map_err(|message| SkillError::new(reasons::FRONT_MATTER, field, message))?;
    let front = |message: String| SkillError::new(reasons::FRONT_MATTER, field, message);
    let mut name = None;
    let mut description = None;
    let mut tools: Option<Vec<String>> = None;
    for (key, value) in parsed.fields {
        match (key.as_str(), value) {
            ("name", Value::Text(text)) => name = Some(text),
            ("description", Value::Text(text)) => description = Some(text),
            ("tools" | "allowed-tools", value) => {
                if tools.is_some() {
                    return Err(front("give either `tools` or `allowed-tools`".into()));
                }
                tools = Some(match value {
                    Value::List(items) => items,
                    // `allowed-tools: Read, Grep` (the comma- or space-separated form).
                    Value::Text(text) => text
                        .split([',', ' '])
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect(),
                });
            }
            ("license" | "version", Value::Text(_)) => {}
            (key @ ("name" | "description" | "license" | "version"), Value::List(_)) => {
                return Err(front(format!("`{key}` must be text, not a list")));
            }
            (key, _) => {
                return Err(front(format!(
                    "unknown key `{key}` (known: name, description, tools, allowed-tools, \
                     license, version)"
                )));
            }
        }
    }
    let name = name.ok_or_else(|| front("`name` is missing".into()))?;
    if !is_valid_name(&name) {
        return Err(SkillError::new(
            reasons::NAME,
            field,
            format!(
                "`{}` is not a valid skill name (1-{MAX_NAME_CHARS} of a-z, 0-9 and single \
                 inner `-`)",
                name.chars().take(80).collect::<String>()
            ),
        ));
    }
    let description = description.ok_or_else(|| front("`description` is missing".into()))?;
    let description = description.trim().to_owned();
    if description.is_empty()
        || description.chars().count() > MAX_DESCRIPTION_CHARS
        || description.contains(['\n', '\r'])
    {
        return Err(SkillError::new(
            reasons::DESCRIPTION,
            field,
            format!("the description must be 1-{MAX_DESCRIPTION_CHARS} characters on one line"),
        ));
    }
    let tools = tools.unwrap_or_default();
    if tools.len() > MAX_TOOLS {
        return Err(SkillError::new(
            reasons::TOO_MANY,
            field,
            format!("a skill unlocks at most {MAX_TOOLS} tools"),
        ));
    }
    for (index, tool) in tools.iter().enumerate() {
        if !is_unlockable_tool(tool) {
            return Err(SkillError::new(
                reasons::UNKNOWN_TOOL,
                field,
                format!(
                    "tools[{index}]: `{}` is not a tool a skill can unlock (a built-in tool \
                     or mcp__<server>__<tool>)",
                    tool.chars().take(80).collect::<String>()
                ),
            ));
        }
        if tools[..index].contains(tool) {
            return Err(front(format!("tools[{index}]: `{tool}` is listed twice")));
        }
    }
    Ok(SkillDefinition {
        name,
        description,
        tools,
        instructions: parsed.body,
    })
}

/// Whether `path` is a valid skill file path (see [`SkillFile::path`]).
pub fn is_valid_file_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH_BYTES
        && path != SKILL_FILE
        && path.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// Checks a registered skill's body: its `SKILL.md` and files, and their bounds.
pub fn check_body(body: &NewSkillBody) -> Result<SkillDefinition, SkillError> {
    let definition = parse_skill_md(&body.content, "content")?;
    if body.files.len() > MAX_FILES {
        return Err(SkillError::new(
            reasons::TOO_MANY,
            "files",
            format!("at most {MAX_FILES} files"),
        ));
    }
    let mut total = body.content.len();
    for (index, file) in body.files.iter().enumerate() {
        if !is_valid_file_path(&file.path) {
            return Err(SkillError::new(
                reasons::FILE_PATH,
                format!("files[{index}].path"),
                "a relative path of plain names (a-z, A-Z, 0-9, `.`, `_`, `-`; no hidden, \
                 `.` or `..` parts), at most 256 bytes, not SKILL.md",
            ));
        }
        if body.files[..index].iter().any(|f| f.path == file.path) {
            return Err(SkillError::new(
                reasons::FILE_PATH,
                format!("files[{index}].path"),
                format!("`{}` is given twice", file.path),
            ));
        }
        if file.content.len() > MAX_FILE_BYTES {
            return Err(SkillError::new(
                reasons::TOO_LARGE,
                format!("files[{index}].content"),
                format!("at most {MAX_FILE_BYTES} bytes"),
            ));
        }
        total += file.content.len();
    }
    if total > MAX_BUNDLE_BYTES {
        return Err(SkillError::new(
            reasons::TOO_LARGE,
            "files",
            format!("the skill and its files hold at most {MAX_BUNDLE_BYTES} bytes"),
        ));
    }
    Ok(definition)
}

/// Checks a session's `skills` list: registered skill names or `"*"` (every registered skill),
/// no name twice, at most [`MAX_SESSION_SKILLS`].
pub fn validate_session_skills(skills: &[String]) -> Result<(), (String, String)> {
    if skills.len() > MAX_SESSION_SKILLS {
        return Err((
            "skills".into(),
            format!("at most {MAX_SESSION_SKILLS} skills"),
        ));
    }
    for (index, name) in skills.iter().enumerate() {
        let field = format!("skills[{index}]");
        if name == "*" {
            if skills.len() > 1 {
                return Err((field, "`*` (every registered skill) stands alone".into()));
            }
            continue;
        }
        if !is_valid_name(name) {
            return Err((field, "not a valid skill name".into()));
        }
        if skills[..index].contains(name) {
            return Err((field, format!("`{name}` is named twice")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
