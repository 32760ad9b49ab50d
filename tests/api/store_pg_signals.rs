//! The signals between replicas on Postgres (`store::pg_notifier`): `events` sent after each
//! append commits — by the one-statement path and by the transaction path (a retry) — and
//! heard by the other replica's listener with the right range, while a replica never hears its
//! own; `approval_decided` after each decision's commit; none while a replica is alone.

use norma::ids::{ApprovalId, GrantId, SessionId, TenantId};
use norma::store::postgres::PgStore;
use norma::store::{
    AppendBatch, ApprovalDecision, ApprovalStatus, ConnectOptions, GrantScope, NewEvent, NewGrant,
    NewSession, Signal, Store,
};
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

fn events(n: usize) -> AppendBatch {
    AppendBatch {
        events: (0..n)
            .map(|i| NewEvent {
                kind: "note".into(),
                payload: json!({ "n": i }).into(),
                run_id: None,
            })
            .collect(),
        ..Default::default()
    }
}

/// The next `events` signal heard (other signals skipped), within a bound.
async fn next_events(signals: &mut UnboundedReceiver<Signal>) -> (SessionId, i64, i64) {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Signal::Events {
                session,
                first,
                last,
                ..
            } = signals.recv().await.expect("the listener runs")
            {
                return (session, first, last);
            }
        }
    })
    .await
    .expect("an events signal within 10 s")
}

/// Two stores on the database at `url` (two replicas) and a session B created.
async fn two_replicas_and_a_session(url: &str) -> (PgStore, PgStore, TenantId, SessionId) {
    let a = PgStore::connect(url, &ConnectOptions::default())
        .await
        .unwrap();
    let b = PgStore::connect(url, &ConnectOptions::default())
        .await
        .unwrap();
    let tenant = TenantId::new("acme");
    let session = SessionId::generate();
    b.create_session(NewSession {
        id: session.clone(),
        tenant: tenant.clone(),
        config: json!({}),
    })
    .await
    .unwrap();
    (a, b, tenant, session)
}

#[tokio::test]
async fn events_signals_reach_the_other_replica_after_each_commit() {
    let Some(url) = crate::helpers::fresh_pg_database().await else {
        return;
    };
    let (a, b, tenant, session) = two_replicas_and_a_session(&url).await;
    let mut heard_by_a = a.signals().await.unwrap().expect("Postgres signals");
    let mut heard_by_b = b.signals().await.unwrap().expect("Postgres signals");

    // One statement: events 1..=3.
    b.append(&tenant, &session, events(3)).await.unwrap();
    assert_eq!(next_events(&mut heard_by_a).await, (session.clone(), 1, 3));
    // The transaction path (a retry of a batch that never committed): events 4..=5.
    let retry = AppendBatch {
        id: Some("batch-1".into()),
        retry: true,
        ..events(2)
    };
    b.append(&tenant, &session, retry).await.unwrap();
    assert_eq!(next_events(&mut heard_by_a).await, (session.clone(), 4, 5));
    // An append without events signals nothing; A's own append reaches B, not A.
    b.append(&tenant, &session, AppendBatch::default())
        .await
        .unwrap();
    a.append(&tenant, &session, events(1)).await.unwrap();
    assert_eq!(next_events(&mut heard_by_b).await, (session.clone(), 6, 6));
    b.append(&tenant, &session, events(1)).await.unwrap();
    assert_eq!(
        next_events(&mut heard_by_a).await,
        (session.clone(), 7, 7),
        "A heard its own append or one without events"
    );
}

#[tokio::test]
async fn a_replica_alone_sends_no_events_signals_until_another_starts() {
    let Some(url) = crate::helpers::fresh_pg_database().await else {
        return;
    };
    let (a, b, tenant, session) = two_replicas_and_a_session(&url).await;
    let mut heard_by_a = a.signals().await.unwrap().expect("Postgres signals");
    // B believes it is alone: its appends (one statement, and a transaction) signal nothing.
    b.set_other_replicas(false);
    b.append(&tenant, &session, events(2)).await.unwrap();
    let retry = AppendBatch {
        id: Some("batch-alone".into()),
        retry: true,
        ..events(1)
    };
    b.append(&tenant, &session, retry).await.unwrap();
    // A starts and says so; B, told, signals again. The first events signal A hears is the
    // one after it, so none was sent for events 1..=3.
    a.signal(Signal::ReplicaStarted {
        replica: "replica-a".into(),
    })
    .await
    .unwrap();
    let started = tokio::time::timeout(Duration::from_secs(10), heard_by_a.recv())
        .await
        .expect("a signal within 10 s")
        .expect("the listener runs");
    assert_eq!(
        started,
        Signal::ReplicaStarted {
            replica: "replica-a".into()
        }
    );
    b.set_other_replicas(true);
    b.append(&tenant, &session, events(1)).await.unwrap();
    assert_eq!(next_events(&mut heard_by_a).await, (session.clone(), 4, 4));
}

/// The next `approval_decided` signal heard (other signals skipped), within a bound.
async fn next_decided(signals: &mut UnboundedReceiver<Signal>) -> String {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Signal::ApprovalDecided { id } = signals.recv().await.expect("the listener runs")
            {
                return id;
            }
        }
    })
    .await
    .expect("an approval_decided signal within 10 s")
}

/// A decision reaches the other replicas once committed — with or without the grant it adds —
/// and only while other replicas share the store; an answer that loses signals nothing.
#[tokio::test]
async fn approval_decisions_are_signalled_after_their_commit_to_replicas_that_share_the_store() {
    let Some(url) = crate::helpers::fresh_pg_database().await else {
        return;
    };
    let (a, b, tenant, session) = two_replicas_and_a_session(&url).await;
    let mut heard_by_a = a.signals().await.unwrap().expect("Postgres signals");
    let request = || async {
        let approval = crate::store_limits::approval(&session, chrono::Duration::minutes(5));
        let id = ApprovalId::from_string(approval.id.to_string());
        b.create_approval(&tenant, approval, 10).await.unwrap();
        id
    };
    let allow = |grant: Option<NewGrant>| ApprovalDecision {
        status: ApprovalStatus::Allowed,
        decided_by: "test".into(),
        reason: None,
        updated_input: None,
        grant,
    };
    let (alone, granted, third) = (request().await, request().await, request().await);

    // B alone: its decision is written and signals nothing.
    b.set_other_replicas(false);
    let decided = b
        .decide_approval(&tenant, &session, &alone, allow(None))
        .await;
    assert_eq!(
        decided.unwrap().expect("decided").status,
        ApprovalStatus::Allowed
    );
    b.set_other_replicas(true);
    // With a grant: one transaction, then the signal; the grant is stored.
    let grant = NewGrant {
        id: GrantId::generate(),
        session: session.clone(),
        scope: GrantScope::Session,
        rule: "Bash(true)".into(),
        created_by: "test".into(),
        approval_id: Some(granted.to_string()),
        expires_at: None,
    };
    let decided = b
        .decide_approval(&tenant, &session, &granted, allow(Some(grant.clone())))
        .await;
    assert!(decided.unwrap().is_some());
    assert_eq!(next_decided(&mut heard_by_a).await, granted.to_string());
    let grants = b.list_grants(&tenant, &session).await.unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].id, grant.id.to_string());
    // A second answer loses (nothing written, nothing signalled); the next decision is heard.
    let lost = b
        .decide_approval(&tenant, &session, &granted, allow(None))
        .await;
    assert!(lost.unwrap().is_none());
    let decided = b
        .decide_approval(&tenant, &session, &third, allow(None))
        .await;
    assert!(decided.unwrap().is_some());
    assert_eq!(next_decided(&mut heard_by_a).await, third.to_string());
}
