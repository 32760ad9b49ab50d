//! Runs in the store suite (see `store.rs`): leases that fence stale writers, leases given up
//! by a stopping replica, queued runs claimed in order, recorded cancels, and the approval a
//! resumed run finds again.

use crate::store::{event, new_session};
use norma::ids::{ApprovalId, RunId, SessionId, TenantId};
use norma::limits::RunCaps;
use norma::store::{
    AppendBatch, AppendResult, NewApproval, NewRun, RunEnd, RunLease, RunStatus, Store, StoreError,
};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn new_run(session: &SessionId, prompt: &str) -> NewRun {
    NewRun {
        id: RunId::generate(),
        session: session.clone(),
        prompt: prompt.into(),
    }
}

/// One event appended under `lease`, as a writer that may have lost it would.
async fn late_append(
    store: &Arc<dyn Store>,
    tenant: &TenantId,
    session: &SessionId,
    lease: RunLease,
) -> Result<AppendResult, StoreError> {
    store
        .append(
            tenant,
            session,
            AppendBatch {
                events: vec![event("late", 1)],
                lease: Some(lease),
                ..Default::default()
            },
        )
        .await
}

pub async fn run_leases_are_exclusive_and_fence_stale_writers(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let session = new_session(&store, "t1").await;
    let long = Duration::from_secs(60);
    let run = store
        .create_run(
            &tenant,
            new_run(&session, "go"),
            Some(("replica-a", long)),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.owner.as_deref(), Some("replica-a"));
    assert_eq!(run.fence, 1);
    let run_id = RunId::from_string(run.id.clone());
    let a_lease = run.lease().unwrap();

    // Another replica cannot take a live lease; the same replica (restarted) can.
    assert!(
        store
            .claim_run(&tenant, &run_id, "replica-b", long, RunCaps::UNLIMITED)
            .await
            .unwrap()
            .is_none()
    );
    let reclaimed = store
        .claim_run(&tenant, &run_id, "replica-a", long, RunCaps::UNLIMITED)
        .await
        .unwrap()
        .expect("own run");
    assert_eq!(reclaimed.fence, 2);

    // The first claim's writer is fenced off; nothing of its batch is written.
    let stale = late_append(&store, &tenant, &session, a_lease).await;
    assert!(matches!(stale, Err(StoreError::LeaseLost)), "{stale:?}");
    assert!(
        store
            .list_events(&tenant, &session, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // An expired lease is taken over by another replica, which can then write.
    let short = store
        .claim_run(
            &tenant,
            &run_id,
            "replica-a",
            Duration::from_millis(1),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = store
        .claim_run(&tenant, &run_id, "replica-b", long, RunCaps::UNLIMITED)
        .await
        .unwrap()
        .expect("expired lease");
    assert_eq!(taken.owner.as_deref(), Some("replica-b"));
    assert!(taken.fence > short.fence);
    assert_eq!(store.renew_leases("replica-a", long).await.unwrap(), 0);
    assert_eq!(store.renew_leases("replica-b", long).await.unwrap(), 1);

    // Ending the run is atomic with its last write, and only for the holder: the previous
    // holder's end writes nothing at all (no event, no end).
    let stale_end = store
        .append(
            &tenant,
            &session,
            AppendBatch {
                events: vec![event("terminal", 2)],
                lease: short.lease(),
                run_end: Some(RunEnd {
                    status: RunStatus::Failed,
                    terminal: json!({ "reason": "error" }),
                }),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(stale_end, Err(StoreError::LeaseLost)),
        "{stale_end:?}"
    );
    let running = store
        .get_run(&tenant, &session, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running.status, RunStatus::Running);
    assert!(
        store
            .list_events(&tenant, &session, 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let ended = store
        .append(
            &tenant,
            &session,
            AppendBatch {
                events: vec![event("terminal", 2)],
                lease: taken.lease(),
                run_end: Some(RunEnd {
                    status: RunStatus::Completed,
                    terminal: json!({ "reason": "end_turn" }),
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ended.events[0].seq, 1);
    let done = store
        .get_run(&tenant, &session, &run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.terminal, Some(json!({ "reason": "end_turn" })));
    assert!(done.ended_at.is_some());
    // A finished run cannot be claimed again, nor written by its last holder.
    assert!(
        store
            .claim_run(&tenant, &run_id, "replica-b", long, RunCaps::UNLIMITED)
            .await
            .unwrap()
            .is_none()
    );
    let after_end = store
        .append(
            &tenant,
            &session,
            AppendBatch {
                events: vec![event("after", 3)],
                lease: taken.lease(),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(after_end, Err(StoreError::LeaseLost)));
    assert!(
        store
            .list_unfinished_runs(100)
            .await
            .unwrap()
            .iter()
            .all(|r| r.id != done.id)
    );
    // Another tenant sees nothing of it.
    assert!(
        store
            .get_run(&TenantId::new("t2"), &session, &run_id)
            .await
            .unwrap()
            .is_none()
    );
}

/// A stopping replica releases its leases (graceful shutdown): only its own running runs,
/// claimable by anyone at once, and its writes are refused from then on.
pub async fn released_leases_are_claimable_at_once_and_fence_the_releaser(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let long = Duration::from_secs(600);
    // Owner names unique to this test: the release is system-wide, by owner.
    let stopping = format!("stopping-{}", RunId::generate());
    let other = format!("other-{}", RunId::generate());
    let taker = format!("taker-{}", RunId::generate());
    let session = new_session(&store, "t1").await;
    let run = store
        .create_run(
            &tenant,
            new_run(&session, "go"),
            Some((&stopping, long)),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    let run_id = RunId::from_string(run.id.clone());
    let old_lease = run.lease().unwrap();
    let elsewhere_session = new_session(&store, "t1").await;
    let elsewhere = store
        .create_run(
            &tenant,
            new_run(&elsewhere_session, "go"),
            Some((&other, long)),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    // A live lease of another replica cannot be taken before the release.
    assert!(
        store
            .claim_run(&tenant, &run_id, &taker, long, RunCaps::UNLIMITED)
            .await
            .unwrap()
            .is_none()
    );

    let released = store.release_leases(&stopping).await.unwrap();
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0].id, run.id);
    assert_eq!(released[0].status, RunStatus::Running);
    assert_eq!(released[0].owner, None);
    assert_eq!(released[0].lease_expires_at, None);
    assert_eq!(released[0].fence, run.fence, "the release does not claim");
    // Its heartbeat no longer extends it, and its writes are refused.
    assert_eq!(store.renew_leases(&stopping, long).await.unwrap(), 0);
    let late = late_append(&store, &tenant, &session, old_lease).await;
    assert!(matches!(late, Err(StoreError::LeaseLost)), "{late:?}");
    // Any replica claims it at once (no lease period to wait).
    let taken = store
        .claim_run(&tenant, &run_id, &taker, long, RunCaps::UNLIMITED)
        .await
        .unwrap()
        .expect("a released run is claimable at once");
    assert_eq!(taken.owner.as_deref(), Some(taker.as_str()));
    assert!(taken.fence > run.fence);
    // Nothing left to release; another replica's run was never touched.
    assert!(store.release_leases(&stopping).await.unwrap().is_empty());
    let untouched = store
        .get_run(
            &tenant,
            &elsewhere_session,
            &RunId::from_string(elsewhere.id.clone()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(untouched.owner.as_deref(), Some(other.as_str()));
    assert_eq!(untouched.lease_expires_at, elsewhere.lease_expires_at);
}

pub async fn queued_runs_are_claimed_in_order_and_cancellable(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let session = new_session(&store, "t1").await;
    let other = new_session(&store, "t2").await;
    let long = Duration::from_secs(60);
    let first = store
        .create_run(&tenant, new_run(&session, "one"), None, RunCaps::UNLIMITED)
        .await
        .unwrap();
    let second = store
        .create_run(&tenant, new_run(&session, "two"), None, RunCaps::UNLIMITED)
        .await
        .unwrap();
    let elsewhere = store
        .create_run(
            &TenantId::new("t2"),
            new_run(&other, "x"),
            None,
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    assert_eq!(first.status, RunStatus::Queued);
    assert!(first.owner.is_none());
    // The record answered is the run as stored.
    let stored = store
        .get_run(&tenant, &session, &RunId::from_string(first.id.clone()))
        .await
        .unwrap();
    assert_eq!(stored.as_ref(), Some(&first));
    // A run cannot be created in another tenant's session, nor in a closed one.
    let closed = new_session(&store, "t1").await;
    store.close_session(&tenant, &closed).await.unwrap();
    assert!(matches!(
        store
            .create_run(&tenant, new_run(&closed, "late"), None, RunCaps::UNLIMITED)
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .create_run(&tenant, new_run(&other, "forged"), None, RunCaps::UNLIMITED)
            .await,
        Err(StoreError::NotFound)
    ));

    // System-level listing sees every tenant's unfinished runs in submission order.
    let unfinished: Vec<String> = store
        .list_unfinished_runs(100)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        unfinished,
        vec![first.id.clone(), second.id.clone(), elsewhere.id.clone()]
    );

    let second_id = RunId::from_string(second.id.clone());
    assert!(
        store
            .cancel_queued_run(&tenant, &session, &second_id)
            .await
            .unwrap()
    );
    assert!(
        !store
            .cancel_queued_run(&tenant, &session, &second_id)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_run(&tenant, &second_id, "replica-a", long, RunCaps::UNLIMITED)
            .await
            .unwrap()
            .is_none(),
        "a cancelled run is not claimable"
    );
    let claimed = store
        .claim_run(
            &tenant,
            &RunId::from_string(first.id.clone()),
            "replica-a",
            long,
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((claimed.status, claimed.fence), (RunStatus::Running, 1));
    assert!(
        !store
            .cancel_queued_run(&tenant, &session, &RunId::from_string(first.id.clone()))
            .await
            .unwrap(),
        "a running run is cancelled through the runtime, not the queue"
    );

    let listed = store.list_runs(&tenant, &session, None, 10).await.unwrap();
    let statuses: Vec<RunStatus> = listed.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![RunStatus::Running, RunStatus::Cancelled]);
    let page = store
        .list_runs(
            &tenant,
            &session,
            Some(&RunId::from_string(first.id.clone())),
            10,
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].id, second.id);
    assert!(
        store
            .list_runs(&TenantId::new("t2"), &session, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A cancel of a running run is recorded for its owner (who reconciles it when the signal is
/// lost); another tenant cannot record one, and a queued run is not "requested".
pub async fn cancels_are_recorded_for_the_replica_holding_the_run(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let id = new_session(&store, "t1").await;
    let owner = format!("replica-{}", RunId::generate());
    let run = store
        .create_run(
            &tenant,
            NewRun {
                id: RunId::generate(),
                session: id.clone(),
                prompt: "go".into(),
            },
            Some((owner.as_str(), Duration::from_secs(60))),
            RunCaps::UNLIMITED,
        )
        .await
        .unwrap();
    let run_id = RunId::from_string(run.id.clone());
    assert!(store.requested_cancels(&owner).await.unwrap().is_empty());
    assert!(
        !store
            .request_cancel(&TenantId::new("t2"), &id, &run_id)
            .await
            .unwrap(),
        "another tenant's cancel records nothing"
    );
    assert!(store.request_cancel(&tenant, &id, &run_id).await.unwrap());
    assert_eq!(
        store.requested_cancels(&owner).await.unwrap(),
        vec![(id.clone(), run_id)]
    );
    assert!(
        store
            .requested_cancels("someone-else")
            .await
            .unwrap()
            .is_empty()
    );
}

/// A resumed run finds the request it made for a call before the restart — its own run's,
/// for that call and that input — and nothing for another run, call or input.
pub(crate) async fn a_resumed_run_finds_its_own_request_for_a_call(store: Arc<dyn Store>) {
    let tenant = TenantId::new("t1");
    let session = new_session(&store, "t1").await;
    let request = |run: &str, tool_use: &str, digest: char| NewApproval {
        id: ApprovalId::generate(),
        session: session.clone(),
        run_id: Some(run.into()),
        tool_use_id: tool_use.into(),
        tool_name: "Bash".into(),
        input: json!({"command": "true"}),
        input_sha256: digest.to_string().repeat(64),
        reason: "needs approval".into(),
        expires_at: chrono::Utc::now() + chrono::Duration::minutes(5),
    };
    let mut ids = Vec::new();
    for (run, tool_use, digest) in [
        ("run_a", "tu_1", 'a'),
        ("run_a", "tu_2", 'a'),
        ("run_b", "tu_1", 'a'),
    ] {
        let new = request(run, tool_use, digest);
        ids.push(new.id.as_str().to_owned());
        store.create_approval(&tenant, new, 100).await.unwrap();
    }
    let find = |run: &str, tool_use: &'static str, digest: char| {
        let (store, tenant, session) = (store.clone(), tenant.clone(), session.clone());
        let run = RunId::from_string(run.to_owned());
        async move {
            store
                .run_approval_request(
                    &tenant,
                    &session,
                    &run,
                    tool_use,
                    &digest.to_string().repeat(64),
                )
                .await
                .unwrap()
                .map(|approval| approval.id)
        }
    };
    assert_eq!(
        find("run_a", "tu_1", 'a').await.as_deref(),
        Some(ids[0].as_str())
    );
    assert_eq!(
        find("run_a", "tu_2", 'a').await.as_deref(),
        Some(ids[1].as_str())
    );
    assert_eq!(
        find("run_b", "tu_1", 'a').await.as_deref(),
        Some(ids[2].as_str())
    );
    assert_eq!(find("run_a", "tu_1", 'b').await, None, "another input");
    assert_eq!(find("run_c", "tu_1", 'a').await, None, "another run");
    assert!(
        store
            .run_approval_request(
                &TenantId::new("t2"),
                &session,
                &RunId::from_string("run_a".to_owned()),
                "tu_1",
                &"a".repeat(64),
            )
            .await
            .unwrap()
            .is_none(),
        "another tenant"
    );
}
