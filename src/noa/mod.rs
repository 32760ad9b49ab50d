//! Noa: model-driven context compression for sessions that run for thousands of turns.
//!
//! A session opts in with `context: {"policy": "noa", …}` ([`NoaSettings`]). Its runs then
//! build every request view through the Noa pipeline instead of the built-in compaction, and
//! offer the model two tools, `Compress` and `Expand`.
//!
//! **The rules** (cited by number in the code):
//!
//! - **N23 — one pipeline, one order.** Before each model request the policy runs, in exactly
//!   this order: *assign refs* → *sync blocks* → *prune* → *hide consumed calls* → *emergency
//!   truncate* → *nudge* ([`pipeline::STEPS`]). Refs must exist before blocks are built from
//!   them; pruning and hiding shrink the view before truncation decides whether anything must
//!   be dropped; the nudge reads the size that is really sent.
//! - **N24 — stable refs and snapshots.** Every history message gets a short ref (`m` and its
//!   position in the session's history, e.g. `m42`) the first time a view is built over it,
//!   and its token estimate is snapshotted then. Both are stored with the session (the
//!   `noa_states` row) and never change: across runs, restarts and resumes the same history
//!   gives the same refs, snapshots and view.
//! - **N25 — protection and tiers.** History is cut into *blocks*: an assistant message with
//!   tool calls together with the message carrying their results, or any other single
//!   message; a block is never split, so a tool_use never loses its result. Each block has a
//!   tier: *normal*, *soft-protected* (the last `protected_tail` messages) or
//!   *hard-protected* (the latest call of every mutating tool, and a call still waiting for
//!   its result or an approval). Protected blocks are never archived: a range that spans
//!   several tiers absorbs only its normal blocks and the protected ones stay in the view where
//!   they were; a range with no normal block is refused. Each range must absorb at least
//!   `min_range_tokens`, checked for the batch as a whole (one range under the floor refuses
//!   the batch) — except a range that is short because it ends against a protected block.
//!   Overlap, order, block-boundary and summary-length failures are all found before anything
//!   changes.
//! - **N26 — archive, then commit, atomically.** A `Compress` batch is validated range by
//!   range first; then the originals of every range are archived and the new state is written
//!   in one store transaction. If any archive cannot be written, nothing is: the stored state
//!   and the live view are unchanged.
//!
//! Token counts are a tokenizer-free estimate (four characters per token, see
//! [`crate::harness::context::estimate_tokens`]); once the provider reports the exact input
//! tokens of a request, the projected size is scaled by the ratio exact / estimated of that
//! request (the snapshots themselves stay the first-render estimate).
//!
//! Sessions that do not opt in pay nothing: no state is read or written for them.

pub mod cache;
pub mod compress;
pub mod kept;
pub mod pipeline;
mod render;
mod rendered;
pub mod session;
pub mod settings;
pub mod state;
pub mod tools;

#[cfg(test)]
mod compress_tests;
#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_support;

pub use session::NoaSession;
pub use settings::{ContextSettings, NoaSettings};
pub use state::NoaState;

/// The names of the tools a Noa session adds.
pub const COMPRESS_TOOL: &str = "Compress";
pub const EXPAND_TOOL: &str = "Expand";

/// Whether `name` is one of the tools a Noa session adds.
pub fn is_noa_tool(name: &str) -> bool {
    name == COMPRESS_TOOL || name == EXPAND_TOOL
}

pub use crate::message::MessageRef;

/// The model-visible ref of the message at `position` in the session's history.
pub fn message_ref(position: u32) -> String {
    MessageRef(position).to_string()
}

/// The position named by a message ref (`m42` → 42).
pub fn parse_message_ref(text: &str) -> Option<u32> {
    let digits = text.strip_prefix('m')?;
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Names of the read-only tools of a session. Hashed with foldhash (seeded per map), not
/// SipHash: the policy looks a name up for every tool call of the history it cuts.
pub type ToolNames = std::collections::HashSet<String, foldhash::fast::RandomState>;

/// The id of the `ordinal`-th archive of a session (`a1`, `a2`, …).
pub fn archive_id(ordinal: u32) -> String {
    format!("a{ordinal}")
}

/// The ordinal named by an archive id (`a3` → 3).
pub fn parse_archive_id(text: &str) -> Option<u32> {
    let digits = text.strip_prefix('a')?;
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}
