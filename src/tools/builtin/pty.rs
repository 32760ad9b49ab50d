//! PTY shells: ShellStart, ShellWrite, ShellRead, ShellResize, ShellClose.
//!
//! A shell is an interactive program (bash by default) on a pseudo-terminal, started through
//! the same sandbox launcher as Bash. Every ShellWrite is checked by the same command policy as
//! a Bash command — together with any not yet submitted text typed earlier, so a command cannot
//! be smuggled in across several writes.
//!
//! ShellStart and ShellWrite also answer to the session's `Bash(...)` permission rules (and to
//! rules naming themselves): the ladder judges ShellStart's `command` and, for ShellWrite, the
//! line the write completes (unsubmitted text plus the typed text, with Enter unless
//! `submit: false`), exactly as it judges a Bash command.

use super::bash::{check_command, command_decision, command_denial};
use super::tasks::kill_group;
use super::{codes, parse_input};
use crate::permission::{SelfDecision, Subject};
use crate::sandbox::Sandbox;
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use crate::workspace::Workspace;
use async_trait::async_trait;
use portable_pty::{Child, CommandBuilder, MasterPty, PtySize, native_pty_system};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most shells one registry keeps open when no tenant limits count them (server sessions
/// use `limits.shells_per_session` and `limits.shells` instead).
pub const MAX_SHELLS: usize = 8;
/// Bytes of terminal output kept per shell.
pub const MAX_BUFFER_BYTES: usize = 1024 * 1024;
/// Most bytes of new output one ShellRead returns (the newest; older unread bytes are
/// reported as omitted).
pub const MAX_READ_BYTES: usize = 64 * 1024;
/// Bytes of the buffer's tail rendered as the current screen.
const SCREEN_TAIL_BYTES: usize = 64 * 1024;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked mid-update of plain data.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct Screen {
    data: Vec<u8>,
    /// Offset in `data` up to which ShellRead already returned output.
    read_pos: usize,
    /// Bytes dropped from the front of `data` to stay under [`MAX_BUFFER_BYTES`].
    dropped: usize,
    eof: bool,
}

struct Shell {
    master: Mutex<Box<dyn MasterPty + Send>>,
    writer: Mutex<Box<dyn Write + Send>>,
    child: Mutex<Box<dyn Child + Send + Sync>>,
    pgid: i32,
    rows: Mutex<u16>,
    screen: Arc<Mutex<Screen>>,
    /// Text written since the last newline: checked together with the next write.
    pending_line: Mutex<String>,
    /// The shell's tenant-limit hold, released when the shell is gone.
    _hold: Option<crate::limits::HoldGuard>,
}

/// The PTY shells of one session.
#[derive(Default)]
pub struct ShellRegistry {
    shells: Mutex<BTreeMap<String, Arc<Shell>>>,
    /// Where an open shell is counted against the tenant's limits (unset: not counted).
    holds: std::sync::OnceLock<crate::limits::SessionHolds>,
}

impl ShellRegistry {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Counts this session's open shells against the tenant's limits from now on.
    pub fn set_holds(&self, holds: crate::limits::SessionHolds) {
        let _ = self.holds.set(holds);
    }

    fn get(&self, id: &str) -> Result<Arc<Shell>, ToolError> {
        lock(&self.shells).get(id).cloned().ok_or_else(|| {
            ToolError::new(
                codes::SHELL_NOT_FOUND,
                format!("no shell {id:?} in this session"),
            )
        })
    }

    /// The text a write of `text` to shell `id` would complete, for the policy check.
    fn pending_with(&self, id: &str, text: &str) -> String {
        let pending = self
            .get(id)
            .map(|s| lock(&s.pending_line).clone())
            .unwrap_or_default();
        format!("{pending}{text}")
    }

    /// Ids of the open shells.
    pub fn ids(&self) -> Vec<String> {
        lock(&self.shells).keys().cloned().collect()
    }

    /// Kills every shell (session close or expiry).
    pub fn shutdown(&self) {
        let shells = std::mem::take(&mut *lock(&self.shells));
        for shell in shells.values() {
            close_shell(shell);
        }
    }
}

impl Drop for ShellRegistry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn close_shell(shell: &Shell) {
    kill_group(shell.pgid);
    let mut child = lock(&shell.child);
    // Already-exited children make kill fail; the group kill above did the work.
    let _ = child.kill();
    let _ = child.try_wait();
}

/// Removes terminal escape sequences and carriage returns, leaving plain text.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    // CSI: parameters then one final byte in @..~
                    for ch in chars.by_ref() {
                        if ('@'..='~').contains(&ch) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    // OSC: until BEL or ESC \
                    while let Some(ch) = chars.next() {
                        if ch == '\u{7}' {
                            break;
                        }
                        if ch == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\r' => {}
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

fn shell_id_schema() -> Value {
    json!({"type": "string", "description": "Id returned by ShellStart"})
}

#[derive(Deserialize)]
struct StartInput {
    command: Option<String>,
    rows: Option<u16>,
    cols: Option<u16>,
}

/// ShellStart: opens a PTY running an interactive bash (or `command`) in the sandbox.
pub struct ShellStartTool {
    sandbox: Arc<Sandbox>,
    network: super::SessionNetwork,
    shells: Arc<ShellRegistry>,
    schema: &'static StaticSchema,
}

impl ShellStartTool {
    /// Builds the tool with its input schema.
    pub fn new(sandbox: Arc<Sandbox>, shells: Arc<ShellRegistry>) -> Self {
        Self {
            sandbox,
            network: Default::default(),
            shells,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "Program line to run on the terminal; an interactive bash by default"},
                    "rows": {"type": "integer", "minimum": 2, "maximum": 500},
                    "cols": {"type": "integer", "minimum": 10, "maximum": 1000}
                },
                "additionalProperties": false
            }),
        }
    }
}

impl ShellStartTool {
    /// The tool with the session's command network (no network by default).
    pub fn with_network(mut self, network: super::SessionNetwork) -> Self {
        self.network = network;
        self
    }
}

#[async_trait]
impl Tool for ShellStartTool {
    fn name(&self) -> &str {
        "ShellStart"
    }
    fn description(&self) -> &str {
        "Starts an interactive shell on a pseudo-terminal in the session workspace (sandboxed)."
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
    fn permission_rules_as(&self) -> Option<&'static str> {
        Some("Bash")
    }
    fn permission_subject_text(&self, input: &Value) -> Option<String> {
        // A shell started without a command runs nothing yet (each line it gets is judged as a
        // ShellWrite), so an empty command: no argument rule matches or covers it.
        match input.get("command") {
            None | Some(Value::Null) => Some(String::new()),
            Some(_) => None,
        }
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: StartInput = parse_input(input)?;
        if let Some(command) = &input.command {
            check_command(command)?;
        }
        let ws = Workspace::for_tool(ctx.workspace.as_ref())?;
        // In a server session the tenant limits count open shells (per session and per
        // tenant, across replicas); a registry without holds keeps the in-process ceiling.
        let hold = match self.shells.holds.get() {
            Some(holds) => Some(holds.take(crate::limits::HoldKind::Shell).await?),
            None => {
                if lock(&self.shells.shells).len() >= MAX_SHELLS {
                    return Err(ToolError::new(
                        codes::SPAWN_FAILED,
                        format!("at most {MAX_SHELLS} shells may be open; close one first"),
                    ));
                }
                None
            }
        };
        let program: Vec<&str> = match &input.command {
            Some(command) => vec!["/bin/bash", "-c", command],
            None => vec!["/bin/bash", "--noprofile", "--norc", "-i"],
        };
        let spec =
            self.network
                .launch_spec(&self.sandbox, ws.root(), &program, "xterm-256color")?;
        let rows = input.rows.unwrap_or(24);
        let size = PtySize {
            rows,
            cols: input.cols.unwrap_or(80),
            pixel_width: 0,
            pixel_height: 0,
        };
        let spawn_err = |e: String| ToolError::new(codes::SPAWN_FAILED, e);
        let pair = native_pty_system()
            .openpty(size)
            .map_err(|e| spawn_err(e.to_string()))?;
        let mut cmd = CommandBuilder::new(&spec.program);
        cmd.args(&spec.args);
        cmd.env_clear();
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        cmd.cwd(&spec.cwd);
        let child = pair
            .slave
            .spawn_command(cmd)
            .map_err(|e| spawn_err(e.to_string()))?;
        drop(pair.slave);
        let pgid = child.process_id().map(|p| p as i32).unwrap_or(0);
        let mut reader = pair
            .master
            .try_clone_reader()
            .map_err(|e| spawn_err(e.to_string()))?;
        let writer = pair
            .master
            .take_writer()
            .map_err(|e| spawn_err(e.to_string()))?;
        let screen = Arc::new(Mutex::new(Screen::default()));
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut s = lock(&sink);
                        s.data.extend_from_slice(&buf[..n]);
                        if s.data.len() > MAX_BUFFER_BYTES {
                            let cut = s.data.len() - MAX_BUFFER_BYTES;
                            s.data.drain(..cut);
                            s.dropped += cut;
                            s.read_pos = s.read_pos.saturating_sub(cut);
                        }
                    }
                }
            }
            lock(&sink).eof = true;
        });
        let id = format!("shell_{}", uuid::Uuid::new_v4().simple());
        let shell = Arc::new(Shell {
            master: Mutex::new(pair.master),
            writer: Mutex::new(writer),
            child: Mutex::new(child),
            pgid,
            rows: Mutex::new(rows),
            screen,
            pending_line: Mutex::new(String::new()),
            _hold: hold,
        });
        lock(&self.shells.shells).insert(id.clone(), shell);
        Ok(ToolOutput::text(format!("Started shell {id}")))
    }
}

#[derive(Deserialize)]
struct WriteInput {
    shell_id: String,
    command: String,
    #[serde(default = "yes")]
    submit: bool,
}

fn yes() -> bool {
    true
}

/// ShellWrite: types text into a shell (and presses Enter unless `submit` is false).
pub struct ShellWriteTool {
    shells: Arc<ShellRegistry>,
    schema: &'static StaticSchema,
}

impl ShellWriteTool {
    /// Builds the tool with its input schema.
    pub fn new(shells: Arc<ShellRegistry>) -> Self {
        Self {
            shells,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "shell_id": shell_id_schema(),
                    "command": {"type": "string", "description": "Text to type"},
                    "submit": {"type": "boolean", "default": true, "description": "Press Enter after the text"}
                },
                "required": ["shell_id", "command"],
                "additionalProperties": false
            }),
        }
    }

    fn typed_text(input: &Value) -> Option<String> {
        let text = input.get("command")?.as_str()?;
        let submit = input.get("submit").and_then(Value::as_bool).unwrap_or(true);
        Some(if submit {
            format!("{text}\n")
        } else {
            text.to_string()
        })
    }
}

#[async_trait]
impl Tool for ShellWriteTool {
    fn name(&self) -> &str {
        "ShellWrite"
    }
    fn description(&self) -> &str {
        "Types text into an open PTY shell; each line is checked like a Bash command."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn self_decision(&self, input: &Value) -> SelfDecision {
        let id = input
            .get("shell_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        match Self::typed_text(input) {
            Some(text) => command_decision(&self.shells.pending_with(id, &text)),
            None => SelfDecision::Ask,
        }
    }
    fn self_denial(&self, input: &Value) -> Option<(&'static str, String)> {
        let id = input
            .get("shell_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        command_denial(&self.shells.pending_with(id, &Self::typed_text(input)?))
    }
    fn permission_subject(&self) -> Subject {
        Subject::Command { field: "command" }
    }
    fn permission_rules_as(&self) -> Option<&'static str> {
        Some("Bash")
    }
    fn permission_subject_text(&self, input: &Value) -> Option<String> {
        let id = input.get("shell_id").and_then(Value::as_str)?;
        Some(self.shells.pending_with(id, &Self::typed_text(input)?))
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: WriteInput = parse_input(input)?;
        let text = if input.submit {
            format!("{}\n", input.command)
        } else {
            input.command.clone()
        };
        let shell = self.shells.get(&input.shell_id)?;
        let mut pending = lock(&shell.pending_line);
        check_command(&format!("{pending}{text}"))?;
        if lock(&shell.screen).eof {
            return Err(ToolError::new(codes::SHELL_CLOSED, "the shell has exited"));
        }
        let mut writer = lock(&shell.writer);
        writer
            .write_all(text.as_bytes())
            .and_then(|()| writer.flush())
            .map_err(|e| ToolError::new(codes::SHELL_CLOSED, e.to_string()))?;
        drop(writer);
        let combined = format!("{pending}{text}");
        *pending = match combined.rfind(['\n', '\r']) {
            Some(idx) => combined[idx + 1..].to_string(),
            None => combined,
        };
        Ok(ToolOutput::text(format!("Wrote {} bytes", text.len())))
    }
}

#[derive(Deserialize)]
struct ReadInput {
    shell_id: String,
    wait_ms: Option<u64>,
}

/// ShellRead: output since the last read, plus the current screen as plain text.
pub struct ShellReadTool {
    shells: Arc<ShellRegistry>,
    schema: &'static StaticSchema,
}

impl ShellReadTool {
    /// Builds the tool with its input schema.
    pub fn new(shells: Arc<ShellRegistry>) -> Self {
        Self {
            shells,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "shell_id": shell_id_schema(),
                    "wait_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "description": "Wait this long for output first (default 200)"}
                },
                "required": ["shell_id"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for ShellReadTool {
    fn name(&self) -> &str {
        "ShellRead"
    }
    fn description(&self) -> &str {
        "Reads a PTY shell's new output and its current screen as plain text."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Allow
    }
    async fn call(&self, input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: ReadInput = parse_input(input)?;
        let shell = self.shells.get(&input.shell_id)?;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(input.wait_ms.unwrap_or(200))) => {}
            _ = ctx.cancel.cancelled() => {}
        }
        let rows = *lock(&shell.rows) as usize;
        let mut screen = lock(&shell.screen);
        let unread = screen.data.len() - screen.read_pos.min(screen.data.len());
        let from = screen.data.len() - unread.min(MAX_READ_BYTES);
        let mut new = String::new();
        if unread > MAX_READ_BYTES {
            new.push_str(&format!(
                "[… {} earlier bytes omitted]\n",
                unread - MAX_READ_BYTES
            ));
        }
        new.push_str(&String::from_utf8_lossy(&screen.data[from..]));
        screen.read_pos = screen.data.len();
        let tail_start = screen.data.len().saturating_sub(SCREEN_TAIL_BYTES);
        let plain = strip_ansi(&String::from_utf8_lossy(&screen.data[tail_start..]));
        let lines: Vec<&str> = plain.lines().collect();
        let visible = lines[lines.len().saturating_sub(rows)..].join("\n");
        let state = if screen.eof { "exited" } else { "running" };
        Ok(ToolOutput::text(format!(
            "[shell {state}]\n--- new output ---\n{}\n--- screen ---\n{visible}",
            strip_ansi(&new)
        )))
    }
}

#[derive(Deserialize)]
struct ResizeInput {
    shell_id: String,
    rows: u16,
    cols: u16,
}

/// ShellResize: changes a shell's terminal size.
pub struct ShellResizeTool {
    shells: Arc<ShellRegistry>,
    schema: &'static StaticSchema,
}

impl ShellResizeTool {
    /// Builds the tool with its input schema.
    pub fn new(shells: Arc<ShellRegistry>) -> Self {
        Self {
            shells,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "shell_id": shell_id_schema(),
                    "rows": {"type": "integer", "minimum": 2, "maximum": 500},
                    "cols": {"type": "integer", "minimum": 10, "maximum": 1000}
                },
                "required": ["shell_id", "rows", "cols"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for ShellResizeTool {
    fn name(&self) -> &str {
        "ShellResize"
    }
    fn description(&self) -> &str {
        "Resizes a PTY shell's terminal."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Allow
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: ResizeInput = parse_input(input)?;
        let shell = self.shells.get(&input.shell_id)?;
        lock(&shell.master)
            .resize(PtySize {
                rows: input.rows,
                cols: input.cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(|e| ToolError::failed(e.to_string()))?;
        *lock(&shell.rows) = input.rows;
        Ok(ToolOutput::text(format!(
            "Resized to {}x{}",
            input.cols, input.rows
        )))
    }
}

#[derive(Deserialize)]
struct CloseInput {
    shell_id: String,
}

/// ShellClose: kills a shell and its process group.
pub struct ShellCloseTool {
    shells: Arc<ShellRegistry>,
    schema: &'static StaticSchema,
}

impl ShellCloseTool {
    /// Builds the tool with its input schema.
    pub fn new(shells: Arc<ShellRegistry>) -> Self {
        Self {
            shells,
            schema: static_schema!({
                "type": "object",
                "properties": {"shell_id": shell_id_schema()},
                "required": ["shell_id"],
                "additionalProperties": false
            }),
        }
    }
}

#[async_trait]
impl Tool for ShellCloseTool {
    fn name(&self) -> &str {
        "ShellClose"
    }
    fn description(&self) -> &str {
        "Closes a PTY shell (kills everything it started)."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn self_decision(&self, _input: &Value) -> SelfDecision {
        SelfDecision::Allow
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: CloseInput = parse_input(input)?;
        let shell = lock(&self.shells.shells)
            .remove(&input.shell_id)
            .ok_or_else(|| {
                ToolError::new(
                    codes::SHELL_NOT_FOUND,
                    format!("no shell {:?}", input.shell_id),
                )
            })?;
        close_shell(&shell);
        Ok(ToolOutput::text(format!("Closed shell {}", input.shell_id)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_ansi_leaves_plain_text() {
        let raw = "\u{1b}[1;32muser\u{1b}[0m$ ls\r\n\u{1b}]0;title\u{7}a.txt\r\n";
        assert_eq!(strip_ansi(raw), "user$ ls\na.txt\n");
    }
}
