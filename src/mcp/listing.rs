//! A server's tool list, read with bounds ([`read`]): the server is the tenant's program (or
//! the tenant's URL), so its `tools/list` answer is hostile input like any other. It may page
//! forever (a `nextCursor` on every page), list a million tools, or give each tool megabytes
//! of description and schema, and the list is kept for the session's life and offered to the
//! model in every request. So at most [`MAX_PAGES`] pages are read, at most [`MAX_TOOLS`]
//! tools kept, a tool whose definition is larger than [`MAX_TOOL_BYTES`] is not kept, and the
//! kept definitions total at most [`MAX_LIST_BYTES`]; each tool left out is named, with why,
//! in the server's `skipped_tools` (at most [`MAX_DROPPED_NOTES`] notes, then one that counts
//! the rest).

use crate::tools::schema::CompiledSchema;
use rmcp::RoleClient;
use rmcp::model::{PaginatedRequestParams, Tool as McpTool};
use rmcp::service::{Peer, ServiceError};
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// Pages of one `tools/list` answer read at most.
pub const MAX_PAGES: usize = 32;
/// Tools kept from one server at most.
pub const MAX_TOOLS: usize = 1000;
/// The largest tool definition kept (as JSON): an input schema of 64 KiB (the most offered,
/// see `super::tools`), a description and the rest.
pub const MAX_TOOL_BYTES: usize = 96 * 1024;
/// The most bytes of tool definitions (as JSON) kept from one server.
pub const MAX_LIST_BYTES: usize = 1024 * 1024;
/// Notes on tools left out kept at most (one more counts the rest).
pub const MAX_DROPPED_NOTES: usize = 32;
/// The longest tool name quoted in a note.
const NOTE_NAME_CHARS: usize = 64;

/// What was kept of a server's tool list, and what was left out.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub tools: Vec<McpTool>,
    /// `(name, why)` of tools listed but not kept (the name cut to [`NOTE_NAME_CHARS`]).
    dropped: Vec<(String, String)>,
    /// Tools left out beyond the notes.
    dropped_more: usize,
    /// Whether the server had pages left after [`MAX_PAGES`].
    unread_pages: bool,
    /// The JSON size of `tools`.
    bytes: usize,
    /// Each tool's input schema, shared and compiled (or why it cannot be offered), made at
    /// the first run that offers the listing and reused by every later one.
    schemas: OnceLock<Vec<ToolSchema>>,
}

/// A listed tool's input schema as every run offers it, or why it cannot be offered.
pub type ToolSchema = Result<(Arc<Value>, CompiledSchema), String>;

impl Listing {
    /// The notes on what was left out (`name: why`), then whether pages were left unread and
    /// the count of the tools beyond the notes.
    pub fn dropped_notes(&self) -> impl Iterator<Item = String> + '_ {
        let more = (self.dropped_more > 0)
            .then(|| format!("{} more tools were left out", self.dropped_more));
        let unread = self.unread_pages.then(|| {
            format!("the server's list has more than {MAX_PAGES} pages; the rest was not read")
        });
        self.dropped
            .iter()
            .map(|(name, why)| format!("{name}: {why}"))
            .chain(unread)
            .chain(more)
    }

    /// The input schemas of `tools`, in their order, compiled once per listing (see
    /// [`super::tools::tool_schema`]).
    pub fn schemas(&self) -> &[ToolSchema] {
        self.schemas
            .get_or_init(|| self.tools.iter().map(super::tools::tool_schema).collect())
    }

    /// Whether a tool of this name was listed but left out with a note.
    pub fn dropped_by_name(&self, name: &str) -> bool {
        self.dropped.iter().any(|(dropped, _)| dropped == name)
    }

    fn drop_tool(&mut self, name: &str, why: String) {
        if self.dropped.len() < MAX_DROPPED_NOTES {
            self.dropped
                .push((name.chars().take(NOTE_NAME_CHARS).collect(), why));
        } else {
            self.dropped_more += 1;
        }
    }

    /// Keeps `tool` when it fits the bounds, else notes why not.
    fn take(&mut self, tool: McpTool) {
        if self.tools.len() >= MAX_TOOLS {
            return self.drop_tool(
                &tool.name,
                format!("the server lists more than {MAX_TOOLS} tools"),
            );
        }
        let size = crate::json_text::json_len(&tool);
        if size > MAX_TOOL_BYTES {
            return self.drop_tool(
                &tool.name,
                format!(
                    "its definition is larger than {} KiB",
                    MAX_TOOL_BYTES / 1024
                ),
            );
        }
        if self.bytes + size > MAX_LIST_BYTES {
            return self.drop_tool(
                &tool.name,
                format!(
                    "the server's tool definitions pass {} MiB",
                    MAX_LIST_BYTES / (1024 * 1024)
                ),
            );
        }
        self.bytes += size;
        self.tools.push(tool);
    }
}

/// Reads `peer`'s tool list page by page within the bounds of the module doc. A server that
/// still has pages after [`MAX_PAGES`] keeps what was read, with a note saying so.
pub async fn read(peer: &Peer<RoleClient>) -> Result<Listing, ServiceError> {
    let mut listing = Listing::default();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params =
            cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = peer.list_tools(params).await?;
        for tool in page.tools {
            listing.take(tool);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(listing),
        }
    }
    listing.unread_pages = true;
    Ok(listing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description_bytes: usize) -> McpTool {
        serde_json::from_value(json!({
            "name": name,
            "description": "d".repeat(description_bytes),
            "inputSchema": {"type": "object"},
        }))
        .unwrap()
    }

    #[test]
    fn tools_past_the_bounds_are_left_out_with_a_note_each_then_a_count() {
        let mut listing = Listing::default();
        listing.take(tool("small", 10));
        listing.take(tool("huge", MAX_TOOL_BYTES));
        assert_eq!(listing.tools.len(), 1);
        assert_eq!(
            listing.dropped_notes().collect::<Vec<_>>(),
            vec!["huge: its definition is larger than 96 KiB".to_owned()]
        );
        assert!(listing.dropped_by_name("huge"));
        assert!(!listing.dropped_by_name("hug"));
        // 80 KiB tools fill the 1 MiB budget after 12 (with `small`).
        for n in 0..20 {
            listing.take(tool(&format!("big{n}"), 80 * 1024));
        }
        assert_eq!(listing.tools.len(), 13);
        assert!(listing.bytes <= MAX_LIST_BYTES);
        let notes: Vec<String> = listing.dropped_notes().collect();
        assert!(notes[1].starts_with("big12: the server's tool definitions pass 1 MiB"));
        // Notes stop at MAX_DROPPED_NOTES; the rest is counted.
        for n in 0..100 {
            listing.take(tool(&format!("late{n}"), 80 * 1024));
        }
        assert_eq!(listing.dropped.len(), MAX_DROPPED_NOTES);
        let notes: Vec<String> = listing.dropped_notes().collect();
        assert_eq!(notes.len(), MAX_DROPPED_NOTES + 1);
        assert_eq!(notes[MAX_DROPPED_NOTES], "77 more tools were left out");
        // Pages left unread are said after the notes, before the count.
        listing.unread_pages = true;
        let notes: Vec<String> = listing.dropped_notes().collect();
        assert_eq!(
            notes[MAX_DROPPED_NOTES],
            "the server's list has more than 32 pages; the rest was not read"
        );
        assert_eq!(notes[MAX_DROPPED_NOTES + 1], "77 more tools were left out");
    }

    #[test]
    fn at_most_max_tools_are_kept() {
        let mut listing = Listing::default();
        for n in 0..MAX_TOOLS + 5 {
            listing.take(tool(&format!("t{n}"), 0));
        }
        assert_eq!(listing.tools.len(), MAX_TOOLS);
        assert_eq!(listing.dropped.len(), 5);
        let notes: Vec<String> = listing.dropped_notes().collect();
        assert!(notes[0].ends_with(": the server lists more than 1000 tools"));
    }

    #[test]
    fn a_long_name_is_quoted_cut() {
        let mut listing = Listing::default();
        listing.take(tool(&"n".repeat(10_000), MAX_TOOL_BYTES));
        let notes: Vec<String> = listing.dropped_notes().collect();
        assert!(notes[0].len() < 200);
    }

    /// A listing's schemas are compiled once, for every run that offers it; one that cannot
    /// be offered says why.
    #[test]
    fn schemas_are_compiled_once_per_listing() {
        let mut listing = Listing::default();
        listing.take(tool("ok", 10));
        listing.take(
            serde_json::from_value(json!({
                "name": "bad",
                "inputSchema": {"type": "object", "properties": {"a": {"type": 7}}},
            }))
            .unwrap(),
        );
        let first = listing.schemas();
        let (shared, _) = first[0].as_ref().unwrap();
        let why = first[1].as_ref().unwrap_err();
        assert!(why.starts_with("invalid input schema"), "{why}");
        let again = listing.schemas();
        assert!(Arc::ptr_eq(shared, &again[0].as_ref().unwrap().0));
    }
}
