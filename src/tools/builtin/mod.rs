//! The built-in tools: confined file tools (Read, Write, Edit, MultiEdit, NotebookEdit, LS,
//! Glob, Grep), sandboxed Bash, background tasks (TaskOutput, TaskStop, TaskList, Monitor) and
//! PTY shells (ShellStart, ShellWrite, ShellRead, ShellResize, ShellClose), and the store-backed
//! state tools (TodoWrite, EnterPlanMode, ExitPlanMode, Memory).
//!
//! File tools are stateless and work on `ToolContext.workspace`. Bash, task and shell tools are
//! built per session around that session's [`tasks::TaskRegistry`] and [`pty::ShellRegistry`].

pub mod ask_user;
pub mod bash;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod ls;
pub mod memory;
pub mod notebook;
pub mod plan;
pub mod pty;
pub mod read;
pub mod tasks;
pub mod todo;
pub mod write;

use crate::ids::{SessionId, TenantId};
use crate::sandbox::Sandbox;
use crate::store::{Store, StoreError};
use crate::tools::{DynTool, ToolError, codes as tool_codes};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// Error codes of the built-in tools (besides [`crate::workspace::codes`]).
pub mod codes {
    pub const BINARY_FILE: &str = "BINARY_FILE";
    pub const EDIT_NOT_FOUND: &str = "EDIT_NOT_FOUND";
    pub const EDIT_NOT_UNIQUE: &str = "EDIT_NOT_UNIQUE";
    pub const EDIT_INVALID: &str = "EDIT_INVALID";
    pub const NOTEBOOK_INVALID: &str = "NOTEBOOK_INVALID";
    pub const CELL_NOT_FOUND: &str = "CELL_NOT_FOUND";
    pub const PATTERN_INVALID: &str = "PATTERN_INVALID";
    pub const COMMAND_DENIED: &str = "COMMAND_DENIED";
    pub const SANDBOX_FAILED: &str = "SANDBOX_FAILED";
    /// A required sandbox part is not enforced on this server: command tools are off.
    pub const SANDBOX_UNAVAILABLE: &str = "SANDBOX_UNAVAILABLE";
    pub const TASK_NOT_FOUND: &str = "TASK_NOT_FOUND";
    pub const SHELL_NOT_FOUND: &str = "SHELL_NOT_FOUND";
    pub const SHELL_CLOSED: &str = "SHELL_CLOSED";
    pub const SPAWN_FAILED: &str = "SPAWN_FAILED";
}

/// The eight file tools.
pub fn file_tools() -> Vec<DynTool> {
    vec![
        Arc::new(read::ReadTool::new()),
        Arc::new(write::WriteTool::new()),
        Arc::new(edit::EditTool::new()),
        Arc::new(edit::MultiEditTool::new()),
        Arc::new(notebook::NotebookEditTool::new()),
        Arc::new(ls::LsTool::new()),
        Arc::new(glob::GlobTool::new()),
        Arc::new(grep::GrepTool::new()),
    ]
}

/// One session's command environment: the probed sandbox, its tasks and its PTY shells.
#[derive(Clone)]
pub struct SessionShells {
    pub sandbox: Arc<Sandbox>,
    pub tasks: Arc<tasks::TaskRegistry>,
    pub shells: Arc<pty::ShellRegistry>,
}

/// Bash, the four task tools and the five PTY shell tools of one session.
pub fn shell_tools(env: &SessionShells) -> Vec<DynTool> {
    vec![
        Arc::new(bash::BashTool::new(env.sandbox.clone(), env.tasks.clone())),
        Arc::new(tasks::TaskOutputTool::new(env.tasks.clone())),
        Arc::new(tasks::TaskStopTool::new(env.tasks.clone())),
        Arc::new(tasks::TaskListTool::new(env.tasks.clone())),
        Arc::new(tasks::MonitorTool::new(env.tasks.clone())),
        Arc::new(pty::ShellStartTool::new(
            env.sandbox.clone(),
            env.shells.clone(),
        )),
        Arc::new(pty::ShellWriteTool::new(env.shells.clone())),
        Arc::new(pty::ShellReadTool::new(env.shells.clone())),
        Arc::new(pty::ShellResizeTool::new(env.shells.clone())),
        Arc::new(pty::ShellCloseTool::new(env.shells.clone())),
    ]
}

/// TodoWrite, EnterPlanMode, ExitPlanMode and Memory for `session` of `tenant`, keeping their
/// state in `store`.
pub fn state_tools(store: Arc<dyn Store>, tenant: TenantId, session: SessionId) -> Vec<DynTool> {
    vec![
        Arc::new(todo::TodoWriteTool::new(
            store.clone(),
            tenant.clone(),
            session.clone(),
        )),
        Arc::new(plan::EnterPlanModeTool::new(
            store.clone(),
            tenant.clone(),
            session.clone(),
        )),
        Arc::new(plan::ExitPlanModeTool::new(
            store.clone(),
            tenant.clone(),
            session,
        )),
        Arc::new(memory::MemoryTool::new(store, tenant)),
    ]
}

/// A refused command launch as a model-visible tool error.
pub(crate) fn sandbox_unavailable(error: crate::sandbox::SandboxUnavailable) -> ToolError {
    ToolError::new(codes::SANDBOX_UNAVAILABLE, error.0)
}

/// Code of a tool error caused by the store being unreachable.
pub const STORE_UNAVAILABLE: &str = "STORE_UNAVAILABLE";

/// A store failure as a model-visible tool error.
pub(crate) fn store_error(error: StoreError) -> ToolError {
    match error {
        StoreError::Unavailable(message) => ToolError::new(STORE_UNAVAILABLE, message),
        StoreError::NotFound => {
            ToolError::new(plan::codes::SESSION_NOT_FOUND, "the session does not exist")
        }
        other => ToolError::failed(other.to_string()),
    }
}

/// Deserializes a tool input; tools validate centrally too, this guards direct calls.
pub(crate) fn parse_input<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input)
        .map_err(|e| ToolError::new(tool_codes::INPUT_SCHEMA_INVALID, e.to_string()))
}

/// Runs blocking filesystem work off the async executor.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::failed(format!("worker failed: {e}")))?
}
