//! Resuming runs from the store: the state a crashed replica leaves behind (a run row whose
//! lease expired, its prompt, and the trail of events of the turn in flight) is written
//! directly, then a server starts on that store and must take the run over. The kill -9
//! tests with the real binary are in tests/crash.rs.

use crate::helpers::{Backend, TestApp, count, fresh_pg_database, test_settings, tool_results};
use norma::ids::{RunId, SessionId, TenantId};
use norma::limits::RunCaps;
use norma::message::Message;
use norma::store::{
    AppendBatch, ConnectOptions, NewApproval, NewEvent, NewMessage, NewRun, NewSession, RunLease,
    RunRecord, Store,
};
use secrecy::SecretString;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// `mod $name { sqlite(); postgres(); }` running `$case(backend)`: each case prepares its
/// store before the server starts.
macro_rules! on_each_store {
    ($($name:ident => $case:path;)*) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                $case(crate::helpers::Backend::Sqlite).await;
            }
            #[tokio::test]
            async fn postgres() {
                $case(crate::helpers::Backend::Postgres).await;
            }
        }
    )*};
}

on_each_store!(
    a_tool_that_was_executing_is_reported_interrupted_and_not_run_again => super::interrupted_tool_is_not_rerun;
    a_read_only_call_cut_before_its_turn_was_written_is_run_again => super::read_only_call_is_rerun;
    a_call_parked_on_an_approval_keeps_its_approval_answerable => super::parked_approval_survives;
    a_resumed_run_does_not_repeat_a_recorded_approval_decision => super::recorded_decision_not_repeated;
    a_run_cut_mid_model_call_reissues_the_call => super::mid_model_call_is_reissued;
    a_resumed_run_counts_the_model_calls_made_before_the_resume => super::usage_before_resume_counts;
    a_run_held_by_a_live_replica_is_left_alone => super::live_lease_is_respected;
    queued_prompts_survive_a_restart_and_run_in_order => super::queued_prompts_survive;
);

const OLD_REPLICA: &str = "crashed-replica";

/// A store prepared before the server starts, and the settings that point at it.
pub(crate) struct Prepared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) settings: norma::config::Settings,
    dir: tempfile::TempDir,
    backend: Backend,
}

impl Prepared {
    pub(crate) async fn new(backend: Backend) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = test_settings(dir.path());
        settings.run_lease_seconds = 1;
        if backend == Backend::Postgres {
            settings.database_url = Some(SecretString::from(fresh_pg_database().await?));
        }
        let store = norma::store::connect(&settings.database_url(), &ConnectOptions::default())
            .await
            .unwrap();
        Some(Self {
            store,
            settings,
            dir,
            backend,
        })
    }

    pub(crate) async fn session(&self, config: Value) -> SessionId {
        let id = SessionId::generate();
        self.store
            .create_session(NewSession {
                id: id.clone(),
                tenant: TenantId::new("acme"),
                config,
            })
            .await
            .unwrap();
        id
    }

    /// A run claimed by a replica that then died: its lease lasts `lease`.
    pub(crate) async fn crashed_run(
        &self,
        session: &SessionId,
        prompt: &str,
        lease: Duration,
    ) -> RunRecord {
        let run = self
            .store
            .create_run(
                &TenantId::new("acme"),
                NewRun {
                    id: RunId::generate(),
                    session: session.clone(),
                    prompt: prompt.into(),
                },
                Some((OLD_REPLICA, lease)),
                RunCaps::UNLIMITED,
            )
            .await
            .unwrap();
        let lease = run.lease().unwrap();
        self.write(
            session,
            &lease,
            vec![Message::user_text(prompt)],
            vec![("run_started", json!({ "run_id": run.id, "prompt": prompt }))],
        )
        .await;
        run
    }

    /// Writes what the crashed replica had written, under its lease.
    pub(crate) async fn write(
        &self,
        session: &SessionId,
        lease: &RunLease,
        messages: Vec<Message>,
        events: Vec<(&str, Value)>,
    ) {
        let run = Some(lease.run_id.to_string());
        self.store
            .append(
                &TenantId::new("acme"),
                session,
                AppendBatch {
                    messages: messages
                        .into_iter()
                        .map(|message| NewMessage {
                            message,
                            run_id: run.clone(),
                            compaction_boundary: false,
                        })
                        .collect(),
                    events: events
                        .into_iter()
                        .map(|(kind, payload)| NewEvent {
                            kind: kind.into(),
                            payload: payload.into(),
                            run_id: run.clone(),
                        })
                        .collect(),
                    lease: Some(lease.clone()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }

    pub(crate) async fn start(self) -> (TestApp, Arc<dyn Store>) {
        let store = self.store.clone();
        (
            TestApp::start(self.settings, self.backend, self.dir).await,
            store,
        )
    }
}

fn marker_script(command: &str) -> Value {
    json!({"turns": [
        {"tool_calls": [{"name": "Bash", "input": {"command": command}}]},
        {"text": "after: {{last_tool_result}}"}
    ]})
}

pub(crate) async fn wait_for_run(
    app: &TestApp,
    token: &str,
    session: &SessionId,
    run: &str,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let record: Value = app
            .get(&format!("/v1/sessions/{session}/runs/{run}"), token)
            .await
            .json()
            .await
            .unwrap();
        if !matches!(record["status"].as_str(), Some("running" | "queued")) {
            return record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run did not finish: {record}"
        );
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// The payload of the one `run_resumed` event among `events`.
fn the_resume(events: &[Value]) -> &Value {
    let resumed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "run_resumed")
        .collect();
    assert_eq!(resumed.len(), 1, "one run_resumed event");
    &resumed[0]["payload"]
}

fn assert_contiguous(events: &[Value]) {
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let expected: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(
        seqs, expected,
        "event seqs are 1..=N without gap or duplicate"
    );
}

async fn interrupted_tool_is_not_rerun(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let input = json!({ "command": "echo ran >> marker" });
    let session = prepared
        .session(json!({
            "permission": {"allow": ["Bash"]},
            "model": {"script": marker_script("echo ran >> marker")},
        }))
        .await;
    let run = prepared
        .crashed_run(&session, "go", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    // The turn in flight: streamed text, the call, and its start; then the process died.
    prepared
        .write(
            &session,
            &lease,
            vec![],
            vec![
                ("model_request", json!({ "request": 1 })),
                ("assistant_delta", json!({ "text": "Let me " })),
                ("assistant_delta", json!({ "text": "write." })),
                (
                    "tool_call",
                    json!({ "tool_use_id": "toolu_scripted_0_0", "name": "Bash", "input": input }),
                ),
                (
                    "tool_started",
                    json!({ "tool_use_id": "toolu_scripted_0_0" }),
                ),
                (
                    "tool_executing",
                    json!({ "tool_use_id": "toolu_scripted_0_0", "name": "Bash" }),
                ),
            ],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await; // the lease expires
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");

    let record = wait_for_run(&app, &token, &session, &run.id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert!(
        record["fence"].as_i64().unwrap() >= 2,
        "the run was claimed again"
    );
    assert_ne!(record["owner"], OLD_REPLICA);

    let messages = app.messages(&token, session.as_str()).await;
    let list = messages["messages"].as_array().unwrap();
    assert_eq!(list.len(), 4, "{messages:#}");
    assert_eq!(list[0]["content"][0]["text"], "go");
    // The interrupted turn, rebuilt from its events: text, then the call.
    assert_eq!(list[1]["role"], "assistant");
    assert_eq!(list[1]["content"][0]["text"], "Let me write.");
    assert_eq!(list[1]["content"][1]["id"], "toolu_scripted_0_0");
    let results = tool_results(&messages);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["code"], "INTERRUPTED");
    assert_eq!(results[0]["is_error"], true);
    // The model saw the INTERRUPTED result and answered.
    assert!(
        list[3]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("not run again"),
        "{:#}",
        list[3]
    );
    // The call was not run again.
    let marker = app
        .data_dir()
        .join("workspaces/acme")
        .join(session.as_str())
        .join("marker");
    assert!(!marker.exists(), "the interrupted call ran a second time");

    let events = app.events(&token, session.as_str()).await;
    assert_contiguous(&events);
    let resumed = the_resume(&events);
    assert_eq!(resumed["interrupted"], json!(["toolu_scripted_0_0"]));
    assert_eq!(resumed["rerun"], json!([]));
    assert_eq!(count(&events, "run_started"), 1);
    assert_eq!(count(&events, "terminal"), 1);
}

/// A read-only call is journaled with its turn, not before it runs (running it again changes
/// nothing): a crash while it runs leaves its call without `tool_executing`, and the resumed
/// run calls it again and answers with its real result, not `INTERRUPTED`.
async fn read_only_call_is_rerun(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let input = json!({ "file_path": "notes.txt" });
    let session = prepared
        .session(json!({
            "model": {"script": {"turns": [
                {"tool_calls": [{"name": "Read", "input": input}]},
                {"text": "after: {{last_tool_result}}"}
            ]}},
        }))
        .await;
    let workspace = prepared
        .settings
        .data_dir
        .join("workspaces/acme")
        .join(session.as_str());
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "remember the milk\n").unwrap();
    let run = prepared
        .crashed_run(&session, "go", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    // What a crash while the Read ran leaves behind: the call and its start, no journal.
    prepared
        .write(
            &session,
            &lease,
            vec![],
            vec![
                ("model_request", json!({ "request": 1 })),
                (
                    "tool_call",
                    json!({ "tool_use_id": "toolu_scripted_0_0", "name": "Read", "input": input }),
                ),
                (
                    "tool_started",
                    json!({ "tool_use_id": "toolu_scripted_0_0" }),
                ),
            ],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await; // the lease expires
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");

    let record = wait_for_run(&app, &token, &session, &run.id).await;
    assert_eq!(record["status"], "completed", "{record}");
    let messages = app.messages(&token, session.as_str()).await;
    let results = tool_results(&messages);
    assert_eq!(results.len(), 1, "{messages:#}");
    assert_ne!(results[0]["is_error"], true, "{}", results[0]);
    assert!(
        results[0].to_string().contains("remember the milk"),
        "{}",
        results[0]
    );
    let events = app.events(&token, session.as_str()).await;
    assert_contiguous(&events);
    let resumed = the_resume(&events);
    assert_eq!(resumed["interrupted"], json!([]));
    assert_eq!(resumed["rerun"], json!(["toolu_scripted_0_0"]));
    // This time the call was journaled, after its call and before its result.
    let position = |kind: &str| {
        events
            .iter()
            .rposition(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    assert!(position("tool_call") < position("tool_executing"));
    assert!(position("tool_executing") < position("tool_result"));
    // ... in the same commit as the result (one write per read-only call, not two).
    assert_eq!(
        events[position("tool_executing")]["created_at"],
        events[position("tool_result")]["created_at"]
    );
}

async fn parked_approval_survives(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let input = json!({ "command": "echo ran >> marker" });
    let session = prepared
        .session(json!({ "model": {"script": marker_script("echo ran >> marker")} }))
        .await;
    let run = prepared
        .crashed_run(&session, "go", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    let approval_id = norma::ids::ApprovalId::generate();
    let approval = prepared
        .store
        .create_approval(
            &TenantId::new("acme"),
            NewApproval {
                id: approval_id.clone(),
                session: session.clone(),
                run_id: Some(run.id.clone()),
                tool_use_id: "toolu_scripted_0_0".into(),
                tool_name: "Bash".into(),
                input_sha256: norma::runtime::approvals::input_digest(&input),
                input: input.clone(),
                reason: "Bash needs approval".into(),
                expires_at: chrono::Utc::now() + chrono::Duration::minutes(10),
            },
            u32::MAX,
        )
        .await
        .unwrap();
    prepared
        .write(
            &session,
            &lease,
            vec![],
            vec![
                ("model_request", json!({ "request": 1 })),
                (
                    "tool_call",
                    json!({ "tool_use_id": "toolu_scripted_0_0", "name": "Bash", "input": input }),
                ),
                ("approval_requested", json!({ "approval": approval })),
            ],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");

    // The new process waits on the same request; it is still answerable.
    app.wait_for_events(&token, session.as_str(), |e| count(e, "run_resumed") == 1)
        .await;
    assert_eq!(
        app.first_pending_approval(&token, session.as_str()).await,
        approval_id.as_str()
    );
    let answered = app
        .answer(
            &token,
            session.as_str(),
            approval_id.as_str(),
            &json!({ "decision": "allow" }),
        )
        .await;
    assert_eq!(answered.status(), 200);
    let record = wait_for_run(&app, &token, &session, &run.id).await;
    assert_eq!(record["status"], "completed", "{record}");

    let all: Value = app
        .get(&format!("/v1/sessions/{session}/approvals"), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        all["approvals"].as_array().unwrap().len(),
        1,
        "the approval was reused, not asked again"
    );
    let marker = app
        .data_dir()
        .join("workspaces/acme")
        .join(session.as_str())
        .join("marker");
    assert_eq!(std::fs::read_to_string(marker).unwrap(), "ran\n");
    let results = tool_results(&app.messages(&token, session.as_str()).await);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["is_error"], false);
    let events = app.events(&token, session.as_str()).await;
    assert_contiguous(&events);
    let resumed = events.iter().find(|e| e["type"] == "run_resumed").unwrap();
    assert_eq!(resumed["payload"]["rerun"], json!(["toolu_scripted_0_0"]));
    assert_eq!(count(&events, "approval_requested"), 1);
    assert_eq!(count(&events, "approval_decided"), 1);
}

async fn mid_model_call_is_reissued(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let session = prepared
        .session(json!({ "model": {"script": {"turns": [{"text": "the full answer"}]}} }))
        .await;
    let run = prepared
        .crashed_run(&session, "hello", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    prepared
        .write(
            &session,
            &lease,
            vec![],
            vec![
                ("model_request", json!({ "request": 1 })),
                ("assistant_delta", json!({ "text": "the fu" })),
            ],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");
    let record = wait_for_run(&app, &token, &session, &run.id).await;
    assert_eq!(record["status"], "completed");
    assert_eq!(record["terminal"]["reason"], "end_turn");
    let messages = app.messages(&token, session.as_str()).await;
    let list = messages["messages"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{messages:#}");
    assert_eq!(list[0]["content"][0]["text"], "hello");
    assert_eq!(list[1]["content"][0]["text"], "the full answer");
    let events = app.events(&token, session.as_str()).await;
    assert_contiguous(&events);
    assert_eq!(
        count(&events, "model_request"),
        2,
        "the call was issued again"
    );
    assert_eq!(count(&events, "run_started"), 1);
}

async fn live_lease_is_respected(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let session = prepared
        .session(json!({ "model": {"script": {"turns": [{"text": "x"}]}} }))
        .await;
    let run = prepared
        .crashed_run(&session, "hello", Duration::from_secs(600))
        .await;
    let (app, store) = prepared.start().await;
    let token = app.token("acme");
    // Another replica holds the run (its lease is live): through start-up and a takeover
    // sweep, this replica leaves it alone.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let record: Value = app
        .get(&format!("/v1/sessions/{session}/runs/{}", run.id), &token)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(record["status"], "running");
    assert_eq!(record["owner"], OLD_REPLICA);
    assert_eq!(record["fence"], 1);
    let events = store
        .list_events(&TenantId::new("acme"), &session, 0, 100)
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "only the dead replica's run_started");
}

async fn queued_prompts_survive(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let session = prepared
        .session(json!({ "model": {"script": {"turns": [
            {"text": "one: {{last_user_text}}"},
            {"text": "two: {{last_user_text}}"}
        ]}} }))
        .await;
    let first = prepared
        .crashed_run(&session, "first", Duration::from_millis(1))
        .await;
    let queued = prepared
        .store
        .create_run(
            &TenantId::new("acme"),
            NewRun {
                id: RunId::generate(),
                session: session.clone(),
                prompt: "second".into(),
            },
            None,
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");
    assert_eq!(
        wait_for_run(&app, &token, &session, &queued.id).await["status"],
        "completed"
    );
    assert_eq!(
        wait_for_run(&app, &token, &session, &first.id).await["status"],
        "completed"
    );
    let messages = app.messages(&token, session.as_str()).await;
    let texts: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, vec!["first", "one: first", "second", "two: second"]);
    assert_contiguous(&app.events(&token, session.as_str()).await);
}

/// The crashed replica had recorded the approval's decision (`approval_decided`) but not run
/// the call yet: the resumed run runs it under that decision without telling it again.
async fn recorded_decision_not_repeated(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let input = json!({ "command": "echo ran >> marker" });
    let session = prepared
        .session(json!({ "model": {"script": marker_script("echo ran >> marker")} }))
        .await;
    let run = prepared
        .crashed_run(&session, "go", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    let tenant = TenantId::new("acme");
    let approval_id = norma::ids::ApprovalId::generate();
    let requested = prepared
        .store
        .create_approval(
            &tenant,
            NewApproval {
                id: approval_id.clone(),
                session: session.clone(),
                run_id: Some(run.id.clone()),
                tool_use_id: "toolu_scripted_0_0".into(),
                tool_name: "Bash".into(),
                input_sha256: norma::runtime::approvals::input_digest(&input),
                input: input.clone(),
                reason: "Bash needs approval".into(),
                expires_at: chrono::Utc::now() + chrono::Duration::minutes(10),
            },
            u32::MAX,
        )
        .await
        .unwrap();
    let decided = prepared
        .store
        .decide_approval(
            &tenant,
            &session,
            &approval_id,
            norma::store::ApprovalDecision {
                status: norma::store::ApprovalStatus::Allowed,
                decided_by: "user-of-acme".into(),
                reason: None,
                updated_input: None,
                grant: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    prepared
        .write(
            &session,
            &lease,
            vec![],
            vec![
                ("model_request", json!({ "request": 1 })),
                (
                    "tool_call",
                    json!({ "tool_use_id": "toolu_scripted_0_0", "name": "Bash", "input": input }),
                ),
                ("approval_requested", json!({ "approval": requested })),
                ("approval_decided", json!({ "approval": decided })),
            ],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");
    let record = wait_for_run(&app, &token, &session, &run.id).await;
    assert_eq!(record["status"], "completed", "{record}");
    let marker = app
        .data_dir()
        .join("workspaces/acme")
        .join(session.as_str())
        .join("marker");
    assert_eq!(std::fs::read_to_string(marker).unwrap(), "ran\n");
    let events = app.events(&token, session.as_str()).await;
    assert_contiguous(&events);
    assert_eq!(count(&events, "run_resumed"), 1);
    assert_eq!(count(&events, "approval_requested"), 1);
    assert_eq!(
        count(&events, "approval_decided"),
        1,
        "the recorded decision is not told again: {events:#?}"
    );
}

/// The usage ledger rows the crashed replica committed count in the resumed run's totals
/// and in its terminal `usage` event (not only the calls made after the resume).
async fn usage_before_resume_counts(backend: Backend) {
    let Some(prepared) = Prepared::new(backend).await else {
        return;
    };
    let session = prepared
        .session(json!({ "model": {"script": {"turns": [{"text": "the full answer"}]}} }))
        .await;
    let run = prepared
        .crashed_run(&session, "hello", Duration::from_millis(1))
        .await;
    let lease = run.lease().unwrap();
    // Before crashing mid-call, the old replica had committed one model call (a compaction
    // summary) with its usage row.
    prepared
        .store
        .append(
            &TenantId::new("acme"),
            &session,
            AppendBatch {
                events: vec![NewEvent {
                    kind: "model_request".into(),
                    payload: json!({ "request": 1 }).into(),
                    run_id: Some(run.id.clone()),
                }],
                usage: vec![norma::usage::NewUsageRecord {
                    run_id: run.id.clone(),
                    provider: "scripted".into(),
                    model: String::new(),
                    tokens: norma::usage::TokenCounts {
                        input_tokens: 1000,
                        output_tokens: 200,
                        cache_read_tokens: 0,
                        cache_write_tokens: 0,
                    },
                    cost_pico: None,
                }],
                lease: Some(lease.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (app, _store) = prepared.start().await;
    let token = app.token("acme");
    let record = wait_for_run(&app, &token, &session, &run.id).await;
    assert_eq!(record["status"], "completed", "{record}");
    assert_eq!(record["usage"]["model_calls"], 2, "{record}");
    assert!(record["usage"]["input_tokens"].as_u64().unwrap() > 1000);
    assert!(record["usage"]["output_tokens"].as_u64().unwrap() > 200);
    let events = app.events(&token, session.as_str()).await;
    let usage = events.iter().find(|e| e["type"] == "usage").unwrap();
    assert_eq!(usage["payload"]["model_calls"], 2, "{usage}");
    assert_eq!(
        usage["payload"]["output_tokens"], record["usage"]["output_tokens"],
        "the event and the ledger agree"
    );
}
