//! Pages of events and messages on both stores end at their byte bound (`PAGE_BYTES`) as well
//! as their row count: a session of large events or messages is read in pages of about 4 MiB,
//! one row larger than that alone, and a run's history (`list_messages`) is still read whole.
//! Pages of runs end likewise at 4 MiB of prompts, pages of approvals at 4 MiB of inputs.

use crate::store::new_session;
use norma::ids::{ApprovalId, RunId, TenantId};
use norma::limits::RunCaps;
use norma::message::Message;
use norma::store::{
    AppendBatch, ApprovalStatus, NewApproval, NewEvent, NewMessage, NewRun, PAGE_BYTES, Store,
};
use serde_json::json;
use std::sync::Arc;

/// Payload text of about a quarter of a page.
fn quarter() -> String {
    "x".repeat(PAGE_BYTES / 4)
}

/// The seqs of every page `page` reads (given the last seq read), from the start until an
/// empty one.
async fn seq_pages<F, Fut>(page: F) -> Vec<Vec<i64>>
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = Vec<i64>>,
{
    let mut pages = Vec::new();
    let mut after = 0;
    loop {
        let seqs = page(after).await;
        let Some(&last) = seqs.last() else {
            return pages;
        };
        after = last;
        pages.push(seqs);
    }
}

pub(crate) async fn pages_of_events_and_messages_end_at_their_byte_bound(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    // Six events and six messages of a quarter page each, then one of a page and a half.
    let mut events: Vec<NewEvent> = (0..6)
        .map(|n| NewEvent {
            kind: "assistant_message".into(),
            payload: json!({"n": n, "text": quarter()}).into(),
            run_id: None,
        })
        .collect();
    events.push(NewEvent {
        kind: "assistant_message".into(),
        payload: json!({"n": 6, "text": "y".repeat(PAGE_BYTES * 3 / 2)}).into(),
        run_id: None,
    });
    let mut messages: Vec<NewMessage> = (0..6)
        .map(|_| NewMessage {
            message: Message::assistant_text(quarter()),
            run_id: None,
            compaction_boundary: false,
        })
        .collect();
    messages.push(NewMessage {
        message: Message::user_text("y".repeat(PAGE_BYTES * 3 / 2)),
        run_id: None,
        compaction_boundary: false,
    });
    store
        .append(
            &tenant,
            &id,
            AppendBatch {
                events,
                messages,
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // Four quarters (a little over: the JSON around the text) fill a page; the row that
    // crosses the bound is the page's last.
    let (reader, tenant_ref, id_ref) = (&store, &tenant, &id);
    let events = seq_pages(|after| async move {
        let page = reader
            .list_events(tenant_ref, id_ref, after, 1000)
            .await
            .unwrap();
        page.iter().map(|e| e.seq).collect()
    })
    .await;
    assert_eq!(events, [vec![1, 2, 3, 4], vec![5, 6, 7]]);
    // The row count still bounds a page.
    let two = store.list_events(&tenant, &id, 0, 2).await.unwrap();
    assert_eq!(two.len(), 2);
    // A row larger than a page comes alone.
    let big = store.list_events(&tenant, &id, 6, 1000).await.unwrap();
    assert_eq!(big.len(), 1);
    assert_eq!(big[0].payload.value()["n"], 6);

    let messages = seq_pages(|after| async move {
        let page = reader
            .list_messages_page(tenant_ref, id_ref, after, 1000)
            .await
            .unwrap();
        page.iter().map(|m| m.seq).collect()
    })
    .await;
    assert_eq!(messages, [vec![1, 2, 3, 4], vec![5, 6, 7]]);
    // A run's history is read whole.
    let whole = store
        .list_messages(&tenant, &id, 0, u32::MAX)
        .await
        .unwrap();
    assert_eq!(whole.len(), 7);
}

pub(crate) async fn pages_of_runs_end_at_their_byte_bound(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        let run = store
            .create_run(
                &tenant,
                NewRun {
                    id: RunId::generate(),
                    session: id.clone(),
                    prompt: quarter(),
                },
                None,
                RunCaps::UNLIMITED,
            )
            .await
            .unwrap();
        ids.push(run.id);
    }
    let first = store.list_runs(&tenant, &id, None, 1000).await.unwrap();
    let first: Vec<String> = first.into_iter().map(|run| run.id).collect();
    assert_eq!(first, ids[..4]);
    let last = RunId::from_string(first[3].clone());
    let rest = store
        .list_runs(&tenant, &id, Some(&last), 1000)
        .await
        .unwrap();
    let rest: Vec<String> = rest.into_iter().map(|run| run.id).collect();
    assert_eq!(rest, ids[4..]);
}

pub(crate) async fn pages_of_approvals_end_at_their_byte_bound(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let mut ids = Vec::new();
    for n in 0..6 {
        let approval = ApprovalId::generate();
        store
            .create_approval(
                &tenant,
                NewApproval {
                    id: approval.clone(),
                    session: id.clone(),
                    run_id: None,
                    tool_use_id: format!("toolu_{n}"),
                    tool_name: "Write".into(),
                    input: json!({"content": quarter()}),
                    input_sha256: "0".repeat(64),
                    reason: "needs approval".into(),
                    expires_at: chrono::Utc::now() + chrono::Duration::minutes(5),
                },
                100,
            )
            .await
            .unwrap();
        ids.push(approval.as_str().to_owned());
    }
    let page = |after: Option<String>, status: Option<ApprovalStatus>, limit: u32| {
        let store = store.clone();
        let (tenant, id) = (tenant.clone(), id.clone());
        async move {
            let after = after.map(ApprovalId::from_string);
            store
                .list_approvals_page(&tenant, &id, status, after.as_ref(), limit)
                .await
                .unwrap()
                .into_iter()
                .map(|approval| approval.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page(None, None, 1000).await, ids[..4]);
    assert_eq!(page(Some(ids[3].clone()), None, 1000).await, ids[4..]);
    let pending = Some(ApprovalStatus::Pending);
    assert_eq!(page(Some(ids[0].clone()), pending, 2).await, ids[1..3]);
    assert!(
        page(None, Some(ApprovalStatus::Denied), 1000)
            .await
            .is_empty()
    );
}
