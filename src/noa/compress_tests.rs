//! Batch validation (N25) and the atomic archive + commit (N26).

use super::compress::{self, RangeRequest, codes};
use super::session::NoaSession;
use super::settings::NoaSettings;
use super::state::{Block, Calibration, Compression, NoaState};
use super::test_support::*;
use crate::message::Message;
use crate::run_event::RunEvent;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn settings() -> NoaSettings {
    NoaSettings {
        soft_limit_tokens: 1_000_000,
        hard_limit_tokens: 2_000_000,
        protected_tail: 4,
        min_range_tokens: 150,
        max_summary_chars: 200,
        prune_min_tokens: 100_000,
        nudge: "compress".into(),
    }
}

/// m0 prompt · m1-m2 Read · m3-m4 Write (hard) · m5-m6 Read · m7-m8 Read (tail) · m9-m10 Read
/// (tail). Results of 400 characters (about 100 tokens).
fn history() -> Vec<Arc<Message>> {
    let mut history = vec![prompt("go")];
    for name in ["Read", "Write", "Read", "Read", "Read"] {
        pair(&mut history, name, 400);
    }
    shared(&history)
}

fn blocks(history: &[Arc<Message>], state: &mut NoaState) -> Vec<Block> {
    let settings = settings();
    let read_only = read_only();
    let mut turn = super::pipeline::Turn::new(&settings, &read_only, history, state);
    turn.run(&super::pipeline::STEPS);
    turn.blocks
}

fn range(from: &str, to: &str) -> RangeRequest {
    RangeRequest {
        from_ref: from.into(),
        to_ref: to.into(),
        summary: "the gist".into(),
    }
}

fn code(batch: &[RangeRequest]) -> (&'static str, Option<usize>) {
    let history = history();
    let blocks = blocks(&history, &mut NoaState::default());
    let rejection = compress::validate(&blocks, &[], &settings(), batch).unwrap_err();
    (rejection.code, rejection.range)
}

#[test]
fn a_range_of_whole_normal_blocks_is_planned() {
    let history = history();
    let blocks = blocks(&history, &mut NoaState::default());
    let plan = compress::validate(&blocks, &[], &settings(), &[range("m0", "m2")]).unwrap();
    assert_eq!(plan[0].absorbed, vec![(0, 2)]);
    assert!(plan[0].kept.is_empty());
}

#[test]
fn a_mixed_tier_range_absorbs_only_the_lowest_tier() {
    let history = history();
    let blocks = blocks(&history, &mut NoaState::default());
    let plan = compress::validate(&blocks, &[], &settings(), &[range("m0", "m6")]).unwrap();
    assert_eq!(plan[0].absorbed, vec![(0, 2), (5, 6)]);
    assert_eq!(
        plan[0].kept,
        vec!["m3", "m4"],
        "the hard-protected Write survives"
    );
    // Into the soft tail: the tail survives too.
    let plan = compress::validate(&blocks, &[], &settings(), &[range("m5", "m10")]).unwrap();
    assert_eq!(plan[0].absorbed, vec![(5, 6)]);
    assert_eq!(plan[0].kept, vec!["m7", "m8", "m9", "m10"]);
}

#[test]
fn every_failure_has_its_code_and_range() {
    assert_eq!(code(&[]), (codes::BATCH_SIZE, None));
    assert_eq!(
        code(&vec![range("m0", "m2"); 17]),
        (codes::BATCH_SIZE, None)
    );
    assert_eq!(code(&[range("x1", "m2")]), (codes::UNKNOWN_REF, Some(0)));
    assert_eq!(code(&[range("m0", "m99")]), (codes::UNKNOWN_REF, Some(0)));
    assert_eq!(code(&[range("m2", "m1")]), (codes::ORDER, Some(0)));
    assert_eq!(
        code(&[range("m5", "m6"), range("m0", "m2")]),
        (codes::ORDER, Some(1))
    );
    assert_eq!(
        code(&[range("m0", "m2"), range("m1", "m2")]),
        (codes::OVERLAP, Some(1))
    );
    assert_eq!(code(&[range("m1", "m1")]), (codes::BLOCK_BOUNDARY, Some(0)));
    assert_eq!(code(&[range("m2", "m4")]), (codes::BLOCK_BOUNDARY, Some(0)));
    assert_eq!(code(&[range("m3", "m4")]), (codes::PROTECTED, Some(0)));
    assert_eq!(code(&[range("m7", "m10")]), (codes::PROTECTED, Some(0)));
    let mut empty = range("m0", "m2");
    empty.summary = "  ".into();
    assert_eq!(code(&[empty]), (codes::SUMMARY_LENGTH, Some(0)));
    let mut long = range("m0", "m2");
    long.summary = "s".repeat(201);
    assert_eq!(code(&[long]), (codes::SUMMARY_LENGTH, Some(0)));
}

#[test]
fn the_floor_applies_to_the_whole_batch_except_against_protected_blocks() {
    // m0 alone is a few tokens and has a normal neighbour: below the floor, and it refuses
    // the valid range after it too.
    assert_eq!(
        code(&[range("m0", "m0"), range("m5", "m6")]),
        (codes::BELOW_FLOOR, Some(0))
    );
    // m5-m6 is about 100 tokens, under the 150 floor, but it runs against the hard Write
    // before it and the soft tail after it: allowed.
    let history = history();
    let blocks = blocks(&history, &mut NoaState::default());
    assert!(compress::validate(&blocks, &[], &settings(), &[range("m5", "m6")]).is_ok());
}

async fn session_over(history: &[Arc<Message>]) -> (Arc<NoaSession>, Arc<MemoryBackend>) {
    let backend = Arc::new(MemoryBackend::default());
    *backend.history.lock().unwrap() = owned(history);
    let session = NoaSession::load(settings(), read_only(), backend.clone())
        .await
        .unwrap();
    (session, backend)
}

#[tokio::test]
async fn a_batch_archives_the_originals_and_shows_summaries() {
    let history = history();
    let (session, backend) = session_over(&history).await;
    session.build_view(&history, None);
    session.settle().await.unwrap();
    let summary = session
        .compress(&[RangeRequest {
            from_ref: "m0".into(),
            to_ref: "m6".into(),
            summary: "read and wrote x".into(),
        }])
        .await
        .unwrap();
    assert!(summary.contains("archive a1") && summary.contains("protected and kept: m3, m4"));
    assert_eq!(
        *backend.reads.lock().unwrap(),
        [(0, 7)],
        "one read of the span the range archives, not of the whole history"
    );
    let archives = backend.archives.lock().unwrap().clone();
    assert_eq!(archives.len(), 1);
    assert_eq!(archives[0].message_count, 5);
    let originals: Vec<Message> = archives[0]
        .messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_json::from_value(m["message"].clone()).unwrap())
        .collect();
    assert_eq!(originals, owned(&[&history[0..3], &history[5..7]].concat()));
    let view = serde_json::to_string(&session.build_view(&history, None)).unwrap();
    assert!(view.contains("read and wrote x") && view.contains("[ref m3]"));
    assert!(!view.contains("[ref m1]") && !view.contains("[ref m5]"));
    let events = session.settle().await.unwrap();
    assert!(events.iter().any(|e| matches!(e, RunEvent::Compression(c)
        if c.ranges.len() == 1 && c.tokens_after < c.tokens_before)));
    // The archive reads back, and so does a single message.
    let expanded = session.expand("a1", 0).await.unwrap();
    assert!(expanded.contains("[m1] assistant") && expanded.contains("tool call Read"));
    assert!(
        session
            .expand("m3", 0)
            .await
            .unwrap()
            .contains("tool call Write")
    );
    assert_eq!(
        backend.reads.lock().unwrap().last(),
        Some(&(3, 1)),
        "one message read"
    );
    let missing = session.expand("a9", 0).await.unwrap_err();
    assert_eq!(missing.code, codes::UNKNOWN_REF);
    let missing = session.expand("m99", 0).await.unwrap_err();
    assert_eq!(missing.code, codes::UNKNOWN_REF);
    // The same range again overlaps what is compressed.
    let again = session.compress(&[range("m0", "m2")]).await.unwrap_err();
    assert_eq!(again.code, codes::OVERLAP);
}

#[tokio::test]
async fn an_archive_failure_leaves_the_state_unchanged() {
    let history = history();
    let (session, backend) = session_over(&history).await;
    let view_before = session.build_view(&history, None);
    session.settle().await.unwrap();
    let stored_before = backend.state.lock().unwrap().clone();
    let state_before = session.state();
    backend.fail_archives.store(true, Ordering::SeqCst);
    let failed = session
        .compress(&[range("m0", "m2"), range("m5", "m6")])
        .await
        .unwrap_err();
    assert_eq!(failed.code, codes::STORE_FAILED);
    assert_eq!(session.state(), state_before);
    assert_eq!(*backend.state.lock().unwrap(), stored_before);
    assert!(backend.archives.lock().unwrap().is_empty());
    assert_eq!(session.build_view(&history, None), view_before);
    // Once the store works again the same batch goes through.
    backend.fail_archives.store(false, Ordering::SeqCst);
    session
        .compress(&[range("m0", "m2"), range("m5", "m6")])
        .await
        .unwrap();
    assert_eq!(backend.archives.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn expand_pages_long_archives() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Read", 40_000);
    pair(&mut history, "Read", 10);
    pair(&mut history, "Read", 10);
    pair(&mut history, "Read", 10);
    let history = shared(&history);
    let (session, _backend) = session_over(&history).await;
    session.build_view(&history, None);
    session.compress(&[range("m0", "m2")]).await.unwrap();
    let first = session.expand("a1", 0).await.unwrap();
    assert!(first.chars().count() < super::session::EXPAND_PAGE_CHARS + 200);
    assert!(first.contains("call Expand again with offset 16000"));
    let last = session.expand("a1", 32_000).await.unwrap();
    assert!(!last.contains("call Expand again"));
}

#[tokio::test]
async fn a_range_may_compress_earlier_summaries_again_but_only_whole() {
    let history = history();
    let (session, backend) = session_over(&history).await;
    session.build_view(&history, None);
    session.compress(&[range("m0", "m2")]).await.unwrap();
    session.build_view(&history, None);
    // Part of a1 (m0..m2) is refused, the whole batch with it.
    let partial = session
        .compress(&[range("m1", "m2"), range("m5", "m6")])
        .await
        .unwrap_err();
    assert_eq!((partial.code, partial.range), (codes::OVERLAP, Some(0)));
    assert!(
        partial.message.contains("archive a1 (m0..m2)"),
        "{partial:?}"
    );
    assert_eq!(backend.archives.lock().unwrap().len(), 1);

    // a1 whole, the hard-protected Write kept, m5..m6 fresh.
    let result = session
        .compress(&[RangeRequest {
            from_ref: "m0".into(),
            to_ref: "m6".into(),
            summary: "all of it".into(),
        }])
        .await
        .unwrap();
    assert!(
        result.contains("archive a2") && result.contains("summaries compressed again: a1"),
        "{result}"
    );
    let state = session.state();
    assert_eq!(state.compressions[1].replaces, ["a1"]);
    assert_eq!(state.compressions[1].absorbed, vec![(0, 2), (5, 6)]);
    // The new archive records the summary it replaced (by a1's id) and the fresh originals.
    let archives = backend.archives.lock().unwrap().clone();
    assert_eq!(archives.len(), 2);
    let refs: Vec<&str> = archives[1]
        .messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["ref"].as_str().unwrap())
        .collect();
    assert_eq!(refs, ["a1", "m5", "m6"]);
    assert_eq!(archives[1].message_count, 3);
    // The view shows only the newest summary; the protected Write stays.
    let view = serde_json::to_string(&session.build_view(&history, None)).unwrap();
    assert!(view.contains("all of it") && view.contains("[archive a2: m0..m6"));
    assert!(!view.contains("the gist") && !view.contains("[archive a1"));
    assert!(view.contains("[ref m3]") && !view.contains("[ref m5]"));
    let events = session.settle().await.unwrap();
    assert!(events.iter().any(|e| matches!(e, RunEvent::Compression(c)
        if c.ranges[0].archive_id == "a2" && c.tokens_after < c.tokens_before)));
    // Expanding a2 shows a1's summary; a1's originals stay readable.
    let expanded = session.expand("a2", 0).await.unwrap();
    assert!(expanded.contains("[a1] user") && expanded.contains("the gist"));
    assert!(expanded.contains("[m5] assistant"));
    assert!(
        session
            .expand("a1", 0)
            .await
            .unwrap()
            .contains("[m1] assistant")
    );
    // A range cutting into a2 is refused; a2's positions stay compressed.
    let cut = session.compress(&[range("m5", "m10")]).await.unwrap_err();
    assert_eq!(cut.code, codes::OVERLAP);
}

fn compression(id: &str, from: &str, to: &str, absorbed: &[(u32, u32)]) -> Compression {
    Compression {
        archive_id: id.into(),
        from_ref: from.into(),
        to_ref: to.into(),
        absorbed: absorbed.to_vec(),
        summary: format!("summary {id}"),
        tokens: 100,
        replaces: Vec::new(),
    }
}

#[test]
fn a_fork_keeps_the_compressions_wholly_before_its_cut() {
    let mut folded = compression("a3", "m0", "m6", &[(0, 2), (5, 6)]);
    folded.replaces = vec!["a1".into(), "a2".into()];
    let state = NoaState {
        snapshots: (0..11).map(|i| 10 + i).collect(),
        compressions: vec![
            compression("a1", "m0", "m2", &[(0, 2)]),
            compression("a2", "m5", "m6", &[(5, 6)]),
            folded,
            compression("a4", "m7", "m10", &[(7, 8)]),
            // Absorbed inside the cut, but its range names a message after it.
            compression("a5", "m1", "m8", &[(1, 2)]),
        ],
        archives: 5,
        calibration: Some(Calibration {
            estimated: 10,
            exact: 20,
        }),
        pruned: 2,
        hidden: 1,
    };

    let fork = state.forked(7);
    assert_eq!(fork.snapshots, state.snapshots[..7]);
    let ids: Vec<&str> = fork
        .compressions
        .iter()
        .map(|c| c.archive_id.as_str())
        .collect();
    assert_eq!(ids, ["a1", "a2", "a3"]);
    assert_eq!(fork.archive_ordinals(), [1, 2, 3]);
    assert_eq!(fork.archives, 5, "the next archive id is never one copied");
    assert_eq!((fork.calibration, fork.pruned, fork.hidden), (None, 0, 0));
    // The folded compression still shows in place of both earlier ones.
    assert_eq!(fork.absorbed_by(7)[0], Some(2));
    assert_eq!(fork.absorbed_by(7)[6], Some(2));

    // A cut inside a2 leaves a2 and the compression that folded it out; a1 shows again.
    let fork = state.forked(6);
    assert_eq!(fork.archive_ordinals(), [1]);
    assert_eq!(fork.absorbed_by(6)[..3], [Some(0); 3]);
    // A cut past the history keeps everything but what is cut nowhere.
    assert_eq!(state.forked(100).archive_ordinals(), [1, 2, 3, 4, 5]);
    assert_eq!(state.forked(100).snapshots.len(), 11);
    assert!(state.forked(0).compressions.is_empty());
}
