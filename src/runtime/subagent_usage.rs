//! A run's (or a session's) usage with its subagents': its own model calls (the usage
//! ledger) plus every subagent it started, nested ones included. A subagent that finished
//! counts as its parent's `subagent_finished` event recorded it (its own subagents already
//! in it); one still running — or cancelled with its parent before that event — counts from
//! its own ledger, read now, recursively. Everything comes from the store, so the totals are
//! the same after a resume, on any replica.
//!
//! The usage ledger itself stays per session (a subagent's rows are its own session's):
//! `GET /v1/usage` sums the ledger and never counts a subagent twice.

use crate::ids::{RunId, SessionId, TenantId};
use crate::run_event::{RunEvent, kinds};
use crate::store::{EventRecord, Store, StoreError};
use crate::subagents::MAX_DEPTH;
use crate::usage::{SubagentUsage, UsageScope, UsageWithSubagents};
use futures::future::BoxFuture;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The events that name a run's subagents.
const KINDS: [&str; 2] = [kinds::SUBAGENT_STARTED, kinds::SUBAGENT_FINISHED];
/// Events read per store query when a whole session is summed.
const PAGE: u32 = 500;

/// One subagent as its parent's events know it (keyed by its session id: a re-attached
/// `Agent` call names the same child twice).
#[derive(Default)]
struct Child {
    run: String,
    finished: Option<UsageWithSubagents>,
}

fn collect(events: &[EventRecord], children: &mut BTreeMap<String, Child>) {
    for event in events {
        match RunEvent::from_row(event) {
            RunEvent::SubagentStarted(started) => {
                children.entry(started.session_id).or_default().run = started.run_id;
            }
            RunEvent::SubagentFinished(done) => {
                let child = children.entry(done.session_id).or_default();
                child.run = done.run_id;
                child.finished = Some(done.usage);
            }
            _ => {}
        }
    }
}

/// Sums `children` (their usage as recorded, or read from their ledgers at `depth`).
async fn sum(
    store: &dyn Store,
    tenant: &TenantId,
    children: BTreeMap<String, Child>,
    depth: u8,
) -> Result<Option<SubagentUsage>, StoreError> {
    let mut total = UsageWithSubagents::default();
    for (session, child) in children {
        let usage = match child.finished {
            Some(usage) => usage,
            None if child.run.is_empty() => continue,
            None => {
                run_usage_at(
                    store,
                    tenant,
                    &SessionId::from_string(session),
                    &RunId::from_string(child.run),
                    depth,
                )
                .await?
            }
        };
        total.add_subagent(&usage);
    }
    Ok(total.subagents)
}

/// The subagents' part of `run`'s usage; `None` when it started none.
pub async fn subagents_of_run(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
) -> Result<Option<SubagentUsage>, StoreError> {
    subagents_at(store, tenant, session, run, 0).await
}

async fn subagents_at(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
    depth: u8,
) -> Result<Option<SubagentUsage>, StoreError> {
    if depth >= MAX_DEPTH {
        // Nothing nests deeper (a bound against a forged chain, not a case that happens).
        return Ok(None);
    }
    let events = store.list_run_events(tenant, session, run, &KINDS).await?;
    let mut children = BTreeMap::new();
    collect(&events, &mut children);
    sum(store, tenant, children, depth + 1).await
}

/// `run`'s usage: its own model calls plus its subagents'.
pub async fn run_usage(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
) -> Result<UsageWithSubagents, StoreError> {
    run_usage_at(store, tenant, session, run, 0).await
}

fn run_usage_at<'a>(
    store: &'a dyn Store,
    tenant: &'a TenantId,
    session: &'a SessionId,
    run: &'a RunId,
    depth: u8,
) -> BoxFuture<'a, Result<UsageWithSubagents, StoreError>> {
    Box::pin(async move {
        let own = store
            .usage_totals(
                tenant,
                UsageScope::Run {
                    session: session.as_str(),
                    run: run.as_str(),
                },
            )
            .await?;
        let part = subagents_at(store, tenant, session, run, depth).await?;
        Ok(with_part(own, part))
    })
}

fn with_part(own: crate::usage::UsageTotals, part: Option<SubagentUsage>) -> UsageWithSubagents {
    let mut usage = UsageWithSubagents::own(own);
    if let Some(part) = part {
        usage.totals.add(&part.totals);
        usage.subagents = Some(part);
    }
    usage
}

/// `session`'s usage: its own model calls (every run) plus those of the subagents its runs
/// started.
pub async fn session_usage(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<UsageWithSubagents, StoreError> {
    let own = store
        .usage_totals(tenant, UsageScope::Session(session.as_str()))
        .await?;
    let mut children = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = store
            .list_session_events(tenant, session, &KINDS, after, PAGE)
            .await?;
        collect(&page, &mut children);
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = last.seq,
            _ => break,
        }
    }
    let part = sum(store, tenant, children, 1).await?;
    Ok(with_part(own, part))
}

/// The subagent sessions `session`'s runs started (each once), with their runs.
pub async fn children_of(
    store: &dyn Store,
    tenant: &TenantId,
    session: &SessionId,
) -> Result<Vec<(SessionId, RunId)>, StoreError> {
    let mut children = BTreeMap::new();
    let mut after = 0;
    loop {
        let page = store
            .list_session_events(tenant, session, &[kinds::SUBAGENT_STARTED], after, PAGE)
            .await?;
        collect(&page, &mut children);
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = last.seq,
            _ => break,
        }
    }
    Ok(children
        .into_iter()
        .map(|(session, child)| {
            (
                SessionId::from_string(session),
                RunId::from_string(child.run),
            )
        })
        .collect())
}

/// What the run's subagents used, by `Agent` call: their tokens count into the parent
/// run's token budget (a call re-attached after a restart counts once), and their usage is
/// the fallback of the run's `usage` event when the store cannot be read at its end.
#[derive(Clone, Default)]
pub struct DelegatedUsage {
    calls: Arc<Mutex<HashMap<String, UsageWithSubagents>>>,
    /// Whether the run offers `Agent` at all (else its end reads nothing for subagents).
    offered: bool,
}

impl DelegatedUsage {
    /// The counter of a run that offers the `Agent` tool.
    pub fn offered() -> Self {
        Self {
            offered: true,
            ..Self::default()
        }
    }

    pub fn is_offered(&self) -> bool {
        self.offered
    }

    pub fn record(&self, tool_use_id: &str, usage: UsageWithSubagents) {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tool_use_id.to_owned(), usage);
    }

    pub fn tokens(&self) -> u64 {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .fold(0, |sum, usage| sum.saturating_add(usage.total_tokens()))
    }

    /// The finished subagents' part of the run's usage, as recorded in memory.
    pub fn part(&self) -> Option<crate::usage::SubagentUsage> {
        let mut total = UsageWithSubagents::default();
        for usage in self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            total.add_subagent(usage);
        }
        total.subagents
    }
}

/// Restores the tokens the subagents of a resumed run used before the restart (their
/// `subagent_finished` events) into `delegated`.
pub async fn restore_delegated(
    store: &dyn crate::store::Store,
    tenant: &TenantId,
    session: &SessionId,
    run: &RunId,
    delegated: &DelegatedUsage,
) -> Result<(), crate::store::StoreError> {
    for event in store
        .list_run_events(tenant, session, run, &[kinds::SUBAGENT_FINISHED])
        .await?
    {
        if let RunEvent::SubagentFinished(done) = RunEvent::from_row(&event) {
            delegated.record(&done.tool_use_id, done.usage);
        }
    }
    Ok(())
}
