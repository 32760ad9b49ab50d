//! The tool registry (N3, D6): tools by name with their input schema compiled at registration.
//! The list shown to the provider ([`ToolRegistry::provider_tools`]) and the by-name execution
//! lookup ([`ToolRegistry::lookup_visible`]) are separate paths; deferred (hidden) tools are
//! omitted from the former and refused by the latter unless unlocked.
//!
//! Cheap to clone: the table sits behind an `Arc` and registration copies on write, so a clone
//! handed to a session never changes under it.

use super::DynTool;
use super::schema::{CompiledSchema, SchemaError};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid tool name {name:?}: use 1 to 64 characters from [A-Za-z0-9_-]")]
    InvalidName { name: String },
    #[error("tool {name:?}: {source}")]
    InvalidSchema {
        name: String,
        #[source]
        source: SchemaError,
    },
}

/// Why a by-name lookup for execution failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("no tool with this name")]
    NotFound,
    /// A deferred tool that is not in the unlock set: to the model it does not exist.
    #[error("tool is deferred and not unlocked")]
    Hidden,
}

/// A tool as the provider sees it: its description is followed by the tool's prompt (when
/// it has one).
pub use crate::llm::ToolSpec as ProviderTool;

/// A registered tool with its compiled schema.
pub struct RegisteredTool {
    pub tool: DynTool,
    pub schema: CompiledSchema,
    /// Deferred: hidden from the provider, runnable only when unlocked (D6).
    pub deferred: bool,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.tool.name())
            .field("deferred", &self.deferred)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Default)]
struct Table {
    by_name: HashMap<String, Arc<RegisteredTool>>,
    /// Registration order of the names (a replaced tool keeps its place).
    order: Vec<String>,
    /// The provider's list, built on first use and shared by every model request; a
    /// registration or removal clears it.
    visible: std::sync::OnceLock<Arc<[ProviderTool]>>,
}

/// Tools by name. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct ToolRegistry {
    table: Arc<Table>,
}

/// True when `name` is acceptable to every provider we speak to.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a visible tool. A tool with the same name is replaced (N3) and its place in
    /// the listing kept. Returns the replaced tool.
    pub fn register(&mut self, tool: DynTool) -> Result<Option<DynTool>, RegistryError> {
        self.insert(tool, false)
    }

    /// Registers a deferred tool: hidden from [`Self::provider_tools`], found by
    /// [`Self::deferred_tools`], runnable only when unlocked.
    pub fn register_deferred(&mut self, tool: DynTool) -> Result<Option<DynTool>, RegistryError> {
        self.insert(tool, true)
    }

    fn insert(&mut self, tool: DynTool, deferred: bool) -> Result<Option<DynTool>, RegistryError> {
        let name = tool.name().to_owned();
        if !is_valid_tool_name(&name) {
            return Err(RegistryError::InvalidName { name });
        }
        let schema = match (tool.compiled_schema(), tool.static_schema()) {
            (Some((_, compiled)), _) => Ok(compiled),
            (None, Some(schema)) => schema.compiled(),
            (None, None) => CompiledSchema::compile(tool.input_schema()),
        }
        .map_err(|source| RegistryError::InvalidSchema {
            name: name.clone(),
            source,
        })?;
        let entry = Arc::new(RegisteredTool {
            tool,
            schema,
            deferred,
        });
        let table = Arc::make_mut(&mut self.table);
        table.visible = Default::default();
        let replaced = table.by_name.insert(name.clone(), entry);
        if replaced.is_none() {
            table.order.push(name);
        }
        Ok(replaced.map(|old| old.tool.clone()))
    }

    /// Removes a tool; returns it when it was registered.
    pub fn unregister(&mut self, name: &str) -> Option<DynTool> {
        let table = Arc::make_mut(&mut self.table);
        let removed = table.by_name.remove(name)?;
        table.visible = Default::default();
        table.order.retain(|known| known != name);
        Some(removed.tool.clone())
    }

    /// The visible tools in registration order, as shown to the provider (built once per
    /// registry).
    pub fn provider_tools(&self) -> Arc<[ProviderTool]> {
        self.table
            .visible
            .get_or_init(|| self.listing(false).into())
            .clone()
    }

    /// The deferred tools in registration order (what `SearchExtraTools` searches).
    pub fn deferred_tools(&self) -> Vec<ProviderTool> {
        self.listing(true)
    }

    fn listing(&self, deferred: bool) -> Vec<ProviderTool> {
        self.table
            .order
            .iter()
            .filter_map(|name| self.table.by_name.get(name))
            .filter(|entry| entry.deferred == deferred)
            .map(|entry| {
                let tool = &entry.tool;
                let prompt = tool.prompt();
                let description = if prompt.is_empty() {
                    tool.description().to_owned()
                } else {
                    format!("{}\n\n{prompt}", tool.description())
                };
                ProviderTool {
                    name: tool.name().to_owned(),
                    description,
                    input_schema: match (tool.compiled_schema(), tool.static_schema()) {
                        (Some((shared, _)), _) => shared,
                        (None, Some(schema)) => schema.shared(),
                        (None, None) => Arc::new(tool.input_schema().clone()),
                    },
                }
            })
            .collect()
    }

    /// Any registered tool by name, deferred or not (for `ExecuteExtraTool` after its own
    /// unlock check, and for reports).
    pub fn lookup(&self, name: &str) -> Option<&Arc<RegisteredTool>> {
        self.table.by_name.get(name)
    }

    /// The execution path: a visible tool, or a deferred tool whose name is in `unlocked`.
    pub fn lookup_visible(
        &self,
        name: &str,
        unlocked: &HashSet<String>,
    ) -> Result<&Arc<RegisteredTool>, LookupError> {
        let entry = self.table.by_name.get(name).ok_or(LookupError::NotFound)?;
        if entry.deferred && !unlocked.contains(name) {
            return Err(LookupError::Hidden);
        }
        Ok(entry)
    }

    /// The names of the tools that are read-only whatever their input (judged on an empty
    /// input): what Noa may fold and what a read-only subagent may call.
    pub fn read_only_names<C: FromIterator<String>>(&self) -> C {
        let no_input = serde_json::json!({});
        self.names()
            .filter(|name| {
                self.lookup(name)
                    .is_some_and(|entry| entry.tool.is_read_only(&no_input))
            })
            .map(str::to_owned)
            .collect()
    }

    /// Registered names in registration order (visible and deferred).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.table.order.iter().map(String::as_str)
    }

    /// How many tools are registered (visible and deferred).
    pub fn len(&self) -> usize {
        self.table.order.len()
    }

    /// True when no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.table.order.is_empty()
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
