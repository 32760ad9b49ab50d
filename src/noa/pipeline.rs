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

use super::ToolNames;
use super::cache::ViewCache;
use super::render::{live, prune_message, pruned_tokens, render_live};
pub use super::render::{marked, summary_message, summary_tokens};
use super::rendered::Renderer;
use super::settings::NoaSettings;
use super::state::{Block, Calibration, NoaState, Tier, blocks_of, message_tokens};
use crate::message::{ContentBlock, Message, Role, ViewMessage};
use crate::run_event::{self, RunEvent};
use std::sync::Arc;

/// How an item's message is made when the view is sent ([`Turn::messages`]): a live message
/// is shared with history and marked, never copied; the token count of every item is known
/// without rendering it.
#[derive(Clone, Debug, PartialEq)]
pub enum Render {
    /// The history message at this position with its ref marker ([`marked`]).
    Live(u32),
    /// The same with its tool results pruned to a stub quoting `about` tokens.
    Pruned { position: u32, about: u64 },
    /// The summary of the compression at this index ([`summary_message`]).
    Summary(usize),
    /// A message a step built or changed (the truncation marker, the nudged message): shared,
    /// so that an item stays small (a view holds one per history message until truncation).
    Owned(Arc<Message>),
}

/// One message of the projected view.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// History position (`None` for a summary or a marker).
    pub position: Option<u32>,
    /// Index into [`Turn::blocks`] (`None` for a summary or a marker).
    pub block: Option<u32>,
    pub render: Render,
    pub tokens: u64,
}

// A cold view writes one item per history message before truncation drops most of them.
const _: () = assert!(std::mem::size_of::<Item>() <= 48);

/// Everything one turn of the pipeline reads and builds.
pub struct Turn<'a> {
    pub settings: &'a NoaSettings,
    pub read_only: &'a ToolNames,
    pub history: &'a [Arc<Message>],
    pub state: &'a mut NoaState,
    /// The hard limit in force (lower for the retry after a context overflow).
    pub hard_limit: u64,
    /// The blocks, and the items of the view. A session hands in the vectors of its last
    /// turn, so that a request reuses their memory instead of allocating (and faulting in)
    /// two history-sized vectors; the steps overwrite whatever they hold.
    pub blocks: Vec<Block>,
    pub items: Vec<Item>,
    pub events: Vec<RunEvent>,
    /// The session's blocks kept between requests (`None`: computed from scratch).
    cache: Option<&'a mut ViewCache>,
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
        read_only: &'a ToolNames,
        history: &'a [Arc<Message>],
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
            cache: None,
        }
    }

    /// The same turn, with the blocks kept in `cache` between the requests of one session
    /// (the view and events are exactly those of a turn without it).
    pub fn with_cache(mut self, cache: &'a mut ViewCache) -> Self {
        self.cache = Some(cache);
        self
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

    /// The message of one item.
    pub fn message(&self, item: &Item) -> Message {
        match &item.render {
            Render::Live(position) => marked(&self.history[*position as usize], *position),
            Render::Pruned { position, about } => {
                let original = &self.history[*position as usize];
                let message = render_live(original, *position, Some(*about));
                debug_assert_eq!(message, {
                    let mut eager = marked(original, *position);
                    prune_message(&mut eager, *position, *about);
                    eager
                });
                message
            }
            Render::Summary(index) => summary_message(&self.state.compressions[*index]),
            Render::Owned(message) => Message::clone(message),
        }
    }

    /// The view's messages: live ones shared with history and marked, summaries shared with
    /// the last view when there is a cache (`noa::rendered`).
    pub fn messages(&mut self) -> Vec<ViewMessage> {
        let previous = self
            .cache
            .as_deref_mut()
            .map(ViewCache::take_rendered)
            .unwrap_or_default();
        let mut renderer = Renderer::new(previous);
        let messages = self
            .items
            .iter()
            .map(|item| match &item.render {
                Render::Live(position) => live(&self.history[*position as usize], *position, None),
                Render::Pruned { position, about } => {
                    live(&self.history[*position as usize], *position, Some(*about))
                }
                Render::Summary(index) => renderer
                    .summary(*index, item.tokens, || self.message(item))
                    .into(),
                Render::Owned(message) => message.clone().into(),
            })
            .collect();
        if let Some(cache) = self.cache.as_deref_mut() {
            cache.keep_rendered(renderer.finish());
        }
        crate::harness::context::pair_tool_blocks(messages)
    }

    /// Renders item `index` so that a step can change its message.
    fn owned(&mut self, index: usize) -> &mut Message {
        if !matches!(self.items[index].render, Render::Owned(_)) {
            let message = self.message(&self.items[index]);
            self.items[index].render = Render::Owned(Arc::new(message));
        }
        match &mut self.items[index].render {
            Render::Owned(message) => Arc::make_mut(message),
            _ => unreachable!("rendered just above"),
        }
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
        .extend(turn.history.iter().skip(known).map(|m| message_tokens(m)));
}

/// Step 2 (N25): blocks and tiers of the rendered messages, and the projected view.
pub fn sync_blocks(turn: &mut Turn<'_>) {
    let rendered = turn.state.snapshots.len().min(turn.history.len());
    match turn.cache.as_deref_mut() {
        Some(cache) => cache.blocks(
            turn.history,
            turn.state,
            rendered,
            turn.settings.protected_tail,
            turn.read_only,
            &mut turn.blocks,
        ),
        None => {
            turn.blocks = blocks_of(
                &turn.history[..rendered],
                &turn.state.snapshots,
                turn.settings.protected_tail,
                turn.read_only,
                &turn.state.absorbed_by(rendered),
            )
        }
    }
    // The buffer of an earlier turn when the session handed one in (see `Turn::blocks`).
    let mut items = std::mem::take(&mut turn.items);
    items.clear();
    items.reserve(rendered + 1);
    for (index, block) in turn.blocks.iter().enumerate() {
        if let Some(compression) = block.absorbed {
            let shown = &turn.state.compressions[compression];
            if shown.absorbed.first().map(|run| run.0) == Some(block.start) {
                items.push(Item {
                    position: None,
                    block: None,
                    render: Render::Summary(compression),
                    tokens: u64::from(summary_tokens(shown)),
                });
            }
            continue;
        }
        for position in block.start..=block.end {
            items.push(Item {
                position: Some(position),
                block: Some(index as u32),
                render: Render::Live(position),
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
    for index in 0..turn.items.len() {
        let item = &turn.items[index];
        let (Some(block_index), Some(position)) = (item.block, item.position) else {
            continue;
        };
        let block = &turn.blocks[block_index as usize];
        if block_index as usize == last_block
            || block.tier != Tier::Normal
            || !block.read_only_calls
            || position != block.end
            || block.start == block.end
            || item.tokens <= turn.settings.prune_min_tokens
        {
            continue;
        }
        let about = item.tokens;
        if matches!(item.render, Render::Live(_)) {
            let tokens = pruned_tokens(&turn.history[position as usize], position, about);
            let item = &mut turn.items[index];
            item.render = Render::Pruned { position, about };
            item.tokens = tokens;
            debug_assert_eq!(
                tokens,
                u64::from(message_tokens(&turn.message(&turn.items[index])))
            );
        } else {
            let message = turn.owned(index);
            prune_message(message, position, about);
            let tokens = u64::from(message_tokens(message));
            turn.items[index].tokens = tokens;
        }
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
            let block = &blocks[index as usize];
            index as usize != last_block
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
            Some(index) => turn.blocks[index as usize].tier == Tier::Normal,
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
            render: Render::Owned(Arc::new(marker)),
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
    let Some(last) = turn.items.len().checked_sub(1) else {
        return;
    };
    let message = turn.owned(last);
    let is_user = message.role == Role::User;
    let result = message.content.iter_mut().rev().find_map(|b| match b {
        ContentBlock::ToolResult(result) => Some(result),
        _ => None,
    });
    match result {
        Some(result) => {
            result.content.push_str("\n\n");
            result.content.push_str(&text);
        }
        None if is_user => message.content.push(ContentBlock::Text { text }),
        // A view ending on the model's own message (never sent by the loop): no place for it.
        None => return,
    }
    turn.items[last].tokens += added;
    turn.events
        .push(RunEvent::ContextNudge(run_event::ContextNudge {
            projected_tokens: projected,
            soft_limit_tokens: soft,
        }));
}
