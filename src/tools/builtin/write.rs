//! Write: creates or replaces a file of the workspace, atomically. Content over
//! [`super::MAX_FILE_BYTES`] is refused with `FILE_TOO_LARGE`; an existing target that is not a
//! regular file (FIFO, socket, device, directory) with `NOT_A_REGULAR_FILE`.

use super::{MAX_FILE_BYTES, file_io, parse_input};
use crate::permission::Subject;
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Input {
    file_path: String,
    content: String,
}

/// The Write tool.
pub struct WriteTool {
    schema: &'static StaticSchema,
}

impl WriteTool {
    /// Builds the tool with its input schema.
    pub fn new() -> Self {
        Self {
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "Path relative to the workspace (or absolute inside it)"},
                    "content": {"type": "string"}
                },
                "required": ["file_path", "content"],
                "additionalProperties": false
            }),
        }
    }
}

impl Default for WriteTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &str {
        "Write"
    }
    fn description(&self) -> &str {
        "Writes a file in the session workspace, replacing any existing content."
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
        let input: Input = parse_input(input)?;
        if input.content.len() as u64 > MAX_FILE_BYTES {
            return Err(ToolError::new(
                crate::workspace::codes::FILE_TOO_LARGE,
                format!(
                    "the content is {} bytes, more than the {MAX_FILE_BYTES}-byte file limit",
                    input.content.len()
                ),
            ));
        }
        let root = ctx.workspace.clone();
        file_io(ctx.file_io, input.content.len() as u64, move |_| {
            let ws = Workspace::for_tool(root.as_ref())?;
            let rel = ws.resolve(&input.file_path)?;
            ws.write_atomic(&rel, input.content.as_bytes())?;
            Ok(ToolOutput::text(format!(
                "Wrote {} bytes to {}",
                input.content.len(),
                ws.display(&rel)
            )))
        })
        .await
    }
}
