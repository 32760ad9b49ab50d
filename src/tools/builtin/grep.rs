//! Grep: regex search over workspace files with ripgrep's engine (`grep-regex` +
//! `grep-searcher`), the gitignore-aware walk of [`super::glob::walk_files`], and file reads
//! through the confined workspace handle (hard-linked and escaping files are skipped).

use super::glob::walk_files;
use super::{blocking, codes, parse_input};
use crate::permission::{SelfDecision, Subject};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::{Workspace, looks_binary};
use async_trait::async_trait;
use globset::{Glob, GlobMatcher};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::PathBuf;

/// Largest file searched; bigger files are skipped.
pub const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// Output lines returned when no head_limit is given.
pub const DEFAULT_HEAD_LIMIT: usize = 1000;

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum OutputMode {
    Content,
    #[default]
    FilesWithMatches,
    Count,
}

#[derive(Deserialize)]
struct Input {
    pattern: String,
    #[serde(default)]
    path: String,
    glob: Option<String>,
    #[serde(default)]
    output_mode: OutputMode,
    #[serde(rename = "-A")]
    after: Option<usize>,
    #[serde(rename = "-B")]
    before: Option<usize>,
    #[serde(rename = "-C")]
    context: Option<usize>,
    #[serde(rename = "-i", default)]
    case_insensitive: bool,
    #[serde(rename = "-n", default = "yes")]
    line_numbers: bool,
    head_limit: Option<usize>,
}

fn yes() -> bool {
    true
}

/// The Grep tool.
pub struct GrepTool {
    schema: Value,
}

impl GrepTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax)"},
                    "path": {"type": "string", "description": "File or directory to search; the workspace root by default"},
                    "glob": {"type": "string", "description": "Only files matching this glob (a pattern without '/' matches the file name)"},
                    "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"], "default": "files_with_matches"},
                    "-A": {"type": "integer", "minimum": 0},
                    "-B": {"type": "integer", "minimum": 0},
                    "-C": {"type": "integer", "minimum": 0},
                    "-i": {"type": "boolean"},
                    "-n": {"type": "boolean", "default": true},
                    "head_limit": {"type": "integer", "minimum": 1}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for GrepTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Collects content-mode lines of one file.
struct Collect<'a> {
    path: &'a str,
    line_numbers: bool,
    lines: Vec<String>,
    matches: usize,
}

impl Collect<'_> {
    fn push(&mut self, sep: char, number: Option<u64>, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        match (self.line_numbers, number) {
            (true, Some(n)) => self.lines.push(format!("{}{sep}{n}{sep}{text}", self.path)),
            _ => self.lines.push(format!("{}{sep}{text}", self.path)),
        }
    }
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        let first = mat.line_number();
        for (i, line) in mat.lines().enumerate() {
            self.push(':', first.map(|n| n + i as u64), line);
        }
        self.matches += 1;
        Ok(true)
    }

    fn context(&mut self, _s: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        self.push('-', ctx.line_number(), ctx.bytes());
        Ok(true)
    }

    fn context_break(&mut self, _s: &Searcher) -> Result<bool, Self::Error> {
        self.lines.push("--".to_string());
        Ok(true)
    }
}

fn file_filter(glob: Option<&str>) -> Result<Option<(GlobMatcher, bool)>, ToolError> {
    glob.map(|g| {
        let matcher = Glob::new(g)
            .map_err(|e| ToolError::new(codes::PATTERN_INVALID, e.to_string()))?
            .compile_matcher();
        Ok((matcher, g.contains('/')))
    })
    .transpose()
}

fn search(ws: &Workspace, input: &Input) -> Result<String, ToolError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(input.case_insensitive)
        .build(&input.pattern)
        .map_err(|e| ToolError::new(codes::PATTERN_INVALID, e.to_string()))?;
    let filter = file_filter(input.glob.as_deref())?;
    let rel = ws.resolve(&input.path)?;
    let single_file =
        !rel.as_os_str().is_empty() && ws.dir().symlink_metadata(&rel).is_ok_and(|m| m.is_file());
    let files: Vec<PathBuf> = if single_file {
        // An explicitly named file must be readable confined; its errors are the answer.
        ws.read_file(&rel, MAX_FILE_BYTES)?;
        vec![rel.clone()]
    } else {
        ws.open_dir(&rel)?;
        walk_files(ws, &rel)?.into_iter().map(|f| f.rel).collect()
    };
    let before = input.before.or(input.context).unwrap_or(0);
    let after = input.after.or(input.context).unwrap_or(0);
    let content = input.output_mode == OutputMode::Content;
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .before_context(if content { before } else { 0 })
        .after_context(if content { after } else { 0 })
        .build();
    let limit = input.head_limit.unwrap_or(DEFAULT_HEAD_LIMIT);
    let mut out: Vec<String> = Vec::new();
    let mut truncated = false;
    for file in files {
        if let Some((glob, with_dirs)) = &filter {
            let subject = if *with_dirs {
                file.strip_prefix(&rel).unwrap_or(&file).to_path_buf()
            } else {
                PathBuf::from(file.file_name().unwrap_or_default())
            };
            if !glob.is_match(&subject) {
                continue;
            }
        }
        // Files that cannot be read confined (hard links, escapes, races) are skipped.
        let Ok(bytes) = ws.read_file(&file, MAX_FILE_BYTES) else {
            continue;
        };
        if looks_binary(&bytes) {
            continue;
        }
        let display = file.to_string_lossy().into_owned();
        let mut sink = Collect {
            path: &display,
            line_numbers: input.line_numbers,
            lines: Vec::new(),
            matches: 0,
        };
        searcher
            .search_slice(&matcher, &bytes, &mut sink)
            .map_err(|e| ToolError::failed(format!("{display}: {e}")))?;
        if sink.matches == 0 {
            continue;
        }
        match input.output_mode {
            OutputMode::Content => {
                if !out.is_empty() && (before > 0 || after > 0) {
                    out.push("--".to_string());
                }
                out.extend(sink.lines);
            }
            OutputMode::FilesWithMatches => out.push(display),
            OutputMode::Count => out.push(format!("{display}:{}", sink.matches)),
        }
        if out.len() > limit {
            truncated = true;
            out.truncate(limit);
            break;
        }
    }
    if out.is_empty() {
        return Ok("No matches found".to_string());
    }
    let mut text = out.join("\n");
    if truncated {
        text.push_str(&format!("\n(output limited to {limit} lines)"));
    }
    Ok(text)
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "Grep"
    }
    fn description(&self) -> &str {
        "Searches workspace files with a regular expression (ripgrep engine, gitignore-aware)."
    }
    fn input_schema(&self) -> &Value {
        &self.schema
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
        blocking(move || {
            let ws = Workspace::for_tool(root.as_ref())?;
            search(&ws, &input).map(ToolOutput::text)
        })
        .await
    }
}
