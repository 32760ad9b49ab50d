//! TodoWrite: replaces the session's todo list, keeps it in the store (per tenant and
//! session) and reports the new list as progress so the loop can publish it as an event.

use super::{parse_input, store_error};
use crate::ids::{SessionId, TenantId};
use crate::permission::SelfDecision;
use crate::store::{Store, TodoItem, TodoStatus};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// Error codes of TodoWrite.
pub mod codes {
    /// Two items share an id.
    pub const TODO_DUPLICATE_ID: &str = "TODO_DUPLICATE_ID";
    /// An id or content is empty or too long.
    pub const TODO_INVALID: &str = "TODO_INVALID";
    /// More than [`super::MAX_TODOS`] items.
    pub const TODO_TOO_MANY: &str = "TODO_TOO_MANY";
}

/// Most items in one list.
pub const MAX_TODOS: usize = 100;
/// Longest item content, in characters.
pub const MAX_CONTENT_CHARS: usize = 2_000;
/// Longest item id, in characters.
pub const MAX_ID_CHARS: usize = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    todos: Vec<TodoItem>,
}

/// The TodoWrite tool of one session.
pub struct TodoWriteTool {
    store: Arc<dyn Store>,
    tenant: TenantId,
    session: SessionId,
    schema: &'static StaticSchema,
}

impl TodoWriteTool {
    /// The tool for `session` of `tenant`, persisting in `store`.
    pub fn new(store: Arc<dyn Store>, tenant: TenantId, session: SessionId) -> Self {
        Self {
            store,
            tenant,
            session,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "description": "The complete new todo list (replaces the old one)",
                        "maxItems": MAX_TODOS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS},
                                "content": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT_CHARS},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                                "priority": {"type": "string", "enum": ["high", "medium", "low"]}
                            },
                            "required": ["id", "content", "status", "priority"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["todos"],
                "additionalProperties": false
            }),
        }
    }
}

/// Checks a new list: unique non-empty ids, non-empty content, size limits.
pub fn validate(items: &[TodoItem]) -> Result<(), ToolError> {
    if items.len() > MAX_TODOS {
        return Err(ToolError::new(
            codes::TODO_TOO_MANY,
            format!("{} items; at most {MAX_TODOS}", items.len()),
        ));
    }
    let mut seen = HashSet::new();
    for item in items {
        let id_chars = item.id.trim().chars().count();
        if id_chars == 0 || item.id.chars().count() > MAX_ID_CHARS {
            return Err(ToolError::new(
                codes::TODO_INVALID,
                format!("todo ids must be 1 to {MAX_ID_CHARS} characters"),
            ));
        }
        if item.content.trim().is_empty() || item.content.chars().count() > MAX_CONTENT_CHARS {
            return Err(ToolError::new(
                codes::TODO_INVALID,
                format!(
                    "todo {} must have 1 to {MAX_CONTENT_CHARS} characters of content",
                    item.id
                ),
            ));
        }
        if !seen.insert(item.id.as_str()) {
            return Err(ToolError::new(
                codes::TODO_DUPLICATE_ID,
                format!("todo id {} appears more than once", item.id),
            ));
        }
    }
    Ok(())
}

/// The list as the model reads it back.
pub fn render(items: &[TodoItem]) -> String {
    if items.is_empty() {
        return "Todo list cleared (0 items).".into();
    }
    let done = items
        .iter()
        .filter(|item| item.status == TodoStatus::Completed)
        .count();
    let mut out = format!("Todo list updated ({done}/{} completed):\n", items.len());
    for item in items {
        let mark = match item.status {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[~]",
            TodoStatus::Completed => "[x]",
        };
        let priority = match item.priority {
            crate::store::TodoPriority::High => "high",
            crate::store::TodoPriority::Medium => "medium",
            crate::store::TodoPriority::Low => "low",
        };
        out.push_str(&format!(
            "{mark} {} ({priority}) {}\n",
            item.id, item.content
        ));
    }
    out
}

#[async_trait]
impl Tool for TodoWriteTool {
    fn name(&self) -> &str {
        "TodoWrite"
    }
    fn description(&self) -> &str {
        "Replaces this session's todo list with the given items (id, content, status, priority) \
         and returns the new list."
    }
    fn prompt(&self) -> &str {
        "Use TodoWrite to plan and track multi-step work. Send the whole list every time; keep \
         exactly one item in_progress while working and mark items completed as soon as they \
         are done."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    // Not read-only (it writes session state), exclusive (two writers would race), but it
    // touches nothing outside the session, so it allows itself.
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Allow
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        validate(&input.todos)?;
        self.store
            .put_todos(&self.tenant, &self.session, &input.todos)
            .await
            .map_err(store_error)?;
        ctx.report_progress(json!({"kind": "todos", "todos": input.todos}));
        Ok(ToolOutput::text(render(&input.todos)))
    }
}
