//! Edit and MultiEdit: exact string replacement in a workspace file. Every edit is applied in
//! memory first; the file is written once, atomically, only when all edits succeeded.
//!
//! Size budget: before an edit allocates its result, the result's length is computed from the
//! match count and the length difference of the strings; a result over
//! [`super::MAX_FILE_BYTES`] is refused with `FILE_TOO_LARGE`. So 24 doubling `replace_all`
//! edits of a 1-byte file stop at the first edit past 10 MiB instead of growing to 16 MiB (or
//! 1 TiB with 40 edits). MultiEdit takes at most [`MAX_EDITS`] edits.

use super::{Interrupt, MAX_FILE_BYTES, blocking, codes, parse_input};
use crate::permission::Subject;
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most edits one MultiEdit call may carry (`EDIT_INVALID` beyond).
pub const MAX_EDITS: usize = 256;

/// One replacement.
#[derive(Clone, Debug, Deserialize)]
pub struct EditSpec {
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// The length of `content` after replacing `count` occurrences of `old` by `new`, or `None`
/// when it does not fit in a `u64`.
fn edited_len(content: &str, count: usize, old: &str, new: &str) -> Option<u64> {
    let count = count as u64;
    (content.len() as u64)
        .checked_sub(count.checked_mul(old.len() as u64)?)?
        .checked_add(count.checked_mul(new.len() as u64)?)
}

/// Applies one edit to `content`: `old_string` must occur exactly once unless `replace_all`.
/// A result longer than `max_bytes` is refused with `FILE_TOO_LARGE` before it is built.
pub fn apply_edit(content: &str, edit: &EditSpec, max_bytes: u64) -> Result<String, ToolError> {
    if edit.old_string.is_empty() {
        return Err(ToolError::new(
            codes::EDIT_INVALID,
            "old_string must not be empty",
        ));
    }
    if edit.old_string == edit.new_string {
        return Err(ToolError::new(
            codes::EDIT_INVALID,
            "old_string and new_string are identical",
        ));
    }
    let count = content.matches(edit.old_string.as_str()).count();
    if count == 1 || (count > 1 && edit.replace_all) {
        let len = edited_len(content, count, &edit.old_string, &edit.new_string);
        if len.is_none_or(|len| len > max_bytes) {
            return Err(ToolError::new(
                crate::workspace::codes::FILE_TOO_LARGE,
                format!(
                    "the edit would make the file {} bytes, more than the {max_bytes}-byte limit",
                    len.map_or_else(|| "too many".to_string(), |len| len.to_string())
                ),
            ));
        }
    }
    match count {
        0 => Err(ToolError::new(
            codes::EDIT_NOT_FOUND,
            "old_string was not found in the file",
        )),
        1 => Ok(content.replacen(&edit.old_string, &edit.new_string, 1)),
        _ if edit.replace_all => Ok(content.replace(&edit.old_string, &edit.new_string)),
        n => Err(ToolError::new(
            codes::EDIT_NOT_UNIQUE,
            format!(
                "old_string occurs {n} times; add context to make it unique or set replace_all"
            ),
        )),
    }
}

fn edit_file(
    root: Option<std::path::PathBuf>,
    path: &str,
    edits: &[EditSpec],
    interrupt: &Interrupt,
) -> Result<ToolOutput, ToolError> {
    let ws = Workspace::for_tool(root.as_ref())?;
    let rel = ws.resolve(path)?;
    let mut content = ws.read_text(&rel, MAX_FILE_BYTES)?;
    for (idx, edit) in edits.iter().enumerate() {
        interrupt.check()?;
        content = apply_edit(&content, edit, MAX_FILE_BYTES).map_err(|e| {
            if edits.len() > 1 {
                ToolError::new(
                    e.code,
                    format!("edit {}: {}; no edit was applied", idx + 1, e.message),
                )
            } else {
                e
            }
        })?;
    }
    ws.write_atomic(&rel, content.as_bytes())?;
    Ok(ToolOutput::text(format!(
        "Applied {} edit(s) to {}",
        edits.len(),
        ws.display(&rel)
    )))
}

#[derive(Deserialize)]
struct EditInput {
    file_path: String,
    #[serde(flatten)]
    edit: EditSpec,
}

fn edit_properties() -> Value {
    json!({
        "old_string": {"type": "string", "minLength": 1, "description": "Exact text to replace"},
        "new_string": {"type": "string"},
        "replace_all": {"type": "boolean", "default": false}
    })
}

/// Edit's properties: one edit and the file it applies to.
fn file_edit_properties() -> Value {
    let mut props = edit_properties();
    props["file_path"] = json!({"type": "string"});
    props
}

/// The Edit tool.
pub struct EditTool {
    schema: &'static StaticSchema,
}

impl EditTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": file_edit_properties(),
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for EditTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for EditTool {
    fn name(&self) -> &str {
        "Edit"
    }
    fn description(&self) -> &str {
        "Replaces an exact, unique string in a workspace file (or every occurrence with replace_all)."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn is_file_edit(&self) -> bool {
        true
    }
    fn permission_subject(&self) -> Subject {
        Subject::Path { field: "file_path" }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: EditInput = parse_input(input)?;
        let root = ctx.workspace.clone();
        blocking(move |interrupt| edit_file(root, &input.file_path, &[input.edit], interrupt)).await
    }
}

#[derive(Deserialize)]
struct MultiEditInput {
    file_path: String,
    edits: Vec<EditSpec>,
}

/// The MultiEdit tool: several edits to one file, all or nothing.
pub struct MultiEditTool {
    schema: &'static StaticSchema,
}

impl MultiEditTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string"},
                    "edits": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EDITS,
                        "items": {
                            "type": "object",
                            "properties": edit_properties(),
                            "required": ["old_string", "new_string"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["file_path", "edits"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for MultiEditTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for MultiEditTool {
    fn name(&self) -> &str {
        "MultiEdit"
    }
    fn description(&self) -> &str {
        "Applies several exact string replacements to one workspace file, in order; if any edit fails nothing is written."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn is_file_edit(&self) -> bool {
        true
    }
    fn permission_subject(&self) -> Subject {
        Subject::Path { field: "file_path" }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: MultiEditInput = parse_input(input)?;
        if input.edits.is_empty() {
            return Err(ToolError::new(
                codes::EDIT_INVALID,
                "edits must not be empty",
            ));
        }
        if input.edits.len() > MAX_EDITS {
            return Err(ToolError::new(
                codes::EDIT_INVALID,
                format!("at most {MAX_EDITS} edits per call"),
            ));
        }
        let root = ctx.workspace.clone();
        blocking(move |interrupt| edit_file(root, &input.file_path, &input.edits, interrupt)).await
    }
}
