//! Store tests of the tenant limits (run admission, holds, pending approvals); part of the
//! shared store suite in `store.rs`, run on SQLite and Postgres.

use norma::ids::{ApprovalId, RunId, SessionId, TenantId};
use norma::limits::{HoldCaps, HoldKind, Limit, LimitExceeded, NewHold, RunCaps};
use norma::store::{
    AppendBatch, NewApproval, NewEvent, NewFork, NewRun, NewSession, Store, StoreError,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn session(store: &Arc<dyn Store>, tenant: &str) -> SessionId {
    let id = SessionId::generate();
    store
        .create_session(NewSession {
            id: id.clone(),
            tenant: TenantId::new(tenant),
            config: json!({}),
        })
        .await
        .unwrap();
    id
}

fn run(session: &SessionId) -> NewRun {
    NewRun {
        id: RunId::generate(),
        session: session.clone(),
        prompt: "p".repeat(1000),
    }
}

fn limit_of<T: std::fmt::Debug>(result: Result<T, StoreError>) -> (Limit, u64) {
    match result {
        Err(StoreError::TenantLimit(LimitExceeded { limit, max })) => (limit, max),
        other => panic!("expected a tenant limit, got {other:?}"),
    }
}

pub async fn run_admission_counts_live_running_and_queued_runs(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let (a, b) = (session(&store, "acme").await, session(&store, "acme").await);
    let other = session(&store, "other").await;
    let caps = RunCaps {
        concurrent_runs: 1,
        queued_per_session: 2,
        queued_per_tenant: 3,
    };
    let long = Duration::from_secs(60);
    let first = store
        .create_run(&tenant, run(&a), Some(("replica-a", long)), caps)
        .await
        .unwrap();
    // A second running run anywhere in the tenant is refused, on any replica.
    assert_eq!(
        limit_of(
            store
                .create_run(&tenant, run(&b), Some(("replica-b", long)), caps)
                .await
        ),
        (Limit::ConcurrentRuns, 1)
    );
    // Another tenant has its own count.
    store
        .create_run(
            &TenantId::new("other"),
            run(&other),
            Some(("replica-a", long)),
            caps,
        )
        .await
        .unwrap();
    // Queued: two per session, three per tenant.
    let queued_a = store
        .create_run(&tenant, run(&a), None, caps)
        .await
        .unwrap();
    store
        .create_run(&tenant, run(&a), None, caps)
        .await
        .unwrap();
    assert_eq!(
        limit_of(store.create_run(&tenant, run(&a), None, caps).await),
        (Limit::QueuedPromptsPerSession, 2)
    );
    let queued_b = store
        .create_run(&tenant, run(&b), None, caps)
        .await
        .unwrap();
    assert_eq!(
        limit_of(store.create_run(&tenant, run(&b), None, caps).await),
        (Limit::QueuedPrompts, 3)
    );
    // Cancelling a queued prompt frees its slot.
    assert!(
        store
            .cancel_queued_run(&tenant, &b, &RunId::from_string(queued_b.id.clone()))
            .await
            .unwrap()
    );
    store
        .create_run(&tenant, run(&b), None, caps)
        .await
        .unwrap();
    // A queued run cannot be claimed while the tenant's slot is taken...
    let queued_a_id = RunId::from_string(queued_a.id.clone());
    assert_eq!(
        limit_of(
            store
                .claim_run(&tenant, &queued_a_id, "replica-b", long, caps)
                .await
        ),
        (Limit::ConcurrentRuns, 1)
    );
    // ...but the holder re-claiming its own run is not counted twice.
    let first_id = RunId::from_string(first.id.clone());
    assert!(
        store
            .claim_run(
                &tenant,
                &first_id,
                "replica-a",
                Duration::from_millis(1),
                caps
            )
            .await
            .unwrap()
            .is_some()
    );
    // A run whose lease expired (its replica died) no longer counts.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let claimed = store
        .claim_run(&tenant, &queued_a_id, "replica-b", long, caps)
        .await
        .unwrap()
        .expect("claimable once the dead replica's lease expired");
    assert_eq!(claimed.prompt.len(), 1000, "a claim loads the prompt");
    // The sweep's listing carries no prompt and sees every tenant.
    let unfinished = store.list_unfinished_runs(100).await.unwrap();
    assert!(unfinished.iter().any(|r| r.id == claimed.id));
    assert!(unfinished.iter().any(|r| r.tenant.as_str() == "other"));
}

/// Many admissions at once (as many replicas would send them) for the last slots of a cap:
/// exactly the cap's worth are admitted, the rest refused, for running runs, queued runs,
/// holds and approval requests alike.
pub async fn concurrent_admissions_never_pass_a_cap(store: Arc<dyn Store>) {
    const AT_ONCE: usize = 12;
    let tenant = TenantId::new("acme");
    let mut sessions = Vec::new();
    for _ in 0..AT_ONCE {
        sessions.push(session(&store, "acme").await);
    }
    let caps = RunCaps {
        concurrent_runs: 3,
        queued_per_session: 100,
        queued_per_tenant: 4,
    };
    let long = Duration::from_secs(60);
    let admitted = |results: Vec<Result<(), StoreError>>, limit: Limit| {
        for result in &results {
            if let Err(error) = result {
                assert!(
                    matches!(error, StoreError::TenantLimit(LimitExceeded { limit: l, .. }) if *l == limit),
                    "{error:?}"
                );
            }
        }
        results.iter().filter(|r| r.is_ok()).count()
    };
    let running = futures::future::join_all(sessions.iter().map(|s| {
        let (store, tenant) = (store.clone(), tenant.clone());
        async move {
            store
                .create_run(&tenant, run(s), Some(("replica", long)), caps)
                .await
                .map(drop)
        }
    }))
    .await;
    assert_eq!(admitted(running, Limit::ConcurrentRuns), 3);
    let queued = futures::future::join_all(sessions.iter().map(|s| {
        let (store, tenant) = (store.clone(), tenant.clone());
        async move {
            store
                .create_run(&tenant, run(s), None, caps)
                .await
                .map(drop)
        }
    }))
    .await;
    assert_eq!(admitted(queued, Limit::QueuedPrompts), 4);
    let hold_caps = HoldCaps {
        per_session: None,
        per_tenant: (Limit::SseStreams, 5),
    };
    let holds = futures::future::join_all(sessions.iter().map(|s| {
        let (store, tenant) = (store.clone(), tenant.clone());
        async move {
            store
                .acquire_hold(
                    &tenant,
                    hold(HoldKind::SseStream, s, "replica", long),
                    hold_caps,
                )
                .await
        }
    }))
    .await;
    assert_eq!(admitted(holds, Limit::SseStreams), 5);
    let approvals = futures::future::join_all(sessions.iter().map(|s| {
        let (store, tenant) = (store.clone(), tenant.clone());
        async move {
            store
                .create_approval(&tenant, approval(s, chrono::Duration::minutes(5)), 6)
                .await
                .map(drop)
        }
    }))
    .await;
    assert_eq!(admitted(approvals, Limit::PendingApprovals), 6);
}

pub async fn concurrent_session_creations_never_pass_the_open_cap(store: Arc<dyn Store>) {
    const AT_ONCE: usize = 12;
    let new_session = |tenant: &str| NewSession {
        id: SessionId::generate(),
        tenant: TenantId::new(tenant),
        config: json!({}),
    };
    let only_sessions_refused = |results: &[Result<(), StoreError>]| {
        for result in results {
            if let Err(error) = result {
                assert!(
                    matches!(
                        error,
                        StoreError::TenantLimit(LimitExceeded {
                            limit: Limit::Sessions,
                            ..
                        })
                    ),
                    "{error:?}"
                );
            }
        }
        results.iter().filter(|r| r.is_ok()).count()
    };
    // A tenant's first sessions: nothing counted yet.
    let first = futures::future::join_all((0..AT_ONCE).map(|_| {
        let (store, session) = (store.clone(), new_session("fresh"));
        async move { store.create_session_keyed(session, 3, None).await.map(drop) }
    }))
    .await;
    assert_eq!(only_sessions_refused(&first), 3);
    assert_eq!(
        store
            .count_open_sessions(&TenantId::new("fresh"))
            .await
            .unwrap(),
        3
    );
    // Creations and forks at once, one open session (the source) already counted.
    let source = session(&store, "acme").await;
    let results = futures::future::join_all((0..AT_ONCE).map(|i| {
        let (store, session) = (store.clone(), new_session("acme"));
        let source = source.clone();
        async move {
            if i % 3 == 0 {
                store
                    .fork_session(NewFork {
                        session,
                        source,
                        batch: AppendBatch {
                            events: vec![NewEvent {
                                kind: "forked".into(),
                                payload: json!({"messages_copied": 0}).into(),
                                run_id: None,
                            }],
                            ..Default::default()
                        },
                        noa: None,
                        max_open: 6,
                    })
                    .await
            } else {
                store.create_session_keyed(session, 6, None).await.map(drop)
            }
        }
    }))
    .await;
    assert_eq!(only_sessions_refused(&results), 5);
    let acme = TenantId::new("acme");
    assert_eq!(store.count_open_sessions(&acme).await.unwrap(), 6);
    // Refused: nothing written. Closing one frees its slot; another tenant has its own count.
    assert_eq!(
        limit_of(
            store
                .create_session_keyed(new_session("acme"), 6, None)
                .await
        ),
        (Limit::Sessions, 6)
    );
    store.close_session(&acme, &source).await.unwrap().unwrap();
    store
        .create_session_keyed(new_session("acme"), 6, None)
        .await
        .unwrap();
    store
        .create_session_keyed(new_session("other"), 6, None)
        .await
        .unwrap();
}

fn hold(kind: HoldKind, session: &SessionId, replica: &str, lease: Duration) -> NewHold {
    NewHold {
        id: format!("hold_{}", uuid::Uuid::new_v4().simple()),
        kind,
        session: session.clone(),
        replica: replica.into(),
        lease,
    }
}

pub async fn holds_are_capped_released_and_expire(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let (a, b) = (session(&store, "acme").await, session(&store, "acme").await);
    let caps = HoldCaps {
        per_session: Some((Limit::ShellsPerSession, 1)),
        per_tenant: (Limit::Shells, 2),
    };
    let long = Duration::from_secs(60);
    let first = hold(HoldKind::Shell, &a, "replica-a", long);
    store
        .acquire_hold(&tenant, first.clone(), caps)
        .await
        .unwrap();
    assert_eq!(
        limit_of(
            store
                .acquire_hold(&tenant, hold(HoldKind::Shell, &a, "replica-a", long), caps)
                .await
        ),
        (Limit::ShellsPerSession, 1)
    );
    // Holds of another kind are counted apart.
    store
        .acquire_hold(
            &tenant,
            hold(HoldKind::Task, &a, "replica-a", long),
            HoldCaps {
                per_session: Some((Limit::TasksPerSession, 1)),
                per_tenant: (Limit::Tasks, 1),
            },
        )
        .await
        .unwrap();
    // A dying replica's shell: its lease is short and never renewed.
    let short = Duration::from_secs(1);
    store
        .acquire_hold(
            &tenant,
            hold(HoldKind::Shell, &b, "replica-dead", short),
            caps,
        )
        .await
        .unwrap();
    let c = session(&store, "acme").await;
    assert_eq!(
        limit_of(
            store
                .acquire_hold(&tenant, hold(HoldKind::Shell, &c, "replica-a", long), caps)
                .await
        ),
        (Limit::Shells, 2)
    );
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    // The live replica's heartbeat renews its holds, the dead one's expire.
    store.renew_leases("replica-a", long).await.unwrap();
    assert_eq!(
        store
            .count_holds(&tenant, HoldKind::Shell, None)
            .await
            .unwrap(),
        1
    );
    store
        .acquire_hold(&tenant, hold(HoldKind::Shell, &c, "replica-a", long), caps)
        .await
        .unwrap();
    // Releasing frees the slot; another tenant sees none of these.
    store.release_hold(&tenant, &first.id).await.unwrap();
    assert_eq!(
        store
            .count_holds(&tenant, HoldKind::Shell, Some(&a))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .count_holds(&TenantId::new("other"), HoldKind::Shell, None)
            .await
            .unwrap(),
        0
    );
    store
        .acquire_hold(&tenant, hold(HoldKind::Shell, &a, "replica-a", long), caps)
        .await
        .unwrap();
}

/// A stream's opening: the tenant's session read and held in one step; another tenant's (or
/// a missing) session reads as nothing and takes no hold; past the cap, the limit and no
/// hold.
pub async fn a_session_hold_reads_and_holds_only_the_tenants_session(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let ours = session(&store, "acme").await;
    let theirs = session(&store, "other").await;
    let caps = HoldCaps {
        per_session: None,
        per_tenant: (Limit::SseStreams, 1),
    };
    let long = Duration::from_secs(60);
    let stream = |session: &SessionId| hold(HoldKind::SseStream, session, "replica-a", long);
    for session in [&theirs, &SessionId::generate()] {
        let read = store
            .read_session_and_hold(&tenant, stream(session), caps)
            .await;
        assert!(read.unwrap().is_none());
    }
    for tenant in [&tenant, &TenantId::new("other")] {
        let held = store.count_holds(tenant, HoldKind::SseStream, None).await;
        assert_eq!(held.unwrap(), 0);
    }
    let first = stream(&ours);
    let read = store
        .read_session_and_hold(&tenant, first.clone(), caps)
        .await
        .unwrap()
        .expect("the tenant's own session");
    let got = store.get_session(&tenant, &ours).await.unwrap().unwrap();
    assert_eq!(format!("{read:?}"), format!("{got:?}"));
    let held = store
        .count_holds(&tenant, HoldKind::SseStream, Some(&ours))
        .await;
    assert_eq!(held.unwrap(), 1);
    assert_eq!(
        limit_of(
            store
                .read_session_and_hold(&tenant, stream(&ours), caps)
                .await
        ),
        (Limit::SseStreams, 1)
    );
    let held = store.count_holds(&tenant, HoldKind::SseStream, None).await;
    assert_eq!(held.unwrap(), 1);
    store.release_hold(&tenant, &first.id).await.unwrap();
    let again = store
        .read_session_and_hold(&tenant, stream(&ours), caps)
        .await;
    assert!(again.unwrap().is_some());
}

/// A replica starting under an id releases what an earlier process of that id held (its
/// heartbeat would renew those holds for good): only that replica's holds, only those taken
/// before the given time, of every tenant; the caps count the released slots free again.
pub async fn a_replica_releases_the_holds_its_id_took_before_a_time(store: Arc<dyn Store>) {
    let (acme, other) = (TenantId::new("acme"), TenantId::new("other"));
    let (ours, theirs) = (
        session(&store, "acme").await,
        session(&store, "other").await,
    );
    let caps = HoldCaps {
        per_session: None,
        per_tenant: (Limit::SseStreams, 2),
    };
    let long = Duration::from_secs(60);
    let take = |tenant: &TenantId, session: &SessionId, replica: &str| {
        let (store, tenant) = (store.clone(), tenant.clone());
        let hold = hold(HoldKind::SseStream, session, replica, long);
        async move { store.acquire_hold(&tenant, hold, caps).await }
    };
    // An earlier process of `replica-a` left two streams of acme (the cap) and one of other;
    // `replica-b` holds one of other.
    take(&acme, &ours, "replica-a").await.unwrap();
    take(&acme, &ours, "replica-a").await.unwrap();
    take(&other, &theirs, "replica-a").await.unwrap();
    take(&other, &theirs, "replica-b").await.unwrap();
    assert_eq!(
        limit_of(take(&acme, &ours, "replica-a").await),
        (Limit::SseStreams, 2)
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The new process's own stream, taken after it started, is kept.
    let third = TenantId::new("third");
    let new_stream = session(&store, "third").await;
    take(&third, &new_stream, "replica-a").await.unwrap();
    let released = store
        .release_replica_holds("replica-a", started)
        .await
        .unwrap();
    assert_eq!(released, 3);
    let count = |tenant: &TenantId| {
        let (store, tenant) = (store.clone(), tenant.clone());
        async move {
            store
                .count_holds(&tenant, HoldKind::SseStream, None)
                .await
                .unwrap()
        }
    };
    assert_eq!(count(&acme).await, 0);
    assert_eq!(count(&other).await, 1, "replica-b's hold is kept");
    assert_eq!(count(&third).await, 1, "the new process's hold is kept");
    take(&acme, &ours, "replica-a").await.unwrap();
    take(&acme, &ours, "replica-a").await.unwrap();
    take(&other, &theirs, "replica-a").await.unwrap();
    // Later holds of the id are not released by a time before them.
    let again = store
        .release_replica_holds("replica-a", started)
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert_eq!(count(&acme).await, 2);
    // Stopping: everything the id holds, released.
    let stopping = chrono::Utc::now() + chrono::Duration::seconds(1);
    let all = store
        .release_replica_holds("replica-a", stopping)
        .await
        .unwrap();
    assert_eq!(all, 4);
    assert_eq!(
        (count(&acme).await, count(&other).await, count(&third).await),
        (0, 1, 0)
    );
}

/// A pending request for a `Bash` call in `session`, expiring in `expires_in`.
pub(crate) fn approval(session: &SessionId, expires_in: chrono::Duration) -> NewApproval {
    NewApproval {
        id: ApprovalId::generate(),
        session: session.clone(),
        run_id: None,
        tool_use_id: "toolu_1".into(),
        tool_name: "Bash".into(),
        input: json!({"command": "true"}),
        input_sha256: "0".repeat(64),
        reason: "needs approval".into(),
        expires_at: chrono::Utc::now() + expires_in,
    }
}

pub async fn pending_approvals_are_capped_per_tenant(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let a = session(&store, "acme").await;
    let other = session(&store, "other").await;
    // An expired request no longer counts as pending.
    store
        .create_approval(&tenant, approval(&a, chrono::Duration::milliseconds(1)), 1)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    store
        .create_approval(&tenant, approval(&a, chrono::Duration::minutes(5)), 1)
        .await
        .unwrap();
    assert_eq!(
        limit_of(
            store
                .create_approval(&tenant, approval(&a, chrono::Duration::minutes(5)), 1)
                .await
        ),
        (Limit::PendingApprovals, 1)
    );
    store
        .create_approval(
            &TenantId::new("other"),
            approval(&other, chrono::Duration::minutes(5)),
            1,
        )
        .await
        .unwrap();
}

/// Records `bytes` as `session`'s measurement and answers the tenant's total after it.
/// The tenant's spend totals are the sum of every session's calls, whichever rows they were
/// added to (Postgres spreads a tenant's totals over shards), also when the sessions append at
/// once; another tenant's calls never count.
pub async fn spend_totals_sum_every_session_of_the_tenant(store: Arc<dyn Store>) {
    const SESSIONS: u64 = 24;
    let tenant = TenantId::new("acme");
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(session(&store, "acme").await);
    }
    let other = session(&store, "other").await;
    let call = |input: u64| norma::usage::NewUsageRecord {
        run_id: RunId::generate().to_string(),
        provider: "scripted".into(),
        model: "m".into(),
        tokens: norma::usage::TokenCounts {
            input_tokens: input,
            output_tokens: 1,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
        },
        cost_pico: Some(7),
    };
    let appends = sessions.iter().enumerate().map(|(n, s)| {
        let (store, tenant) = (store.clone(), tenant.clone());
        let batch = AppendBatch {
            events: vec![NewEvent {
                kind: "model_request".into(),
                payload: json!({}).into(),
                run_id: None,
            }],
            usage: vec![call(10 * (n as u64 + 1)), call(1)],
            ..Default::default()
        };
        async move { store.append(&tenant, s, batch).await }
    });
    for appended in futures::future::join_all(appends).await {
        appended.unwrap();
    }
    store
        .append(
            &TenantId::new("other"),
            &other,
            AppendBatch {
                usage: vec![call(1_000_000)],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let spend = store
        .tenant_spend(&tenant, chrono::Utc::now())
        .await
        .unwrap();
    // Each session: 10·(n+1) + 1 input tokens and 2 output tokens, 2 calls of 7 pico.
    let tokens = 10 * SESSIONS * (SESSIONS + 1) / 2 + 3 * SESSIONS;
    assert_eq!((spend.day.tokens, spend.month.tokens), (tokens, tokens));
    assert_eq!(
        (spend.day.cost_pico, spend.month.cost_pico),
        (14 * SESSIONS, 14 * SESSIONS)
    );
    let others = store
        .tenant_spend(&TenantId::new("other"), chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(others.day.tokens, 1_000_001);
    // Sums past the largest integer stay at it, in both periods.
    for _ in 0..2 {
        store
            .append(
                &TenantId::new("other"),
                &other,
                AppendBatch {
                    usage: vec![call(i64::MAX as u64)],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let saturated = store
        .tenant_spend(&TenantId::new("other"), chrono::Utc::now())
        .await
        .unwrap();
    let most = i64::MAX as u64;
    assert_eq!((saturated.day.tokens, saturated.month.tokens), (most, most));
    assert_eq!(saturated.day.cost_pico, 7 * 3);
}

async fn record_then_total(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    session: &SessionId,
    bytes: u64,
) -> u64 {
    store
        .record_workspace_bytes(tenant, session, bytes)
        .await
        .unwrap();
    store.workspace_bytes(tenant).await.unwrap()
}

pub async fn workspace_bytes_sum_open_sessions_of_the_tenant(store: Arc<dyn Store>) {
    let tenant = TenantId::new("acme");
    let (a, b) = (session(&store, "acme").await, session(&store, "acme").await);
    let other = session(&store, "other").await;
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 0);
    store
        .record_workspace_bytes(&tenant, &a, 1000)
        .await
        .unwrap();
    store.record_workspace_bytes(&tenant, &b, 24).await.unwrap();
    // A new measurement replaces the last one.
    store
        .record_workspace_bytes(&tenant, &a, 2000)
        .await
        .unwrap();
    store
        .record_workspace_bytes(&TenantId::new("other"), &other, 5)
        .await
        .unwrap();
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 2024);
    // Another tenant's session cannot be written to.
    assert!(matches!(
        store.record_workspace_bytes(&tenant, &other, 1).await,
        Err(StoreError::NotFound)
    ));
    // The same measurement again changes nothing; a smaller one gives the difference back.
    assert_eq!(record_then_total(&store, &tenant, &b, 24).await, 2024);
    assert_eq!(record_then_total(&store, &tenant, &a, 1500).await, 1524);
    assert_eq!(record_then_total(&store, &tenant, &a, 2000).await, 2024);
    // A closed session no longer counts (closing it again takes nothing more), nor does a
    // measurement recorded after it closed; a session measured for the first time counts.
    store.close_session(&tenant, &a).await.unwrap();
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 24);
    let _ = store.close_session(&tenant, &a).await;
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 24);
    assert_eq!(record_then_total(&store, &tenant, &a, 9000).await, 24);
    let c = session(&store, "acme").await;
    assert_eq!(record_then_total(&store, &tenant, &c, 100).await, 124);
    // A session that does not exist is not found, and counts nothing.
    assert!(matches!(
        store
            .record_workspace_bytes(&tenant, &norma::ids::SessionId::generate(), 7)
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 124);
    // A run's append carries its session's latest measurement in the same transaction (on
    // Postgres the one-statement append and, for a retried batch, the transaction's path).
    let measured = |bytes: u64, retry: bool| AppendBatch {
        events: vec![NewEvent {
            kind: "tool_result".into(),
            payload: json!({"tool_use_id": "t1"}).into(),
            run_id: None,
        }],
        id: Some(format!("measured-{bytes}")),
        retry,
        workspace_bytes: Some(bytes),
        ..Default::default()
    };
    store
        .append(&tenant, &c, measured(300, false))
        .await
        .unwrap();
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 324);
    store
        .append(&tenant, &c, measured(200, true))
        .await
        .unwrap();
    assert_eq!(store.workspace_bytes(&tenant).await.unwrap(), 224);
    assert_eq!(
        store
            .workspace_bytes(&TenantId::new("other"))
            .await
            .unwrap(),
        5
    );
}

/// The open-session count (kept by triggers, migration 0018) follows creations and closes per
/// tenant, a close counted once however often it is repeated.
pub async fn open_sessions_are_counted_per_tenant_through_creations_and_closes(
    store: Arc<dyn Store>,
) {
    let (t1, t2) = (TenantId::new("t1"), TenantId::new("t2"));
    assert_eq!(store.count_open_sessions(&t1).await.unwrap(), 0);
    let first = session(&store, "t1").await;
    session(&store, "t1").await;
    session(&store, "t1").await;
    let other = session(&store, "t2").await;
    assert_eq!(store.count_open_sessions(&t1).await.unwrap(), 3);
    assert_eq!(store.count_open_sessions(&t2).await.unwrap(), 1);
    for _ in 0..2 {
        store.close_session(&t1, &first).await.unwrap().unwrap();
    }
    // Another tenant cannot close (or count down) t2's session.
    assert!(store.close_session(&t1, &other).await.unwrap().is_none());
    assert_eq!(store.count_open_sessions(&t1).await.unwrap(), 2);
    assert_eq!(store.count_open_sessions(&t2).await.unwrap(), 1);
    store.close_session(&t2, &other).await.unwrap().unwrap();
    assert_eq!(store.count_open_sessions(&t2).await.unwrap(), 0);
}
