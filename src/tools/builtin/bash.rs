//! Bash: one sandboxed `bash -c` command per call, in its own process group, with a timeout
//! (default 120 s, at most 600 s); `run_in_background` turns it into a task instead.
//!
//! Deny patterns ([`crate::sandbox::policy::deny_reason`]) make the tool's own decision a hard
//! deny; the call re-checks so a direct call can never run a denied command either.

use super::tasks::{TaskRegistry, kill_group};
use super::{codes, parse_input};
use crate::permission::{SelfDecision, Subject};
use crate::sandbox::launcher::EXIT_SANDBOX_FAILED;
use crate::sandbox::{Sandbox, policy};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput, codes as tool_codes};
use crate::workspace::Workspace;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Default foreground timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Largest foreground timeout.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Most bytes kept from each of stdout and stderr.
pub const MAX_CAPTURE_BYTES: usize = 1024 * 1024;

#[derive(Deserialize)]
struct Input {
    command: String,
    timeout: Option<u64>,
    description: Option<String>,
    #[serde(default)]
    run_in_background: bool,
}

/// The policy check shared by Bash and the PTY tools: `Deny` when a deny pattern matches.
pub fn command_decision(command: &str) -> SelfDecision {
    match policy::deny_reason(command) {
        Some(_) => SelfDecision::Deny,
        None => SelfDecision::Ask,
    }
}

/// The `COMMAND_DENIED` code and reason when a deny pattern matches (or the text cannot be
/// parsed), for the tool result of a call the tool denies itself.
pub fn command_denial(command: &str) -> Option<(&'static str, String)> {
    policy::deny_reason(command).map(|reason| {
        (
            codes::COMMAND_DENIED,
            format!("command refused by policy: {reason}"),
        )
    })
}

/// Fails with `COMMAND_DENIED` when a deny pattern matches.
pub fn check_command(command: &str) -> Result<(), ToolError> {
    match policy::deny_reason(command) {
        Some(reason) => Err(ToolError::new(
            codes::COMMAND_DENIED,
            format!("command refused by policy: {reason}"),
        )),
        None => Ok(()),
    }
}

/// The Bash tool of one session.
pub struct BashTool {
    sandbox: Arc<Sandbox>,
    network: super::SessionNetwork,
    tasks: Arc<TaskRegistry>,
    schema: &'static StaticSchema,
}

impl BashTool {
    /// Builds the tool with its input schema.
    pub fn new(sandbox: Arc<Sandbox>, tasks: Arc<TaskRegistry>) -> Self {
        Self {
            sandbox,
            network: Default::default(),
            tasks,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1},
                    "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS, "description": "Milliseconds (default 120000)"},
                    "description": {"type": "string"},
                    "run_in_background": {"type": "boolean", "default": false}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }
}

impl BashTool {
    /// The tool with the session's command network (no network by default).
    pub fn with_network(mut self, network: super::SessionNetwork) -> Self {
        self.network = network;
        self
    }
}

async fn read_capped(mut reader: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_CAPTURE_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    kept
}

fn render(stdout: &[u8], stderr: &[u8], code: Option<i32>) -> String {
    let mut out = String::from_utf8_lossy(stdout).into_owned();
    let err = String::from_utf8_lossy(stderr);
    if !err.is_empty() {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&err);
    }
    match code {
        Some(0) => {}
        Some(code) => out.push_str(&format!("\n[exit code {code}]")),
        None => out.push_str("\n[killed by a signal]"),
    }
    out
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &str {
        "Bash"
    }
    fn description(&self) -> &str {
        "Runs a bash command in the session workspace inside the sandbox."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn self_decision(&self, input: &Value) -> SelfDecision {
        match input.get("command").and_then(Value::as_str) {
            Some(command) => command_decision(command),
            None => SelfDecision::Ask,
        }
    }
    fn self_denial(&self, input: &Value) -> Option<(&'static str, String)> {
        command_denial(input.get("command").and_then(Value::as_str)?)
    }
    fn permission_subject(&self) -> Subject {
        Subject::Command { field: "command" }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        check_command(&input.command)?;
        let ws = Workspace::for_tool(ctx.workspace.as_ref())?;
        let spec = self.network.launch_spec(
            &self.sandbox,
            ws.root(),
            &["/bin/bash", "-c", &input.command],
            "dumb",
        )?;
        if input.run_in_background {
            let hold = self.tasks.take_hold().await?;
            let info = self
                .tasks
                .spawn(&spec, &input.command, input.description, hold)
                .map_err(|e| ToolError::new(codes::SPAWN_FAILED, e.to_string()))?;
            return Ok(ToolOutput::text(format!(
                "Started background task {} (use TaskOutput to read its output)",
                info.task_id
            )));
        }
        let timeout = Duration::from_millis(
            input
                .timeout
                .unwrap_or(DEFAULT_TIMEOUT_MS)
                .clamp(1, MAX_TIMEOUT_MS),
        );
        let mut child = tokio::process::Command::new(&spec.program)
            .args(&spec.args)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&spec.cwd)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ToolError::new(codes::SPAWN_FAILED, e.to_string()))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        // A call dropped mid-command (its run task stopped past the shutdown grace or by
        // self-fencing) kills the whole group too, not only the leader.
        let mut group = GroupKill(pgid);
        let stdout = child.stdout.take().map(|s| tokio::spawn(read_capped(s)));
        let stderr = child.stderr.take().map(|s| tokio::spawn(read_capped(s)));
        let outcome = tokio::select! {
            status = child.wait() => Ok(status),
            _ = tokio::time::sleep(timeout) => Err(tool_codes::TOOL_TIMEOUT),
            _ = ctx.cancel.cancelled() => Err(tool_codes::CANCELLED),
        };
        // Whatever happened, nothing of this command may outlive the call: kill the group
        // (grandchildren included), then reap the leader.
        kill_group(pgid);
        let _ = child.wait().await;
        group.0 = 0; // reaped: the id may be reused
        let collect = |h: Option<tokio::task::JoinHandle<Vec<u8>>>| async move {
            match h {
                Some(h) => tokio::time::timeout(Duration::from_secs(5), h)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default(),
                None => Vec::new(),
            }
        };
        let out = collect(stdout).await;
        let err = collect(stderr).await;
        match outcome {
            Ok(Ok(status)) => {
                if status.code() == Some(EXIT_SANDBOX_FAILED)
                    && String::from_utf8_lossy(&err).starts_with("norma-sandbox:")
                {
                    return Err(ToolError::new(
                        codes::SANDBOX_FAILED,
                        String::from_utf8_lossy(&err).trim().to_string(),
                    ));
                }
                Ok(ToolOutput::text(render(&out, &err, status.code())))
            }
            Ok(Err(e)) => Err(ToolError::failed(format!("waiting for the command: {e}"))),
            Err(code) if code == tool_codes::TOOL_TIMEOUT => Err(ToolError::new(
                code,
                format!(
                    "command timed out after {} ms and was killed\n{}",
                    timeout.as_millis(),
                    render(&out, &err, None)
                ),
            )),
            Err(code) => Err(ToolError::new(code, "command cancelled and killed")),
        }
    }
}

/// Kills a command's process group when dropped (unless disarmed with a zero id).
struct GroupKill(i32);

impl Drop for GroupKill {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}
