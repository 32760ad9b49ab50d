//! Grep: regex search over workspace files with ripgrep's engine (`grep-regex` +
//! `grep-searcher`), the gitignore-aware walk of [`super::glob::walk_files`], and file reads
//! through the confined workspace handle (hard-linked, escaping and non-regular files are
//! skipped).
//!
//! Budgets: the pattern compiles under [`super::patterns`]'s limits; each output line is cut
//! to [`MAX_LINE_BYTES`]; the answer holds at most `head_limit` lines (≤ [`MAX_HEAD_LIMIT`])
//! and [`MAX_OUTPUT_BYTES`] bytes, and the search stops the moment either is reached — lines
//! go straight into the answer, never into a per-file buffer. The walk and the per-file search
//! stop when the call's [`Interrupt`] is set.

use super::glob::walk_files;
use super::{Interrupt, blocking, parse_input, patterns};
use crate::permission::{SelfDecision, Subject};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::{Workspace, looks_binary};
use async_trait::async_trait;
use globset::GlobMatcher;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use serde::Deserialize;
use serde_json::Value;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

/// Bytes read from the start of a file to decide whether it is binary.
const BINARY_SNIFF_BYTES: usize = 8192;

/// Largest file searched (streamed, never read whole); bigger files are skipped.
pub const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;
/// Output lines returned when no head_limit is given.
pub const DEFAULT_HEAD_LIMIT: usize = 1000;
/// Largest head_limit accepted.
pub const MAX_HEAD_LIMIT: usize = 10_000;
/// Largest -A / -B / -C accepted.
pub const MAX_CONTEXT_LINES: usize = 100;
/// Longer output lines are cut to this many bytes, with a marker.
pub const MAX_LINE_BYTES: usize = 2000;
/// Most bytes of one answer; the search stops when it is full.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

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
    schema: &'static StaticSchema,
}

impl GrepTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression (Rust regex syntax)"},
                    "path": {"type": "string", "description": "File or directory to search; the workspace root by default"},
                    "glob": {"type": "string", "description": "Only files matching this glob (a pattern without '/' matches the file name)"},
                    "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"], "default": "files_with_matches"},
                    "-A": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT_LINES},
                    "-B": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT_LINES},
                    "-C": {"type": "integer", "minimum": 0, "maximum": MAX_CONTEXT_LINES},
                    "-i": {"type": "boolean"},
                    "-n": {"type": "boolean", "default": true},
                    "head_limit": {"type": "integer", "minimum": 1, "maximum": MAX_HEAD_LIMIT}
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

/// The answer being built, under the line and byte budgets.
struct Output {
    lines: Vec<String>,
    bytes: usize,
    max_lines: usize,
    /// Why the answer stopped early, if it did.
    truncated: Option<String>,
}

impl Output {
    /// Appends a line unless a budget is spent; false once the answer is full.
    fn push(&mut self, line: String) -> bool {
        if self.truncated.is_some() {
            return false;
        }
        if self.lines.len() >= self.max_lines {
            self.truncated = Some(format!("output limited to {} lines", self.max_lines));
            return false;
        }
        if self.bytes + line.len() + 1 > MAX_OUTPUT_BYTES {
            self.truncated = Some(format!("output limited to {MAX_OUTPUT_BYTES} bytes"));
            return false;
        }
        self.bytes += line.len() + 1;
        self.lines.push(line);
        true
    }

    /// Drops lines past `len` (a separator pushed for a file that had no match).
    fn truncate(&mut self, len: usize) {
        for line in self.lines.drain(len.min(self.lines.len())..) {
            self.bytes -= line.len() + 1;
        }
    }

    fn full(&self) -> bool {
        self.truncated.is_some()
    }
}

/// `text` cut to at most [`MAX_LINE_BYTES`] bytes (on a character boundary) with a marker.
fn clip_line(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_LINE_BYTES {
        return text.into();
    }
    let mut end = MAX_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [line truncated, {} bytes]", &text[..end], text.len()).into()
}

/// Searches one file: content lines go straight into the shared [`Output`], matches are
/// counted, and the search stops as soon as the answer is full, the file's question is
/// answered (files_with_matches) or the call is gone.
struct Collect<'a> {
    path: &'a str,
    mode: OutputMode,
    line_numbers: bool,
    out: &'a mut Output,
    interrupt: &'a Interrupt,
    matches: usize,
}

impl Collect<'_> {
    fn push(&mut self, sep: char, number: Option<u64>, bytes: &[u8]) -> bool {
        let text = String::from_utf8_lossy(bytes);
        let text = clip_line(text.trim_end_matches(['\n', '\r']));
        let line = match (self.line_numbers, number) {
            (true, Some(n)) => format!("{}{sep}{n}{sep}{text}", self.path),
            _ => format!("{}{sep}{text}", self.path),
        };
        self.out.push(line)
    }
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _s: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.interrupt.is_set() {
            return Ok(false);
        }
        self.matches += 1;
        match self.mode {
            OutputMode::FilesWithMatches => Ok(false),
            OutputMode::Count => Ok(true),
            OutputMode::Content => {
                let first = mat.line_number();
                for (i, line) in mat.lines().enumerate() {
                    if !self.push(':', first.map(|n| n + i as u64), line) {
                        return Ok(false);
                    }
                }
                Ok(true)
            }
        }
    }

    fn context(&mut self, _s: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        Ok(!self.interrupt.is_set() && self.push('-', ctx.line_number(), ctx.bytes()))
    }

    fn context_break(&mut self, _s: &Searcher) -> Result<bool, Self::Error> {
        Ok(!self.interrupt.is_set() && self.out.push("--".to_string()))
    }
}

/// Opens a walked file for a streaming search: a regular file within [`MAX_FILE_BYTES`] whose
/// first 8 KiB hold no NUL byte (binary files are skipped). The reader stops at the size the
/// file had when opened, so a file growing during the search (a background `yes > f`) cannot
/// keep the search — and its thread — going.
fn open_for_search(ws: &Workspace, file: &Path) -> Option<impl Read> {
    let (mut handle, meta) = ws.open_regular(file).ok()?;
    if meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut handle)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    if looks_binary(&head) {
        return None;
    }
    handle.rewind().ok()?;
    Some(handle.take(meta.len()))
}

fn file_filter(glob: Option<&str>) -> Result<Option<(GlobMatcher, bool)>, ToolError> {
    glob.map(|g| Ok((patterns::glob_matcher(g, false)?, g.contains('/'))))
        .transpose()
}

fn search(ws: &Workspace, input: &Input, interrupt: &Interrupt) -> Result<String, ToolError> {
    let matcher = patterns::regex_matcher(&input.pattern, input.case_insensitive)?;
    let filter = file_filter(input.glob.as_deref())?;
    let rel = ws.resolve(&input.path)?;
    let single_file =
        !rel.as_os_str().is_empty() && ws.dir().symlink_metadata(&rel).is_ok_and(|m| !m.is_dir());
    let (files, capped): (Vec<PathBuf>, bool) = if single_file {
        // An explicitly named file must be a readable regular file; its errors are the answer.
        ws.open_regular(&rel)?;
        (vec![rel.clone()], false)
    } else {
        ws.open_dir(&rel)?;
        let walk = walk_files(ws, &rel, interrupt)?;
        (walk.files.into_iter().map(|f| f.rel).collect(), walk.capped)
    };
    let before = input.before.or(input.context).unwrap_or(0);
    let after = input.after.or(input.context).unwrap_or(0);
    let content = input.output_mode == OutputMode::Content;
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        // The line buffer never grows past the file limit (a single enormous line).
        .heap_limit(Some(MAX_FILE_BYTES as usize + (64 << 10)))
        .before_context(if content { before } else { 0 })
        .after_context(if content { after } else { 0 })
        .build();
    let mut out = Output {
        lines: Vec::new(),
        bytes: 0,
        max_lines: input.head_limit.unwrap_or(DEFAULT_HEAD_LIMIT),
        truncated: None,
    };
    for file in files {
        interrupt.check()?;
        if out.full() {
            break;
        }
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
        // Files that cannot be read confined (hard links, escapes, non-regular files, races)
        // are skipped.
        let Some(reader) = open_for_search(ws, &file) else {
            continue;
        };
        let display = file.to_string_lossy().into_owned();
        // Context groups of different files are separated like ripgrep does.
        let mark = out.lines.len();
        if content && (before > 0 || after > 0) && mark > 0 && !out.push("--".into()) {
            break;
        }
        let mut sink = Collect {
            path: &display,
            mode: input.output_mode,
            line_numbers: input.line_numbers,
            out: &mut out,
            interrupt,
            matches: 0,
        };
        // A read error (a file changed under the search, a line past the heap limit) ends this
        // file's search only; matches found before it count.
        if let Err(error) = searcher.search_reader(&matcher, reader, &mut sink) {
            let path = display.as_str();
            tracing::debug!(%error, path, "grep stopped searching a file");
        }
        let matches = sink.matches;
        interrupt.check()?;
        if matches == 0 {
            // Drop the separator pushed for a file without matches.
            out.truncate(mark);
            continue;
        }
        match input.output_mode {
            OutputMode::Content => {}
            OutputMode::FilesWithMatches => {
                out.push(display);
            }
            OutputMode::Count => {
                out.push(format!("{display}:{matches}"));
            }
        }
    }
    if out.lines.is_empty() && out.truncated.is_none() && !capped {
        return Ok("No matches found".to_string());
    }
    let mut text = out.lines.join("\n");
    if let Some(reason) = &out.truncated {
        text.push_str(&format!("\n({reason})"));
    }
    if capped {
        text.push_str(&format!(
            "\n(the search stopped after {} files; narrow `path` or `glob`)",
            super::glob::MAX_WALK_FILES
        ));
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
        blocking(move |interrupt| {
            let ws = Workspace::for_tool(root.as_ref())?;
            search(&ws, &input, interrupt).map(ToolOutput::text)
        })
        .await
    }
}
