//! Provider-visible context (N21, N22): which messages a model request sees.
//!
//! - **History** (stored, durable): every message of the session, append-only.
//! - **Transcript** (stored, durable): the event log of everything that happened.
//! - **Request view** (derived, never stored): what one request sends — by default the
//!   messages from the last compaction boundary on, with tool_use/tool_result pairs whole.
//!
//! A [`ContextPolicy`] may replace the built-in behaviour: `pre` may change the history before
//! each request, `view` (when it returns `Some`) fully decides the messages, and `reactive` may
//! give one smaller view to retry after a context overflow. A custom policy disables the
//! built-in compaction. A stateful policy (Noa, `crate::noa`) persists what building a view
//! changed in `after_view` — which also hands the engine the events to record — and learns
//! the provider's exact input tokens through `observe_usage`.

use crate::message::{ContentBlock, Message, Role, ViewMessage};
use std::borrow::Borrow;
use std::collections::HashSet;
use std::sync::Arc;

/// A pluggable compactor / context view.
#[async_trait::async_trait]
pub trait ContextPolicy: Send + Sync {
    /// May rewrite the in-memory history before a request.
    fn pre(&self, _history: &mut Vec<Arc<Message>>) {}
    /// The full request view, when this policy decides it.
    fn view(&self, _history: &[Arc<Message>]) -> Option<Vec<ViewMessage>> {
        None
    }
    /// A view for the single retry after a context overflow.
    fn reactive(&self, _history: &[Arc<Message>]) -> Option<Vec<ViewMessage>> {
        None
    }
    /// Called once the view of a request is built, before it is sent: persists the policy's
    /// state and returns the events to record (an error ends the run).
    async fn after_view(&self) -> Result<Vec<crate::run_event::RunEvent>, String> {
        Ok(Vec::new())
    }
    /// The provider's input tokens of the request built from the last view.
    fn observe_usage(&self, _input_tokens: u64) {}
}

/// Rough token estimate used for the compaction threshold: four characters per token.
pub fn estimate_tokens<M: Borrow<Message>>(messages: &[M]) -> u64 {
    let chars: usize = messages
        .iter()
        .flat_map(|m| &m.borrow().content)
        .map(block_chars)
        .sum();
    (chars as u64).div_ceil(4)
}

/// The characters an image counts for: about 1,600 tokens, whatever its size.
pub const IMAGE_CHARS: usize = 6400;

/// The characters one content block counts for in [`estimate_tokens`].
pub fn block_chars(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => text.len(),
        ContentBlock::Thinking { thinking, .. } => thinking.len(),
        ContentBlock::RedactedThinking { data } => data.len(),
        ContentBlock::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
        ContentBlock::ToolResult(result) => {
            result.content.len() + result.images.len() * IMAGE_CHARS
        }
    }
}

type IdSet<'m> = HashSet<&'m str, foldhash::fast::RandomState>;

/// The blocks [`pair_tool_blocks`] drops, as (message index, block index), in order: found
/// over borrowed ids, so nothing is copied when every pair is whole.
fn unpaired_blocks<M: Borrow<Message>>(messages: &[M]) -> Vec<(usize, usize)> {
    let last_assistant = messages
        .iter()
        .rposition(|m| m.borrow().role == Role::Assistant);
    // foldhash (seeded per set), not SipHash: every request hashes every call id of its view.
    let uses: IdSet = messages
        .iter()
        .flat_map(|m| m.borrow().tool_uses().map(|(id, _, _)| id))
        .collect();
    let results: IdSet = messages
        .iter()
        .flat_map(|m| &m.borrow().content)
        .filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some(result.tool_use_id.as_str()),
            _ => None,
        })
        .collect();
    let mut unpaired = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let answering = Some(index) == last_assistant;
        for (at, block) in message.borrow().content.iter().enumerate() {
            let keep = match block {
                ContentBlock::ToolResult(result) => uses.contains(result.tool_use_id.as_str()),
                ContentBlock::ToolUse { id, .. } => answering || results.contains(id.as_str()),
                _ => true,
            };
            if !keep {
                unpaired.push((index, at));
            }
        }
    }
    unpaired
}

/// Keeps tool_use/tool_result pairs whole: drops tool_result blocks whose tool_use is not in
/// the view, and tool_use blocks with no result in a later message — except in the last
/// assistant message, whose calls are being answered. Messages left empty are removed. A
/// shared message is copied only if a block of it is dropped.
pub fn pair_tool_blocks(mut messages: Vec<ViewMessage>) -> Vec<ViewMessage> {
    let originals: Vec<&Message> = messages.iter().map(|m| &**m.original()).collect();
    let unpaired = unpaired_blocks(&originals);
    // Last first, so that the positions still to remove stay valid.
    for &(index, at) in unpaired.iter().rev() {
        messages[index].remove_block(at);
    }
    if !unpaired.is_empty() {
        messages.retain(|message| !message.is_empty());
    }
    messages
}

/// The default request view: messages from the last compaction boundary on (the boundary
/// index is into `history`), shared with history, pairs whole.
pub fn default_view(history: &[Arc<Message>], boundary: usize) -> Vec<ViewMessage> {
    pair_tool_blocks(
        history[boundary.min(history.len())..]
            .iter()
            .cloned()
            .map(ViewMessage::new)
            .collect(),
    )
}

/// [`estimate_tokens`] of [`default_view`], without building the view.
pub fn default_view_tokens(history: &[Arc<Message>], boundary: usize) -> u64 {
    let view = &history[boundary.min(history.len())..];
    let unpaired = unpaired_blocks(view);
    let dropped: usize = unpaired
        .iter()
        .map(|&(index, at)| block_chars(&view[index].content[at]))
        .sum();
    let chars: usize = view.iter().flat_map(|m| &m.content).map(block_chars).sum();
    ((chars - dropped) as u64).div_ceil(4)
}

/// Where the current run's messages start: the last user message that carries text and no
/// tool results (the prompt, or an injected continuation). Everything before it can be
/// summarised without splitting a pair.
pub fn last_safe_cut(history: &[Arc<Message>]) -> usize {
    history
        .iter()
        .rposition(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }))
                && !m
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult(_)))
        })
        .unwrap_or(0)
}

/// The text that opens a compaction boundary.
pub fn summary_message(summary: &str) -> Message {
    Message::user_text(format!(
        "<conversation_summary>\nThe earlier conversation was compacted. Summary:\n{summary}\n</conversation_summary>"
    ))
}

/// The instruction used to ask the provider for a summary.
pub const SUMMARY_INSTRUCTION: &str = "Summarise the conversation above for your own later use: \
     the user's goals, decisions made, facts learned from tool results, files touched, and \
     open tasks. Be complete but concise. Answer with the summary only.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolResultBlock;
    use serde_json::json;

    fn use_msg(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "Read".into(),
                input: json!({}),
            }],
        }
    }

    fn result_msg(id: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(id, "x"))],
        }
    }

    #[test]
    fn view_starts_at_the_boundary_and_drops_orphan_results() {
        let long_result = Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock::ok(
                "a",
                "x".repeat(400),
            ))],
        };
        let history = vec![
            Message::user_text("old"),
            use_msg("a"),
            long_result,
            Message::user_text("summary"),
            use_msg("b"),
            result_msg("b"),
        ];
        let history: Vec<Arc<Message>> = history.into_iter().map(Arc::new).collect();
        let tokens = |view: &[ViewMessage]| {
            estimate_tokens(&view.iter().map(|m| m.rendered()).collect::<Vec<_>>())
        };
        let view = default_view(&history, 3);
        assert_eq!(view.len(), 3);
        assert_eq!(view[0], Message::user_text("summary").into());
        assert_eq!(default_view_tokens(&history, 3), tokens(&view));
        // A boundary that would split a pair drops the orphan result instead of sending it.
        let split = default_view(&history, 2);
        assert_eq!(split[0], Message::user_text("summary").into());
        assert_eq!(split.len(), 3);
        assert_eq!(default_view_tokens(&history, 2), tokens(&split));
        assert!(default_view_tokens(&history, 2) < estimate_tokens(&history[2..]));
    }

    #[test]
    fn unanswered_tool_uses_are_dropped_except_in_the_last_assistant_message() {
        let history = vec![
            Message::user_text("go"),
            use_msg("a"),
            Message::user_text("more"),
            use_msg("b"),
        ];
        let shared: Vec<Arc<Message>> = history.into_iter().map(Arc::new).collect();
        let view = pair_tool_blocks(shared.iter().cloned().map(ViewMessage::new).collect());
        assert_eq!(view.len(), 3, "the stale unanswered call is gone");
        assert_eq!(view[2], use_msg("b").into());
        assert!(
            Arc::ptr_eq(view[2].original(), &shared[3]),
            "a whole message is not copied"
        );
        assert_eq!(
            shared[1].content.len(),
            1,
            "a shared message is never changed in place"
        );
    }

    #[test]
    fn safe_cut_is_the_last_plain_user_message() {
        let history = vec![
            Message::user_text("p1"),
            use_msg("a"),
            result_msg("a"),
            Message::user_text("p2"),
            use_msg("b"),
            result_msg("b"),
        ]
        .into_iter()
        .map(Arc::new)
        .collect::<Vec<_>>();
        assert_eq!(last_safe_cut(&history), 3);
        assert!(estimate_tokens(&history) > 0);
    }
}
