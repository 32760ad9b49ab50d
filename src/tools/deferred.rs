//! Deferred tools (N12, D6): tools whose schemas are hidden from the provider. Two tools are
//! added instead: `SearchExtraTools` finds hidden tools by query (and unlocks what it returns)
//! and `ExecuteExtraTool` runs one by name. The host runs the inner call through the same
//! pipeline under the inner tool's own name, so its schema, permission and hooks apply; a
//! hidden tool named directly is refused unless unlocked.
//!
//! Neither wrapper changes the world by itself, so the permission ladder judges them by what
//! they do: `SearchExtraTools` is read-only (it only changes which hidden tools are runnable, so
//! it is allowed in plan mode), and `ExecuteExtraTool` is read-only and concurrency-safe exactly
//! when its inner tool is for the inner input — plan mode lets it run a read-only inner tool and
//! refuses a mutating one, and the scheduler keeps an exclusive inner tool exclusive.

use crate::permission::SelfDecision;
use crate::tools::builder::ToolBuilder;
use crate::tools::registry::ProviderTool;
use crate::tools::schema::static_schema;
use crate::tools::{DynTool, ToolOutput};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

pub const SEARCH_EXTRA_TOOLS: &str = "SearchExtraTools";
pub const EXECUTE_EXTRA_TOOL: &str = "ExecuteExtraTool";

/// The deferred tool names this session may run (shared by the search tool and the host).
#[derive(Clone, Debug, Default)]
pub struct UnlockSet(Arc<Mutex<HashSet<String>>>);

impl UnlockSet {
    pub fn snapshot(&self) -> HashSet<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn unlock(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_owned());
    }
}

/// `SearchExtraTools` over the hidden tools in `catalog`.
/// `SearchExtraTools` and `ExecuteExtraTool` over `registry`'s deferred tools as they are now;
/// none when it has no deferred tool.
pub fn wrappers(
    registry: &crate::tools::registry::ToolRegistry,
    unlocked: &UnlockSet,
) -> Vec<DynTool> {
    let hidden = registry.deferred_tools();
    if hidden.is_empty() {
        return Vec::new();
    }
    let inner = hidden
        .iter()
        .filter_map(|tool| registry.lookup(&tool.name))
        .map(|entry| entry.tool.clone())
        .collect();
    vec![search_tool(hidden, unlocked.clone()), execute_tool(inner)]
}

pub fn search_tool(catalog: Vec<ProviderTool>, unlocked: UnlockSet) -> DynTool {
    let catalog = Arc::new(catalog);
    let tool = ToolBuilder::new(SEARCH_EXTRA_TOOLS)
        .description(
            "Search the additional tools that are not listed by default. Returns the matching \
             tools with their input schemas; run one with ExecuteExtraTool.",
        )
        .static_schema(static_schema!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 200},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 20}
            },
            "required": ["query"],
            "additionalProperties": false
        }))
        .read_only(true)
        .concurrency_safe(true)
        .self_decision(SelfDecision::Allow)
        .handler(move |input: Value, _ctx| {
            let catalog = catalog.clone();
            let unlocked = unlocked.clone();
            async move {
                let query = input["query"].as_str().unwrap_or_default().to_lowercase();
                let limit = input["max_results"].as_u64().unwrap_or(5) as usize;
                let words: Vec<&str> = query.split_whitespace().collect();
                let found: Vec<Value> = catalog
                    .iter()
                    .filter(|tool| {
                        let haystack = format!("{} {}", tool.name, tool.description).to_lowercase();
                        words.iter().any(|word| haystack.contains(word))
                    })
                    .take(limit)
                    .map(|tool| {
                        unlocked.unlock(&tool.name);
                        json!({"name": tool.name, "description": tool.description, "input_schema": tool.input_schema})
                    })
                    .collect();
                Ok(ToolOutput::text(
                    serde_json::to_string_pretty(&json!({ "tools": found })).unwrap_or_default(),
                ))
            }
        })
        .build()
        .expect("the SearchExtraTools schema is valid");
    Arc::new(tool)
}

/// `ExecuteExtraTool` over the hidden tools `inner` (by name): validated and permission-checked
/// as itself, judged read-only and concurrency-safe by the inner tool; the host then runs the
/// inner tool through the pipeline under its own name.
pub fn execute_tool(inner: Vec<DynTool>) -> DynTool {
    let inner: Arc<HashMap<String, DynTool>> = Arc::new(
        inner
            .into_iter()
            .map(|tool| (tool.name().to_owned(), tool))
            .collect(),
    );
    let read_only = inner.clone();
    let concurrency_safe = inner;
    let tool = ToolBuilder::new(EXECUTE_EXTRA_TOOL)
        .description("Run one of the additional tools found with SearchExtraTools.")
        .static_schema(static_schema!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 128},
                "input": {"type": "object"}
            },
            "required": ["name", "input"],
            "additionalProperties": false
        }))
        .read_only_when(move |input| {
            inner_tool(&read_only, input).is_some_and(|(tool, inner)| tool.is_read_only(inner))
        })
        .concurrency_safe_when(move |input| {
            inner_tool(&concurrency_safe, input)
                .is_some_and(|(tool, inner)| tool.is_concurrency_safe(inner))
        })
        .self_decision(SelfDecision::Allow)
        .handler(|_input: Value, _ctx| async { Ok(ToolOutput::text("")) })
        .build()
        .expect("the ExecuteExtraTool schema is valid");
    Arc::new(tool)
}

/// The hidden tool an `ExecuteExtraTool` input names, with the input meant for it.
fn inner_tool<'a>(
    tools: &'a HashMap<String, DynTool>,
    input: &'a Value,
) -> Option<(&'a DynTool, &'a Value)> {
    let tool = tools.get(input["name"].as_str()?)?;
    Some((tool, &input["input"]))
}

#[cfg(test)]
#[path = "deferred_tests.rs"]
mod tests;
