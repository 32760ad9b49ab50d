//! The per-turn Noa pipeline (N23): six steps, each a function over one [`Turn`], run in the
//! order of [`STEPS`].
//!
//! - **assign refs** snapshots the tokens of every message not rendered before (N24).
//! - **sync blocks** cuts history into blocks with their tiers (N25) and projects the view:
//!   live messages carry a `[ref m…]` marker, each compression shows as its summary.
//! - **prune** shortens the consumed results of read-only calls that left the protected tail
//!   and are bigger than `prune_min_tokens` to a stub naming their ref (`Expand` re-reads it).
//! - **hide consumed calls** removes the consumed `Compress`/`Expand` pairs that left the tail:
//!   their effect is already in the view.
//! - **emergency truncate** drops the oldest normal-tier blocks, whole, while the projected
//!   size is over the hard limit (the originals stay in history and remain compressible).
//! - **nudge** appends the nudge text to the last message when the projected size is over the
//!   soft limit.
//!
//! Pruning, hiding and truncating change only the view, never history, and each is recorded
//! as an event (`context_pruned`, `context_hidden`, `context_truncated`, `context_nudge`).

use super::settings::NoaSettings;
use super::state::{Block, NoaState, Tier, blocks_of, message_tokens};
use super::{message_ref, state::Calibration};
use crate::message::{ContentBlock, Message, Role};
use crate::run_event::{self, RunEvent};
use std::collections::HashSet;

/// One message of the projected view.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// History position (`None` for a summary or a marker).
    pub position: Option<u32>,
    /// Index into [`Turn::blocks`] (`None` for a summary or a marker).
    pub block: Option<usize>,
    pub message: Message,
    pub tokens: u64,
}

/// Everything one turn of the pipeline reads and builds.
pub struct Turn<'a> {
    pub settings: &'a NoaSettings,
    pub read_only: &'a HashSet<String>,
    pub history: &'a [Message],
    pub state: &'a mut NoaState,
    /// The hard limit in force (lower for the retry after a context overflow).
    pub hard_limit: u64,
    pub blocks: Vec<Block>,
    pub items: Vec<Item>,
    pub events: Vec<RunEvent>,
}

/// A named pipeline step.
pub type Step = (&'static str, fn(&mut Turn<'_>));

/// The steps in the order N23 fixes.
pub const STEPS: [Step; 6] = [
    ("assign_refs", assign_refs),
    ("sync_blocks", sync_blocks),
    ("prune", prune),
    ("hide_consumed_calls", hide_consumed_calls),
    ("emergency_truncate", emergency_truncate),
    ("nudge", nudge),
];

impl<'a> Turn<'a> {
    pub fn new(
        settings: &'a NoaSettings,
        read_only: &'a HashSet<String>,
        history: &'a [Message],
        state: &'a mut NoaState,
    ) -> Self {
        Self {
            settings,
            read_only,
            history,
            state,
            hard_limit: settings.hard_limit_tokens,
            blocks: Vec::new(),
            items: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Runs `steps` in order.
    pub fn run(&mut self, steps: &[Step]) {
        for (_, step) in steps {
            step(self);
        }
    }

    /// The estimated size of the view, before calibration.
    pub fn estimated(&self) -> u64 {
        self.items.iter().map(|item| item.tokens).sum()
    }

    /// The projected size: the estimate scaled by the last request's exact / estimated ratio
    /// (clamped to 0.5..=4) once the provider reported one.
    pub fn projected(&self) -> u64 {
        calibrated(self.estimated(), self.state.calibration)
    }

    /// The view's messages.
    pub fn messages(&self) -> Vec<Message> {
        crate::harness::context::pair_tool_blocks(
            self.items.iter().map(|item| item.message.clone()).collect(),
        )
    }
}

/// `estimate` scaled by a calibration (see [`Turn::projected`]).
pub fn calibrated(estimate: u64, calibration: Option<Calibration>) -> u64 {
    match calibration {
        Some(Calibration { estimated, exact }) if estimated > 0 => {
            let ratio = (exact as f64 / estimated as f64).clamp(0.5, 4.0);
            (estimate as f64 * ratio).ceil() as u64
        }
        _ => estimate,
    }
}

/// Step 1 (N24): snapshots every message rendered for the first time. Existing snapshots
/// never change.
pub fn assign_refs(turn: &mut Turn<'_>) {
    let known = turn.state.snapshots.len();
    turn.state
        .snapshots
        .extend(turn.history.iter().skip(known).map(message_tokens));
}

/// Step 2 (N25): blocks and tiers of the rendered messages, and the projected view.
pub fn sync_blocks(turn: &mut Turn<'_>) {
    let rendered = turn.state.snapshots.len().min(turn.history.len());
    let absorbed = turn.state.absorbed_by(rendered);
    turn.blocks = blocks_of(
        &turn.history[..rendered],
        &turn.state.snapshots,
        turn.settings.protected_tail,
        turn.read_only,
        &absorbed,
    );
    let mut items = Vec::with_capacity(turn.blocks.len() + 1);
    for (index, block) in turn.blocks.iter().enumerate() {
        if let Some(compression) = block.absorbed {
            let compression = &turn.state.compressions[compression];
            if compression.absorbed.first().map(|run| run.0) == Some(block.start) {
                let message = summary_message(compression);
                items.push(Item {
                    position: None,
                    block: None,
                    tokens: u64::from(message_tokens(&message)),
                    message,
                });
            }
            continue;
        }
        for position in block.start..=block.end {
            items.push(Item {
                position: Some(position),
                block: Some(index),
                message: marked(&turn.history[position as usize], position),
                tokens: u64::from(turn.state.snapshots[position as usize]),
            });
        }
    }
    turn.items = items;
}

/// Step 3: stubs for big consumed results of read-only calls outside the tail.
pub fn prune(turn: &mut Turn<'_>) {
    let last_block = turn.blocks.len().saturating_sub(1);
    let before = turn.estimated();
    let mut pruned = 0u32;
    for item in &mut turn.items {
        let (Some(index), Some(position)) = (item.block, item.position) else {
            continue;
        };
        let block = &turn.blocks[index];
        if index == last_block
            || block.tier != Tier::Normal
            || !block.read_only_calls
            || position != block.end
            || block.start == block.end
            || item.tokens <= turn.settings.prune_min_tokens
        {
            continue;
        }
        let reference = message_ref(position);
        let mut first = true;
        for content in &mut item.message.content {
            if let ContentBlock::ToolResult(result) = content {
                result.content = if first {
                    format!(
                        "[ref {reference}] [result pruned: about {} tokens; call Expand with \
                         ref {reference} to read it again]",
                        item.tokens
                    )
                } else {
                    "[result pruned]".into()
                };
                first = false;
            }
        }
        item.tokens = u64::from(message_tokens(&item.message));
        pruned += 1;
    }
    if pruned > turn.state.pruned {
        turn.events
            .push(RunEvent::ContextPruned(run_event::ContextEdit {
                messages: pruned as usize,
                tokens_before: before,
                tokens_after: turn.estimated(),
            }));
    }
    turn.state.pruned = pruned;
}

/// Step 4: removes consumed `Compress`/`Expand` pairs outside the tail.
pub fn hide_consumed_calls(turn: &mut Turn<'_>) {
    let before = turn.estimated();
    let blocks = &turn.blocks;
    let last_block = blocks.len().saturating_sub(1);
    let mut hidden = 0u32;
    turn.items.retain(|item| {
        let hide = item.block.is_some_and(|index| {
            let block = &blocks[index];
            index != last_block
                && block.noa_only
                && block.tier == Tier::Normal
                && block.start != block.end
        });
        hidden += u32::from(hide);
        !hide
    });
    if hidden > turn.state.hidden {
        turn.events
            .push(RunEvent::ContextHidden(run_event::ContextEdit {
                messages: hidden as usize,
                tokens_before: before,
                tokens_after: turn.estimated(),
            }));
    }
    turn.state.hidden = hidden;
}

/// Step 5: over the hard limit, drops the oldest normal blocks (and summaries), whole.
pub fn emergency_truncate(turn: &mut Turn<'_>) {
    let before = turn.estimated();
    if turn.projected() <= turn.hard_limit {
        return;
    }
    let mut drop = vec![false; turn.items.len()];
    let mut projected = turn.projected();
    let mut dropped = 0usize;
    let mut i = 0;
    while i < turn.items.len() && projected > turn.hard_limit {
        let item = &turn.items[i];
        let droppable = match item.block {
            None => item.position.is_none(),
            Some(index) => turn.blocks[index].tier == Tier::Normal,
        };
        if !droppable {
            i += 1;
            continue;
        }
        // The whole block goes, never half a pair.
        let mut j = i;
        while j < turn.items.len()
            && (j == i || (item.block.is_some() && turn.items[j].block == item.block))
        {
            drop[j] = true;
            dropped += 1;
            j += 1;
        }
        let removed: u64 = turn.items[i..j].iter().map(|item| item.tokens).sum();
        projected = projected.saturating_sub(calibrated(removed, turn.state.calibration));
        i = j;
    }
    if dropped == 0 {
        return;
    }
    let mut index = 0;
    turn.items.retain(|_| {
        index += 1;
        !drop[index - 1]
    });
    let marker = Message::user_text(format!(
        "[{dropped} older messages are not shown: the context is over its hard limit. Compress \
         them (their refs are still valid) to bring them back as summaries.]"
    ));
    turn.items.insert(
        0,
        Item {
            position: None,
            block: None,
            tokens: u64::from(message_tokens(&marker)),
            message: marker,
        },
    );
    turn.events
        .push(RunEvent::ContextTruncated(run_event::ContextEdit {
            messages: dropped,
            tokens_before: before,
            tokens_after: turn.estimated(),
        }));
}

/// Step 6: over the soft limit, appends the nudge to the last message (to its last tool
/// result, or as a text block of the prompt).
pub fn nudge(turn: &mut Turn<'_>) {
    let projected = turn.projected();
    let soft = turn.settings.soft_limit_tokens;
    if projected <= soft {
        return;
    }
    let text = format!(
        "<noa_nudge projected_tokens=\"{projected}\" soft_limit_tokens=\"{soft}\">{}</noa_nudge>",
        turn.settings.nudge
    );
    let added = (text.len() as u64).div_ceil(4);
    let Some(last) = turn.items.last_mut() else {
        return;
    };
    last.tokens += added;
    let is_user = last.message.role == Role::User;
    let result = last.message.content.iter_mut().rev().find_map(|b| match b {
        ContentBlock::ToolResult(result) => Some(result),
        _ => None,
    });
    match result {
        Some(result) => {
            result.content.push_str("\n\n");
            result.content.push_str(&text);
        }
        None if is_user => last.message.content.push(ContentBlock::Text { text }),
        // A view ending on the model's own message (never sent by the loop): no place for it.
        None => {
            last.tokens -= added;
            return;
        }
    }
    turn.events
        .push(RunEvent::ContextNudge(run_event::ContextNudge {
            projected_tokens: projected,
            soft_limit_tokens: soft,
        }));
}

/// The message showing a compression in the view.
pub fn summary_message(compression: &super::state::Compression) -> Message {
    Message::user_text(format!(
        "[archive {}: {}..{} compressed; call Expand with ref {} to read the originals]\n{}",
        compression.archive_id,
        compression.from_ref,
        compression.to_ref,
        compression.archive_id,
        compression.summary
    ))
}

/// `message` with its ref marker: in front of the first tool result of a results message,
/// otherwise as a text block after any leading thinking.
pub fn marked(message: &Message, position: u32) -> Message {
    let marker = format!("[ref {}]", message_ref(position));
    let mut message = message.clone();
    if let Some(result) = message.content.iter_mut().find_map(|b| match b {
        ContentBlock::ToolResult(result) => Some(result),
        _ => None,
    }) {
        result.content.insert_str(0, &format!("{marker} "));
        return message;
    }
    let at = message
        .content
        .iter()
        .position(|b| {
            !matches!(
                b,
                ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. }
            )
        })
        .unwrap_or(message.content.len());
    message
        .content
        .insert(at, ContentBlock::Text { text: marker });
    message
}
