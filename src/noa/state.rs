//! Noa's durable state (N24) and the blocks and tiers derived from history each turn (N25).

use super::ToolNames;
use crate::message::{ContentBlock, Message, Role};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::Arc;

/// What a Noa session stores (one `noa_states` row, JSON): the first-render token snapshot of
/// every message that has been rendered (its index is the message's position, so the ref of
/// `snapshots[i]` is `m{i}`), the compressions applied and the archive counter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NoaState {
    /// First-render token estimate of each rendered message, by position (N24).
    pub snapshots: Vec<u32>,
    /// Compressions in the order they were applied. A later one may absorb earlier ones
    /// whole (it compresses their summaries again): a position shows the latest compression
    /// that absorbed it.
    pub compressions: Vec<Compression>,
    /// Archives written so far (the next one is `a{archives + 1}`).
    pub archives: u32,
    /// The estimate and the provider's exact input tokens of the last request, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// Messages pruned / hidden in the last view (an event is recorded when they grow).
    #[serde(default)]
    pub pruned: u32,
    #[serde(default)]
    pub hidden: u32,
}

/// The estimate of one request and the exact count the provider reported for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calibration {
    pub estimated: u64,
    pub exact: u64,
}

/// One applied compression: the archive holding the originals, the positions it absorbed and
/// the summary shown in their place (at the first absorbed position).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compression {
    pub archive_id: String,
    pub from_ref: String,
    pub to_ref: String,
    /// Absorbed positions as inclusive runs, ascending.
    pub absorbed: Vec<(u32, u32)>,
    pub summary: String,
    /// Tokens it took out of the view: snapshots of the originals it archived and the
    /// summaries it replaced.
    pub tokens: u64,
    /// The archives of the earlier compressions whose summaries it compressed again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
}

/// A block's protection (N25). Ordered: a range absorbs only its lowest tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    Normal,
    /// In the recent protected tail.
    Soft,
    /// The latest call of a mutating tool, or a call still waiting for its result.
    Hard,
}

/// Messages `start..=end` that are never split (an assistant tool call message and the
/// message carrying its results, or one message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub start: u32,
    pub end: u32,
    pub tier: Tier,
    /// Sum of the snapshots of its messages.
    pub tokens: u64,
    /// The compression (index into [`NoaState::compressions`]) that absorbed it.
    pub absorbed: Option<usize>,
    /// Every tool call of the block is a Noa tool (`Compress`/`Expand`).
    pub noa_only: bool,
    /// The block has a tool result whose call is read-only.
    pub read_only_calls: bool,
}

/// The tokens of one message: the tokenizer-free estimate (at least 1).
pub fn message_tokens(message: &Message) -> u32 {
    let tokens = crate::harness::context::estimate_tokens(std::slice::from_ref(message));
    u32::try_from(tokens).unwrap_or(u32::MAX).max(1)
}

/// [`message_tokens`] of a message that counts `chars` characters.
pub fn tokens_of_chars(chars: usize) -> u32 {
    u32::try_from((chars as u64).div_ceil(4))
        .unwrap_or(u32::MAX)
        .max(1)
}

fn results_of(message: &Message) -> bool {
    message.role == Role::User
        && message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// The block starting at `i` in `history[..len]`, with its base tier (hard when its calls
/// still wait for their results) and no compression. One pass over the message's tool calls
/// classifies them and hands each mutating one (see [`mutating_calls`]) to `mutating`.
pub(super) fn cut_block<'m>(
    history: &'m [Arc<Message>],
    snapshots: &[u32],
    i: usize,
    len: usize,
    read_only: &ToolNames,
    mut mutating: impl FnMut(&'m str),
) -> Block {
    let message = &history[i];
    let (mut has_calls, mut noa_only, mut read_only_calls) = (false, true, true);
    for (_, name, _) in message.tool_uses() {
        has_calls = true;
        let noa = super::is_noa_tool(name);
        let reads = read_only.contains(name);
        noa_only &= noa;
        read_only_calls &= reads;
        if !noa && !reads {
            mutating(name);
        }
    }
    let end = if has_calls && i + 1 < len && results_of(&history[i + 1]) {
        i + 1
    } else {
        i
    };
    let tokens = snapshots[i..=end].iter().map(|t| u64::from(*t)).sum();
    let unanswered = has_calls && end == i;
    Block {
        start: i as u32,
        end: end as u32,
        tier: if unanswered { Tier::Hard } else { Tier::Normal },
        tokens,
        absorbed: None,
        noa_only: has_calls && noa_only,
        read_only_calls: has_calls && read_only_calls,
    }
}

/// The mutating tools `message` calls (every tool but the read-only ones and Noa's own).
pub(super) fn mutating_calls<'m>(
    message: &'m Message,
    read_only: &ToolNames,
) -> impl Iterator<Item = &'m str> {
    message.tool_uses().filter_map(move |(_, name, _)| {
        (!read_only.contains(name) && !super::is_noa_tool(name)).then_some(name)
    })
}

/// Cuts `history` into blocks and gives each its tier. `read_only` names the tools whose calls
/// are read-only; every other tool is treated as mutating (closes safe). This is the
/// from-scratch computation; [`super::cache::ViewCache`] keeps the same blocks between the
/// requests of a session and must always agree with it.
pub fn blocks_of(
    history: &[Arc<Message>],
    snapshots: &[u32],
    protected_tail: u32,
    read_only: &ToolNames,
    absorbed_by: &[Option<usize>],
) -> Vec<Block> {
    let len = history.len().min(snapshots.len());
    let mut blocks = Vec::with_capacity(len);
    let mut i = 0;
    while i < len {
        let mut block = cut_block(history, snapshots, i, len, read_only, |_| {});
        block.absorbed = absorbed_by.get(i).copied().flatten();
        i = block.end as usize + 1;
        blocks.push(block);
    }
    // Soft tail: every block with a message among the last `protected_tail`.
    let tail_start = len.saturating_sub(protected_tail as usize) as u32;
    for block in blocks.iter_mut().rev() {
        if block.end < tail_start {
            break;
        }
        block.tier = block.tier.max(Tier::Soft);
    }
    // Hard: the latest block calling each mutating tool.
    let mut seen: HashSet<&str, foldhash::fast::RandomState> = HashSet::default();
    for block in blocks.iter_mut().rev() {
        let mut latest = false;
        for name in mutating_calls(&history[block.start as usize], read_only) {
            latest |= seen.insert(name);
        }
        if latest {
            block.tier = Tier::Hard;
        }
    }
    blocks
}

impl NoaState {
    /// The state of a fork that copies the first `messages` messages of this session's
    /// history: their snapshots and the compressions that lie wholly inside them (every
    /// absorbed position and the range's `to_ref` before `messages`). A compression that
    /// reaches past the cut is left out, and the earlier ones it had absorbed show again.
    /// The archive counter is kept, so the fork never reuses an archive id it copied; the
    /// calibration and the pruned/hidden counts start over (they describe the last view).
    pub fn forked(&self, messages: usize) -> NoaState {
        let inside = |position: u32| (position as usize) < messages;
        NoaState {
            snapshots: self.snapshots[..self.snapshots.len().min(messages)].to_vec(),
            compressions: self
                .compressions
                .iter()
                .filter(|c| {
                    c.absorbed.iter().all(|&(_, end)| inside(end))
                        && super::parse_message_ref(&c.to_ref).is_some_and(inside)
                })
                .cloned()
                .collect(),
            archives: self.archives,
            calibration: None,
            pruned: 0,
            hidden: 0,
        }
    }

    /// The ordinals of the archives this state's compressions wrote (one per compression; an
    /// archive a later compression replaced is still its own compression's).
    pub fn archive_ordinals(&self) -> Vec<u32> {
        self.compressions
            .iter()
            .filter_map(|c| super::parse_archive_id(&c.archive_id))
            .collect()
    }

    /// For each position, the latest compression that absorbed it.
    pub fn absorbed_by(&self, len: usize) -> Vec<Option<usize>> {
        self.absorbed_between(0, len)
    }

    /// For each position of `from..to`, the latest compression that absorbed it.
    pub fn absorbed_between(&self, from: usize, to: usize) -> Vec<Option<usize>> {
        let mut by = vec![None; to.saturating_sub(from)];
        for (index, compression) in self.compressions.iter().enumerate() {
            for &(start, end) in &compression.absorbed {
                let start = (start as usize).max(from);
                let end = (end as usize + 1).min(to);
                if start < end {
                    by[start - from..end - from].fill(Some(index));
                }
            }
        }
        by
    }
}
