//! NotebookEdit: replace, insert or delete one cell of a Jupyter notebook (.ipynb) in the
//! workspace, addressed by cell id or index; the notebook is rewritten atomically.
//!
//! Size budget: the notebook read is at most [`super::MAX_FILE_BYTES`], and the rewritten
//! notebook is serialized into a writer that refuses to grow past the same limit
//! (`FILE_TOO_LARGE`) — pretty-printing deeply nested JSON multiplies its size, so the check is
//! made while writing, not after. Before parsing, a linear scan refuses notebooks with more
//! than [`MAX_NOTEBOOK_VALUES`] JSON values (`NOTEBOOK_INVALID`), which bounds the parsed form.

use super::{MAX_FILE_BYTES, blocking, codes, parse_input};
use crate::permission::Subject;
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most JSON values (arrays, objects, elements) a notebook may hold: parsed into memory each
/// value costs tens of bytes, so a 10 MiB file of `[[],[],…]` would otherwise take ~16 times
/// its size.
pub const MAX_NOTEBOOK_VALUES: usize = 500_000;

/// Counts the structural tokens (`[`, `{`, `,`) of JSON text outside strings — an upper bound
/// on its number of values, by a linear scan without parsing.
fn structural_tokens(text: &str) -> usize {
    let (mut count, mut in_string, mut escaped) = (0usize, false, false);
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' | b',' => count += 1,
            _ => {}
        }
    }
    count
}

/// A `Vec` writer that fails once more than `limit` bytes would be written.
struct CappedWriter {
    buf: Vec<u8>,
    limit: u64,
    over: bool,
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if (self.buf.len() + data.len()) as u64 > self.limit {
            self.over = true;
            return Err(std::io::Error::other("size limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The notebook as pretty JSON with a final newline, or `FILE_TOO_LARGE` past `limit` bytes.
fn serialize_capped(notebook: &Value, limit: u64) -> Result<Vec<u8>, ToolError> {
    let mut writer = CappedWriter {
        buf: Vec::new(),
        limit: limit.saturating_sub(1),
        over: false,
    };
    if let Err(error) = serde_json::to_writer_pretty(&mut writer, notebook) {
        return Err(if writer.over {
            ToolError::new(
                crate::workspace::codes::FILE_TOO_LARGE,
                format!("the edited notebook would be more than the {limit}-byte file limit"),
            )
        } else {
            invalid(error.to_string())
        });
    }
    writer.buf.push(b'\n');
    Ok(writer.buf)
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum EditMode {
    #[default]
    Replace,
    Insert,
    Delete,
}

#[derive(Deserialize)]
struct Input {
    notebook_path: String,
    cell_id: Option<String>,
    cell_index: Option<usize>,
    #[serde(default)]
    new_source: String,
    cell_type: Option<String>,
    #[serde(default)]
    edit_mode: EditMode,
}

/// The NotebookEdit tool.
pub struct NotebookEditTool {
    schema: &'static StaticSchema,
}

impl NotebookEditTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "notebook_path": {"type": "string"},
                    "cell_id": {"type": "string", "description": "Id of the target cell (insert: the new cell goes after it)"},
                    "cell_index": {"type": "integer", "minimum": 0, "description": "0-based index of the target cell (insert: position of the new cell)"},
                    "new_source": {"type": "string"},
                    "cell_type": {"type": "string", "enum": ["code", "markdown", "raw"]},
                    "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"], "default": "replace"}
                },
                "required": ["notebook_path"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for NotebookEditTool {
    fn default() -> Self {
        Self::new()
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(codes::NOTEBOOK_INVALID, message)
}

fn source_lines(source: &str) -> Value {
    Value::Array(
        source
            .split_inclusive('\n')
            .map(|l| Value::String(l.to_string()))
            .collect(),
    )
}

fn new_cell(cell_type: &str, source: &str) -> Value {
    let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut cell = json!({
        "id": id,
        "cell_type": cell_type,
        "metadata": {},
        "source": source_lines(source),
    });
    if cell_type == "code" {
        cell["outputs"] = json!([]);
        cell["execution_count"] = Value::Null;
    }
    cell
}

/// Applies one cell edit to a parsed notebook and returns a summary.
fn edit_notebook(notebook: &mut Value, input: &Input) -> Result<String, ToolError> {
    let cells = notebook
        .get_mut("cells")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| invalid("the notebook has no cells array"))?;
    let found = match (&input.cell_id, input.cell_index) {
        (Some(id), _) => Some(
            cells
                .iter()
                .position(|c| c.get("id").and_then(Value::as_str) == Some(id.as_str()))
                .ok_or_else(|| {
                    ToolError::new(codes::CELL_NOT_FOUND, format!("no cell has id {id:?}"))
                })?,
        ),
        (None, Some(idx)) => Some(idx),
        (None, None) => None,
    };
    match input.edit_mode {
        EditMode::Insert => {
            let cell_type = input.cell_type.as_deref().unwrap_or("code");
            // With a cell id the new cell goes after that cell; with an index, at that index.
            let at = match (&input.cell_id, found) {
                (Some(_), Some(pos)) => pos + 1,
                (None, Some(idx)) => idx,
                (_, None) => 0,
            };
            if at > cells.len() {
                return Err(ToolError::new(
                    codes::CELL_NOT_FOUND,
                    format!("index {at} is past the end ({} cells)", cells.len()),
                ));
            }
            cells.insert(at, new_cell(cell_type, &input.new_source));
            Ok(format!("Inserted a {cell_type} cell at index {at}"))
        }
        EditMode::Replace | EditMode::Delete => {
            let pos = found.ok_or_else(|| {
                ToolError::new(codes::CELL_NOT_FOUND, "give cell_id or cell_index")
            })?;
            if pos >= cells.len() {
                return Err(ToolError::new(
                    codes::CELL_NOT_FOUND,
                    format!("index {pos} is past the end ({} cells)", cells.len()),
                ));
            }
            if input.edit_mode == EditMode::Delete {
                cells.remove(pos);
                return Ok(format!("Deleted cell {pos}"));
            }
            let cell = &mut cells[pos];
            cell["source"] = source_lines(&input.new_source);
            if let Some(cell_type) = &input.cell_type {
                cell["cell_type"] = Value::String(cell_type.clone());
                if cell_type == "code" {
                    if cell.get("outputs").is_none() {
                        cell["outputs"] = json!([]);
                        cell["execution_count"] = Value::Null;
                    }
                } else if let Some(obj) = cell.as_object_mut() {
                    obj.remove("outputs");
                    obj.remove("execution_count");
                }
            }
            Ok(format!("Replaced the source of cell {pos}"))
        }
    }
}

#[async_trait]
impl Tool for NotebookEditTool {
    fn name(&self) -> &str {
        "NotebookEdit"
    }
    fn description(&self) -> &str {
        "Replaces, inserts or deletes a cell of a Jupyter notebook in the session workspace."
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
        Subject::Path {
            field: "notebook_path",
        }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        if input.new_source.len() as u64 > MAX_FILE_BYTES {
            return Err(ToolError::new(
                crate::workspace::codes::FILE_TOO_LARGE,
                format!("new_source is more than the {MAX_FILE_BYTES}-byte file limit"),
            ));
        }
        let root = ctx.workspace.clone();
        blocking(move |_| {
            let ws = Workspace::for_tool(root.as_ref())?;
            let rel = ws.resolve(&input.notebook_path)?;
            let text = ws.read_text(&rel, MAX_FILE_BYTES)?;
            if structural_tokens(&text) > MAX_NOTEBOOK_VALUES {
                return Err(invalid(format!(
                    "the notebook holds more than {MAX_NOTEBOOK_VALUES} JSON values"
                )));
            }
            let mut notebook: Value = serde_json::from_str(&text)
                .map_err(|e| invalid(format!("not a JSON notebook: {e}")))?;
            let summary = edit_notebook(&mut notebook, &input)?;
            let out = serialize_capped(&notebook, MAX_FILE_BYTES)?;
            ws.write_atomic(&rel, &out)?;
            Ok(ToolOutput::text(format!(
                "{summary} in {}",
                ws.display(&rel)
            )))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structural_tokens_skip_strings() {
        assert_eq!(structural_tokens(r#"{"a":[1,2],"b":"[,{\"]"}"#), 4);
        assert_eq!(structural_tokens("[]"), 1);
    }
}
