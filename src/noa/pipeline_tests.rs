//! One test per pipeline step, and the order of the steps (N23).

use super::pipeline::{self, STEPS, Step, Turn};
use super::settings::NoaSettings;
use super::state::{Compression, NoaState, Tier};
use super::test_support::*;
use crate::message::{ContentBlock, Message, ViewMessage};
use crate::run_event::RunEvent;

fn settings() -> NoaSettings {
    NoaSettings {
        soft_limit_tokens: 1_000_000,
        hard_limit_tokens: 2_000_000,
        protected_tail: 4,
        min_range_tokens: 10,
        max_summary_chars: 1000,
        prune_min_tokens: 100,
        nudge: "compress please".into(),
    }
}

struct Outcome {
    view: Vec<ViewMessage>,
    events: Vec<RunEvent>,
    state: NoaState,
}

fn run_with(
    settings: &NoaSettings,
    history: &[Message],
    mut state: NoaState,
    steps: &[Step],
) -> Outcome {
    let read_only = read_only();
    let history = shared(history);
    let mut turn = Turn::new(settings, &read_only, &history, &mut state);
    turn.run(steps);
    let view = turn.messages();
    let events = std::mem::take(&mut turn.events);
    Outcome {
        view,
        events,
        state,
    }
}

fn text_of(view: &[ViewMessage]) -> String {
    serde_json::to_string(view).unwrap()
}

#[test]
fn assign_refs_snapshots_new_messages_once() {
    let mut history = vec![prompt("hello there"), reply("hi")];
    let first = run_with(&settings(), &history, NoaState::default(), &STEPS);
    assert_eq!(first.state.snapshots.len(), 2);
    // The same messages rendered again, even if their text were different now, keep the
    // first-render snapshot (N24); new messages get theirs.
    history[0] = prompt(&"longer ".repeat(100));
    history.push(prompt("next"));
    let second = run_with(&settings(), &history, first.state.clone(), &STEPS);
    assert_eq!(second.state.snapshots[..2], first.state.snapshots[..]);
    assert_eq!(second.state.snapshots.len(), 3);
    assert!(text_of(&second.view).contains("[ref m2]"));
}

#[test]
fn sync_blocks_pairs_calls_with_results_and_sets_tiers() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Read", 40); // m1, m2
    pair(&mut history, "Write", 40); // m3, m4: the latest Write, hard
    pair(&mut history, "Read", 40); // m5, m6
    pair(&mut history, "Read", 40); // m7, m8
    history.push(call("toolu_pending", "Bash")); // m9: waiting for its result
    let read_only = read_only();
    let mut state = NoaState::default();
    let settings = settings();
    let history = shared(&history);
    let mut turn = Turn::new(&settings, &read_only, &history, &mut state);
    pipeline::assign_refs(&mut turn);
    pipeline::sync_blocks(&mut turn);
    let tiers: Vec<(u32, u32, Tier)> = turn
        .blocks
        .iter()
        .map(|b| (b.start, b.end, b.tier))
        .collect();
    assert_eq!(
        tiers,
        vec![
            (0, 0, Tier::Normal),
            (1, 2, Tier::Normal),
            (3, 4, Tier::Hard),
            (5, 6, Tier::Soft), // m6 is among the last four messages
            (7, 8, Tier::Soft),
            (9, 9, Tier::Hard),
        ]
    );
    let view = text_of(&turn.messages());
    for position in 0..10 {
        assert!(view.contains(&format!("[ref m{position}]")), "m{position}");
    }
}

#[test]
fn sync_blocks_shows_a_compression_as_its_summary() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Read", 40);
    pair(&mut history, "Read", 40);
    let state = NoaState {
        compressions: vec![Compression {
            archive_id: "a1".into(),
            from_ref: "m0".into(),
            to_ref: "m2".into(),
            absorbed: vec![(0, 2)],
            summary: "read x twice".into(),
            tokens: 30,
            replaces: Vec::new(),
        }],
        archives: 1,
        ..NoaState::default()
    };
    let outcome = run_with(&settings(), &history, state, &STEPS);
    let view = text_of(&outcome.view);
    assert!(view.contains("[archive a1: m0..m2"));
    assert!(view.contains("read x twice"));
    assert!(!view.contains("[ref m1]") && view.contains("[ref m3]"));
    assert_eq!(outcome.view.len(), 3);
}

#[test]
fn prune_stubs_big_consumed_read_only_results_outside_the_tail() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Read", 4000); // m1, m2: pruned
    pair(&mut history, "Write", 4000); // m3, m4: mutating, kept
    pair(&mut history, "Read", 40); // m5, m6: small, kept
    pair(&mut history, "Read", 4000); // m7, m8: in the tail, kept
    pair(&mut history, "Read", 40);
    let outcome = run_with(&settings(), &history, NoaState::default(), &STEPS);
    let view = text_of(&outcome.view);
    assert!(view.contains("[ref m2] [result pruned"));
    assert_eq!(view.matches("result pruned").count(), 1);
    assert!(
        matches!(&outcome.events[..], [RunEvent::ContextPruned(e)] if e.messages == 1 && e.tokens_after < e.tokens_before)
    );
    // The next turn prunes the same result without a new event.
    let again = run_with(&settings(), &history, outcome.state, &STEPS);
    assert!(again.events.is_empty());
}

#[test]
fn hide_removes_consumed_noa_calls_outside_the_tail() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Compress", 40); // m1, m2: hidden
    pair(&mut history, "Read", 40);
    pair(&mut history, "Read", 40);
    pair(&mut history, "Compress", 40); // in the tail: shown
    let outcome = run_with(&settings(), &history, NoaState::default(), &STEPS);
    let view = text_of(&outcome.view);
    assert!(!view.contains("[ref m1]") && !view.contains("[ref m2]"));
    assert!(view.contains("[ref m7]") && view.contains("[ref m8]"));
    assert!(matches!(&outcome.events[..], [RunEvent::ContextHidden(e)] if e.messages == 2));
}

#[test]
fn emergency_truncate_drops_whole_old_blocks_and_keeps_protected_ones() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Read", 400); // m1, m2
    pair(&mut history, "Write", 400); // m3, m4: hard
    pair(&mut history, "Read", 400); // m5, m6
    pair(&mut history, "Read", 400);
    pair(&mut history, "Read", 400);
    let settings = NoaSettings {
        soft_limit_tokens: 300,
        hard_limit_tokens: 500,
        ..settings()
    };
    let outcome = run_with(&settings, &history, NoaState::default(), &STEPS);
    let view = text_of(&outcome.view);
    assert!(view.contains("older messages are not shown"));
    assert!(!view.contains("[ref m1]") && !view.contains("[ref m2]"));
    assert!(
        view.contains("[ref m3]") && view.contains("[ref m4]"),
        "hard kept"
    );
    assert!(
        view.contains("[ref m9]") && view.contains("[ref m10]"),
        "tail kept"
    );
    // Never half a pair.
    assert_eq!(view.contains("[ref m5]"), view.contains("[ref m6]"));
    assert!(
        outcome.events.iter().any(
            |e| matches!(e, RunEvent::ContextTruncated(t) if t.tokens_after < t.tokens_before)
        )
    );
}

#[test]
fn nudge_is_appended_to_the_last_result_over_the_soft_limit() {
    let mut history = vec![prompt("go")];
    pair(&mut history, "Read", 2000);
    let settings = NoaSettings {
        soft_limit_tokens: 100,
        ..settings()
    };
    let outcome = run_with(&settings, &history, NoaState::default(), &STEPS);
    let last = outcome.view.last().unwrap().rendered();
    let ContentBlock::ToolResult(result) = &last.content[0] else {
        panic!("the last message carries the result")
    };
    assert!(result.content.contains("<noa_nudge") && result.content.contains("compress please"));
    assert!(
        matches!(&outcome.events[..], [RunEvent::ContextNudge(n)] if n.soft_limit_tokens == 100)
    );
    // Under the limit: no nudge.
    let quiet = run_with(&self::settings(), &history, NoaState::default(), &STEPS);
    assert!(!text_of(&quiet.view).contains("noa_nudge"));
}

#[test]
fn calibration_scales_the_projected_size() {
    assert_eq!(pipeline::calibrated(100, None), 100);
    let calibration = Some(super::state::Calibration {
        estimated: 100,
        exact: 200,
    });
    assert_eq!(pipeline::calibrated(100, calibration), 200);
    let wild = Some(super::state::Calibration {
        estimated: 1,
        exact: 1000,
    });
    assert_eq!(pipeline::calibrated(100, wild), 400, "clamped");
}

/// The fixture of the order test: big consumed read-only results (pruned), an Expand pair
/// (pruned, then hidden), a tail; the hard limit sits just above the canonical view, so only
/// the canonical order needs no truncation.
fn order_fixture() -> (Vec<Message>, NoaSettings) {
    let mut history = vec![prompt("go")];
    for _ in 0..4 {
        pair(&mut history, "Read", 3000);
    }
    pair(&mut history, "Expand", 3000);
    pair(&mut history, "Read", 400);
    pair(&mut history, "Read", 400);
    pair(&mut history, "Read", 400);
    let base = NoaSettings {
        soft_limit_tokens: 10,
        hard_limit_tokens: 1_000_000,
        ..settings()
    };
    let canonical_size = {
        let read_only = read_only();
        let mut state = NoaState::default();
        let history = shared(&history);
        let mut turn = Turn::new(&base, &read_only, &history, &mut state);
        turn.run(&STEPS[..4]);
        turn.estimated()
    };
    let settings = NoaSettings {
        hard_limit_tokens: canonical_size + 5,
        ..base
    };
    (history, settings)
}

#[test]
fn the_steps_run_in_the_order_n23_fixes() {
    let names: Vec<&str> = STEPS.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        names,
        [
            "assign_refs",
            "sync_blocks",
            "prune",
            "hide_consumed_calls",
            "emergency_truncate",
            "nudge"
        ]
    );
    let (history, settings) = order_fixture();
    let canonical = run_with(&settings, &history, NoaState::default(), &STEPS);
    let view = text_of(&canonical.view);
    // The canonical outcome: pruned, the Expand pair hidden, nothing truncated, nudged with
    // the size really sent.
    assert!(view.contains("result pruned"));
    assert!(
        !view.contains("[ref m9]"),
        "the consumed Expand call is hidden"
    );
    assert!(!view.contains("not shown"), "nothing truncated");
    let nudged = canonical.events.iter().find_map(|e| match e {
        RunEvent::ContextNudge(n) => Some(n.projected_tokens),
        _ => None,
    });
    let sent: u64 = {
        let mut without_nudge = STEPS.to_vec();
        without_nudge.pop();
        let read_only = read_only();
        let mut state = NoaState::default();
        let history = shared(&history);
        let mut turn = Turn::new(&settings, &read_only, &history, &mut state);
        turn.run(&without_nudge);
        turn.projected()
    };
    assert_eq!(nudged, Some(sent));
    // Swapping any two neighbouring steps changes the outcome.
    for i in 0..STEPS.len() - 1 {
        let mut swapped = STEPS.to_vec();
        swapped.swap(i, i + 1);
        let outcome = run_with(&settings, &history, NoaState::default(), &swapped);
        assert!(
            outcome.view != canonical.view || outcome.events != canonical.events,
            "swapping {} and {} went unnoticed",
            STEPS[i].0,
            STEPS[i + 1].0
        );
    }
}
