//! A fork is written in ONE transaction (issue 14): the new session, its copied history, its
//! `forked` event and the Noa state and archives it keeps, or nothing of it.

use norma::ids::{SessionId, TenantId};
use norma::message::Message;
use norma::store::{
    AppendBatch, ForkedNoa, NewEvent, NewFork, NewMessage, NewNoaArchive, NewSession, Store,
};
use serde_json::json;
use std::sync::Arc;

fn history(texts: &[&str]) -> AppendBatch {
    AppendBatch {
        messages: texts
            .iter()
            .map(|text| NewMessage {
                message: Message::user_text(*text),
                run_id: None,
                compaction_boundary: false,
            })
            .collect(),
        events: vec![NewEvent {
            kind: "forked".into(),
            payload: json!({"messages_copied": texts.len()}).into(),
            run_id: None,
        }],
        ..Default::default()
    }
}

fn fork(tenant: &TenantId, source: &SessionId, noa: Option<ForkedNoa>) -> NewFork {
    NewFork {
        session: NewSession {
            id: SessionId::generate(),
            tenant: tenant.clone(),
            config: json!({"title": "fork"}),
        },
        source: source.clone(),
        batch: history(&["one", "two"]),
        noa,
        max_open: u32::MAX,
    }
}

/// A source session with two archives (`a1`, `a2`).
async fn source_with_archives(store: &Arc<dyn Store>, tenant: &TenantId) -> SessionId {
    let source = SessionId::generate();
    store
        .create_session(NewSession {
            id: source.clone(),
            tenant: tenant.clone(),
            config: json!({}),
        })
        .await
        .unwrap();
    let archives: Vec<NewNoaArchive> = (1..=2)
        .map(|ordinal| NewNoaArchive {
            ordinal,
            from_ref: "m0".into(),
            to_ref: "m1".into(),
            summary: format!("summary {ordinal}"),
            message_count: 2,
            tokens: 40,
            messages: json!([{"ref": "m0", "message": {"role": "user", "content": []}}]),
        })
        .collect();
    store
        .commit_noa(tenant, &source, &archives, &json!({"archives": 2}), 0)
        .await
        .unwrap();
    source
}

pub async fn a_fork_is_written_whole_or_not_at_all(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let source = source_with_archives(&store, &tenant).await;

    // Whole: the session, its history and event, the Noa state and the one archive it names.
    let whole = fork(
        &tenant,
        &source,
        Some(ForkedNoa {
            state: json!({"archives": 2, "snapshots": [5, 6]}),
            archives: vec![2],
        }),
    );
    let id = whole.session.id.clone();
    store.fork_session(whole).await.unwrap();
    let record = store.get_session(&tenant, &id).await.unwrap().unwrap();
    assert_eq!(record.config, json!({"title": "fork"}));
    assert_eq!(record.last_event_seq, 1);
    let messages = store.list_messages(&tenant, &id, 0, 10).await.unwrap();
    assert_eq!(
        messages.iter().map(|m| m.seq).collect::<Vec<_>>(),
        [1, 2],
        "numbered from 1 in the fork"
    );
    let events = store.list_events(&tenant, &id, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "forked");
    let state = store.noa_state(&tenant, &id).await.unwrap().unwrap();
    assert_eq!(state.version, 1);
    assert_eq!(state.state["snapshots"], json!([5, 6]));
    let archives = store.list_noa_archives(&tenant, &id, 0, 10).await.unwrap();
    assert_eq!(
        archives.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
        ["a2"]
    );
    let copied = store
        .get_noa_archive(&tenant, &id, 2)
        .await
        .unwrap()
        .unwrap();
    let original = store
        .get_noa_archive(&tenant, &source, 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(copied, original, "copied with its originals");
    // The source keeps its own.
    assert_eq!(
        store
            .list_noa_archives(&tenant, &source, 0, 10)
            .await
            .unwrap()
            .len(),
        2
    );

    // A fork whose last part fails (its state names an archive the source does not have)
    // leaves nothing: no session, no history, no state.
    let broken = fork(
        &tenant,
        &source,
        Some(ForkedNoa {
            state: json!({"archives": 3}),
            archives: vec![1, 3],
        }),
    );
    let id = broken.session.id.clone();
    let open_before = store.count_open_sessions(&tenant).await.unwrap();
    assert!(store.fork_session(broken).await.is_err());
    assert!(store.get_session(&tenant, &id).await.unwrap().is_none());
    assert!(
        store
            .list_messages(&tenant, &id, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.noa_state(&tenant, &id).await.unwrap().is_none());
    assert_eq!(
        store.count_open_sessions(&tenant).await.unwrap(),
        open_before
    );

    // Another tenant's archives are never copied: the same ordinals, named from another
    // tenant, find nothing, and the fork fails whole.
    let other = TenantId::new("t2");
    let stolen = fork(
        &other,
        &source,
        Some(ForkedNoa {
            state: json!({"archives": 2}),
            archives: vec![1],
        }),
    );
    let id = stolen.session.id.clone();
    assert!(store.fork_session(stolen).await.is_err());
    assert!(store.get_session(&other, &id).await.unwrap().is_none());

    // Without Noa a fork is the session and its append, and the store keeps serving.
    let plain = fork(&tenant, &source, None);
    let id = plain.session.id.clone();
    store.fork_session(plain).await.unwrap();
    assert!(store.noa_state(&tenant, &id).await.unwrap().is_none());
    assert_eq!(
        store
            .list_messages(&tenant, &id, 0, 10)
            .await
            .unwrap()
            .len(),
        2
    );
}
