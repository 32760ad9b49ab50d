//! The blocks of a session's history kept between its model requests, so that a request
//! costs what changed since the last one, not the whole history (issue 15's 1 ms target).
//!
//! [`ViewCache`] holds the blocks (N25) with their *base* tier (hard for a call still waiting
//! for its result, otherwise normal) and the compression that absorbed each, the latest block
//! calling each mutating tool, and the key they were computed from. Each request checks the
//! key first and rebuilds from scratch when anything it covers changed:
//!
//! - the history: every covered message must still be the same message (the address and
//!   length of its content and its role; history is append-only — N24's refs are positions —
//!   so a changed or removed message is a bug elsewhere, and the cache then starts over), and
//!   the history may not have become shorter than what the cache covers;
//! - the state: the covered snapshots, and the absorbed runs of every compression it applied
//!   (new compressions are applied to the cached blocks incrementally);
//! - the read-only tool set.
//!
//! New messages are cut into blocks from the last cached block on when that block was a call
//! still waiting for its result (the next message may answer it), otherwise from the first new
//! message. The soft tail and the hard tier of the latest mutating calls depend on the end of
//! history and are applied per request (O(tail + tools)). The result is always exactly
//! [`blocks_of`](super::state::blocks_of) over the same history and state, which the property
//! tests check over random histories, batches and appends.
//!
//! It also keeps the summary messages the last view sent ([`RenderedMessages`]), dropped
//! with the rest whenever the cache starts over (live messages are shared with history, not
//! kept).
//!
//! **Across runs.** A run's Noa session hands its cache to the runtime's
//! [`KeptViews`](super::kept::KeptViews) when the run ends, and the session's next run takes
//! it back when the stored Noa state still has the version it was kept with. That run reads
//! its history from the store again, so the covered messages are new allocations: the first
//! request *adopts* them ([`ViewCache::adopt`]) — the same count or more, and each covered
//! message with the same role and number of content blocks — instead of comparing addresses.
//! That relies on what the store guarantees: a session's history is append-only (messages
//! are numbered by their sequence, never changed, never deleted) and the Noa state version
//! changes with every write of the state.
//!
//! Memory: a few words per message and per block, one entry per mutating tool name, and the
//! summaries of one view ([`ViewCache::bytes`] estimates it).

use super::ToolNames;
use super::rendered::RenderedMessages;
use super::state::{Block, NoaState, Tier, cut_block};
use crate::message::{Message, Role};
use std::collections::HashMap;
use std::sync::Arc;

/// The identity of one history message (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    content: usize,
    blocks: usize,
    role: Role,
}

impl Identity {
    fn of(message: &Message) -> Self {
        Self {
            content: message.content.as_ptr() as usize,
            blocks: message.content.len(),
            role: message.role,
        }
    }
}

/// Blocks kept between the requests of one session (see the module doc).
#[derive(Debug, Default)]
pub struct ViewCache {
    read_only: Option<ToolNames>,
    /// Identity of each covered message (`identity.len()` messages are covered).
    identity: Vec<Identity>,
    /// The snapshots of the covered messages when they were cut.
    snapshots: Vec<u32>,
    /// The absorbed runs of each compression applied to `blocks`.
    absorbed: Vec<Vec<(u32, u32)>>,
    /// Blocks of the covered messages, with their base tiers.
    blocks: Vec<Block>,
    /// Mutating tool name → index of the latest block calling it.
    latest: HashMap<String, usize, foldhash::fast::RandomState>,
    /// Requests that had to start over (tests and diagnostics).
    rebuilds: u64,
    /// The messages the last view sent.
    rendered: RenderedMessages,
    /// Kept from an earlier run: the next request adopts the covered messages.
    adopted: bool,
}

impl ViewCache {
    /// How many times the cache started over (the first request counts).
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Marks a cache kept from an earlier run (see the module doc).
    pub fn adopt(&mut self) {
        self.adopted = true;
    }

    /// Roughly the heap bytes this cache holds.
    pub fn bytes(&self) -> usize {
        self.identity.len() * (std::mem::size_of::<Identity>() + 4)
            + self.blocks.len() * std::mem::size_of::<Block>()
            + self
                .absorbed
                .iter()
                .map(|runs| runs.len() * 8 + 24)
                .sum::<usize>()
            + self
                .latest
                .keys()
                .map(|name| name.len() + 32)
                .sum::<usize>()
            + self.rendered.bytes()
    }

    /// The messages the last view sent (the cache keeps none until [`Self::keep_rendered`]).
    pub fn take_rendered(&mut self) -> RenderedMessages {
        std::mem::take(&mut self.rendered)
    }

    /// Keeps the messages a view sent, for the next request.
    pub fn keep_rendered(&mut self, rendered: RenderedMessages) {
        self.rendered = rendered;
    }

    /// The blocks of `history[..rendered]` with their tiers, as
    /// [`blocks_of`](super::state::blocks_of) computes them from scratch, written over `blocks`
    /// (its memory reused).
    pub fn blocks(
        &mut self,
        history: &[Arc<Message>],
        state: &NoaState,
        rendered: usize,
        protected_tail: u32,
        read_only: &ToolNames,
        blocks: &mut Vec<Block>,
    ) {
        let rendered = rendered.min(history.len()).min(state.snapshots.len());
        if std::mem::take(&mut self.adopted) {
            self.rebind(history);
        }
        if !self.valid(history, state, rendered, read_only) {
            *self = Self {
                read_only: Some(read_only.clone()),
                rebuilds: self.rebuilds + 1,
                ..Self::default()
            };
        }
        self.apply_new_compressions(state);
        self.extend(history, state, rendered, read_only);
        blocks.clone_from(&self.blocks);
        let tail_start = rendered.saturating_sub(protected_tail as usize) as u32;
        for block in blocks.iter_mut().rev() {
            if block.end < tail_start {
                break;
            }
            block.tier = block.tier.max(Tier::Soft);
        }
        for &index in self.latest.values() {
            blocks[index].tier = Tier::Hard;
        }
    }

    /// Takes the covered messages of a run's history read again from the store as the ones
    /// covered, when they match in count, role and number of content blocks (see the module
    /// doc); otherwise the cache stays as it was and is found invalid.
    fn rebind(&mut self, history: &[Arc<Message>]) {
        let covered = self.identity.len();
        let same = history.len() >= covered
            && history[..covered]
                .iter()
                .zip(&self.identity)
                .all(|(message, identity)| {
                    message.role == identity.role && message.content.len() == identity.blocks
                });
        if same {
            for (identity, message) in self.identity.iter_mut().zip(history) {
                *identity = Identity::of(message);
            }
        }
    }

    /// Whether everything the cache covers is unchanged (see the module doc).
    fn valid(
        &self,
        history: &[Arc<Message>],
        state: &NoaState,
        rendered: usize,
        read_only: &ToolNames,
    ) -> bool {
        let covered = self.identity.len();
        self.read_only.as_ref() == Some(read_only)
            && covered <= rendered
            && state.snapshots[..covered] == self.snapshots[..]
            && history[..covered]
                .iter()
                .zip(&self.identity)
                .all(|(message, identity)| Identity::of(message) == *identity)
            && state.compressions.len() >= self.absorbed.len()
            && state
                .compressions
                .iter()
                .zip(&self.absorbed)
                .all(|(compression, absorbed)| compression.absorbed == *absorbed)
    }

    /// Marks the cached blocks absorbed by compressions applied since the last request (a
    /// later compression wins, as in [`NoaState::absorbed_by`]).
    fn apply_new_compressions(&mut self, state: &NoaState) {
        for (index, compression) in state
            .compressions
            .iter()
            .enumerate()
            .skip(self.absorbed.len())
        {
            for &(start, end) in &compression.absorbed {
                let first = self.blocks.partition_point(|block| block.start < start);
                for block in &mut self.blocks[first..] {
                    if block.start > end {
                        break;
                    }
                    block.absorbed = Some(index);
                }
            }
            self.absorbed.push(compression.absorbed.clone());
        }
    }

    /// Cuts the messages of `history[covered..rendered]` into blocks.
    fn extend(
        &mut self,
        history: &[Arc<Message>],
        state: &NoaState,
        rendered: usize,
        read_only: &ToolNames,
    ) {
        let covered = self.identity.len();
        if rendered == covered {
            return;
        }
        // A call that was waiting for its result at the end may be answered now: cut again.
        let mut from = covered;
        if let Some(last) = self.blocks.last()
            && last.tier == Tier::Hard
            && last.end as usize + 1 == covered
        {
            from = last.start as usize;
            self.blocks.pop();
        }
        let absorbed = state.absorbed_between(from, rendered);
        let mut i = from;
        while i < rendered {
            let index = self.blocks.len();
            let latest = &mut self.latest;
            let mut block =
                cut_block(
                    history,
                    &state.snapshots,
                    i,
                    rendered,
                    read_only,
                    |name| match latest.get_mut(name) {
                        Some(latest) => *latest = index,
                        None => {
                            latest.insert(name.to_owned(), index);
                        }
                    },
                );
            block.absorbed = absorbed[i - from];
            i = block.end as usize + 1;
            self.blocks.push(block);
        }
        self.identity
            .extend(history[covered..rendered].iter().map(|m| Identity::of(m)));
        self.snapshots
            .extend_from_slice(&state.snapshots[covered..rendered]);
    }
}
