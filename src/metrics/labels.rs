//! Label values from bounded sets only: what a tenant chooses folds into `other` / `mcp`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The label of everything outside a bounded set.
pub const OTHER: &str = "other";
/// The label of every MCP tool (`mcp__<server>__<tool>`: both names are tenant-chosen).
pub const MCP: &str = "mcp";

/// The tool label of a called tool name: a built-in tool keeps its name, an MCP tool is
/// `mcp`, anything else (an unknown name the model made up) is `other`.
pub fn tool_label(name: &str) -> &'static str {
    use crate::tools::builtin::rule_targets::{BUILTIN_RULE_TARGETS, is_mcp_name};
    if let Some((builtin, _)) = BUILTIN_RULE_TARGETS.iter().find(|(n, _)| *n == name) {
        return builtin;
    }
    if is_mcp_name(name) { MCP } else { OTHER }
}

/// The model names the operator configured: the server's and tenants' providers and the
/// price table. Any other name (a session's `model.name`) is `other`.
#[derive(Debug)]
pub struct ModelNames {
    names: HashMap<Box<str>, Arc<str>>,
    other: Arc<str>,
}

impl ModelNames {
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            names: names
                .into_iter()
                .filter(|name| !name.is_empty())
                .map(|name| (Box::from(name), Arc::from(name)))
                .collect(),
            other: Arc::from(OTHER),
        }
    }

    /// No configured name: every model is `other`.
    pub fn none() -> Self {
        Self::new([])
    }

    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Self::new(
            std::iter::once(settings.provider.model.as_str())
                .chain(settings.tenant_providers.values().map(|p| p.model.as_str()))
                .chain(settings.prices.iter().map(|price| price.model.as_str())),
        )
    }

    pub fn label(&self, model: &str) -> Arc<str> {
        self.names.get(model).unwrap_or(&self.other).clone()
    }
}

/// The most route templates kept as labels; the router has far fewer, so this only guards
/// against a router change that would make templates unbounded.
const MAX_ROUTES: usize = 128;

/// Route templates (axum's matched paths) as shared label values; no match is `other`.
#[derive(Debug)]
pub struct RouteNames {
    known: RwLock<HashMap<Box<str>, Arc<str>>>,
    other: Arc<str>,
}

impl Default for RouteNames {
    fn default() -> Self {
        Self {
            known: RwLock::default(),
            other: Arc::from(OTHER),
        }
    }
}

impl RouteNames {
    /// The label of a matched route template (`None`: no route matched).
    pub fn label(&self, template: Option<&str>) -> Arc<str> {
        let Some(template) = template else {
            return self.other.clone();
        };
        if let Some(label) = self
            .known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(template)
        {
            return label.clone();
        }
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_ROUTES && !known.contains_key(template) {
            return self.other.clone();
        }
        known
            .entry(Box::from(template))
            .or_insert_with(|| Arc::from(template))
            .clone()
    }
}
