//! Appends of many sessions at once (SQLite commits them together, in one transaction): each
//! keeps its own fence, its own numbering and its own error.

use norma::ids::{RunId, SessionId, TenantId};
use norma::limits::RunCaps;
use norma::store::{
    AppendBatch, NewEvent, NewOutput, NewRun, NewSession, RunLease, Store, StoreError,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn session_with_run(store: &Arc<dyn Store>, tenant: &TenantId) -> (SessionId, RunLease) {
    let session = SessionId::generate();
    store
        .create_session(NewSession {
            id: session.clone(),
            tenant: tenant.clone(),
            config: json!({}),
        })
        .await
        .unwrap();
    let run = store
        .create_run(
            tenant,
            NewRun {
                id: RunId::generate(),
                session: session.clone(),
                prompt: "go".into(),
            },
            Some(("replica-a", Duration::from_secs(60))),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    (session, run.lease().unwrap())
}

fn batch(lease: Option<RunLease>, n: usize) -> AppendBatch {
    AppendBatch {
        events: (0..n)
            .map(|i| NewEvent {
                kind: "e".into(),
                payload: json!({ "i": i }).into(),
                run_id: None,
            })
            .collect(),
        lease,
        id: Some(uuid::Uuid::new_v4().to_string()),
        ..Default::default()
    }
}

/// A batch whose spilled output reuses `id`: it fails on its last statement, after its
/// events were written (in SQLite's shared transaction, the whole group is written again).
fn clashing_batch(lease: RunLease, id: &str) -> AppendBatch {
    AppendBatch {
        outputs: vec![NewOutput {
            id: norma::ids::OutputId::from_string(id.to_owned()),
            tool_use_id: "tu".into(),
            tool_name: "Bash".into(),
            content: "x".into(),
            sha256: "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881".into(),
        }],
        ..batch(Some(lease), 2)
    }
}

/// 16 sessions append 3 rounds at once, while a fenced-off writer (its run was claimed again),
/// a writer naming another tenant's session and a writer whose batch fails part-way (its
/// output id is taken) append among them: every good append is stored once, numbered
/// contiguously per session, the fenced one gets `LeaseLost`, the foreign one `NotFound`, the
/// clashing one an error, and none of them leaves anything behind or fails anyone else.
pub async fn appends_of_many_sessions_at_once_keep_their_own_fence_and_errors(
    store: Arc<dyn Store>,
) {
    let tenant = TenantId::new("t1");
    let mut sessions = Vec::new();
    for _ in 0..16 {
        sessions.push(session_with_run(&store, &tenant).await);
    }
    let (fenced_session, stale) = session_with_run(&store, &tenant).await;
    store
        .claim_run(
            &tenant,
            &stale.run_id,
            "replica-a",
            Duration::from_secs(60),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap()
        .expect("reclaimed");
    let (foreign_session, _) = session_with_run(&store, &TenantId::new("t2")).await;
    let (clashing_session, clashing) = session_with_run(&store, &tenant).await;
    let taken = format!("out_{}", uuid::Uuid::new_v4().simple());
    let (owner_session, owner) = session_with_run(&store, &tenant).await;
    store
        .append(&tenant, &owner_session, clashing_batch(owner, &taken))
        .await
        .expect("the first output with this id");

    for round in 0..3 {
        let mut writes = Vec::new();
        for (i, (session, lease)) in sessions.iter().enumerate() {
            let store = store.clone();
            let (tenant, session, lease) = (tenant.clone(), session.clone(), lease.clone());
            writes.push(tokio::spawn(async move {
                store
                    .append(&tenant, &session, batch(Some(lease), 1 + i % 3))
                    .await
            }));
        }
        let fenced = {
            let (store, tenant, session, stale) = (
                store.clone(),
                tenant.clone(),
                fenced_session.clone(),
                stale.clone(),
            );
            tokio::spawn(
                async move { store.append(&tenant, &session, batch(Some(stale), 2)).await },
            )
        };
        let foreign = {
            let (store, tenant, session) = (store.clone(), tenant.clone(), foreign_session.clone());
            tokio::spawn(async move { store.append(&tenant, &session, batch(None, 2)).await })
        };
        let clash = {
            let (store, tenant, session, lease, taken) = (
                store.clone(),
                tenant.clone(),
                clashing_session.clone(),
                clashing.clone(),
                taken.clone(),
            );
            tokio::spawn(async move {
                store
                    .append(&tenant, &session, clashing_batch(lease, &taken))
                    .await
            })
        };
        for (i, write) in writes.into_iter().enumerate() {
            let written = write.await.unwrap().unwrap_or_else(|error| {
                panic!("round {round}, session {i}: {error}");
            });
            let n = 1 + i as i64 % 3;
            let seqs: Vec<i64> = written.events.iter().map(|e| e.seq).collect();
            assert_eq!(
                seqs,
                ((round * n + 1)..=(round * n + n)).collect::<Vec<_>>()
            );
        }
        let fenced = fenced.await.unwrap();
        assert!(matches!(fenced, Err(StoreError::LeaseLost)), "{fenced:?}");
        let foreign = foreign.await.unwrap();
        assert!(matches!(foreign, Err(StoreError::NotFound)), "{foreign:?}");
        let clash = clash.await.unwrap();
        assert!(
            clash.is_err() && !matches!(clash, Err(StoreError::LeaseLost | StoreError::NotFound)),
            "{clash:?}"
        );
    }
    for (i, (session, _)) in sessions.iter().enumerate() {
        let stored = store.list_events(&tenant, session, 0, 100).await.unwrap();
        let n = 3 * (1 + i % 3);
        assert_eq!(
            stored.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=n as i64).collect::<Vec<_>>(),
            "session {i}"
        );
    }
    assert!(
        store
            .list_events(&tenant, &fenced_session, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_events(&tenant, &clashing_session, 0, 10)
            .await
            .unwrap()
            .is_empty(),
        "a batch that failed part-way leaves nothing"
    );
    let t2 = TenantId::new("t2");
    assert!(
        store
            .list_events(&t2, &foreign_session, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Session creations (two of them with the same idempotency key), SSE hold acquisitions over
/// the tenant's cap, run admissions over its concurrent-run cap and appends, all at once (on
/// SQLite they share the group writer's transactions): each refusal is its own and writes
/// nothing, exactly the capped number gets through, and every other write is stored.
pub async fn creations_holds_admissions_and_appends_at_once_each_get_their_own_answer(
    store: Arc<dyn Store>,
) {
    use norma::limits::{HoldCaps, HoldKind, Limit, NewHold};
    use norma::store::NewIdempotencyKey;
    let tenant = TenantId::new("t1");
    let (appending, lease) = session_with_run(&store, &tenant).await;
    let (held, _) = session_with_run(&store, &TenantId::new("t1")).await;
    let caps = RunCaps {
        concurrent_runs: 2 + 3, // the two runs above plus three
        ..RunCaps::UNLIMITED
    };
    let key = NewIdempotencyKey {
        scope: "session".into(),
        key: "same-key".into(),
        request_sha256: "0".repeat(64),
        max_live: 100,
    };
    let mut creations = Vec::new();
    for i in 0..18 {
        let (store, tenant, key) = (store.clone(), tenant.clone(), key.clone());
        creations.push(tokio::spawn(async move {
            let session = NewSession {
                id: SessionId::generate(),
                tenant,
                config: json!({ "n": i }),
            };
            let keyed = (i < 2).then_some(&key);
            store.create_session_keyed(session, u32::MAX, keyed).await
        }));
    }
    let mut holds = Vec::new();
    for i in 0..8 {
        let (store, tenant, session) = (store.clone(), tenant.clone(), held.clone());
        holds.push(tokio::spawn(async move {
            let hold = NewHold {
                id: format!("hold-{i}"),
                kind: HoldKind::SseStream,
                session,
                replica: "replica-a".into(),
                lease: Duration::from_secs(60),
            };
            let caps = HoldCaps {
                per_session: None,
                per_tenant: (Limit::SseStreams, 5),
            };
            store.acquire_hold(&tenant, hold, caps).await
        }));
    }
    let mut admissions = Vec::new();
    for _ in 0..8 {
        let (store, tenant, session) = (store.clone(), tenant.clone(), held.clone());
        admissions.push(tokio::spawn(async move {
            let run = NewRun {
                id: RunId::generate(),
                session,
                prompt: "go".into(),
            };
            let claim = Some(("replica-a", Duration::from_secs(60)));
            store.create_run(&tenant, run, claim, caps).await
        }));
    }
    let mut appends = Vec::new();
    for _ in 0..4 {
        let (store, tenant, session, lease) = (
            store.clone(),
            tenant.clone(),
            appending.clone(),
            lease.clone(),
        );
        appends.push(tokio::spawn(async move {
            store.append(&tenant, &session, batch(Some(lease), 2)).await
        }));
    }

    let mut created = 0;
    let mut key_taken = 0;
    for creation in creations {
        match creation.await.unwrap() {
            Ok(_) => created += 1,
            Err(StoreError::IdempotencyKeyTaken) => key_taken += 1,
            Err(error) => panic!("session creation: {error}"),
        }
    }
    assert_eq!((created, key_taken), (17, 1));
    let mut granted = 0;
    for hold in holds {
        match hold.await.unwrap() {
            Ok(()) => granted += 1,
            Err(StoreError::TenantLimit(exceeded)) => {
                assert_eq!(exceeded.limit, Limit::SseStreams)
            }
            Err(error) => panic!("hold: {error}"),
        }
    }
    assert_eq!(granted, 5);
    let mut admitted = 0;
    for admission in admissions {
        match admission.await.unwrap() {
            Ok(_) => admitted += 1,
            Err(StoreError::TenantLimit(exceeded)) => {
                assert_eq!(exceeded.limit, Limit::ConcurrentRuns)
            }
            Err(error) => panic!("run admission: {error}"),
        }
    }
    assert_eq!(admitted, 3);
    for append in appends {
        append.await.unwrap().expect("append");
    }
    let seqs: Vec<i64> = store
        .list_events(&tenant, &appending, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(
        store
            .count_holds(&tenant, HoldKind::SseStream, None)
            .await
            .unwrap(),
        5
    );
    // The refused admissions left no run behind.
    let runs = store.list_runs(&tenant, &held, None, 100).await.unwrap();
    assert_eq!(runs.len(), 1 + 3);
}

/// A run's end is written whole with its events (on Postgres by one statement that also ends
/// the run and checks its lease there), run after run on the same pooled connections. (The
/// ordering fault this guards against — the end's `UPDATE` evaluated before a `FOR SHARE` read
/// of the same row — was caught by `subagents_nested`, where it failed about every other run.)
pub async fn run_ends_are_written_whole_run_after_run(store: Arc<dyn Store>) {
    use norma::store::{RunEnd, RunStatus};
    let tenant = TenantId::new("ends");
    for n in 0..12 {
        let (session, lease) = session_with_run(&store, &tenant).await;
        let run_id = lease.run_id.clone();
        let ended = store
            .append(
                &tenant,
                &session,
                AppendBatch {
                    events: vec![NewEvent {
                        kind: "terminal".into(),
                        payload: json!({ "reason": "end_turn", "n": n }).into(),
                        run_id: Some(run_id.to_string()),
                    }],
                    lease: Some(lease),
                    run_end: Some(RunEnd {
                        status: RunStatus::Completed,
                        terminal: json!({ "reason": "end_turn" }),
                    }),
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|error| panic!("end of run {n}: {error}"));
        assert_eq!(ended.events[0].seq, 1, "run {n}");
        let run = store
            .get_run(&tenant, &session, &run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Completed, "run {n}");
    }
}
