//! Glob: files of the workspace whose path matches a glob, gitignore-aware.
//!
//! The walk (shared with Grep) always starts at the canonical workspace root and never follows
//! symlinks, so neither a symlinked directory nor one swapped in during the walk leads outside;
//! a sub-directory search is a filter on that walk, not a new root. Only regular files are
//! listed (FIFOs, sockets and devices are skipped), the walk checks the call's [`Interrupt`] at
//! every entry so a timed-out call frees its thread, and it stops after [`MAX_WALK_FILES`]
//! files (the answer then says so).

use super::{Interrupt, blocking, parse_input, patterns};
use crate::permission::{SelfDecision, Subject};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::Workspace;
use async_trait::async_trait;
use ignore::WalkBuilder;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Most paths returned.
pub const MAX_RESULTS: usize = 1000;
/// Most bytes of listed paths.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;
/// Most regular files one walk collects (Glob and Grep); the rest of the tree is not visited.
pub const MAX_WALK_FILES: usize = 100_000;

/// A regular file found by [`walk_files`].
#[derive(Clone, Debug)]
pub struct WalkedFile {
    /// Path relative to the workspace root.
    pub rel: PathBuf,
    pub modified: SystemTime,
}

/// The result of a walk: regular files, and whether the walk stopped at [`MAX_WALK_FILES`].
#[derive(Debug, Default)]
pub struct Walk {
    pub files: Vec<WalkedFile>,
    pub capped: bool,
}

/// Regular files (not symlinks, FIFOs, sockets or devices) beneath `rel_dir`, honouring
/// .gitignore / .ignore files inside the workspace and skipping hidden entries. Sorted by path.
/// Stops with `CANCELLED` once `interrupt` is set, and after [`MAX_WALK_FILES`] files.
pub fn walk_files(
    ws: &Workspace,
    rel_dir: &Path,
    interrupt: &Interrupt,
) -> Result<Walk, ToolError> {
    let root = ws.root().to_path_buf();
    let target = rel_dir.to_path_buf();
    let filter_root = root.clone();
    let mut builder = WalkBuilder::new(&root);
    builder
        .follow_links(false)
        .parents(false)
        .git_global(false)
        .require_git(false)
        .filter_entry(move |entry| {
            let rel = entry
                .path()
                .strip_prefix(&filter_root)
                .unwrap_or(entry.path());
            rel.starts_with(&target) || target.starts_with(rel)
        });
    let mut files = Vec::new();
    let mut capped = false;
    for entry in builder.build() {
        interrupt.check()?;
        if files.len() >= MAX_WALK_FILES {
            capped = true;
            break;
        }
        // Unreadable entries (permissions, races) are skipped like ripgrep does.
        let Ok(entry) = entry else { continue };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if !kind.is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&root) else {
            continue;
        };
        if !rel.starts_with(rel_dir) {
            continue;
        }
        let modified = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        files.push(WalkedFile {
            rel: rel.to_path_buf(),
            modified,
        });
    }
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(Walk { files, capped })
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum SortBy {
    #[default]
    Mtime,
    Name,
}

#[derive(Deserialize)]
struct Input {
    pattern: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    sort: SortBy,
}

/// The Glob tool.
pub struct GlobTool {
    schema: &'static StaticSchema,
}

impl GlobTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob such as **/*.rs, matched against paths relative to `path`"},
                    "path": {"type": "string", "description": "Directory to search; the workspace root by default"},
                    "sort": {"type": "string", "enum": ["mtime", "name"], "default": "mtime", "description": "mtime: newest first"}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for GlobTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &str {
        "Glob"
    }
    fn description(&self) -> &str {
        "Finds workspace files by glob pattern (gitignore-aware); paths are relative to the workspace."
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
        let root = ctx.workspace.clone();
        let matcher = patterns::glob_matcher(&input.pattern, true)?;
        blocking(move |interrupt| {
            let ws = Workspace::for_tool(root.as_ref())?;
            let rel_dir = ws.resolve(&input.path)?;
            ws.open_dir(&rel_dir)?;
            let walk = walk_files(&ws, &rel_dir, interrupt)?;
            let mut hits: Vec<WalkedFile> = walk
                .files
                .into_iter()
                .filter(|f| {
                    f.rel
                        .strip_prefix(&rel_dir)
                        .is_ok_and(|inner| matcher.is_match(inner))
                })
                .collect();
            if input.sort == SortBy::Mtime {
                hits.sort_by(|a, b| b.modified.cmp(&a.modified).then(a.rel.cmp(&b.rel)));
            }
            let total = hits.len();
            let mut out: Vec<String> = Vec::new();
            let mut bytes = 0usize;
            for hit in hits.iter().take(MAX_RESULTS) {
                let path = hit.rel.to_string_lossy().into_owned();
                bytes += path.len() + 1;
                if bytes > MAX_OUTPUT_BYTES {
                    break;
                }
                out.push(path);
            }
            let shown = out.len();
            if total == 0 && !walk.capped {
                return Ok(ToolOutput::text("No files found"));
            }
            if total > shown {
                out.push(format!("({total} files; showing the first {shown})"));
            }
            if walk.capped {
                out.push(format!(
                    "(the search stopped after {MAX_WALK_FILES} files; narrow `path`)"
                ));
            }
            Ok(ToolOutput::text(out.join("\n")))
        })
        .await
    }
}
