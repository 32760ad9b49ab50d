//! The `Skill` tool: the model loads a skill by name (its instructions become the result and
//! the deferred tools it lists are unlocked, durably) or reads one of its files.
//!
//! The tool is read-only (it changes no file; like `SearchExtraTools` it only changes which
//! deferred tools are runnable) and allows itself, so plan mode allows it and a `Skill` deny
//! rule refuses it. What a load may unlock is decided when the run starts, from the
//! session's registry and rules ([`Availability`]): only tools the session has as deferred
//! tools and no deny rule names outright. A tool with argument deny rules (`Write(secret/**)`)
//! is unlocked and those calls stay denied by the pipeline.

use super::{MAX_NAME_CHARS, MAX_PATH_BYTES, SKILL_TOOL, SkillDefinition, workspace};
use crate::ids::{SessionId, TenantId};
use crate::permission::SelfDecision;
use crate::run_event::{SkillLoaded, SkillToolRefusal};
use crate::store::Store;
use crate::tools::builder::ToolBuilder;
use crate::tools::deferred::UnlockSet;
use crate::tools::schema::static_schema;
use crate::tools::{DynTool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// Codes of the `Skill` tool's results.
pub mod codes {
    /// No skill of that name is available to this session.
    pub const SKILL_NOT_FOUND: &str = "SKILL_NOT_FOUND";
    /// A workspace skill's `SKILL.md` does not parse or check (the reason is in the text).
    pub const SKILL_INVALID: &str = "SKILL_INVALID";
    /// The skill has no file of that path.
    pub const SKILL_FILE_NOT_FOUND: &str = "SKILL_FILE_NOT_FOUND";
}

/// The most characters of the catalog in the tool's description; skills past it are listed
/// by name only.
pub const MAX_CATALOG_CHARS: usize = 16_000;

/// Where a skill comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Registered,
    Workspace,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Registered => "registered",
            Self::Workspace => "workspace",
        }
    }
}

/// One skill the model is told about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogEntry {
    pub name: String,
    pub description: String,
    pub source: Source,
}

/// What a load may do with a tool of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Deferred and not denied: a load unlocks it.
    Deferred,
    /// Already offered to the model: nothing to unlock.
    Visible,
    /// A deny rule names the tool (no argument part, or `*`): never unlocked.
    Denied,
}

/// Records the `skill_loaded` event of a load (before its result).
#[async_trait]
pub trait SkillJournal: Send + Sync {
    async fn loaded(&self, event: SkillLoaded) -> Result<(), String>;
}

/// Everything the session's `Skill` tool works with.
pub struct SkillSetup {
    pub tenant: TenantId,
    pub session: SessionId,
    pub store: Arc<dyn Store>,
    /// The skills offered, registered ones first, each name once.
    pub catalog: Vec<CatalogEntry>,
    /// Whether names not in the catalog are looked up in the workspace at load time (a skill
    /// written during the run).
    pub workspace_skills: bool,
    /// The session's tools (by name) and what a load may do with each.
    pub tools: HashMap<String, Availability>,
    pub unlocked: UnlockSet,
    pub journal: Arc<dyn SkillJournal>,
}

/// The catalog as the tool's description shows it.
pub fn description(catalog: &[CatalogEntry]) -> String {
    let mut text = String::from(
        "Load a skill: instructions for a kind of task, and the extra tools it needs (they \
         become callable by name once loaded). Load the skill whose description fits the \
         task before starting it. With `file`, read one of the skill's files instead.\n\n\
         Available skills:\n",
    );
    if catalog.is_empty() {
        text.push_str("(none yet)\n");
    }
    let mut rest = Vec::new();
    for entry in catalog {
        let line = format!("- {}: {}\n", entry.name, entry.description);
        if rest.is_empty() && text.len() + line.len() <= MAX_CATALOG_CHARS {
            text.push_str(&line);
        } else {
            rest.push(entry.name.as_str());
        }
    }
    if !rest.is_empty() {
        text.push_str(&format!("More skills (by name): {}\n", rest.join(", ")));
    }
    text
}

/// The session's `Skill` tool.
pub fn skill_tool(setup: SkillSetup) -> DynTool {
    let description = description(&setup.catalog);
    let setup = Arc::new(setup);
    let tool = ToolBuilder::new(SKILL_TOOL)
        .description(description)
        .static_schema(static_schema!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS},
                "file": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_BYTES}
            },
            "required": ["name"],
            "additionalProperties": false
        }))
        .read_only(true)
        .concurrency_safe(true)
        .self_decision(SelfDecision::Allow)
        .handler(move |input: Value, ctx| {
            let setup = setup.clone();
            async move { setup.call(&input, &ctx).await }
        })
        .build()
        .expect("the Skill schema is valid");
    Arc::new(tool)
}

/// A skill as loaded: its definition and, for a registered one, its files.
struct Loaded {
    definition: SkillDefinition,
    source: Source,
    files: Vec<super::SkillFile>,
}

impl SkillSetup {
    async fn call(&self, input: &Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let name = input["name"].as_str().unwrap_or_default();
        let loaded = self.find(name, ctx).await?;
        match input["file"].as_str() {
            Some(file) => self.read_file(&loaded, file, ctx).await,
            None => self.load(loaded, ctx).await,
        }
    }

    fn not_found(&self, name: &str) -> ToolError {
        let names: Vec<&str> = self.catalog.iter().map(|e| e.name.as_str()).collect();
        ToolError::new(
            codes::SKILL_NOT_FOUND,
            format!(
                "no skill named `{}` is available; available: {}",
                name.chars().take(MAX_NAME_CHARS).collect::<String>(),
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            ),
        )
    }

    async fn find(&self, name: &str, ctx: &ToolContext) -> Result<Loaded, ToolError> {
        let entry = self.catalog.iter().find(|entry| entry.name == name);
        let source = match entry {
            Some(entry) => entry.source,
            None if self.workspace_skills => Source::Workspace,
            None => return Err(self.not_found(name)),
        };
        match source {
            Source::Registered => {
                let record = self
                    .store
                    .get_skill(&self.tenant, name)
                    .await
                    .map_err(|error| ToolError::failed(format!("cannot read the skill: {error}")))?
                    // Deleted since the run started.
                    .ok_or_else(|| self.not_found(name))?;
                let definition = super::parse_skill_md(&record.content, "content")
                    .map_err(|error| ToolError::new(codes::SKILL_INVALID, error.to_string()))?;
                Ok(Loaded {
                    definition,
                    source,
                    files: record.files,
                })
            }
            Source::Workspace => {
                let root = ctx.workspace.clone().ok_or_else(|| self.not_found(name))?;
                let owned = name.to_owned();
                let definition =
                    tokio::task::spawn_blocking(move || workspace::load(&root, &owned))
                        .await
                        .map_err(|error| ToolError::failed(error.to_string()))?
                        .map_err(|error| {
                            ToolError::new(
                                codes::SKILL_INVALID,
                                format!("{} ({})", error, error.reason),
                            )
                        })?
                        .ok_or_else(|| self.not_found(name))?;
                Ok(Loaded {
                    definition,
                    source,
                    files: Vec::new(),
                })
            }
        }
    }

    async fn read_file(
        &self,
        loaded: &Loaded,
        file: &str,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let name = &loaded.definition.name;
        let missing = || {
            ToolError::new(
                codes::SKILL_FILE_NOT_FOUND,
                format!("the skill `{name}` has no file `{file}`"),
            )
        };
        match loaded.source {
            Source::Registered => loaded
                .files
                .iter()
                .find(|f| f.path == file)
                .map(|f| ToolOutput::text(f.content.clone()))
                .ok_or_else(missing),
            Source::Workspace => {
                let root = ctx.workspace.clone().ok_or_else(missing)?;
                let (owned, path) = (name.clone(), file.to_owned());
                let text =
                    tokio::task::spawn_blocking(move || workspace::read_file(&root, &owned, &path))
                        .await
                        .map_err(|error| ToolError::failed(error.to_string()))?
                        .map_err(|error| {
                            if error.code == crate::workspace::codes::FILE_NOT_FOUND {
                                missing()
                            } else {
                                error
                            }
                        })?;
                Ok(ToolOutput::text(text))
            }
        }
    }

    async fn load(&self, loaded: Loaded, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let definition = &loaded.definition;
        let mut unlocked = Vec::new();
        let mut available = Vec::new();
        let mut refused = Vec::new();
        for tool in &definition.tools {
            match self.tools.get(tool) {
                Some(Availability::Deferred) => unlocked.push(tool.clone()),
                Some(Availability::Visible) => available.push(tool.clone()),
                Some(Availability::Denied) => refused.push(SkillToolRefusal {
                    tool: tool.clone(),
                    reason: "denied".into(),
                }),
                None => refused.push(SkillToolRefusal {
                    tool: tool.clone(),
                    reason: "not_in_session".into(),
                }),
            }
        }
        if !unlocked.is_empty() {
            // Stored before anything says so: a resumed or later run finds them unlocked.
            self.store
                .unlock_tools(&self.tenant, &self.session, &unlocked)
                .await
                .map_err(|error| {
                    ToolError::failed(format!("cannot record the unlocked tools: {error}"))
                })?;
            for tool in &unlocked {
                self.unlocked.unlock(tool);
            }
        }
        self.journal
            .loaded(SkillLoaded {
                tool_use_id: ctx.tool_use_id.clone(),
                name: definition.name.clone(),
                source: loaded.source.as_str().into(),
                unlocked: unlocked.clone(),
                available: available.clone(),
                refused: refused.clone(),
            })
            .await
            .map_err(|error| ToolError::failed(format!("cannot record the load: {error}")))?;
        Ok(ToolOutput::text(render(
            &loaded, &unlocked, &available, &refused,
        )))
    }
}

fn render(
    loaded: &Loaded,
    unlocked: &[String],
    available: &[String],
    refused: &[SkillToolRefusal],
) -> String {
    let definition = &loaded.definition;
    let mut text = format!(
        "Skill `{}` loaded. Follow these instructions:\n\n{}\n",
        definition.name,
        definition.instructions.trim_end()
    );
    let mut notes = Vec::new();
    if !unlocked.is_empty() {
        notes.push(format!(
            "Tools unlocked (call them by name): {}.",
            unlocked.join(", ")
        ));
    }
    if !available.is_empty() {
        notes.push(format!(
            "Tools already available: {}.",
            available.join(", ")
        ));
    }
    if !refused.is_empty() {
        let list: Vec<String> = refused
            .iter()
            .map(|r| match r.reason.as_str() {
                "denied" => format!("{} (denied by this session's permission rules)", r.tool),
                _ => format!("{} (not available in this session)", r.tool),
            })
            .collect();
        notes.push(format!("Tools not unlocked: {}.", list.join("; ")));
    }
    match loaded.source {
        Source::Registered if !loaded.files.is_empty() => {
            let paths: Vec<&str> = loaded.files.iter().map(|f| f.path.as_str()).collect();
            notes.push(format!(
                "Files of this skill: {} (read one with Skill {{\"name\": \"{}\", \"file\": \
                 \"<path>\"}}).",
                paths.join(", "),
                definition.name
            ));
        }
        Source::Workspace => notes.push(format!(
            "This skill's files are in {}/{}/ in the workspace.",
            super::WORKSPACE_SKILLS_DIR,
            definition.name
        )),
        Source::Registered => {}
    }
    if !notes.is_empty() {
        text.push_str("\n---\n");
        text.push_str(&notes.join("\n"));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_is_bounded() {
        let catalog: Vec<CatalogEntry> = (0..100)
            .map(|i| CatalogEntry {
                name: format!("skill-{i}"),
                description: "d".repeat(900),
                source: Source::Registered,
            })
            .collect();
        let text = description(&catalog);
        assert!(text.len() < MAX_CATALOG_CHARS + 2_000, "{}", text.len());
        assert!(text.contains("- skill-0: "));
        assert!(text.contains("More skills (by name): "));
        assert!(text.contains("skill-99"));
        assert!(description(&[]).contains("(none yet)"));
    }
}
