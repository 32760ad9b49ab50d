//! LS: the entries of one workspace directory (symlinks are listed, never followed).
//!
//! Budgets: at most [`MAX_IGNORE_PATTERNS`] ignore globs, each checked by
//! [`super::patterns`]; at most [`MAX_SCANNED_ENTRIES`] directory entries are read (the answer
//! says when the directory holds more), [`MAX_ENTRIES`] are listed.

use super::{blocking, codes, parse_input, patterns};
use crate::permission::{SelfDecision, Subject};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::{Workspace, map_io};
use async_trait::async_trait;
use globset::GlobSetBuilder;
use serde::Deserialize;
use serde_json::Value;

/// Most entries listed.
pub const MAX_ENTRIES: usize = 1000;
/// Most directory entries read for one listing.
pub const MAX_SCANNED_ENTRIES: usize = 100_000;
/// Most ignore patterns.
pub const MAX_IGNORE_PATTERNS: usize = 64;

#[derive(Deserialize)]
struct Input {
    #[serde(default)]
    path: String,
    #[serde(default)]
    ignore: Vec<String>,
}

/// The LS tool.
pub struct LsTool {
    schema: &'static StaticSchema,
}

impl LsTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory relative to the workspace; empty for the root"},
                    "ignore": {"type": "array", "maxItems": MAX_IGNORE_PATTERNS, "items": {"type": "string"}, "description": "Glob patterns of names to leave out"}
                },
                "additionalProperties": false
            }),
        }
    }
}

impl Default for LsTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for LsTool {
    fn name(&self) -> &str {
        "LS"
    }
    fn description(&self) -> &str {
        "Lists a directory of the session workspace. Directories end in '/', symlinks in '@'."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn is_read_only(&self, _input: &Value) -> bool {
        true
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        true
    }
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::None
    }
    fn permission_subject(&self) -> Subject {
        Subject::Path { field: "path" }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        if input.ignore.len() > MAX_IGNORE_PATTERNS {
            return Err(ToolError::new(
                codes::PATTERN_TOO_COMPLEX,
                format!("at most {MAX_IGNORE_PATTERNS} ignore patterns"),
            ));
        }
        let mut ignore = GlobSetBuilder::new();
        for pattern in &input.ignore {
            ignore.add(patterns::glob(pattern, false)?);
        }
        let ignore = ignore
            .build()
            .map_err(|e| ToolError::new(codes::PATTERN_INVALID, e.to_string()))?;
        let root = ctx.workspace.clone();
        blocking(move |interrupt| {
            let ws = Workspace::for_tool(root.as_ref())?;
            let rel = ws.resolve(&input.path)?;
            let display = ws.display(&rel);
            let dir = ws.open_dir(&rel)?;
            let mut names = Vec::new();
            let mut scanned_all = true;
            for (scanned, entry) in dir.entries().map_err(|e| map_io(e, &display))?.enumerate() {
                interrupt.check()?;
                if scanned >= MAX_SCANNED_ENTRIES {
                    scanned_all = false;
                    break;
                }
                let entry = entry.map_err(|e| map_io(e, &display))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if ignore.is_match(&name) {
                    continue;
                }
                let kind = entry.file_type().map_err(|e| map_io(e, &display))?;
                let suffix = if kind.is_dir() {
                    "/"
                } else if kind.is_symlink() {
                    "@"
                } else {
                    ""
                };
                names.push(format!("{name}{suffix}"));
            }
            names.sort();
            let total = names.len();
            names.truncate(MAX_ENTRIES);
            let mut out = names.join("\n");
            if total > MAX_ENTRIES {
                out.push_str(&format!(
                    "\n({total} entries; showing the first {MAX_ENTRIES})"
                ));
            }
            if !scanned_all {
                out.push_str(&format!(
                    "\n(the directory has more than {MAX_SCANNED_ENTRIES} entries; only that many were read)"
                ));
            }
            if total == 0 {
                out = format!("({display} is empty)");
            }
            Ok(ToolOutput::text(out))
        })
        .await
    }
}
