//! Memory: a tenant's notes kept in the store under path-like keys (`projects/alpha.md`),
//! shared by all of the tenant's sessions and invisible to every other tenant. Commands:
//! `view`, `list` (read-only), `create`, `str_replace`, `append`, `delete`. Notes and the
//! tenant's total are size-limited; updates are compare-and-set on the note version, so two
//! sessions editing one note never lose a write.

use super::{parse_input, store_error};
use crate::ids::TenantId;
use crate::permission::SelfDecision;
use crate::store::{MemoryExpect, MemoryNote, Store, StoreError};
use crate::tools::schema::{StaticSchema, static_schema};
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;

/// Error codes of the memory tool.
pub mod codes {
    pub const MEMORY_PATH_INVALID: &str = "MEMORY_PATH_INVALID";
    pub const MEMORY_NOT_FOUND: &str = "MEMORY_NOT_FOUND";
    pub const MEMORY_EXISTS: &str = "MEMORY_EXISTS";
    /// One note would exceed [`super::MemoryLimits::max_note_bytes`].
    pub const MEMORY_NOTE_TOO_LARGE: &str = "MEMORY_NOTE_TOO_LARGE";
    /// The tenant would exceed its note count or byte total.
    pub const MEMORY_QUOTA_EXCEEDED: &str = "MEMORY_QUOTA_EXCEEDED";
    /// The note kept changing under concurrent writers.
    pub const MEMORY_CONFLICT: &str = "MEMORY_CONFLICT";
    /// A command is missing one of its fields.
    pub const MEMORY_INPUT_INVALID: &str = "MEMORY_INPUT_INVALID";
}

/// Size limits of one tenant's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Largest note, in bytes.
    pub max_note_bytes: usize,
    /// Most notes per tenant.
    pub max_notes: i64,
    /// Most bytes over all of a tenant's notes.
    pub max_total_bytes: i64,
    /// Longest path, in bytes.
    pub max_path_bytes: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            max_note_bytes: 64 * 1024,
            max_notes: 1_000,
            max_total_bytes: 4 * 1024 * 1024,
            max_path_bytes: 200,
        }
    }
}

/// How many times a read-modify-write retries after losing a compare-and-set race.
const CAS_ATTEMPTS: usize = 5;

/// Normalizes a note path: an optional leading `/memories/` or `/` is dropped; segments of
/// `[A-Za-z0-9._-]`, none empty, `.` or `..`. `allow_root` accepts the empty path (listing).
pub fn normalize_path(
    raw: &str,
    limits: &MemoryLimits,
    allow_root: bool,
) -> Result<String, ToolError> {
    let invalid = |why: &str| {
        ToolError::new(
            codes::MEMORY_PATH_INVALID,
            format!("invalid memory path {raw:?}: {why}"),
        )
    };
    let mut path = raw.strip_prefix("/memories").unwrap_or(raw);
    path = path.trim_start_matches('/');
    if allow_root {
        path = path.trim_end_matches('/');
    }
    if path.is_empty() {
        return if allow_root {
            Ok(String::new())
        } else {
            Err(invalid("empty"))
        };
    }
    if path.len() > limits.max_path_bytes {
        return Err(invalid(&format!(
            "longer than {} bytes",
            limits.max_path_bytes
        )));
    }
    for segment in path.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(invalid("empty, '.' or '..' segment"));
        }
        if !segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(invalid(
                "only letters, digits, '.', '_', '-' and '/' are allowed",
            ));
        }
    }
    Ok(path.to_owned())
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Command {
    View,
    List,
    Create,
    StrReplace,
    Append,
    Delete,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    command: Command,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    old_str: Option<String>,
    #[serde(default)]
    new_str: Option<String>,
    #[serde(default)]
    overwrite: bool,
}

fn required<'a>(
    value: &'a Option<String>,
    field: &str,
    command: &str,
) -> Result<&'a str, ToolError> {
    value.as_deref().ok_or_else(|| {
        ToolError::new(
            codes::MEMORY_INPUT_INVALID,
            format!("{command} needs `{field}`"),
        )
    })
}

fn is_read_only_command(input: &Value) -> bool {
    matches!(
        input.get("command").and_then(Value::as_str),
        Some("view" | "list")
    )
}

/// The memory tool of one tenant.
pub struct MemoryTool {
    store: Arc<dyn Store>,
    tenant: TenantId,
    limits: MemoryLimits,
    schema: &'static StaticSchema,
}

impl MemoryTool {
    /// The tool for `tenant` with the default limits.
    pub fn new(store: Arc<dyn Store>, tenant: TenantId) -> Self {
        Self::with_limits(store, tenant, MemoryLimits::default())
    }

    /// The tool for `tenant` with explicit limits.
    pub fn with_limits(store: Arc<dyn Store>, tenant: TenantId, limits: MemoryLimits) -> Self {
        Self {
            store,
            tenant,
            limits,
            schema: static_schema!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "enum": ["view", "list", "create", "str_replace", "append", "delete"]},
                    "path": {"type": "string", "description": "Note path such as projects/alpha.md (a leading /memories/ is accepted); a directory prefix for list"},
                    "content": {"type": "string", "description": "create: the note text; append: text to add"},
                    "old_str": {"type": "string", "description": "str_replace: text that occurs exactly once"},
                    "new_str": {"type": "string", "description": "str_replace: its replacement"},
                    "overwrite": {"type": "boolean", "description": "create: replace an existing note"}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    async fn get(&self, path: &str) -> Result<Option<MemoryNote>, ToolError> {
        self.store
            .memory_get(&self.tenant, path)
            .await
            .map_err(store_error)
    }

    /// Checks the limits for replacing a note of `old_bytes` (None: a new note) by `new_bytes`.
    async fn check_limits(
        &self,
        old_bytes: Option<usize>,
        new_bytes: usize,
    ) -> Result<(), ToolError> {
        if new_bytes > self.limits.max_note_bytes {
            return Err(ToolError::new(
                codes::MEMORY_NOTE_TOO_LARGE,
                format!(
                    "the note would be {new_bytes} bytes; at most {}",
                    self.limits.max_note_bytes
                ),
            ));
        }
        let usage = self
            .store
            .memory_usage(&self.tenant)
            .await
            .map_err(store_error)?;
        if old_bytes.is_none() && usage.notes >= self.limits.max_notes {
            return Err(ToolError::new(
                codes::MEMORY_QUOTA_EXCEEDED,
                format!("at most {} notes per tenant", self.limits.max_notes),
            ));
        }
        let total = usage.bytes - old_bytes.unwrap_or(0) as i64 + new_bytes as i64;
        if total > self.limits.max_total_bytes {
            return Err(ToolError::new(
                codes::MEMORY_QUOTA_EXCEEDED,
                format!(
                    "the tenant's notes would total {total} bytes; at most {}",
                    self.limits.max_total_bytes
                ),
            ));
        }
        Ok(())
    }

    async fn put(
        &self,
        path: &str,
        content: &str,
        expect: MemoryExpect,
    ) -> Result<Option<MemoryNote>, ToolError> {
        match self
            .store
            .memory_put(&self.tenant, path, content, expect)
            .await
        {
            Ok(note) => Ok(Some(note)),
            Err(StoreError::Conflict(_)) => Ok(None),
            Err(error) => Err(store_error(error)),
        }
    }

    async fn view(&self, path: &str) -> Result<String, ToolError> {
        if let Some(note) = self.get(path).await? {
            let mut out = format!("{} (version {}):\n", note.path, note.version);
            for (n, line) in note.content.lines().enumerate() {
                out.push_str(&format!("{:>6}\t{line}\n", n + 1));
            }
            return Ok(out);
        }
        let listing = self.list(path).await?;
        if listing.is_empty() {
            return Err(ToolError::new(
                codes::MEMORY_NOT_FOUND,
                format!("no memory note or directory {path}"),
            ));
        }
        Ok(listing)
    }

    /// Notes under directory `dir` ("" = all); empty string when there are none.
    async fn list(&self, dir: &str) -> Result<String, ToolError> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let entries = self
            .store
            .memory_list(&self.tenant, &prefix)
            .await
            .map_err(store_error)?;
        Ok(entries
            .iter()
            .map(|entry| format!("{}\t{} bytes\n", entry.path, entry.size_bytes))
            .collect())
    }

    async fn create(
        &self,
        path: &str,
        content: &str,
        overwrite: bool,
    ) -> Result<String, ToolError> {
        for _ in 0..CAS_ATTEMPTS {
            let existing = self.get(path).await?;
            let expect = match &existing {
                Some(_) if !overwrite => {
                    return Err(ToolError::new(
                        codes::MEMORY_EXISTS,
                        format!("memory note {path} exists; pass overwrite: true to replace it"),
                    ));
                }
                Some(note) => MemoryExpect::Version(note.version),
                None => MemoryExpect::Absent,
            };
            self.check_limits(existing.as_ref().map(|n| n.content.len()), content.len())
                .await?;
            if let Some(note) = self.put(path, content, expect).await? {
                return Ok(format!(
                    "{} memory note {} ({} bytes, version {}).",
                    if existing.is_some() {
                        "Replaced"
                    } else {
                        "Created"
                    },
                    note.path,
                    content.len(),
                    note.version
                ));
            }
        }
        Err(conflict(path))
    }

    /// Read-modify-write of an existing (or, for append, possibly new) note.
    async fn modify(
        &self,
        path: &str,
        create_missing: bool,
        edit: impl Fn(&str) -> Result<String, ToolError>,
    ) -> Result<MemoryNote, ToolError> {
        for _ in 0..CAS_ATTEMPTS {
            let existing = self.get(path).await?;
            let (old, expect) = match &existing {
                Some(note) => (note.content.as_str(), MemoryExpect::Version(note.version)),
                None if create_missing => ("", MemoryExpect::Absent),
                None => {
                    return Err(ToolError::new(
                        codes::MEMORY_NOT_FOUND,
                        format!("no memory note {path}"),
                    ));
                }
            };
            let new = edit(old)?;
            self.check_limits(existing.as_ref().map(|n| n.content.len()), new.len())
                .await?;
            if let Some(note) = self.put(path, &new, expect).await? {
                return Ok(note);
            }
        }
        Err(conflict(path))
    }
}

fn conflict(path: &str) -> ToolError {
    ToolError::new(
        codes::MEMORY_CONFLICT,
        format!("memory note {path} kept changing concurrently; read it again and retry"),
    )
}

fn replace_once(text: &str, old: &str, new: &str) -> Result<String, ToolError> {
    if old.is_empty() {
        return Err(ToolError::new(
            super::codes::EDIT_INVALID,
            "old_str must not be empty",
        ));
    }
    match text.matches(old).count() {
        0 => Err(ToolError::new(
            super::codes::EDIT_NOT_FOUND,
            "old_str does not occur in the note",
        )),
        1 => Ok(text.replacen(old, new, 1)),
        n => Err(ToolError::new(
            super::codes::EDIT_NOT_UNIQUE,
            format!("old_str occurs {n} times; include more context to make it unique"),
        )),
    }
}

#[async_trait]
impl Tool for MemoryTool {
    fn name(&self) -> &str {
        "Memory"
    }
    fn description(&self) -> &str {
        "Durable notes shared by all of this tenant's sessions. Commands: view, list, create, \
         str_replace, append, delete."
    }
    fn prompt(&self) -> &str {
        "Check memory (list / view) before starting work and record durable learnings there. \
         Notes persist across sessions; never store secrets."
    }
    fn input_schema(&self) -> &Value {
        self.schema.value()
    }
    fn static_schema(&self) -> Option<&'static StaticSchema> {
        Some(self.schema)
    }
    fn is_read_only(&self, input: &Value) -> bool {
        is_read_only_command(input)
    }
    fn is_concurrency_safe(&self, input: &Value) -> bool {
        is_read_only_command(input)
    }
    // Reading the tenant's own notes is harmless; writes outlive the session and can steer
    // later sessions, so they are left to the mode and rules.
    fn self_decision(&self, input: &Value) -> SelfDecision {
        if is_read_only_command(input) {
            SelfDecision::Allow
        } else {
            SelfDecision::None
        }
    }
    async fn call(&self, input: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let input: Input = parse_input(input)?;
        let limits = &self.limits;
        let text = match input.command {
            Command::List => {
                let dir = normalize_path(input.path.as_deref().unwrap_or(""), limits, true)?;
                let listing = self.list(&dir).await?;
                if listing.is_empty() {
                    "(no memory notes)".to_owned()
                } else {
                    listing
                }
            }
            Command::View => {
                let path = normalize_path(required(&input.path, "path", "view")?, limits, true)?;
                self.view(&path).await?
            }
            Command::Create => {
                let path = normalize_path(required(&input.path, "path", "create")?, limits, false)?;
                let content = required(&input.content, "content", "create")?;
                self.create(&path, content, input.overwrite).await?
            }
            Command::StrReplace => {
                let path =
                    normalize_path(required(&input.path, "path", "str_replace")?, limits, false)?;
                let old = required(&input.old_str, "old_str", "str_replace")?;
                let new = required(&input.new_str, "new_str", "str_replace")?;
                let note = self
                    .modify(&path, false, |text| replace_once(text, old, new))
                    .await?;
                format!(
                    "Edited memory note {} (version {}).",
                    note.path, note.version
                )
            }
            Command::Append => {
                let path = normalize_path(required(&input.path, "path", "append")?, limits, false)?;
                let content = required(&input.content, "content", "append")?;
                let note = self
                    .modify(&path, true, |text| {
                        let mut out = text.to_owned();
                        if !out.is_empty() && !out.ends_with('\n') {
                            out.push('\n');
                        }
                        out.push_str(content);
                        Ok(out)
                    })
                    .await?;
                format!(
                    "Appended to memory note {} (version {}).",
                    note.path, note.version
                )
            }
            Command::Delete => {
                let path = normalize_path(required(&input.path, "path", "delete")?, limits, false)?;
                let deleted = self
                    .store
                    .memory_delete(&self.tenant, &path)
                    .await
                    .map_err(store_error)?;
                if !deleted {
                    return Err(ToolError::new(
                        codes::MEMORY_NOT_FOUND,
                        format!("no memory note {path}"),
                    ));
                }
                format!("Deleted memory note {path}.")
            }
        };
        Ok(ToolOutput::text(text))
    }
}
