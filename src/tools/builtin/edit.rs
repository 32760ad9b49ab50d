//! Edit and MultiEdit: exact string replacement in a workspace file. Every edit is applied in
//! memory first; the file is written once, atomically, only when all edits succeeded.

use super::{blocking, codes, parse_input};
use crate::permission::Subject;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

/// Largest file the edit tools open.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// One replacement.
#[derive(Clone, Debug, Deserialize)]
pub struct EditSpec {
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// Applies one edit to `content`: `old_string` must occur exactly once unless `replace_all`.
pub fn apply_edit(content: &str, edit: &EditSpec) -> Result<String, ToolError> {
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
) -> Result<ToolOutput, ToolError> {
    let ws = Workspace::for_tool(root.as_ref())?;
    let rel = ws.resolve(path)?;
    let mut content = ws.read_text(&rel, MAX_FILE_BYTES)?;
    for (idx, edit) in edits.iter().enumerate() {
        content = apply_edit(&content, edit).map_err(|e| {
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

/// The Edit tool.
pub struct EditTool {
    schema: Value,
}

impl EditTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        let mut props = edit_properties();
        props["file_path"] = json!({"type": "string"});
        Self {
            schema: json!({
                "type": "object",
                "properties": props,
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
        &self.schema
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
        blocking(move || edit_file(root, &input.file_path, &[input.edit])).await
    }
}

#[derive(Deserialize)]
struct MultiEditInput {
    file_path: String,
    edits: Vec<EditSpec>,
}

/// The MultiEdit tool: several edits to one file, all or nothing.
pub struct MultiEditTool {
    schema: Value,
}

impl MultiEditTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string"},
                    "edits": {
                        "type": "array",
                        "minItems": 1,
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
        &self.schema
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
        let root = ctx.workspace.clone();
        blocking(move || edit_file(root, &input.file_path, &input.edits)).await
    }
}
