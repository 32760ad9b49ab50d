//! `tools/list_changed` between turns: before each model request of a run, the lists of the
//! servers that said theirs changed are read again and the run's registry is rebuilt with
//! them, so the request offers the new tools and a removed tool is `TOOL_NOT_FOUND`.
//!
//! A server's notice only sets a flag, so a server sending thousands of them costs at most one
//! `tools/list` per model request (each bounded by 10 s; one that does not answer keeps its
//! last list). Nothing changes while the calls of a turn run: the registry is swapped only
//! between turns.

use super::{McpTools, SessionMcp, config::tool_name};
use crate::tools::deferred::{self, UnlockSet};
use crate::tools::pipeline::Pipeline;
use crate::tools::registry::ToolRegistry;
use std::sync::Arc;

/// The MCP part of one run's tools: what the host asks before each model request.
#[derive(Clone)]
pub struct McpRefresh {
    pub mcp: Arc<SessionMcp>,
    /// The session's unlocked deferred tools (the `SearchExtraTools` of the rebuilt registry
    /// unlocks into it).
    pub unlocked: UnlockSet,
}

impl McpRefresh {
    /// Brings `pipeline`'s registry up to date with the servers that said their list
    /// changed (nothing to do, and no await, when none did).
    pub async fn apply(&self, pipeline: &Pipeline) {
        if !self.mcp.tools_changed() {
            return;
        }
        let refreshed = self.mcp.refresh_changed().await;
        if refreshed.is_empty() {
            return;
        }
        let mut registry = pipeline.registry();
        for (server, tools) in refreshed {
            replace_server_tools(&mut registry, &server, tools);
            tracing::info!(server = %server, "MCP tool list changed; the run's tools were updated");
        }
        rebuild_deferred_wrappers(&mut registry, &self.unlocked);
        pipeline.set_registry(registry);
    }
}

/// Replaces every `mcp__<server>__*` tool of `registry` with `tools`.
pub fn replace_server_tools(registry: &mut ToolRegistry, server: &str, tools: McpTools) {
    let prefix = tool_name(server, "");
    let old: Vec<String> = registry
        .names()
        .filter(|name| name.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    for name in old {
        registry.unregister(&name);
    }
    register_tools(registry, tools);
}

/// Registers MCP tools in `registry`, the deferred ones hidden; a tool that cannot be
/// registered is logged and left out.
pub fn register_tools(registry: &mut ToolRegistry, tools: McpTools) {
    for (tool, hidden) in tools
        .visible
        .into_iter()
        .map(|tool| (tool, false))
        .chain(tools.deferred.into_iter().map(|tool| (tool, true)))
    {
        let name = tool.name().to_owned();
        let registered = if hidden {
            registry.register_deferred(tool)
        } else {
            registry.register(tool)
        };
        if let Err(error) = registered {
            tracing::warn!(tool = %name, %error, "MCP tool not registered");
        }
    }
}

/// `SearchExtraTools` and `ExecuteExtraTool` over the registry's deferred tools as they are
/// now (when it has any).
fn rebuild_deferred_wrappers(registry: &mut ToolRegistry, unlocked: &UnlockSet) {
    for tool in deferred::wrappers(registry, unlocked) {
        if let Err(error) = registry.register(tool) {
            tracing::warn!(%error, "deferred-tool wrapper not registered");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::DynTool;
    use crate::tools::builder::ToolBuilder;
    use crate::tools::pipeline::PermissionGate;
    use serde_json::json;

    fn tool(name: &str) -> DynTool {
        Arc::new(
            ToolBuilder::new(name)
                .description("a tool")
                .schema(json!({"type": "object"}))
                .handler(|_, _| async { Ok(crate::tools::ToolOutput::text("")) })
                .build()
                .unwrap(),
        )
    }

    #[test]
    fn only_the_servers_own_tools_are_replaced() {
        let mut registry = ToolRegistry::new();
        for name in ["Read", "mcp__fx__a", "mcp__fx__b", "mcp__fx_y__c"] {
            registry.register(tool(name)).unwrap();
        }
        replace_server_tools(
            &mut registry,
            "fx",
            McpTools {
                visible: vec![tool("mcp__fx__b"), tool("mcp__fx__new")],
                deferred: Vec::new(),
            },
        );
        let names: Vec<&str> = registry.names().collect();
        assert_eq!(
            names,
            ["Read", "mcp__fx_y__c", "mcp__fx__b", "mcp__fx__new"]
        );
    }

    #[test]
    fn deferred_tools_get_wrappers_over_the_new_list() {
        let mut registry = ToolRegistry::new();
        replace_server_tools(
            &mut registry,
            "fx",
            McpTools {
                visible: Vec::new(),
                deferred: vec![tool("mcp__fx__hidden")],
            },
        );
        let unlocked = UnlockSet::default();
        rebuild_deferred_wrappers(&mut registry, &unlocked);
        assert!(registry.lookup(deferred::SEARCH_EXTRA_TOOLS).is_some());
        assert!(registry.lookup(deferred::EXECUTE_EXTRA_TOOL).is_some());
        assert_eq!(registry.deferred_tools()[0].name, "mcp__fx__hidden");
        // A swapped registry is what every clone of the pipeline runs.
        let gate: Arc<dyn PermissionGate> =
            Arc::new(|_: &dyn crate::tools::Tool, _: &serde_json::Value| {
                crate::permission::Verdict::Ask
            });
        let pipeline = Pipeline::new(ToolRegistry::new(), gate);
        let clone = pipeline.clone();
        pipeline.set_registry(registry);
        assert!(clone.registry().lookup("mcp__fx__hidden").is_some());
    }
}
