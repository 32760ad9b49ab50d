//! Background tasks of one session: sandboxed commands that outlive the Bash call that started
//! them, their output files, completion notifications, and the TaskOutput, TaskStop, TaskList
//! and Monitor tools.
//!
//! Output files live at `<data>/tasks/<session id>/<task id>.log`: both ids are server-issued,
//! no model string ever becomes part of the path. Every task runs in its own process group,
//! which TaskStop and [`TaskRegistry::shutdown`] kill as a whole.

use super::{codes, parse_input};
use crate::ids::SessionId;
use crate::permission::SelfDecision;
use crate::sandbox::LaunchSpec;
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Most bytes one TaskOutput returns (the tail is kept).
pub const MAX_OUTPUT_BYTES: u64 = 256 * 1024;

/// Where a task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Running,
    /// Exited on its own (see the exit code).
    Completed,
    /// Stopped by TaskStop or shutdown.
    Killed,
}

/// Sent when a task ends, for the loop's task-notification continue reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskNotification {
    pub task_id: String,
    pub status: TaskStatus,
    pub exit_code: Option<i32>,
    pub command: String,
}

/// A snapshot of one task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInfo {
    pub task_id: String,
    pub command: String,
    pub description: Option<String>,
    pub status: TaskStatus,
    pub exit_code: Option<i32>,
    /// The process group id (the task's leader pid).
    pub pgid: i32,
}

struct Task {
    info: Mutex<TaskInfo>,
    log_path: PathBuf,
    /// Bytes of the log already returned by incremental TaskOutput reads.
    read_offset: Mutex<u64>,
    done: watch::Receiver<bool>,
}

/// Why the registry could not be created or a task started.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("session id {0:?} is not a server-issued id")]
    MalformedSessionId(String),
    #[error("task I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// The background tasks of one session.
pub struct TaskRegistry {
    log_dir: PathBuf,
    tasks: Mutex<BTreeMap<String, Arc<Task>>>,
    notify_tx: mpsc::Sender<TaskNotification>,
    notify_rx: Mutex<Option<mpsc::Receiver<TaskNotification>>>,
    /// Where a running task is counted against the tenant's limits (unset: not counted).
    holds: std::sync::OnceLock<crate::limits::SessionHolds>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of plain data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills a whole process group; an already-gone group is not an error.
pub fn kill_group(pgid: i32) {
    if pgid > 0 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

impl TaskRegistry {
    /// Creates the registry of `session`, with output files under `<data_dir>/tasks/<session>`
    /// (the directory is made with the session's first task: most sessions never start one).
    pub fn new(data_dir: &Path, session: &SessionId) -> Result<Arc<Self>, TaskError> {
        if !session.is_well_formed() {
            return Err(TaskError::MalformedSessionId(session.to_string()));
        }
        let log_dir = data_dir.join("tasks").join(session.as_str());
        let (notify_tx, notify_rx) = mpsc::channel(1024);
        Ok(Arc::new(Self {
            log_dir,
            tasks: Mutex::new(BTreeMap::new()),
            notify_tx,
            notify_rx: Mutex::new(Some(notify_rx)),
            holds: std::sync::OnceLock::new(),
        }))
    }

    /// The completion-notification stream; handed out once (to the session loop).
    pub fn notifications(&self) -> Option<mpsc::Receiver<TaskNotification>> {
        lock(&self.notify_rx).take()
    }

    /// Counts this session's running tasks against the tenant's limits from now on.
    pub fn set_holds(&self, holds: crate::limits::SessionHolds) {
        let _ = self.holds.set(holds);
    }

    /// Takes the tenant-limit hold a new task needs (`None` when tasks are not counted).
    pub async fn take_hold(&self) -> Result<Option<crate::limits::HoldGuard>, ToolError> {
        match self.holds.get() {
            Some(holds) => Ok(Some(holds.take(crate::limits::HoldKind::Task).await?)),
            None => Ok(None),
        }
    }

    /// Starts a sandboxed command as a background task. Must be called inside a tokio runtime.
    /// `hold` (from [`Self::take_hold`]) is released when the task's process exits.
    pub fn spawn(
        self: &Arc<Self>,
        spec: &LaunchSpec,
        command: &str,
        description: Option<String>,
        hold: Option<crate::limits::HoldGuard>,
    ) -> Result<TaskInfo, TaskError> {
        let task_id = format!("task_{}", uuid::Uuid::new_v4().simple());
        std::fs::create_dir_all(&self.log_dir)?;
        let log_path = self.log_dir.join(format!("{task_id}.log"));
        let log = std::fs::File::create(&log_path)?;
        let mut child = tokio::process::Command::new(&spec.program)
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let info = TaskInfo {
            task_id: task_id.clone(),
            command: command.to_string(),
            description,
            status: TaskStatus::Running,
            exit_code: None,
            pgid,
        };
        let (done_tx, done_rx) = watch::channel(false);
        let task = Arc::new(Task {
            info: Mutex::new(info.clone()),
            log_path,
            read_offset: Mutex::new(0),
            done: done_rx,
        });
        lock(&self.tasks).insert(task_id, task.clone());
        let notify = self.notify_tx.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            // Stray grandchildren of a finished task go with it.
            kill_group(pgid);
            drop(hold);
            let note = {
                let mut info = lock(&task.info);
                if info.status == TaskStatus::Running {
                    info.status = TaskStatus::Completed;
                    info.exit_code = status.ok().and_then(|s| s.code());
                }
                TaskNotification {
                    task_id: info.task_id.clone(),
                    status: info.status,
                    exit_code: info.exit_code,
                    command: info.command.clone(),
                }
            };
            let _ = done_tx.send(true);
            // A full or closed channel only means nobody is consuming notifications.
            let _ = notify.try_send(note);
        });
        Ok(info)
    }

    fn get(&self, task_id: &str) -> Result<Arc<Task>, ToolError> {
        lock(&self.tasks).get(task_id).cloned().ok_or_else(|| {
            ToolError::new(
                codes::TASK_NOT_FOUND,
                format!("no task {task_id:?} in this session"),
            )
        })
    }

    /// Snapshots of every task, oldest id order.
    pub fn list(&self) -> Vec<TaskInfo> {
        lock(&self.tasks)
            .values()
            .map(|t| lock(&t.info).clone())
            .collect()
    }

    /// A snapshot of one task.
    pub fn info(&self, task_id: &str) -> Result<TaskInfo, ToolError> {
        Ok(lock(&self.get(task_id)?.info).clone())
    }

    /// Kills a task's process group.
    pub fn stop(&self, task_id: &str) -> Result<TaskInfo, ToolError> {
        let task = self.get(task_id)?;
        let mut info = lock(&task.info);
        if info.status == TaskStatus::Running {
            info.status = TaskStatus::Killed;
            kill_group(info.pgid);
        }
        Ok(info.clone())
    }

    /// Waits until the task ends or `timeout` passes; true when it ended.
    pub async fn wait(&self, task_id: &str, timeout: Duration) -> Result<bool, ToolError> {
        let mut done = self.get(task_id)?.done.clone();
        let ended = tokio::time::timeout(timeout, done.wait_for(|d| *d)).await;
        Ok(matches!(ended, Ok(Ok(_))))
    }

    /// Output of a task: everything (`full`), or what was not returned by an earlier
    /// incremental read. At most [`MAX_OUTPUT_BYTES`] (the tail) are returned.
    pub fn output(&self, task_id: &str, full: bool) -> Result<String, ToolError> {
        let task = self.get(task_id)?;
        let mut offset = lock(&task.read_offset);
        let start = if full { 0 } else { *offset };
        let (text, end) = read_log(&task.log_path, start)?;
        *offset = end;
        Ok(text)
    }

    /// The log from byte `start` (used by Monitor, which keeps its own offset).
    pub fn output_from(&self, task_id: &str, start: u64) -> Result<(String, u64), ToolError> {
        let task = self.get(task_id)?;
        read_log(&task.log_path, start)
    }

    /// Kills every running task (session close or expiry).
    pub fn shutdown(&self) {
        for task in lock(&self.tasks).values() {
            let mut info = lock(&task.info);
            if info.status == TaskStatus::Running {
                info.status = TaskStatus::Killed;
                kill_group(info.pgid);
            }
        }
    }
}

impl Drop for TaskRegistry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn read_log(path: &Path, start: u64) -> Result<(String, u64), ToolError> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| ToolError::failed(format!("task output unavailable: {e}")))?;
    let len = file
        .metadata()
        .map_err(|e| ToolError::failed(e.to_string()))?
        .len();
    let from = start.max(len.saturating_sub(MAX_OUTPUT_BYTES)).min(len);
    file.seek(SeekFrom::Start(from))
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let mut buf = Vec::new();
    file.take(len - from)
        .read_to_end(&mut buf)
        .map_err(|e| ToolError::failed(e.to_string()))?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if from > start {
        text.insert_str(0, &format!("[… {} earlier bytes omitted]\n", from - start));
    }
    Ok((text, len))
}

fn status_line(info: &TaskInfo) -> String {
    let status = match info.status {
        TaskStatus::Running => "running".to_string(),
        TaskStatus::Completed => match info.exit_code {
            Some(code) => format!("completed (exit code {code})"),
            None => "completed (killed by a signal)".to_string(),
        },
        TaskStatus::Killed => "killed".to_string(),
    };
    format!("{}: {status} — {}", info.task_id, info.command)
}

macro_rules! task_tool_basics {
    ($name:literal, $desc:literal, $read_only:expr) => {
        fn name(&self) -> &str {
            $name
        }
        fn description(&self) -> &str {
            $desc
        }
        fn input_schema(&self) -> &Value {
            self.schema.value()
        }
        fn static_schema(&self) -> Option<&'static StaticSchema> {
            Some(self.schema)
        }
        fn is_read_only(&self, _input: &Value) -> bool {
            $read_only
        }
        fn is_concurrency_safe(&self, _input: &Value) -> bool {
            $read_only
        }
        fn self_decision(&self, _input: &Value) -> SelfDecision {
            // Tasks were approved when Bash started them; these only observe or stop them.
            SelfDecision::Allow
        }
    };
}

#[derive(Deserialize)]
struct OutputInput {
    task_id: String,
    #[serde(default)]
    block: bool,
    timeout: Option<u64>,
    #[serde(default)]
    full: bool,
}

/// TaskOutput: a task's status and new (or full) output, optionally waiting for it to end.
pub struct TaskOutputTool {
    tasks: Arc<TaskRegistry>,
    schema: &'static StaticSchema,
}

impl TaskOutputTool {
    /// Builds the tool with its input schema.
    pub fn new(tasks: Arc<TaskRegistry>) -> Self {
        Self {
            tasks,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string"},
                    "block": {"type": "boolean", "default": false, "description": "Wait for the task to end"},
                    "timeout": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "Milliseconds to wait when blocking (default 30000)"},
                    "full": {"type": "boolean", "default": false, "description": "Return all output, not only what is new"}
                },
                "required": ["task_id"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for TaskOutputTool {
    task_tool_basics!(
        "TaskOutput",
        "Shows a background task's status and its new (or full) output.",
        true
    );
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: OutputInput = parse_input(input)?;
        if input.block {
            let wait = Duration::from_millis(input.timeout.unwrap_or(30_000));
            tokio::select! {
                r = self.tasks.wait(&input.task_id, wait) => { r?; }
                _ = ctx.cancel.cancelled() => {
                    return Err(ToolError::new(crate::tools::codes::CANCELLED, "cancelled"));
                }
            }
        }
        let info = self.tasks.info(&input.task_id)?;
        let output = self.tasks.output(&input.task_id, input.full)?;
        Ok(ToolOutput::text(format!(
            "{}\n{output}",
            status_line(&info)
        )))
    }
}

#[derive(Deserialize)]
struct IdInput {
    task_id: String,
}

/// TaskStop: kills a background task's whole process group.
pub struct TaskStopTool {
    tasks: Arc<TaskRegistry>,
    schema: &'static StaticSchema,
}

impl TaskStopTool {
    /// Builds the tool with its input schema.
    pub fn new(tasks: Arc<TaskRegistry>) -> Self {
        Self {
            tasks,
            schema: static_schema!({
                "type": "object",
                "properties": {"task_id": {"type": "string"}},
                "required": ["task_id"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for TaskStopTool {
    task_tool_basics!(
        "TaskStop",
        "Stops a background task (kills its process group).",
        false
    );
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: IdInput = parse_input(input)?;
        let info = self.tasks.stop(&input.task_id)?;
        Ok(ToolOutput::text(status_line(&info)))
    }
}

/// TaskList: every task of the session.
pub struct TaskListTool {
    tasks: Arc<TaskRegistry>,
    schema: &'static StaticSchema,
}

impl TaskListTool {
    /// Builds the tool with its input schema.
    pub fn new(tasks: Arc<TaskRegistry>) -> Self {
        Self {
            tasks,
            schema: static_schema!({"type": "object", "properties": {}, "additionalProperties": false}),
        }
    }
}

#[async_trait]
impl Tool for TaskListTool {
    task_tool_basics!("TaskList", "Lists the session's background tasks.", true);
    async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let lines: Vec<String> = self.tasks.list().iter().map(status_line).collect();
        if lines.is_empty() {
            return Ok(ToolOutput::text("No background tasks"));
        }
        Ok(ToolOutput::text(lines.join("\n")))
    }
}

#[derive(Deserialize)]
struct MonitorInput {
    task_id: String,
    pattern: String,
    timeout: Option<u64>,
    max_lines: Option<usize>,
}

/// Monitor: streams a task's output lines matching a pattern (as progress) until the task
/// ends, the timeout passes, or `max_lines` lines matched.
pub struct MonitorTool {
    tasks: Arc<TaskRegistry>,
    schema: &'static StaticSchema,
}

impl MonitorTool {
    /// Builds the tool with its input schema.
    pub fn new(tasks: Arc<TaskRegistry>) -> Self {
        Self {
            tasks,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string"},
                    "pattern": {"type": "string", "description": "Regular expression lines must match"},
                    "timeout": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "Milliseconds (default 60000)"},
                    "max_lines": {"type": "integer", "minimum": 1, "description": "Stop after this many matching lines (default 100)"}
                },
                "required": ["task_id", "pattern"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for MonitorTool {
    task_tool_basics!(
        "Monitor",
        "Watches a background task's output for lines matching a pattern.",
        true
    );
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: MonitorInput = parse_input(input)?;
        let regex = grep_regex::RegexMatcher::new_line_matcher(&input.pattern)
            .map_err(|e| ToolError::new(codes::PATTERN_INVALID, e.to_string()))?;
        let max_lines = input.max_lines.unwrap_or(100);
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(input.timeout.unwrap_or(60_000));
        let mut offset = 0u64;
        let mut partial = String::new();
        let mut matched: Vec<String> = Vec::new();
        loop {
            let ended = self.tasks.info(&input.task_id)?.status != TaskStatus::Running;
            let (chunk, end) = self.tasks.output_from(&input.task_id, offset)?;
            offset = end;
            partial.push_str(&chunk);
            let mut lines: Vec<String> = partial.split('\n').map(str::to_string).collect();
            // The last piece is an unfinished line unless the task ended.
            partial = if ended {
                String::new()
            } else {
                lines.pop().unwrap_or_default()
            };
            for line in lines {
                use grep_matcher::Matcher;
                if regex.is_match(line.as_bytes()).unwrap_or(false) {
                    ctx.report_progress(json!({"task_id": input.task_id, "line": line}));
                    matched.push(line);
                    if matched.len() >= max_lines {
                        break;
                    }
                }
            }
            let reason = if matched.len() >= max_lines {
                Some("line limit reached")
            } else if ended {
                Some("task ended")
            } else if tokio::time::Instant::now() >= deadline {
                Some("timeout")
            } else {
                None
            };
            if let Some(reason) = reason {
                let info = self.tasks.info(&input.task_id)?;
                return Ok(ToolOutput::text(format!(
                    "{} ({reason}; {} matching lines)\n{}",
                    status_line(&info),
                    matched.len(),
                    matched.join("\n")
                )));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = ctx.cancel.cancelled() => {
                    return Err(ToolError::new(crate::tools::codes::CANCELLED, "cancelled"));
                }
            }
        }
    }
}
