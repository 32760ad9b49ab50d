//! The one invariant checker every scenario ends with, and the SSE witness it reads.
//!
//! After a fault and its recovery, for every session under test:
//!
//! - **I1 runs end**: every accepted run is in a final status and has exactly one `terminal`
//!   event, and that end is not a store error (`error` with `RUN_FAILED`, or any mention of the
//!   store);
//! - **I2 seqs**: the session's event `seq`s are exactly 1..=N: contiguous, no duplicate;
//! - **I3 pairing**: every `tool_call` has exactly one `tool_result` event, and every `tool_use`
//!   block in history exactly one `tool_result` block;
//! - **I4 at most once**: no call has two `tool_executing` events, no call's marker appears
//!   twice in the workspace's `calls.log`, and a call a resume listed as `interrupted` has the
//!   `INTERRUPTED` result;
//! - **I5 approvals**: every requested approval is decided exactly once: the store holds one
//!   decision (status, time, decider) and every `approval_decided` event of it tells that same
//!   decision (a run resumed after a crash re-reads a decision made before it and may report it
//!   again; a second, different decision is the violation), and none is left pending;
//! - **I6 SSE**: the session's SSE witness — a client that reconnects with `Last-Event-ID`
//!   whenever its stream ends, breaks or stays silent — received every stored event exactly
//!   once, in order.
//!
//! Violations are collected over all sessions and reported together, with the transcripts and
//! the server logs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use crate::server::{ServerProcess, read_lines, summarize};
use crate::workload::{TENANT, Tracked};

/// How long a witness follows a session at most.
const WITNESS_DEADLINE: Duration = Duration::from_secs(120);
/// A witness that received nothing for this long reconnects (what a client with a read
/// timeout does).
const WITNESS_IDLE: Duration = Duration::from_secs(5);
/// How long the check waits for a witness to see its last `terminal`.
const WITNESS_FINISH: Duration = Duration::from_secs(20);

/// An SSE client of one session: follows `GET …/stream` through the given base URLs (the next
/// one after each failure), reconnecting with `Last-Event-ID` whenever the stream ends, breaks,
/// sends `reconnect` or stays silent, until it received `terminals` `terminal` events.
pub struct Witness {
    seen: Arc<Mutex<Vec<(i64, String)>>>,
    reconnects: Arc<AtomicUsize>,
    finished: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Witness {
    pub fn follow(urls: Vec<String>, token: &str, session: &str, terminals: usize) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reconnects = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicBool::new(false));
        let (log, count, done) = (seen.clone(), reconnects.clone(), finished.clone());
        let (token, session) = (token.to_owned(), session.to_owned());
        let task = tokio::spawn(async move {
            let client = reqwest::Client::new();
            let deadline = Instant::now() + WITNESS_DEADLINE;
            let mut attempt = 0usize;
            let mut last: Option<i64> = None;
            let mut terminal_count = 0;
            while Instant::now() < deadline {
                let base = &urls[attempt % urls.len()];
                attempt += 1;
                let mut request = client
                    .get(format!("{base}/v1/sessions/{session}/stream"))
                    .bearer_auth(&token)
                    .timeout(Duration::from_secs(600));
                if let Some(last) = last {
                    request = request.header("Last-Event-ID", last.to_string());
                }
                if attempt > 1 {
                    count.fetch_add(1, Ordering::SeqCst);
                }
                let response = match request.send().await {
                    Ok(response) if response.status() == 200 => response,
                    _ => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let mut stream = response.bytes_stream().eventsource();
                while let Ok(Some(Ok(event))) =
                    tokio::time::timeout(WITNESS_IDLE, stream.next()).await
                {
                    let Ok(seq) = event.id.parse::<i64>() else {
                        if event.event == "reconnect" {
                            break;
                        }
                        continue;
                    };
                    if event.event.is_empty() || event.event == "reconnect" {
                        break;
                    }
                    log.lock().unwrap().push((seq, event.event.clone()));
                    last = Some(seq);
                    if event.event == "terminal" {
                        terminal_count += 1;
                        if terminal_count >= terminals {
                            done.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }
        });
        Self {
            seen,
            reconnects,
            finished,
            task,
        }
    }

    /// What the witness received so far: `(seq, type)` in arrival order.
    pub fn seen(&self) -> Vec<(i64, String)> {
        self.seen.lock().unwrap().clone()
    }

    /// The type of the last event received, if any.
    pub fn last_kind(&self) -> Option<String> {
        self.seen
            .lock()
            .unwrap()
            .last()
            .map(|(_, kind)| kind.clone())
    }

    /// How many events of `kind` were received.
    pub fn count(&self, kind: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, k)| k == kind)
            .count()
    }

    /// How many times it reconnected.
    pub fn reconnects(&self) -> usize {
        self.reconnects.load(Ordering::SeqCst)
    }

    /// Waits (bounded, when `wait`) for the witness to see its last `terminal`; true if it did.
    async fn finish(&self, wait: bool) -> bool {
        let deadline = Instant::now() + if wait { WITNESS_FINISH } else { Duration::ZERO };
        while !self.finished.load(Ordering::SeqCst) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.finished.load(Ordering::SeqCst)
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the check found, for the scenario's report.
#[derive(Debug, Default)]
pub struct Summary {
    pub sessions: usize,
    pub runs: usize,
    pub events: usize,
    pub tool_calls: usize,
    pub interrupted: usize,
    pub approvals: usize,
    /// Approvals whose one decision the transcript reports more than once (after a resume).
    pub repeated_decisions: usize,
    pub sse_reconnects: usize,
    /// `run_resumed` events by the replica that resumed.
    pub resumes: BTreeMap<String, usize>,
    /// Terminal reasons and how often.
    pub reasons: BTreeMap<String, usize>,
}

/// Checks I1–I6 for every session through `replicas[0]` (a live replica; the others' data dirs
/// are read for the workspaces' `calls.log`) and panics with every violation found. Returns
/// what was checked.
pub async fn assert_invariants(
    scenario: &str,
    replicas: &[&ServerProcess],
    token: &str,
    tracked: &[Tracked],
) -> Summary {
    let server = replicas[0];
    let mut summary = Summary::default();
    let mut violations = Vec::new();
    let mut transcripts = String::new();
    for session in tracked {
        let before = violations.len();
        let events = server.all_events(token, &session.id).await;
        check_session(
            replicas,
            token,
            session,
            &events,
            &mut violations,
            &mut summary,
        )
        .await;
        if violations.len() > before {
            transcripts.push_str(&format!(
                "--- session {} ({:?}) ---\n{}\nwitness: {:?}\n",
                session.id,
                session.shape,
                summarize(&events),
                session.witness.seen()
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "{scenario}: {} invariant violation(s):\n- {}\n{transcripts}\n{}",
        violations.len(),
        violations.join("\n- "),
        replicas
            .iter()
            .map(|r| r.logs())
            .collect::<Vec<_>>()
            .join("\n")
    );
    summary
}

async fn check_session(
    replicas: &[&ServerProcess],
    token: &str,
    session: &Tracked,
    events: &[Value],
    violations: &mut Vec<String>,
    summary: &mut Summary,
) {
    let server = replicas[0];
    let id = &session.id;
    let mut fail = |text: String| violations.push(format!("session {id}: {text}"));
    summary.sessions += 1;
    summary.events += events.len();

    // I2: seqs are 1..=N.
    let seqs: Vec<i64> = events.iter().filter_map(|e| e["seq"].as_i64()).collect();
    if seqs != (1..=seqs.len() as i64).collect::<Vec<_>>() {
        fail(format!("I2 event seqs are not 1..=N: {seqs:?}"));
    }

    // I1: every accepted run ended, once, and not with a store error.
    let mut all_ended = true;
    for run in &session.runs {
        summary.runs += 1;
        let (status, record) = server
            .get(&format!("/v1/sessions/{id}/runs/{run}"), token)
            .await;
        let run_status = record["status"].as_str().unwrap_or_default();
        if status != 200 || !["completed", "failed", "cancelled"].contains(&run_status) {
            all_ended = false;
            fail(format!("I1 run {run} did not end: {status} {record}"));
        }
        let terminals: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "terminal" && e["run_id"] == run.as_str())
            .collect();
        if terminals.len() != 1 {
            fail(format!(
                "I1 run {run} has {} terminal events",
                terminals.len()
            ));
        }
        for terminal in terminals {
            let payload = &terminal["payload"];
            let reason = payload["reason"].as_str().unwrap_or("?").to_owned();
            let text = payload.to_string().to_lowercase();
            if reason == "error" && (payload["code"] == "RUN_FAILED" || text.contains("store")) {
                fail(format!("I1 run {run} ended with a store error: {payload}"));
            }
            *summary.reasons.entry(reason).or_default() += 1;
        }
    }

    // I3: pairing, in events and in history.
    let calls = ids_of(events, "tool_call");
    summary.tool_calls += calls.len();
    for call in &calls {
        let results = of_call(events, "tool_result", call).len();
        if results != 1 {
            fail(format!("I3 call {call} has {results} tool_result events"));
        }
    }
    let messages = server.all_messages(token, id).await;
    let blocks: Vec<Value> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    for block in blocks.iter().filter(|b| b["type"] == "tool_use") {
        let use_id = block["id"].as_str().unwrap_or_default();
        let results = blocks
            .iter()
            .filter(|b| b["type"] == "tool_result" && b["tool_use_id"] == use_id)
            .count();
        if results != 1 {
            fail(format!(
                "I3 tool_use {use_id} has {results} tool_result blocks in history"
            ));
        }
    }

    // I4: at most once.
    for call in &calls {
        let executing = of_call(events, "tool_executing", call).len();
        if executing > 1 {
            fail(format!("I4 call {call} executed {executing} times"));
        }
    }
    // Each replica has its own data dir: a call that ran on two replicas shows across them.
    let markers: Vec<String> = replicas
        .iter()
        .flat_map(|replica| read_lines(&replica.workspace(TENANT, id).join("calls.log")))
        .collect();
    let unique: BTreeSet<&String> = markers.iter().collect();
    if unique.len() != markers.len() {
        fail(format!("I4 a call ran twice: calls.log = {markers:?}"));
    }
    for resumed in events.iter().filter(|e| e["type"] == "run_resumed") {
        let replica = resumed["payload"]["replica"].as_str().unwrap_or("?");
        *summary.resumes.entry(replica.to_owned()).or_default() += 1;
        for call in resumed["payload"]["interrupted"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let call = call.as_str().unwrap_or_default();
            summary.interrupted += 1;
            let results = of_call(events, "tool_result", call);
            if !results
                .iter()
                .all(|r| r["payload"]["result"]["code"] == "INTERRUPTED")
            {
                fail(format!("I4 interrupted call {call} has another result"));
            }
        }
    }

    // I5: approvals decided exactly once.
    let requested: BTreeSet<String> = events
        .iter()
        .filter(|e| e["type"] == "approval_requested")
        .filter_map(|e| e["payload"]["approval"]["id"].as_str().map(str::to_owned))
        .collect();
    summary.approvals += requested.len();
    let (status, listed) = server
        .get(&format!("/v1/sessions/{id}/approvals"), token)
        .await;
    let listed = listed["approvals"].as_array().cloned().unwrap_or_default();
    if status != 200 {
        fail(format!("I5 approvals not listed: {status}"));
    }
    for approval in &requested {
        // The decision as the store has it: one status, one time, one decider.
        let stored = listed.iter().find(|a| a["id"] == approval.as_str());
        let decision = |record: &Value| {
            (
                record["status"].clone(),
                record["decided_at"].clone(),
                record["decided_by"].clone(),
            )
        };
        let Some(stored) = stored.filter(|a| a["status"] != "pending") else {
            fail(format!("I5 approval {approval} is not decided: {stored:?}"));
            continue;
        };
        let told: Vec<&Value> = events
            .iter()
            .filter(|e| {
                e["type"] == "approval_decided"
                    && e["payload"]["approval"]["id"] == approval.as_str()
            })
            .map(|e| &e["payload"]["approval"])
            .collect();
        // Told exactly once: a resumed run that re-reads a decision it recorded before the
        // crash does not tell it again.
        if told.is_empty() || told.iter().any(|t| decision(t) != decision(stored)) {
            fail(format!(
                "I5 approval {approval} decided {:?} in the store, the transcript tells {:?}",
                decision(stored),
                told.iter().map(|t| decision(t)).collect::<Vec<_>>()
            ));
        }
        if told.len() > 1 {
            summary.repeated_decisions += 1;
            fail(format!(
                "I5 approval {approval}: its decision is told {} times",
                told.len()
            ));
        }
    }
    for approval in &listed {
        if approval["status"] == "pending" {
            fail(format!("I5 approval {} is still pending", approval["id"]));
        }
    }

    // I6: the SSE witness saw every event once, in order.
    // (A witness of a run that did not end cannot finish: no need to wait for it.)
    let finished = session.witness.finish(all_ended).await;
    let seen: Vec<i64> = session.witness.seen().iter().map(|(seq, _)| *seq).collect();
    summary.sse_reconnects += session.witness.reconnects();
    if !finished || seen != seqs {
        fail(format!(
            "I6 the SSE witness (finished: {finished}, {} reconnects) received {seen:?}, the \
             store has {seqs:?}",
            session.witness.reconnects()
        ));
    }
}

/// The distinct `tool_use_id`s of the events of `kind`, in order.
fn ids_of(events: &[Value], kind: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for event in events.iter().filter(|e| e["type"] == kind) {
        if let Some(id) = event["payload"]["tool_use_id"].as_str()
            && !ids.iter().any(|known| known == id)
        {
            ids.push(id.to_owned());
        }
    }
    ids
}

fn of_call<'a>(events: &'a [Value], kind: &str, call: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind && e["payload"]["tool_use_id"] == call)
        .collect()
}
