//! One store test suite, run against SQLite and Postgres; plus the Postgres row-level-security
//! proof that a query forgetting its tenant filter sees nothing of other tenants.

use norma::ids::{OutputId, SessionId, TenantId};
use norma::message::{ContentBlock, Message, Role, ToolResultBlock};
use norma::store::{
    AppendBatch, AppendResult, ConnectOptions, NewEvent, NewMessage, NewOutput, NewSession,
    SessionStatus, Store, StoreError,
};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::sync::Arc;

use crate::store_fork::a_fork_is_written_whole_or_not_at_all;
use crate::store_groups::{
    appends_of_many_sessions_at_once_keep_their_own_fence_and_errors,
    creations_holds_admissions_and_appends_at_once_each_get_their_own_answer,
    run_ends_are_written_whole_run_after_run,
};
use crate::store_limits::{
    a_replica_releases_the_holds_its_id_took_before_a_time,
    a_session_hold_reads_and_holds_only_the_tenants_session,
    concurrent_admissions_never_pass_a_cap, concurrent_session_creations_never_pass_the_open_cap,
    holds_are_capped_released_and_expire,
    open_sessions_are_counted_per_tenant_through_creations_and_closes,
    pending_approvals_are_capped_per_tenant, run_admission_counts_live_running_and_queued_runs,
    spend_totals_sum_every_session_of_the_tenant, workspace_bytes_sum_open_sessions_of_the_tenant,
};
use crate::store_pages::{
    pages_of_approvals_end_at_their_byte_bound,
    pages_of_events_and_messages_end_at_their_byte_bound, pages_of_runs_end_at_their_byte_bound,
};
use crate::store_permissions::{
    a_started_run_comes_with_the_permission_state_it_starts_from,
    permission_state_reads_live_grants_and_the_mode_override_together,
};
use crate::store_runs::{
    a_resumed_run_finds_its_own_request_for_a_call,
    cancels_are_recorded_for_the_replica_holding_the_run,
    queued_runs_are_claimed_in_order_and_cancellable,
    released_leases_are_claimable_at_once_and_fence_the_releaser,
    run_leases_are_exclusive_and_fence_stale_writers,
};
use crate::store_webhooks::{
    a_tenants_backlog_past_its_cap_is_failed_unsent,
    deliveries_are_claimed_in_turns_within_each_tenants_room,
};

async fn sqlite_store() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    (
        norma::store::connect(&url, &ConnectOptions::default())
            .await
            .unwrap(),
        dir,
    )
}

async fn pg_store() -> Option<Arc<dyn Store>> {
    let url = crate::helpers::fresh_pg_database().await?;
    Some(
        norma::store::connect(&url, &ConnectOptions::default())
            .await
            .unwrap(),
    )
}

macro_rules! store_suite {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                let (store, _dir) = super::sqlite_store().await;
                super::$name(store).await;
            }
            #[tokio::test]
            async fn postgres() {
                if let Some(store) = super::pg_store().await {
                    super::$name(store).await;
                }
            }
        }
    )*};
}

store_suite!(
    sessions_round_trip,
    a_retried_batch_whose_commit_answer_was_lost_is_not_stored_twice,
    cancels_are_recorded_for_the_replica_holding_the_run,
    append_numbers_events_and_messages_contiguously,
    a_batch_of_many_events_is_stored_whole_and_in_order,
    the_idle_clock_moves_with_an_append_only_in_a_later_second,
    a_long_history_reads_whole_in_order_and_in_pages,
    concurrent_appends_never_duplicate_a_seq,
    appends_are_tenant_scoped_and_atomic,
    outputs_keep_digest_and_provenance,
    run_leases_are_exclusive_and_fence_stale_writers,
    released_leases_are_claimable_at_once_and_fence_the_releaser,
    queued_runs_are_claimed_in_order_and_cancellable,
    unlocked_tools_are_kept_per_session,
    nul_characters_are_stored_as_replacement_characters,
    run_admission_counts_live_running_and_queued_runs,
    concurrent_admissions_never_pass_a_cap,
    concurrent_session_creations_never_pass_the_open_cap,
    spend_totals_sum_every_session_of_the_tenant,
    holds_are_capped_released_and_expire,
    a_session_hold_reads_and_holds_only_the_tenants_session,
    a_replica_releases_the_holds_its_id_took_before_a_time,
    open_sessions_are_counted_per_tenant_through_creations_and_closes,
    pending_approvals_are_capped_per_tenant,
    workspace_bytes_sum_open_sessions_of_the_tenant,
    appends_of_many_sessions_at_once_keep_their_own_fence_and_errors,
    creations_holds_admissions_and_appends_at_once_each_get_their_own_answer,
    a_fork_is_written_whole_or_not_at_all,
    run_ends_are_written_whole_run_after_run,
    permission_state_reads_live_grants_and_the_mode_override_together,
    a_started_run_comes_with_the_permission_state_it_starts_from,
    deliveries_are_claimed_in_turns_within_each_tenants_room,
    pages_of_events_and_messages_end_at_their_byte_bound,
    pages_of_runs_end_at_their_byte_bound,
    pages_of_approvals_end_at_their_byte_bound,
    a_tenants_backlog_past_its_cap_is_failed_unsent,
    a_resumed_run_finds_its_own_request_for_a_call,
);

pub(crate) async fn new_session(store: &Arc<dyn Store>, tenant: &str) -> SessionId {
    let id = SessionId::generate();
    store
        .create_session(NewSession {
            id: id.clone(),
            tenant: TenantId::new(tenant),
            config: json!({"title": tenant}),
        })
        .await
        .unwrap();
    id
}

pub(crate) fn event(kind: &str, n: i64) -> NewEvent {
    NewEvent {
        kind: kind.into(),
        payload: json!({ "n": n }).into(),
        run_id: Some("run_x".into()),
    }
}

async fn sessions_round_trip(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let record = store.get_session(&tenant, &id).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Active);
    assert_eq!(record.config, json!({"title": "t1"}));
    assert_eq!(record.last_event_seq, 0);
    assert!(
        store
            .get_session(&TenantId::new("t2"), &id)
            .await
            .unwrap()
            .is_none()
    );
    let closed = store.close_session(&tenant, &id).await.unwrap().unwrap();
    assert_eq!(closed.status, SessionStatus::Closed);
    assert!(
        store
            .close_session(&TenantId::new("t2"), &id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store.list_sessions(&tenant, None, 10).await.unwrap().len(),
        1
    );
    // Duplicate ids are a conflict, never an overwrite.
    let duplicate = store
        .create_session(NewSession {
            id: id.clone(),
            tenant: tenant.clone(),
            config: json!({}),
        })
        .await;
    assert!(
        matches!(duplicate, Err(StoreError::Conflict(_))),
        "{duplicate:?}"
    );
}

async fn append_numbers_events_and_messages_contiguously(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let first = store
        .append(
            &tenant,
            &id,
            AppendBatch {
                events: vec![event("a", 1), event("b", 2)],
                messages: vec![NewMessage {
                    message: Message::user_text("hi"),
                    run_id: None,
                    compaction_boundary: false,
                }],
                outputs: vec![],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        first.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(first.messages[0].seq, 1);
    let assistant = Message {
        role: Role::Assistant,
        content: vec![
            ContentBlock::Text { text: "ok".into() },
            ContentBlock::ToolUse {
                id: "tu1".into(),
                name: "Read".into(),
                input: json!({"file_path": "a"}),
            },
        ],
    };
    let second = store
        .append(
            &tenant,
            &id,
            AppendBatch {
                events: vec![event("c", 3)],
                messages: vec![NewMessage {
                    message: assistant.clone(),
                    run_id: Some("run_x".into()),
                    compaction_boundary: true,
                }],
                outputs: vec![],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(second.events[0].seq, 3);
    assert_eq!(second.messages[0].seq, 2);

    let events = store.list_events(&tenant, &id, 0, 100).await.unwrap();
    assert_eq!(
        events,
        [first.events.clone(), second.events.clone()].concat(),
        "read back equals written"
    );
    assert_eq!(
        store.list_events(&tenant, &id, 2, 100).await.unwrap(),
        second.events
    );
    assert_eq!(
        store.list_events(&tenant, &id, 0, 1).await.unwrap().len(),
        1
    );
    let messages = store.list_messages(&tenant, &id, 0, 100).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[1].to_message(), assistant);
    assert!(messages[1].compaction_boundary);
    assert_eq!(
        store
            .get_session(&tenant, &id)
            .await
            .unwrap()
            .unwrap()
            .last_event_seq,
        3
    );
}

/// A history longer than what SQLite reads on the caller's thread (64 messages; the rest
/// through sqlx from where that read ended) comes back whole, in order, and cut at `limit`.
async fn a_long_history_reads_whole_in_order_and_in_pages(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    for chunk in 0..5 {
        let messages = (0..40)
            .map(|i| NewMessage {
                message: Message::user_text(format!("m{}", chunk * 40 + i + 1)),
                run_id: None,
                compaction_boundary: false,
            })
            .collect();
        store
            .append(
                &tenant,
                &id,
                AppendBatch {
                    messages,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let text = |record: &norma::store::MessageRecord| match &record.to_message().content[0] {
        ContentBlock::Text { text } => text.clone(),
        other => panic!("{other:?}"),
    };
    let all = store
        .list_messages(&tenant, &id, 0, u32::MAX)
        .await
        .unwrap();
    assert_eq!(all.len(), 200);
    for (i, record) in all.iter().enumerate() {
        assert_eq!(record.seq, i as i64 + 1);
        assert_eq!(text(record), format!("m{}", i + 1));
    }
    for (after, limit, expected) in [
        (0, 64, 64),
        (0, 65, 65),
        (0, 100, 100),
        (150, 1000, 50),
        (10, 64, 64),
        (199, 10, 1),
        (200, 10, 0),
    ] {
        let page = store
            .list_messages(&tenant, &id, after, limit)
            .await
            .unwrap();
        assert_eq!(page.len(), expected, "after {after}, limit {limit}");
        assert!(
            page.iter()
                .zip(after + 1..)
                .all(|(record, seq)| record.seq == seq),
            "after {after}, limit {limit}"
        );
    }
    // Another tenant reads nothing of it.
    assert!(
        store
            .list_messages(&TenantId::new("t2"), &id, 0, u32::MAX)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn concurrent_appends_never_duplicate_a_seq(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (store, tenant, id) = (store.clone(), tenant.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0..10 {
                store
                    .append(
                        &tenant,
                        &id,
                        AppendBatch {
                            events: vec![event("w", worker * 100 + n), event("w", -1)],
                            ..Default::default()
                        },
                    )
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let seqs: Vec<i64> = store
        .list_events(&tenant, &id, 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        seqs,
        (1..=160).collect::<Vec<_>>(),
        "contiguous, unique, ordered"
    );
}

/// A batch of more events than one statement writes on SQLite (16) — 37, then 3 — is stored
/// whole: every event at its own seq with its own kind, payload and run.
async fn a_batch_of_many_events_is_stored_whole_and_in_order(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let batch = |from: i64, count: i64| AppendBatch {
        events: (from..from + count)
            .map(|n| NewEvent {
                kind: format!("kind_{}", n % 5),
                payload: json!({ "n": n, "text": "x".repeat(n as usize * 10) }).into(),
                run_id: (n % 2 == 0).then(|| format!("run_{n}")),
            })
            .collect(),
        ..Default::default()
    };
    let first = store.append(&tenant, &id, batch(1, 37)).await.unwrap();
    assert_eq!(first.events.first().map(|e| e.seq), Some(1));
    let second = store.append(&tenant, &id, batch(38, 3)).await.unwrap();
    assert_eq!(second.events.first().map(|e| e.seq), Some(38));
    let stored = store.list_events(&tenant, &id, 0, 100).await.unwrap();
    assert_eq!(stored.len(), 40);
    for (event, n) in stored.iter().zip(1_i64..) {
        assert_eq!(event.seq, n);
        assert_eq!(event.kind, format!("kind_{}", n % 5));
        assert_eq!(event.payload.value()["n"], n, "{event:?}");
        assert_eq!(
            event.payload.value()["text"].as_str().map(str::len),
            Some(n as usize * 10)
        );
        assert_eq!(event.run_id, (n % 2 == 0).then(|| format!("run_{n}")));
    }
}

/// One event appended by `tenant` to `session`.
async fn append_one_event(
    store: &Arc<dyn Store>,
    tenant: &str,
    session: &SessionId,
) -> Result<AppendResult, StoreError> {
    let batch = AppendBatch {
        events: vec![event("x", 1)],
        ..Default::default()
    };
    store.append(&TenantId::new(tenant), session, batch).await
}

async fn appends_are_tenant_scoped_and_atomic(store: Arc<dyn Store>) {
    let id = new_session(&store, "owner").await;
    let intruder = append_one_event(&store, "intruder", &id).await;
    assert!(
        matches!(intruder, Err(StoreError::NotFound)),
        "{intruder:?}"
    );
    // A session that does not exist takes no rows (on SQLite no foreign key checks the
    // session any more: the append's update of the session row does).
    let missing = SessionId::generate();
    let appended = append_one_event(&store, "owner", &missing).await;
    assert!(
        matches!(appended, Err(StoreError::NotFound)),
        "{appended:?}"
    );
    assert!(
        store
            .list_events(&TenantId::new("owner"), &missing, 0, 10)
            .await
            .map_or(true, |events| events.is_empty())
    );
    // A batch whose output collides with an existing id fails as a whole.
    let output_id = OutputId::generate();
    let output = NewOutput {
        id: output_id.clone(),
        tool_use_id: "tu".into(),
        tool_name: "Bash".into(),
        content: "x".into(),
        sha256: "00".into(),
    };
    let owner = TenantId::new("owner");
    store
        .append(
            &owner,
            &id,
            AppendBatch {
                outputs: vec![output.clone()],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let failed = store
        .append(
            &owner,
            &id,
            AppendBatch {
                events: vec![event("y", 1)],
                outputs: vec![output],
                ..Default::default()
            },
        )
        .await;
    assert!(failed.is_err());
    assert!(
        store
            .list_events(&owner, &id, 0, 10)
            .await
            .unwrap()
            .is_empty(),
        "no partial write"
    );
    assert_eq!(
        store
            .get_session(&owner, &id)
            .await
            .unwrap()
            .unwrap()
            .last_event_seq,
        0
    );
    assert!(
        store
            .list_events(&TenantId::new("intruder"), &id, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn outputs_keep_digest_and_provenance(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let content = "é".repeat(40_000);
    let sha256 = hex::encode(Sha256::digest(content.as_bytes()));
    let output_id = OutputId::generate();
    let result = ToolResultBlock {
        output_id: Some(output_id.to_string()),
        capped: true,
        ..ToolResultBlock::ok("tu_9", "head…")
    };
    store
        .append(
            &tenant,
            &id,
            AppendBatch {
                messages: vec![NewMessage {
                    message: Message {
                        role: Role::User,
                        content: vec![ContentBlock::ToolResult(result)],
                    },
                    run_id: None,
                    compaction_boundary: false,
                }],
                outputs: vec![NewOutput {
                    id: output_id.clone(),
                    tool_use_id: "tu_9".into(),
                    tool_name: "Bash".into(),
                    content: content.clone(),
                    sha256: sha256.clone(),
                }],
                events: vec![],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let stored = store
        .get_output(&tenant, &id, &output_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.content, content);
    assert_eq!(stored.sha256, sha256);
    assert_eq!(stored.size_bytes, content.len() as i64);
    assert_eq!(
        (stored.tool_use_id.as_str(), stored.tool_name.as_str()),
        ("tu_9", "Bash")
    );
    assert!(
        store
            .get_output(&TenantId::new("t2"), &id, &output_id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .purge_outputs(std::time::Duration::from_secs(3600))
            .await
            .unwrap(),
        0
    );
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(
        store
            .purge_outputs(std::time::Duration::from_millis(1))
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .get_output(&tenant, &id, &output_id)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn postgres_row_level_security_hides_other_tenants_from_unfiltered_queries() {
    let Some(url) = crate::helpers::fresh_pg_database().await else {
        return;
    };
    let store = norma::store::postgres::PgStore::connect(&url, &ConnectOptions::default())
        .await
        .unwrap();
    for tenant in ["alpha", "beta"] {
        let id = SessionId::generate();
        store
            .create_session(NewSession {
                id: id.clone(),
                tenant: TenantId::new(tenant),
                config: json!({}),
            })
            .await
            .unwrap();
        store
            .append(
                &TenantId::new(tenant),
                &id,
                AppendBatch {
                    events: vec![event("e", 1)],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    // A query that "forgets" its tenant filter, inside alpha's transaction.
    let mut tx = store.tenant_tx(&TenantId::new("alpha")).await.unwrap();
    let tenants: Vec<String> = sqlx::query_scalar("SELECT tenant_id FROM sessions")
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    assert_eq!(tenants, vec!["alpha".to_owned()]);
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(events, 1);
    // Writing another tenant's row is refused by the policy's WITH CHECK.
    let forged = sqlx::query(
        "INSERT INTO sessions (id, tenant_id, config) VALUES ('ses_forged', 'beta', '{}')",
    )
    .execute(&mut *tx)
    .await;
    assert!(forged.is_err(), "cross-tenant insert must fail");
    drop(tx);

    // The app role with no tenant set sees nothing at all.
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query("SELECT set_config('role', 'norma_app', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let visible: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(visible, 0);
}

async fn unlocked_tools_are_kept_per_session(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let session = new_session(&store, "t1").await;
    let other = new_session(&store, "t1").await;
    store
        .unlock_tools(&tenant, &session, &["Grep".into(), "Glob".into()])
        .await
        .unwrap();
    // Idempotent.
    store
        .unlock_tools(&tenant, &session, &["Grep".into()])
        .await
        .unwrap();
    assert_eq!(
        store.unlocked_tools(&tenant, &session).await.unwrap(),
        vec!["Glob".to_owned(), "Grep".to_owned()]
    );
    assert!(
        store
            .unlocked_tools(&tenant, &other)
            .await
            .unwrap()
            .is_empty()
    );
    // Another tenant can neither read nor write the session's unlocks.
    let intruder = TenantId::new("t2");
    assert!(
        store
            .unlocked_tools(&intruder, &session)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .unlock_tools(&intruder, &session, &["Bash".into()])
            .await,
        Err(StoreError::NotFound)
    ));
}

/// Model and tool text with NULs (Postgres refuses them in `text` and `jsonb`) is stored on
/// both backends alike, every NUL replaced by U+FFFD; a spilled output's digest is of the
/// stored text.
async fn nul_characters_are_stored_as_replacement_characters(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let output_id = OutputId::generate();
    store
        .append(
            &tenant,
            &id,
            AppendBatch {
                messages: vec![NewMessage {
                    message: Message {
                        role: Role::Assistant,
                        content: vec![
                            ContentBlock::Text {
                                text: "a\u{0}b".into(),
                            },
                            ContentBlock::ToolUse {
                                id: "tu_1".into(),
                                name: "Bash".into(),
                                input: json!({"command": "printf \u{0}", "k\u{0}": 1}),
                            },
                        ],
                    },
                    run_id: None,
                    compaction_boundary: false,
                }],
                events: vec![NewEvent {
                    kind: "assistant_delta".into(),
                    payload: json!({"text": "x\u{0}y"}).into(),
                    run_id: None,
                }],
                outputs: vec![NewOutput {
                    id: output_id.clone(),
                    tool_use_id: "tu_1".into(),
                    tool_name: "Bash".into(),
                    content: "out\u{0}put".into(),
                    sha256: hex::encode(Sha256::digest("out\u{0}put".as_bytes())),
                }],
                ..Default::default()
            },
        )
        .await
        .expect("a NUL does not fail the write");
    let events = store.list_events(&tenant, &id, 0, 10).await.unwrap();
    assert_eq!(events[0].payload, json!({"text": "x\u{FFFD}y"}));
    let messages = store.list_messages(&tenant, &id, 0, 10).await.unwrap();
    assert_eq!(
        messages[0].content[0],
        ContentBlock::Text {
            text: "a\u{FFFD}b".into()
        }
    );
    assert!(matches!(
        &messages[0].content[1],
        ContentBlock::ToolUse { input, .. }
            if *input == json!({"command": "printf \u{FFFD}", "k\u{FFFD}": 1})
    ));
    let output = store
        .get_output(&tenant, &id, &output_id)
        .await
        .unwrap()
        .expect("output");
    assert_eq!(output.content, "out\u{FFFD}put");
    assert_eq!(
        output.sha256,
        hex::encode(Sha256::digest("out\u{FFFD}put".as_bytes()))
    );

    let todo = norma::store::TodoItem {
        id: "1".into(),
        content: "do\u{0}it".into(),
        status: norma::store::TodoStatus::Pending,
        priority: norma::store::TodoPriority::High,
    };
    store.put_todos(&tenant, &id, &[todo]).await.unwrap();
    let todos = store.get_todos(&tenant, &id).await.unwrap();
    assert_eq!(todos[0].content, "do\u{FFFD}it");
    let note = store
        .memory_put(
            &tenant,
            "notes/a",
            "n\u{0}te",
            norma::store::MemoryExpect::Absent,
        )
        .await
        .unwrap();
    assert_eq!(note.content, "n\u{FFFD}te");
}

/// The regression of "a commit's answer was lost": the writer retries the same batch (same
/// id, marked as a retry); the store answers with what the first attempt committed instead of
/// storing the events twice, and a later batch is numbered after it.
async fn a_retried_batch_whose_commit_answer_was_lost_is_not_stored_twice(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let batch = AppendBatch {
        events: vec![event("a", 1), event("b", 2)],
        messages: vec![NewMessage {
            message: Message::user_text("hi"),
            run_id: None,
            compaction_boundary: false,
        }],
        id: Some("batch-1".into()),
        ..Default::default()
    };
    let first = store.append(&tenant, &id, batch.clone()).await.unwrap();
    let retried = store
        .append(
            &tenant,
            &id,
            AppendBatch {
                retry: true,
                ..batch.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        retried.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        first.events.iter().map(|e| e.seq).collect::<Vec<_>>()
    );
    assert_eq!(retried.messages[0].seq, first.messages[0].seq);
    assert_eq!(retried.events[0].created_at, first.events[0].created_at);
    let stored = store.list_events(&tenant, &id, 0, 100).await.unwrap();
    assert_eq!(stored.len(), 2, "stored once: {stored:?}");
    assert_eq!(
        store
            .list_messages(&tenant, &id, 0, 100)
            .await
            .unwrap()
            .len(),
        1
    );
    // A retry of a batch that never committed is written (once).
    let second = store
        .append(
            &tenant,
            &id,
            AppendBatch {
                events: vec![event("c", 3)],
                id: Some("batch-2".into()),
                retry: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(second.events[0].seq, 3);
    assert_eq!(
        store.list_events(&tenant, &id, 0, 100).await.unwrap().len(),
        3
    );
}

/// The session admission count and the idle-expiry sweep read only active sessions (migration
/// 0016): SQLite's planner answers both from the partial indexes, not by scanning every
/// session the tenant ever had.
#[tokio::test]
async fn active_sessions_are_counted_and_swept_through_their_own_indexes() {
    let (store, dir) = sqlite_store().await;
    drop(store);
    let db = rusqlite::Connection::open(dir.path().join("t.db")).unwrap();
    let plan = |sql: &str, params: &[&str]| -> String {
        let mut statement = db.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = statement
            .query_map(rusqlite::params_from_iter(params), |row| {
                row.get::<_, String>(3)
            })
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    };
    let count = plan(
        "SELECT count(*) FROM sessions WHERE tenant_id = ? AND status = 'active'",
        &["tenant"],
    );
    assert!(count.contains("sessions_tenant_active"), "{count}");
    let idle = plan(
        "SELECT id, tenant_id FROM sessions WHERE status = 'active' AND active_at < ? \
         ORDER BY active_at LIMIT ?",
        &["2026-01-01T00:00:00Z", "10"],
    );
    assert!(idle.contains("sessions_idle_active"), "{idle}");
    assert!(!idle.contains("TEMP B-TREE"), "sorted by the index: {idle}");
}

/// The idle sweep's clock (`active_at`): a session is idle from its creation; an append moves
/// the clock when it was set in an earlier second, not at every append (which would rewrite
/// the sweep's index at every commit), while `updated_at` moves at every append.
async fn the_idle_clock_moves_with_an_append_only_in_a_later_second(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let id = new_session(&store, "acme").await;
    let idle_before = |at: chrono::DateTime<chrono::Utc>| {
        let store = store.clone();
        async move {
            store
                .list_idle_sessions(at, 100)
                .await
                .unwrap()
                .iter()
                .map(|idle| idle.id.to_string())
                .collect::<Vec<_>>()
        }
    };
    let created = store.get_session(&tenant, &id).await.unwrap().unwrap();
    let never = chrono::Duration::milliseconds(1);
    assert!(idle_before(created.created_at - never).await.is_empty());
    assert_eq!(
        idle_before(created.created_at + never).await,
        [id.to_string()]
    );
    // Just past the start of a later second than the creation's, so both appends below fall
    // in that second.
    let into_second = chrono::Utc::now().timestamp_subsec_millis();
    tokio::time::sleep(std::time::Duration::from_millis(
        u64::from(2_000 - into_second) + 10,
    ))
    .await;
    let append = |n: i64| {
        let (store, tenant, id) = (store.clone(), tenant.clone(), id.clone());
        async move {
            store
                .append(
                    &tenant,
                    &id,
                    AppendBatch {
                        events: vec![event("tick", n)],
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            store
                .get_session(&tenant, &id)
                .await
                .unwrap()
                .unwrap()
                .updated_at
        }
    };
    // In a later second than the creation, the append moves the clock to its time...
    let first = append(1).await;
    assert!(idle_before(first).await.is_empty(), "active since {first}");
    // ...and the next append, moments later in the same second, leaves it there.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let second = append(2).await;
    assert!(second > first, "updated_at moves at every append");
    let between = first + (second - first) / 2;
    assert_eq!(idle_before(between).await, [id.to_string()]);
    assert!(idle_before(first).await.is_empty());
}
