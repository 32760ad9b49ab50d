//! Read: a text file of the workspace with line numbers, by line range.
//!
//! Budget: the file is at most [`MAX_FILE_BYTES`]; lines are cut at [`MAX_LINE_CHARS`]; the
//! numbered answer stops at [`MAX_OUTPUT_BYTES`] (numbering a file of empty lines would
//! otherwise multiply its size by eight) and says which lines it holds.

use super::{INLINE_FILE_BYTES, MAX_FILE_BYTES, blocking, parse_input};
use crate::permission::{SelfDecision, Subject};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{FileIo, Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::{OpenedFile, Workspace};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;

/// Lines returned when no limit is given.
pub const DEFAULT_LIMIT: usize = 2000;
/// Longer lines are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 2000;
/// Most bytes of one numbered answer.
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
struct Input {
    file_path: String,
    /// 1-based first line.
    offset: Option<usize>,
    limit: Option<usize>,
}

/// The Read tool.
pub struct ReadTool {
    schema: &'static StaticSchema,
}

impl ReadTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path relative to the workspace (or absolute inside it)"},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to read"}
                },
                "required": ["file_path"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for ReadTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Formats `text` like `cat -n` from line `offset` (1-based), at most `limit` lines and about
/// [`MAX_OUTPUT_BYTES`] bytes; returns the text and the number of the last line included.
pub fn number_lines(text: &str, offset: usize, limit: usize) -> (String, usize) {
    let mut out = String::with_capacity(text.len().min(MAX_OUTPUT_BYTES) + 64);
    let mut last = offset.saturating_sub(1);
    for (idx, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        if out.len() >= MAX_OUTPUT_BYTES {
            break;
        }
        push_line_number(&mut out, idx + 1);
        // A line of at most MAX_LINE_CHARS bytes has at most as many characters.
        let cut = (line.len() > MAX_LINE_CHARS)
            .then(|| line.char_indices().nth(MAX_LINE_CHARS))
            .flatten();
        match cut {
            Some((end, _)) => {
                out.push_str(&line[..end]);
                out.push('…');
            }
            None => out.push_str(line),
        }
        out.push('\n');
        last = idx + 1;
    }
    (out, last)
}

/// `number` right-aligned in 6 columns and a tab (`{:>6}\t`), without the formatting machinery
/// (once per line read).
fn push_line_number(out: &mut String, number: usize) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = number;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for _ in digits.len() - start..6 {
        out.push(' ');
    }
    for &digit in &digits[start..] {
        out.push(char::from(digit));
    }
    out.push('\t');
}

#[async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &str {
        "Read"
    }
    fn description(&self) -> &str {
        "Reads a text file from the session workspace, with line numbers."
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
        Subject::Path { field: "file_path" }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        let root = ctx.workspace.clone();
        if ctx.file_io == FileIo::Local {
            // Opened on this thread (a few calls on the dentry cache), and a small file read
            // here too; a larger one, or one that grows past the bound while it is read, is
            // read on (from where this stopped) on the blocking pool.
            let mut file = open(root.as_ref(), &input.file_path)?;
            if file.read_upto(INLINE_FILE_BYTES)? {
                return answer(file, &input);
            }
            return blocking(move |_| answer(file, &input)).await;
        }
        blocking(move |_| answer(open(root.as_ref(), &input.file_path)?, &input)).await
    }
}

/// Opens the file `path` names in the workspace at `root`.
fn open(root: Option<&PathBuf>, path: &str) -> Result<OpenedFile, ToolError> {
    let ws = Workspace::for_tool(root)?;
    let rel = ws.resolve(path)?;
    OpenedFile::open(&ws, &rel)
}

/// Reads the rest of `file` and numbers the lines `input` asks for.
fn answer(file: OpenedFile, input: &Input) -> Result<ToolOutput, ToolError> {
    let text = file.into_text(MAX_FILE_BYTES)?;
    let offset = input.offset.unwrap_or(1).max(1);
    let limit = input.limit.unwrap_or(DEFAULT_LIMIT);
    let total = text.lines().count();
    if text.is_empty() {
        return Ok(ToolOutput::text("(the file is empty)"));
    }
    if offset > total {
        return Ok(ToolOutput::text(format!(
            "(the file has {total} lines; offset {offset} is past the end)"
        )));
    }
    let (mut out, last) = number_lines(&text, offset, limit);
    if last < total {
        out.push_str(&format!(
            "(lines {offset}-{last} of {total}; use offset/limit to read more)\n"
        ));
    }
    Ok(ToolOutput::text(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_from_the_offset_and_long_ones_cut_on_a_character() {
        let (out, last) = number_lines("a\nb\nc\nd", 2, 2);
        assert_eq!(out, "     2\tb\n     3\tc\n");
        assert_eq!(last, 3);
        let exact = "é".repeat(MAX_LINE_CHARS);
        let long = format!("{exact}é");
        let (out, _) = number_lines(&format!("{exact}\n{long}"), 1, 10);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            format!("     1\t{exact}"),
            "at the limit: kept whole"
        );
        assert_eq!(
            lines[1],
            format!("     2\t{exact}…"),
            "past it: cut, marked"
        );
        let (out, last) = number_lines("x\n", 5, 10);
        assert_eq!((out.as_str(), last), ("", 4), "past the end");
    }

    #[test]
    fn line_numbers_are_right_aligned_in_six_columns_like_the_format_string() {
        for number in [
            1,
            9,
            10,
            99_999,
            100_000,
            999_999,
            1_000_000,
            123_456_789,
            usize::MAX,
        ] {
            let mut out = String::new();
            push_line_number(&mut out, number);
            assert_eq!(out, format!("{number:>6}\t"));
        }
    }

    #[test]
    fn the_numbered_text_stops_at_the_output_cap() {
        let text = "\n".repeat(MAX_OUTPUT_BYTES);
        let (out, last) = number_lines(&text, 1, usize::MAX);
        assert!(out.len() >= MAX_OUTPUT_BYTES && out.len() < MAX_OUTPUT_BYTES + 16);
        assert_eq!(out.lines().count(), last);
    }
}
