//! Property tests over random histories and random compression batches (fixed seed): no
//! pair is ever split, protected content is never archived, a refused or failed batch
//! changes nothing, refs and snapshots are stable.

use super::cache::ViewCache;
use super::compress::{self, RangeRequest};
use super::pipeline::{STEPS, Turn};
use super::session::NoaSession;
use super::settings::NoaSettings;
use super::state::{NoaState, Tier, blocks_of, message_tokens};
use super::test_support::*;
use crate::message::{ContentBlock, Message, ViewMessage};
use crate::run_event::RunEvent;
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(Clone, Debug)]
enum Step {
    Prompt,
    Reply,
    Read(usize),
    Write(usize),
    Noa,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Prompt),
        Just(Step::Reply),
        (1usize..3000).prop_map(Step::Read),
        (1usize..3000).prop_map(Step::Write),
        Just(Step::Noa),
    ]
}

fn build(steps: &[Step], pending: bool) -> Vec<Arc<Message>> {
    let mut history = vec![prompt("start")];
    for step in steps {
        match step {
            Step::Prompt => history.push(prompt("more")),
            Step::Reply => history.push(reply("noted")),
            Step::Read(size) => pair(&mut history, "Read", *size),
            Step::Write(size) => pair(&mut history, "Write", *size),
            Step::Noa => pair(&mut history, "Compress", 20),
        }
    }
    if pending {
        history.push(call("toolu_pending", "Bash"));
    }
    shared(&history)
}

fn settings() -> NoaSettings {
    NoaSettings {
        soft_limit_tokens: 2_000,
        hard_limit_tokens: 10_000_000,
        protected_tail: 4,
        min_range_tokens: 50,
        max_summary_chars: 100,
        prune_min_tokens: 500,
        nudge: "compress".into(),
    }
}

fn batch_of(raw: &[(u8, u8, u8)], len: usize) -> Vec<RangeRequest> {
    raw.iter()
        .map(|&(from, to, summary)| RangeRequest {
            from_ref: format!("m{}", from as usize % (len + 2)),
            to_ref: format!("m{}", to as usize % (len + 2)),
            summary: "s".repeat(summary as usize),
        })
        .collect()
}

/// Tool_use ids and tool_result ids of a view pair up (the last assistant message may wait).
fn pairs_whole(view: &[ViewMessage]) -> bool {
    let mut uses = HashSet::new();
    let mut results = HashSet::new();
    for message in view {
        for block in &message.rendered().content {
            match block {
                ContentBlock::ToolUse { id, .. } => {
                    uses.insert(id.clone());
                }
                ContentBlock::ToolResult(result) => {
                    results.insert(result.tool_use_id.clone());
                }
                _ => {}
            }
        }
    }
    results.is_subset(&uses)
        && uses
            .iter()
            .all(|id| results.contains(id) || id == "toolu_pending")
}

/// What happens to a session between two model requests (the cache property).
#[derive(Clone, Debug)]
enum Between {
    /// New messages.
    Append(Vec<Step>),
    /// A call of `Read` (true) or `Write` (false) now, its result after the next request.
    Split(bool, usize),
    /// A call nothing answers (the next message is a prompt).
    Dangling,
    /// A `Compress` batch over the last view: per range, the blocks skipped before it, the
    /// blocks it spans and its summary length.
    Compress(Vec<(u8, u8, u8)>),
    /// The provider's exact count of the last request.
    Calibrate(u16),
    /// The retry after a context overflow (a lower hard limit).
    Overflow,
    /// A message replaced (history is append-only; the cache must notice and start over).
    Rewrite(u8),
    /// History cut short (likewise).
    Shrink(u8),
    /// The state replaced by an empty one (likewise: its compressions are gone).
    Forget,
}

fn between() -> impl Strategy<Value = Between> {
    prop_oneof![
        4 => prop::collection::vec(step(), 1..6).prop_map(Between::Append),
        2 => (any::<bool>(), 1usize..3000).prop_map(|(read, size)| Between::Split(read, size)),
        1 => Just(Between::Dangling),
        3 => prop::collection::vec((any::<u8>(), any::<u8>(), 1u8..120), 1..4)
            .prop_map(Between::Compress),
        1 => (1u16..4000).prop_map(Between::Calibrate),
        1 => Just(Between::Overflow),
        1 => any::<u8>().prop_map(Between::Rewrite),
        1 => any::<u8>().prop_map(Between::Shrink),
        1 => Just(Between::Forget),
    ]
}

/// Ranges on block boundaries of `blocks`, ascending (most of them valid, unlike
/// [`batch_of`]'s): `(skip, span, summary)` per range.
fn aligned_batch(raw: &[(u8, u8, u8)], blocks: &[super::state::Block]) -> Vec<RangeRequest> {
    let mut batch = Vec::new();
    let mut next = 0usize;
    for &(skip, span, summary) in raw {
        let first = next + usize::from(skip % 4);
        let last = first + usize::from(span % 16);
        let (Some(from), Some(to)) = (blocks.get(first), blocks.get(last)) else {
            break;
        };
        batch.push(RangeRequest {
            from_ref: format!("m{}", from.start),
            to_ref: format!("m{}", to.end),
            summary: "s".repeat(usize::from(summary)),
        });
        next = last + 1;
    }
    batch
}

/// Tighter limits than [`settings`], so that pruning, truncation and nudges all happen.
fn cache_settings() -> NoaSettings {
    NoaSettings {
        hard_limit_tokens: 4_000,
        prune_min_tokens: 300,
        ..settings()
    }
}

/// One request's outcome: the view, the events, the blocks and the estimate.
type Outcome = (
    Vec<ViewMessage>,
    Vec<RunEvent>,
    Vec<super::state::Block>,
    u64,
);

fn request(
    history: &[Arc<Message>],
    state: &mut NoaState,
    cache: Option<&mut ViewCache>,
    hard_limit: Option<u64>,
) -> Outcome {
    let settings = cache_settings();
    let read_only = read_only();
    let mut turn = Turn::new(&settings, &read_only, history, state);
    if let Some(cache) = cache {
        turn = turn.with_cache(cache);
        // As a session does: the vectors of an earlier turn handed in, holding stale entries.
        let snapshots: Vec<u32> = history.iter().map(|m| message_tokens(m)).collect();
        turn.blocks = blocks_of(history, &snapshots, 0, &read_only, &[]);
        turn.blocks.reverse();
        turn.items = vec![super::pipeline::Item {
            position: Some(0),
            block: Some(0),
            render: super::pipeline::Render::Owned(Arc::new(Message::user_text("stale"))),
            tokens: 7,
        }];
    }
    if let Some(limit) = hard_limit {
        turn.hard_limit = limit;
    }
    turn.run(&STEPS);
    (
        turn.messages(),
        std::mem::take(&mut turn.events),
        std::mem::take(&mut turn.blocks),
        turn.estimated(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(15),
        ..ProptestConfig::default()
    })]

    #[test]
    fn batches_never_split_pairs_nor_archive_protected_content(
        steps in prop::collection::vec(step(), 0..40),
        pending in any::<bool>(),
        raw in prop::collection::vec((any::<u8>(), any::<u8>(), 0u8..120), 1..5),
    ) {
        let history = build(&steps, pending);
        let settings = settings();
        let read_only = read_only();
        let mut state = NoaState::default();
        let mut turn = super::pipeline::Turn::new(&settings, &read_only, &history, &mut state);
        turn.run(&super::pipeline::STEPS);
        let blocks = std::mem::take(&mut turn.blocks);
        prop_assert!(pairs_whole(&turn.messages()));
        let batch = batch_of(&raw, history.len());
        let Ok(plan) = compress::validate(&blocks, &state.compressions, &settings, &batch) else {
            return Ok(()); // refusals are checked in the next property
        };
        let mut absorbed = HashSet::new();
        for range in &plan {
            for &(start, end) in &range.absorbed {
                prop_assert!(blocks.iter().any(|b| b.start == start));
                prop_assert!(blocks.iter().any(|b| b.end == end));
            }
            for position in range.positions() {
                let block = blocks.iter().find(|b| b.start <= position && position <= b.end).unwrap();
                prop_assert_eq!(block.tier, Tier::Normal, "protected m{} archived", position);
                prop_assert!(absorbed.insert(position), "m{} archived twice", position);
            }
        }
        // The view after the batch still pairs every call with its result, and keeps every
        // protected message.
        let mut next = compress::apply(&state, &plan);
        let mut turn = super::pipeline::Turn::new(&settings, &read_only, &history, &mut next);
        turn.run(&super::pipeline::STEPS);
        let view = turn.messages();
        prop_assert!(pairs_whole(&view));
        let text = serde_json::to_string(&view).unwrap();
        for block in blocks.iter().filter(|b| b.tier != Tier::Normal) {
            for position in block.start..=block.end {
                prop_assert!(text.contains(&format!("[ref m{position}]")), "m{} lost", position);
            }
        }
        for position in &absorbed {
            let marker = format!("[ref m{position}]");
            prop_assert!(!text.contains(&marker), "m{} still shown", position);
        }
        prop_assert_eq!(&next.snapshots, &state.snapshots, "snapshots unchanged by a batch");
    }

    #[test]
    fn a_second_batch_over_earlier_summaries_keeps_everything_compressed_and_protected_shown(
        steps in prop::collection::vec(step(), 0..40),
        first in prop::collection::vec((any::<u8>(), any::<u8>(), 1u8..120), 1..5),
        second in prop::collection::vec((any::<u8>(), any::<u8>(), 1u8..120), 1..5),
    ) {
        let history = build(&steps, false);
        let settings = settings();
        let read_only = read_only();
        let mut state = NoaState::default();
        let blocks = {
            let mut turn = super::pipeline::Turn::new(&settings, &read_only, &history, &mut state);
            turn.run(&super::pipeline::STEPS);
            std::mem::take(&mut turn.blocks)
        };
        let Ok(plan) = compress::validate(&blocks, &state.compressions, &settings, &batch_of(&first, history.len())) else {
            return Ok(());
        };
        let mut once = compress::apply(&state, &plan);
        let blocks = {
            let mut turn = super::pipeline::Turn::new(&settings, &read_only, &history, &mut once);
            turn.run(&super::pipeline::STEPS);
            std::mem::take(&mut turn.blocks)
        };
        let Ok(plan) = compress::validate(&blocks, &once.compressions, &settings, &batch_of(&second, history.len())) else {
            return Ok(());
        };
        for range in &plan {
            // Earlier compressions are taken whole, and fresh positions were live and normal.
            for &c in &range.replaces {
                let compressed: Vec<u32> = blocks.iter().filter(|b| b.absorbed == Some(c))
                    .flat_map(|b| b.start..=b.end).collect();
                prop_assert!(compressed.iter().all(|p| range.positions().any(|q| q == *p)));
            }
            for position in range.fresh_positions() {
                let block = blocks.iter().find(|b| b.start <= position && position <= b.end).unwrap();
                prop_assert_eq!(block.tier, Tier::Normal, "protected m{} archived", position);
                prop_assert!(block.absorbed.is_none(), "m{} archived twice", position);
            }
        }
        let mut twice = compress::apply(&once, &plan);
        let mut turn = super::pipeline::Turn::new(&settings, &read_only, &history, &mut twice);
        turn.run(&super::pipeline::STEPS);
        let view = turn.messages();
        prop_assert!(pairs_whole(&view));
        let text = serde_json::to_string(&view).unwrap();
        for block in &blocks {
            for position in block.start..=block.end {
                let marker = format!("[ref m{position}]");
                if block.absorbed.is_some() {
                    prop_assert!(!text.contains(&marker), "m{} shown again", position);
                } else if block.tier != Tier::Normal {
                    prop_assert!(text.contains(&marker), "m{} lost", position);
                }
            }
        }
        // Every summary shown belongs to a compression nothing replaced.
        let replaced: HashSet<&str> = twice.compressions.iter()
            .flat_map(|c| c.replaces.iter().map(String::as_str)).collect();
        for id in replaced {
            prop_assert!(!text.contains(&format!("[archive {id}:")), "{} still shown", id);
        }
    }

    #[test]
    fn refused_or_failed_batches_change_nothing_and_refs_stay_stable(
        steps in prop::collection::vec(step(), 0..30),
        more in prop::collection::vec(step(), 0..10),
        raw in prop::collection::vec((any::<u8>(), any::<u8>(), 0u8..120), 1..5),
        fail in any::<bool>(),
    ) {
        let history = build(&steps, false);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let backend = Arc::new(MemoryBackend::default());
            *backend.history.lock().unwrap() = owned(&history);
            let session = NoaSession::load(settings(), read_only(), backend.clone()).await.unwrap();
            let view = session.build_view(&history, None);
            session.settle().await.unwrap();
            let state = session.state();
            let stored = backend.state.lock().unwrap().clone();
            backend.fail_archives.store(fail, Ordering::SeqCst);
            let outcome = session.compress(&batch_of(&raw, history.len())).await;
            if outcome.is_err() {
                prop_assert_eq!(session.state(), state.clone());
                prop_assert_eq!(backend.state.lock().unwrap().clone(), stored);
                prop_assert!(backend.archives.lock().unwrap().is_empty());
                prop_assert_eq!(session.build_view(&history, None), view);
            } else {
                prop_assert!(!fail);
            }
            // Refs and snapshots of rendered messages never change as history grows, and a
            // session loaded from the store again renders the same view.
            let mut longer = history.clone();
            longer.extend(build(&more, false).into_iter().skip(1));
            *backend.history.lock().unwrap() = owned(&longer);
            let before = session.state().snapshots;
            let view = session.build_view(&longer, None);
            session.settle().await.unwrap();
            let after = session.state().snapshots;
            prop_assert_eq!(&after[..before.len()], &before[..]);
            backend.fail_archives.store(false, Ordering::SeqCst);
            let reloaded = NoaSession::load(settings(), read_only(), backend.clone()).await.unwrap();
            prop_assert_eq!(reloaded.build_view(&longer, None), view);
            Ok(())
        })?;
    }
}

/// One request from scratch and through `cache`: both must give the same outcome and state.
fn both_ways(
    history: &[Arc<Message>],
    state: &mut NoaState,
    cache: &mut ViewCache,
    hard_limit: Option<u64>,
) -> Result<Outcome, TestCaseError> {
    let mut scratch_state = state.clone();
    let scratch = request(history, &mut scratch_state, None, hard_limit);
    let cached = request(history, state, Some(cache), hard_limit);
    prop_assert_eq!(&cached, &scratch);
    prop_assert_eq!(&*state, &scratch_state);
    Ok(cached)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(1515),
        ..ProptestConfig::default()
    })]

    /// The blocks a session keeps between requests ([`ViewCache`]) never change a request:
    /// over random histories, random appends, batches, calibrations, overflow retries — and
    /// histories changed under the cache — every request's view, events, blocks, estimate and
    /// state equal a from-scratch computation. The cache starts over only when history was
    /// changed under it.
    #[test]
    fn the_cached_view_equals_the_view_from_scratch(
        steps in prop::collection::vec(step(), 0..30),
        script in prop::collection::vec(between(), 1..24),
    ) {
        let mut history = build(&steps, false);
        let mut state = NoaState::default();
        let mut cache = ViewCache::default();
        let mut changed_under = 0u64;
        let mut answer: Option<Message> = None;
        let mut last = both_ways(&history, &mut state, &mut cache, None)?;
        for between in &script {
            if let Some(result) = answer.take() {
                history.push(Arc::new(result));
            }
            let mut hard_limit = None;
            match between {
                Between::Append(more) => {
                    history.extend(build(more, false).into_iter().skip(1));
                }
                Between::Split(read, size) => {
                    let id = format!("toolu_{}", history.len());
                    history.push(Arc::new(call(&id, if *read { "Read" } else { "Write" })));
                    answer = Some(result(&id, *size));
                }
                Between::Dangling => {
                    history.push(Arc::new(call(&format!("toolu_{}", history.len()), "Bash")));
                    history.push(Arc::new(prompt("never mind")));
                }
                Between::Compress(raw) => {
                    let blocks = &last.2;
                    let batch = aligned_batch(raw, blocks);
                    if let Ok(plan) =
                        compress::validate(blocks, &state.compressions, &cache_settings(), &batch)
                    {
                        state = compress::apply(&state, &plan);
                    }
                }
                Between::Calibrate(exact) => {
                    state.calibration = Some(super::state::Calibration {
                        estimated: last.3.max(1),
                        exact: u64::from(*exact),
                    });
                }
                Between::Overflow => hard_limit = Some(cache_settings().soft_limit_tokens),
                Between::Rewrite(at) => {
                    let at = *at as usize % history.len();
                    history[at] = Arc::new(if history[at].role == crate::message::Role::User {
                        prompt("rewritten")
                    } else {
                        call(&format!("toolu_rewritten_{at}"), "Write")
                    });
                    changed_under += 1;
                }
                Between::Shrink(by) => {
                    let keep = history.len().saturating_sub(*by as usize % 8).max(1);
                    changed_under += u64::from(keep < history.len());
                    history.truncate(keep);
                }
                Between::Forget => {
                    changed_under += 1;
                    state = NoaState::default();
                }
            }
            last = both_ways(&history, &mut state, &mut cache, hard_limit)?;
        }
        prop_assert!(
            cache.rebuilds() <= 1 + changed_under,
            "{} rebuilds for {} changes under the cache", cache.rebuilds(), changed_under
        );
    }
}

/// One run of a session kept across runs: what happens before each of its requests.
#[derive(Clone, Debug)]
struct RunScript {
    /// New messages before the run (its prompt and what the last run's turns added).
    append: Vec<Step>,
    /// A batch after the first request of the run.
    compress: Option<Vec<(u8, u8, u8)>>,
    /// The provider's exact count of the run's last request (left unsaved, like a run's last
    /// response).
    calibrate: Option<u16>,
}

fn run_script() -> impl Strategy<Value = RunScript> {
    (
        prop::collection::vec(step(), 0..6),
        prop::option::of(prop::collection::vec(
            (any::<u8>(), any::<u8>(), 1u8..120),
            1..4,
        )),
        prop::option::of(1u16..4000),
    )
        .prop_map(|(append, compress, calibrate)| RunScript {
            append,
            compress,
            calibrate,
        })
}

/// One request of a live session, checked against a from-scratch computation over the same
/// state: the view and the state after it must be equal.
fn checked_view(
    session: &NoaSession,
    history: &[Arc<Message>],
) -> Result<Vec<ViewMessage>, TestCaseError> {
    let mut scratch_state = session.state();
    let scratch = request(history, &mut scratch_state, None, None);
    let view = session.build_view(history, None);
    prop_assert_eq!(&view, &scratch.0);
    prop_assert_eq!(session.state(), scratch_state);
    Ok(view)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(1516),
        ..ProptestConfig::default()
    })]

    /// A view cache kept across runs ([`super::kept::KeptViews`]) never changes a request:
    /// each run reads its history again (new allocations, as from the store), adopts the kept
    /// cache and gives the same views as a from-scratch computation; it starts over only on
    /// the first run. Within a run, a request shares every message the previous request sent
    /// but the two it makes each time (the truncation marker, the nudged last message).
    #[test]
    fn a_view_cache_kept_across_runs_equals_the_view_from_scratch(
        steps in prop::collection::vec(step(), 0..30),
        runs in prop::collection::vec(run_script(), 1..6),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let backend = Arc::new(MemoryBackend::default());
            let views = Arc::new(super::kept::KeptViews::default());
            let mut history = build(&steps, false);
            let mut rebuilds = 0;
            for run in &runs {
                history.extend(build(&run.append, false).into_iter().skip(1));
                // Read again from the store: every message a new allocation.
                let read: Vec<Arc<Message>> = shared(&owned(&history));
                *backend.history.lock().unwrap() = owned(&read);
                let keep = super::session::Keep {
                    views: views.clone(),
                    session: crate::ids::SessionId::from_string("ses_kept"),
                };
                let session = NoaSession::load_kept(cache_settings(), read_only(), backend.clone(), Some(keep))
                    .await
                    .unwrap();
                let first = checked_view(&session, &read)?;
                session.settle().await.unwrap();
                let again = checked_view(&session, &read)?;
                let shared = first
                    .iter()
                    .zip(&again)
                    .filter(|(a, b)| Arc::ptr_eq(a.original(), b.original()) && a.mark() == b.mark())
                    .count();
                // The truncation marker and the nudged last message are made per request.
                prop_assert!(shared + 2 >= again.len(), "{} of {} shared", shared, again.len());
                if let Some(raw) = &run.compress {
                    let blocks = request(&read, &mut session.state(), None, None).2;
                    let _ = session.compress(&aligned_batch(raw, &blocks)).await;
                    checked_view(&session, &read)?;
                    session.settle().await.unwrap();
                }
                if let Some(exact) = run.calibrate {
                    session.observe_usage(u64::from(exact));
                }
                rebuilds = session.cache_rebuilds();
            }
            prop_assert_eq!(rebuilds, 1, "only the first run builds from scratch");
            Ok(())
        })?;
    }
}

#[tokio::test]
async fn a_kept_cache_is_not_adopted_by_a_history_of_another_shape() {
    let backend = Arc::new(MemoryBackend::default());
    let views = Arc::new(super::kept::KeptViews::default());
    let keep = || super::session::Keep {
        views: views.clone(),
        session: crate::ids::SessionId::from_string("ses_shape"),
    };
    let history = build(&[Step::Read(500), Step::Write(400), Step::Prompt], false);
    let session =
        NoaSession::load_kept(cache_settings(), read_only(), backend.clone(), Some(keep()))
            .await
            .unwrap();
    session.build_view(&history, None);
    session.settle().await.unwrap();
    drop(session);
    assert_eq!(views.usage().0, 1, "handed back when the run ends");
    // The same count of messages, one of them with another number of blocks.
    let mut other = history.clone();
    Arc::make_mut(&mut other[1]).content.pop();
    let session =
        NoaSession::load_kept(cache_settings(), read_only(), backend.clone(), Some(keep()))
            .await
            .unwrap();
    let mut scratch_state = session.state();
    let scratch = request(&other, &mut scratch_state, None, None).0;
    assert_eq!(session.build_view(&other, None), scratch);
    assert_eq!(session.cache_rebuilds(), 2, "started over");
}
