//! The execution journal: every call is journaled before it runs, only read-only ones as
//! repeatable.

use super::*;
use pretty_assertions::assert_eq;

/// Remembers what the pipeline journaled: `(tool_use_id, repeatable)`; refuses when `refuse`.
#[derive(Default)]
struct RecordingJournal {
    entries: Mutex<Vec<(String, bool)>>,
    refuse: bool,
}

#[async_trait]
impl ExecutionJournal for RecordingJournal {
    async fn executing(
        &self,
        tool_use_id: &str,
        _tool_name: &str,
        repeatable: bool,
    ) -> Result<(), String> {
        if self.refuse {
            return Err("store down".into());
        }
        self.entries
            .lock()
            .unwrap()
            .push((tool_use_id.to_owned(), repeatable));
        Ok(())
    }
}

#[tokio::test]
async fn every_call_is_journaled_before_it_runs_and_only_read_only_ones_as_repeatable() {
    let probe = Probe::default();
    let journal = Arc::new(RecordingJournal::default());
    let journaled = pipeline(&probe, TestGate::allow_all()).with_journal(journal.clone());
    // `Counter` is read-only below 10.
    run(&journaled, json!({"n": 3})).await;
    run(&journaled, json!({"n": 50})).await;
    assert_eq!(probe.calls(), 2);
    assert_eq!(
        *journal.entries.lock().unwrap(),
        vec![("tu_1".to_string(), true), ("tu_1".to_string(), false)]
    );

    // A call that cannot be journaled never runs.
    let refusing = Arc::new(RecordingJournal {
        refuse: true,
        ..Default::default()
    });
    let probe = Probe::default();
    let refused = pipeline(&probe, TestGate::allow_all()).with_journal(refusing);
    let outcome = run(&refused, json!({"n": 50})).await;
    assert_eq!(probe.calls(), 0);
    assert_eq!(code(&outcome), Some(codes::TOOL_FAILED));
}
