//! Validating and applying a `Compress` batch (N25, N26), purely: [`validate`] checks every
//! range against the blocks of the view the model saw and returns a plan, or the first
//! failure with its code; [`apply`] returns the state with the plan applied. The session
//! ([`super::session`]) archives the originals and commits the new state in one transaction.

use super::settings::NoaSettings;
use super::state::{Block, Compression, NoaState, Tier, message_tokens};
use super::{archive_id, message_ref, parse_message_ref};
use crate::message::Message;
use serde::Deserialize;

/// Most ranges in one batch.
pub const MAX_RANGES: usize = 16;

/// Stable codes of a refused batch (the tool result starts with one).
pub mod codes {
    /// No range, or more than [`super::MAX_RANGES`].
    pub const BATCH_SIZE: &str = "NOA_BATCH_SIZE";
    /// A ref that is not a message ref of this session's rendered history.
    pub const UNKNOWN_REF: &str = "NOA_UNKNOWN_REF";
    /// `from_ref` after `to_ref`, or ranges not in ascending order.
    pub const ORDER: &str = "NOA_RANGE_ORDER";
    /// Two ranges overlap, or a range covers part of an earlier compression (it may cover
    /// an earlier compression whole: its summary is then compressed again).
    pub const OVERLAP: &str = "NOA_RANGE_OVERLAP";
    /// A range starts or ends inside a block (it would split a tool call from its result).
    pub const BLOCK_BOUNDARY: &str = "NOA_BLOCK_BOUNDARY";
    /// A range holds only protected messages (the recent tail, the latest call of a mutating
    /// tool, a call waiting for its result).
    pub const PROTECTED: &str = "NOA_PROTECTED";
    /// A summary is empty or longer than `max_summary_chars`.
    pub const SUMMARY_LENGTH: &str = "NOA_SUMMARY_LENGTH";
    /// A range absorbs fewer than `min_range_tokens` (the whole batch is refused).
    pub const BELOW_FLOOR: &str = "NOA_BELOW_FLOOR";
    /// The state changed since the view was built (another writer); nothing was changed.
    pub const CONFLICT: &str = "NOA_CONFLICT";
    /// The archives or the state could not be written; nothing was changed.
    pub const STORE_FAILED: &str = "NOA_STORE_FAILED";
}

/// One range of a batch, as the model sends it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeRequest {
    pub from_ref: String,
    pub to_ref: String,
    pub summary: String,
}

/// Why a batch was refused: a code of [`codes`], the failing range (0-based) and a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Rejection {
    pub code: &'static str,
    pub range: Option<usize>,
    pub message: String,
}

fn reject(code: &'static str, range: Option<usize>, message: impl Into<String>) -> Rejection {
    let message = message.into();
    Rejection {
        code,
        range,
        message: match range {
            Some(index) => format!("range {index}: {message}"),
            None => message,
        },
    }
}

/// One validated range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedRange {
    pub from_ref: String,
    pub to_ref: String,
    pub summary: String,
    /// Absorbed positions as inclusive runs: its normal-tier blocks and every position of the
    /// earlier compressions it replaces.
    pub absorbed: Vec<(u32, u32)>,
    /// The positions it archives as originals (normal-tier blocks not compressed before).
    pub fresh: Vec<(u32, u32)>,
    /// The earlier compressions (indexes into [`NoaState::compressions`]) whose summaries it
    /// compresses again, ascending.
    pub replaces: Vec<usize>,
    /// Tokens it removes from the view: the snapshots of its fresh positions and the
    /// summaries it replaces.
    pub tokens: u64,
    /// Refs of protected messages inside the range, which stay in the view.
    pub kept: Vec<String>,
}

impl PlannedRange {
    /// Every absorbed position, ascending.
    pub fn positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.absorbed.iter().flat_map(|&(start, end)| start..=end)
    }

    /// The positions archived as originals, ascending.
    pub fn fresh_positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.fresh.iter().flat_map(|&(start, end)| start..=end)
    }
}

/// Appends block `start..=end` to inclusive runs, merging with an adjacent last run.
fn extend_runs(runs: &mut Vec<(u32, u32)>, start: u32, end: u32) {
    match runs.last_mut() {
        Some(run) if run.1 + 1 == start => run.1 = end,
        _ => runs.push((start, end)),
    }
}

/// The first and last position a compression absorbed.
fn span_of(compression: &Compression) -> Option<(u32, u32)> {
    Some((
        compression.absorbed.first()?.0,
        compression.absorbed.last()?.1,
    ))
}

/// The tokens a compression's summary takes in the view.
pub fn summary_tokens(compression: &Compression) -> u64 {
    u64::from(super::pipeline::summary_tokens(compression))
}

/// Checks the whole batch before anything changes (N25, N26). `blocks` are the blocks of the
/// last view (every rendered message is in exactly one), `compressions` the state's (what the
/// blocks' `absorbed` index). A range may cover earlier compressions, each whole: their
/// summaries are compressed again into the range's.
pub fn validate(
    blocks: &[Block],
    compressions: &[Compression],
    settings: &NoaSettings,
    batch: &[RangeRequest],
) -> Result<Vec<PlannedRange>, Rejection> {
    if batch.is_empty() || batch.len() > MAX_RANGES {
        return Err(reject(
            codes::BATCH_SIZE,
            None,
            format!("a batch has 1 to {MAX_RANGES} ranges"),
        ));
    }
    let rendered = blocks.last().map_or(0, |b| b.end + 1);
    let block_at = |position: u32| {
        blocks
            .partition_point(|block| block.end < position)
            .min(blocks.len().saturating_sub(1))
    };
    let mut spans: Vec<(u32, u32, usize, usize)> = Vec::with_capacity(batch.len());
    let mut replaced: Vec<Vec<usize>> = Vec::with_capacity(batch.len());
    for (index, range) in batch.iter().enumerate() {
        let parse = |text: &str| {
            parse_message_ref(text.trim())
                .filter(|position| *position < rendered)
                .ok_or_else(|| {
                    reject(
                        codes::UNKNOWN_REF,
                        Some(index),
                        format!("{text:?} is not a message ref shown in the context"),
                    )
                })
        };
        let (from, to) = (parse(&range.from_ref)?, parse(&range.to_ref)?);
        if from > to {
            return Err(reject(
                codes::ORDER,
                Some(index),
                "from_ref comes after to_ref",
            ));
        }
        if let Some(&(prev_from, prev_to, _, _)) = spans.last() {
            if from <= prev_to && to >= prev_from {
                return Err(reject(
                    codes::OVERLAP,
                    Some(index),
                    format!("overlaps range {}", index - 1),
                ));
            }
            if from < prev_from {
                return Err(reject(
                    codes::ORDER,
                    Some(index),
                    "ranges must be in ascending order",
                ));
            }
        }
        let (first, last) = (block_at(from), block_at(to));
        if blocks[first].start != from || blocks[last].end != to {
            return Err(reject(
                codes::BLOCK_BOUNDARY,
                Some(index),
                format!(
                    "a range must start and end on whole blocks (tool calls with their \
                     results): {} starts at {} and {} ends at {}",
                    range.from_ref,
                    message_ref(blocks[first].start),
                    range.to_ref,
                    message_ref(blocks[last].end)
                ),
            ));
        }
        // Earlier compressions inside the range are compressed again, but only whole.
        let mut replaces: Vec<usize> = Vec::new();
        for compressed in blocks[first..=last].iter().filter_map(|b| b.absorbed) {
            if replaces.contains(&compressed) {
                continue;
            }
            let compression = compressions.get(compressed);
            let span = compression.and_then(span_of);
            if !span.is_some_and(|(start, end)| from <= start && end <= to) {
                let (id, start, end) = match (compression, span) {
                    (Some(c), Some((start, end))) => (c.archive_id.as_str(), start, end),
                    _ => ("?", from, to),
                };
                return Err(reject(
                    codes::OVERLAP,
                    Some(index),
                    format!(
                        "the range covers part of archive {id} ({}..{}): cover all of it to \
                         compress its summary again, or none of it",
                        message_ref(start),
                        message_ref(end)
                    ),
                ));
            }
            replaces.push(compressed);
        }
        replaces.sort_unstable();
        let chars = range.summary.chars().count();
        if range.summary.trim().is_empty() || chars > settings.max_summary_chars as usize {
            return Err(reject(
                codes::SUMMARY_LENGTH,
                Some(index),
                format!(
                    "a summary has 1 to {} characters (this one has {chars})",
                    settings.max_summary_chars
                ),
            ));
        }
        spans.push((from, to, first, last));
        replaced.push(replaces);
    }
    // Tiers: only the lowest tier of each range is absorbed; a range of protected blocks only
    // is refused.
    let absorbable = |b: &Block| b.tier == Tier::Normal || b.absorbed.is_some();
    let mut plan = Vec::with_capacity(batch.len());
    for (index, ((range, &(_, _, first, last)), replaces)) in
        batch.iter().zip(&spans).zip(replaced).enumerate()
    {
        let inside = &blocks[first..=last];
        if !inside.iter().any(absorbable) {
            return Err(reject(
                codes::PROTECTED,
                Some(index),
                "every message of the range is protected (the recent tail, the latest call of \
                 a mutating tool, or a call waiting for its result)",
            ));
        }
        let mut absorbed: Vec<(u32, u32)> = Vec::new();
        let mut fresh: Vec<(u32, u32)> = Vec::new();
        let mut kept = Vec::new();
        let mut tokens: u64 = replaces
            .iter()
            .filter_map(|&c| compressions.get(c))
            .map(summary_tokens)
            .sum();
        for block in inside {
            if block.absorbed.is_some() {
                extend_runs(&mut absorbed, block.start, block.end);
            } else if block.tier == Tier::Normal {
                tokens += block.tokens;
                extend_runs(&mut absorbed, block.start, block.end);
                extend_runs(&mut fresh, block.start, block.end);
            } else {
                kept.extend((block.start..=block.end).map(message_ref));
            }
        }
        plan.push(PlannedRange {
            from_ref: range.from_ref.trim().to_owned(),
            to_ref: range.to_ref.trim().to_owned(),
            summary: range.summary.clone(),
            absorbed,
            fresh,
            replaces,
            tokens,
            kept,
        });
    }
    // The floor, for the batch as a whole: one short range refuses it, unless that range is
    // short because it runs against protected content.
    for (index, (planned, &(_, _, first, last))) in plan.iter().zip(&spans).enumerate() {
        let against_protected = !planned.kept.is_empty()
            || (first > 0 && blocks[first - 1].tier != Tier::Normal)
            || blocks.get(last + 1).is_some_and(|b| b.tier != Tier::Normal);
        if planned.tokens < settings.min_range_tokens && !against_protected {
            return Err(reject(
                codes::BELOW_FLOOR,
                Some(index),
                format!(
                    "the range absorbs {} tokens, fewer than the {} a range must; widen it or \
                     leave it out (nothing in the batch was compressed)",
                    planned.tokens, settings.min_range_tokens
                ),
            ));
        }
    }
    Ok(plan)
}

/// `state` with `plan` applied: one compression (and archive ordinal) per range. A
/// compression that replaces earlier ones absorbs their positions too; being later in the
/// list, it is the one that shows (the earlier ones stay, with their archives).
pub fn apply(state: &NoaState, plan: &[PlannedRange]) -> NoaState {
    let mut next = state.clone();
    for range in plan {
        next.archives += 1;
        let replaces = range
            .replaces
            .iter()
            .filter_map(|&c| state.compressions.get(c))
            .map(|c| c.archive_id.clone())
            .collect();
        next.compressions.push(Compression {
            archive_id: archive_id(next.archives),
            from_ref: range.from_ref.clone(),
            to_ref: range.to_ref.clone(),
            absorbed: range.absorbed.clone(),
            summary: range.summary.clone(),
            tokens: range.tokens,
            replaces,
        });
    }
    next
}

/// Tokens of the view (live messages and summaries) before and after `plan` (estimates).
pub fn tokens_before_after(
    blocks: &[Block],
    compressions: &[Compression],
    plan: &[PlannedRange],
) -> (u64, u64) {
    let mut shown: Vec<usize> = blocks.iter().filter_map(|b| b.absorbed).collect();
    shown.sort_unstable();
    shown.dedup();
    let summaries_shown: u64 = shown
        .iter()
        .filter_map(|&c| compressions.get(c))
        .map(summary_tokens)
        .sum();
    let before: u64 = blocks
        .iter()
        .filter(|b| b.absorbed.is_none())
        .map(|b| b.tokens)
        .sum::<u64>()
        + summaries_shown;
    let absorbed: u64 = plan.iter().map(|p| p.tokens).sum();
    let summaries: u64 = plan
        .iter()
        .map(|p| u64::from(message_tokens(&Message::user_text(p.summary.clone()))))
        .sum();
    (before, before.saturating_sub(absorbed) + summaries)
}
