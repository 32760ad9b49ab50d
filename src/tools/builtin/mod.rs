//! The built-in tools: confined file tools (Read, Write, Edit, MultiEdit, NotebookEdit, LS,
//! Glob, Grep), sandboxed Bash, background tasks (TaskOutput, TaskStop, TaskList, Monitor) and
//! PTY shells (ShellStart, ShellWrite, ShellRead, ShellResize, ShellClose), and the store-backed
//! state tools (TodoWrite, EnterPlanMode, ExitPlanMode, Memory), and WebFetch (through the
//! egress broker, [`crate::egress`]).
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
pub mod patterns;
pub mod plan;
pub mod pty;
pub mod read;
pub mod rule_targets;
pub mod tasks;
pub mod todo;
pub mod web_content;
pub mod web_fetch;
pub mod web_search;
pub mod write;

use crate::ids::{SessionId, TenantId};
use crate::sandbox::Sandbox;
use crate::store::{Store, StoreError};
use crate::tools::{DynTool, FileIo, ToolError, codes as tool_codes};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// A glob or regex over its length, nesting or compiled-size limit.
    pub const PATTERN_TOO_COMPLEX: &str = "PATTERN_TOO_COMPLEX";
}

/// Largest file the file tools read, and largest result Write, Edit, MultiEdit and
/// NotebookEdit may produce (`FILE_TOO_LARGE`).
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Largest file Read reads, and largest content Write writes, on the calling task's thread
/// when the workspace is local ([`FileIo::Local`]): at most tens of microseconds of work on
/// cached pages; a larger file goes to the blocking pool.
pub const INLINE_FILE_BYTES: u64 = 64 * 1024;

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

/// One session's command environment: the probed sandbox, its network, its tasks and its
/// PTY shells.
#[derive(Clone)]
pub struct SessionShells {
    pub sandbox: Arc<Sandbox>,
    pub network: SessionNetwork,
    pub tasks: Arc<tasks::TaskRegistry>,
    pub shells: Arc<pty::ShellRegistry>,
}

/// The network of one session's commands (session configuration `network`).
#[derive(Clone, Default)]
pub enum SessionNetwork {
    /// No network (the default).
    #[default]
    None,
    /// Only the session's egress proxy — or why it could not be started (then command tools
    /// answer `SANDBOX_UNAVAILABLE`: never the host's network instead).
    Egress(Result<Arc<crate::egress::proxy::ProxyEndpoint>, String>),
}

impl SessionNetwork {
    /// How to start `program` sandboxed in `workspace` with this network.
    pub(crate) fn launch_spec(
        &self,
        sandbox: &Sandbox,
        workspace: &std::path::Path,
        program: &[&str],
        term: &str,
    ) -> Result<crate::sandbox::LaunchSpec, ToolError> {
        let proxy = match self {
            Self::None => None,
            Self::Egress(Ok(endpoint)) => Some(endpoint.socket_path()),
            Self::Egress(Err(why)) => {
                return Err(sandbox_unavailable(crate::sandbox::SandboxUnavailable(
                    format!(
                        "network \"egress\": the session's egress proxy could not start: {why}"
                    ),
                )));
            }
        };
        sandbox
            .launch_spec(workspace, program, term, proxy)
            .map_err(sandbox_unavailable)
    }
}

/// Bash, the four task tools and the five PTY shell tools of one session.
pub fn shell_tools(env: &SessionShells) -> Vec<DynTool> {
    vec![
        Arc::new(
            bash::BashTool::new(env.sandbox.clone(), env.tasks.clone())
                .with_network(env.network.clone()),
        ),
        Arc::new(tasks::TaskOutputTool::new(env.tasks.clone())),
        Arc::new(tasks::TaskStopTool::new(env.tasks.clone())),
        Arc::new(tasks::TaskListTool::new(env.tasks.clone())),
        Arc::new(tasks::MonitorTool::new(env.tasks.clone())),
        Arc::new(
            pty::ShellStartTool::new(env.sandbox.clone(), env.shells.clone())
                .with_network(env.network.clone()),
        ),
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

/// A stop signal for work running on a blocking-pool thread.
///
/// Dropping the future of a tool call (the pipeline's timeout, the run's cancel token) does not
/// stop a `spawn_blocking` closure; without a signal a walk over a huge tree would keep its
/// thread long after the call ended. [`blocking`] hands the closure an `Interrupt` that is set
/// when the awaiting future goes away, and long loops call [`Interrupt::check`] as they go.
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// A fresh, unset signal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the call that started the work is gone.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(CANCELLED)` once the call that started the work is gone.
    pub fn check(&self) -> Result<(), ToolError> {
        if self.is_set() {
            Err(ToolError::new(
                tool_codes::CANCELLED,
                "the tool call ended (timeout or cancel) before its work finished",
            ))
        } else {
            Ok(())
        }
    }

    /// Sets the signal.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Sets the interrupt when dropped: when the awaiting future completes or is dropped.
struct SetOnDrop(Interrupt);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.set();
    }
}

/// Runs blocking filesystem work off the async executor. The closure gets an [`Interrupt`]
/// that is set as soon as the calling future is dropped (timeout or cancel), so loops in the
/// work stop and free the blocking thread promptly.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce(&Interrupt) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let interrupt = Interrupt::new();
    let guard = SetOnDrop(interrupt.clone());
    let result = tokio::task::spawn_blocking(move || work(&interrupt))
        .await
        .map_err(|e| ToolError::failed(format!("worker failed: {e}")))?;
    drop(guard);
    result
}

/// Runs a file tool's work on `bytes` bytes on the calling thread when the workspace is local
/// and `bytes` is at most [`INLINE_FILE_BYTES`] (a hop to the blocking pool and back costs
/// more than such work), otherwise on the blocking pool ([`blocking`]).
pub(crate) async fn file_io<T: Send + 'static>(
    io: FileIo,
    bytes: u64,
    work: impl FnOnce(&Interrupt) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    if io == FileIo::Local && bytes <= INLINE_FILE_BYTES {
        return work(&Interrupt::new());
    }
    blocking(work).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn dropping_the_call_interrupts_its_blocking_work() {
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (stopped_tx, stopped_rx) = std::sync::mpsc::channel();
        let call = blocking(move |interrupt| {
            started_tx.send(()).expect("started");
            // Spins until the call is gone, like a walk over an endless tree.
            loop {
                if let Err(error) = interrupt.check() {
                    stopped_tx.send(error.code).expect("stopped");
                    return Err::<(), _>(error);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        // The pipeline's timeout drops the call future the same way.
        let timed_out = tokio::time::timeout(Duration::from_millis(50), call).await;
        assert!(timed_out.is_err(), "the work never ends on its own");
        started_rx.recv().expect("the work ran");
        let code = tokio::task::spawn_blocking(move || stopped_rx.recv())
            .await
            .expect("join")
            .expect("the blocking work saw the interrupt and returned");
        assert_eq!(code, tool_codes::CANCELLED);
    }

    #[test]
    fn a_set_interrupt_stops_a_walk() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ws = crate::workspace::Workspace::create(
            tmp.path(),
            &TenantId::new("acme"),
            &SessionId::generate(),
        )
        .expect("workspace");
        std::fs::write(ws.root().join("a.txt"), "a").expect("write");
        let interrupt = Interrupt::new();
        let walk = glob::walk_files(&ws, std::path::Path::new(""), &interrupt).expect("walk");
        assert_eq!(walk.files.len(), 1);
        interrupt.set();
        let error = glob::walk_files(&ws, std::path::Path::new(""), &interrupt).unwrap_err();
        assert_eq!(error.code, tool_codes::CANCELLED);
    }
}
