//! A run's journal (each tool call's `tool_executing`, egress events) and the session's slot
//! that routes command connections to the journal of its current run.

use super::session_writer::SessionWriter;
use crate::run_event::{self, RunEvent};
use async_trait::async_trait;
use std::sync::{Arc, Mutex};

/// Journals each tool call of a run durably before it runs (`tool_executing`), in order with
/// every event before it.
pub struct RunJournal {
    pub writer: Arc<SessionWriter>,
}

#[async_trait]
impl crate::tools::pipeline::ExecutionJournal for RunJournal {
    async fn executing(
        &self,
        tool_use_id: &str,
        tool_name: &str,
        repeatable: bool,
    ) -> Result<(), String> {
        let event = RunEvent::ToolExecuting(run_event::ToolExecuting {
            tool_use_id: tool_use_id.to_owned(),
            name: tool_name.to_owned(),
        });
        if repeatable {
            // Written with the turn (or by the run's lingering write if the call takes longer): one commit
            // fewer per read-only call.
            self.writer.push_event(event);
            return Ok(());
        }
        self.writer
            .write(vec![], vec![event])
            .await
            .map_err(|error| error.0)
    }
}

#[async_trait]
impl crate::egress::EgressRecorder for RunJournal {
    async fn record(&self, egress: crate::egress::EgressEvent) {
        if let Err(error) = self
            .writer
            .write(vec![], vec![RunEvent::Egress(egress.into())])
            .await
        {
            tracing::warn!(error = %error.0, "could not record an egress event");
        }
    }
}

/// Where a session's command connections (the egress proxy) are recorded: the journal of
/// the session's current run, set when each run starts. A connection reported while no run
/// of this replica writes for the session (a background task outliving its run) is logged
/// only: its journal's writer refuses the write.
///
/// It also holds the permission ladder of the session's latest run on this replica, which
/// judges destinations no egress rule lists (see [`crate::egress::proxy::gate`]); before the
/// first run, such destinations are refused.
#[derive(Clone, Default)]
pub struct EgressSlot {
    journal: Arc<Mutex<Option<Arc<dyn crate::egress::EgressRecorder>>>>,
    ladder: Arc<Mutex<Option<Arc<dyn crate::egress::fetch::HopGate>>>>,
}

impl EgressSlot {
    /// Records into `journal` from now on.
    pub fn set(&self, journal: Arc<dyn crate::egress::EgressRecorder>) {
        *self.journal.lock().unwrap_or_else(|e| e.into_inner()) = Some(journal);
    }

    /// Judges unlisted destinations with `ladder` (the current run's) from now on.
    pub fn set_ladder(&self, ladder: Arc<dyn crate::egress::fetch::HopGate>) {
        *self.ladder.lock().unwrap_or_else(|e| e.into_inner()) = Some(ladder);
    }

    /// Records one proxied connection as an `egress` event (on a task of its own: the proxy
    /// must not wait for the store).
    pub fn record_proxy(&self, record: crate::egress::proxy::ProxyRecord) {
        let Some(journal) = self
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return;
        };
        let event = crate::egress::proxy::egress_event(&record);
        tokio::spawn(async move { journal.record(event).await });
    }
}

impl crate::egress::fetch::HopGate for EgressSlot {
    fn allows(&self, url: &url::Url) -> Result<String, String> {
        let ladder = self
            .ladder
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match ladder {
            Some(ladder) => ladder.allows(url),
            None => Err("no run of the session has judged it yet".into()),
        }
    }
}
