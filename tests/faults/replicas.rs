//! Faults between replicas sharing one Postgres database: one replica's listening connection
//! alone cut while the other answers its approvals and runs events, and two replicas racing for
//! the same expired leases after a third was killed.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use crate::invariants::assert_invariants;
use crate::pg;
use crate::proxy::FaultProxy;
use crate::server::{ServerProcess, of_kind};
use crate::workload::{
    Shape, TENANT, allow_pending, drive_to_end, report, seeded_sessions, session_config,
    start_session, upstream_of, wait_until_seen,
};

/// Bound for the work to end once the fault is over.
const FINISH_WITHIN: Duration = Duration::from_secs(30);
/// Bound for runs answered elsewhere during a listener outage to end once the listener is
/// back: the replica must notice what it missed (not wait for the approvals' expiry or a lease).
const NOTICED_WITHIN: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The listening connection alone cut
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_cut_while_another_replica_answers_and_runs() {
    let scenario = "listening connection cut";
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let proxy = FaultProxy::start(upstream_of(&url)).await;
    let replica = |url: String, name: &str| {
        ServerProcess::new(Some(url))
            .env("NORMA_REPLICA_ID", name)
            .env("NORMA_APPROVAL_PARK_AFTER_MS", "300")
    };
    let mut deaf = replica(proxy.proxied_url(&url), "fault-deaf-replica");
    let mut other = replica(url.clone(), "fault-other-replica");
    deaf.start().await;
    other.start().await;
    let token = deaf.token(TENANT);
    let both = vec![deaf.url(""), other.url("")];

    // Runs parked on the deaf replica, waiting for their approvals.
    let mut tracked = Vec::new();
    for _ in 0..3 {
        let config = session_config(Shape::Approval, 0.2, None);
        tracked.push(start_session(&deaf, &token, &config, Shape::Approval, &both).await);
    }
    wait_until_seen(&tracked, "run_parked", 3, Duration::from_secs(20)).await;

    // Only the listening connection goes, and cannot come back while blocked; the pool's
    // connections keep working.
    let cut = proxy.block_listen(true);
    assert!(cut >= 1, "{scenario}: no listening connection found to cut");

    // Meanwhile the other replica answers the parked runs' approvals and runs sessions of its
    // own, followed by SSE clients of the deaf replica.
    let deaf_only = vec![deaf.url("")];
    let mut elsewhere = Vec::new();
    for _ in 0..3 {
        let config = session_config(Shape::Tools, 0.2, None);
        elsewhere.push(start_session(&other, &token, &config, Shape::Tools, &deaf_only).await);
    }
    for session in &tracked {
        allow_pending(&other, &token, &session.id).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.block_listen(false);
    let restored = Instant::now();
    tracked.extend(elsewhere);
    let ended = drive_to_end(&other, Some(&other), &token, &tracked, NOTICED_WITHIN).await;
    report(
        scenario,
        format!(
            "{cut} listening connection cut for 3 s; the parked runs answered elsewhere ended \
             {ended:?} after it came back (bound {NOTICED_WITHIN:?}, {:?} since)",
            restored.elapsed()
        ),
    );
    let summary = assert_invariants(scenario, &[&other, &deaf], &token, &tracked).await;
    report(scenario, format!("{summary:?}"));
}

// ---------------------------------------------------------------------------------------------
// Two replicas racing for the same expired leases
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_race_for_the_same_expired_leases() {
    let scenario = "two replicas race for expired leases";
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(0x5eed_0401);
    let replica = |name: &str| {
        ServerProcess::new(Some(url.clone()))
            .env("NORMA_REPLICA_ID", name)
            .env("NORMA_RUN_LEASE_SECONDS", "2")
            .env("NORMA_APPROVAL_PARK_AFTER_MS", "300")
    };
    let mut dead = replica("fault-dead-replica");
    let mut first = replica("fault-racer-1");
    let mut second = replica("fault-racer-2");
    dead.start().await;
    let token = dead.token(TENANT);
    let urls = vec![dead.url(""), first.url(""), second.url("")];
    let tracked = seeded_sessions(&dead, &token, &mut rng, 8, 1.5, &urls).await;
    wait_until_seen(&tracked, "tool_executing", 2, Duration::from_secs(10)).await;
    // What each stream had shown at the kill (every seq up to there was stored before it).
    let killed_at: Vec<usize> = tracked.iter().map(|t| t.witness.seen().len()).collect();
    dead.kill();

    // Both start at once and find the same leases expiring.
    let raced = Instant::now();
    tokio::join!(first.start(), second.start());
    let ended = drive_to_end(&first, Some(&first), &token, &tracked, FINISH_WITHIN).await;
    let summary = assert_invariants(scenario, &[&first, &second, &dead], &token, &tracked).await;

    // One winner per run: a run without approvals is resumed exactly once after the kill.
    let mut winners: BTreeMap<String, usize> = BTreeMap::new();
    for (session, before) in tracked.iter().zip(killed_at) {
        let events = first.all_events(&token, &session.id).await;
        let resumed: Vec<_> = of_kind(&events, "run_resumed")
            .into_iter()
            .filter(|e| e["seq"].as_i64().unwrap_or(0) > before as i64)
            .collect();
        for event in &resumed {
            let name = event["payload"]["replica"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            *winners.entry(name).or_default() += 1;
        }
        // One winner per run: nobody resumes a run the other racer already took over.
        if session.shape != Shape::Approval {
            assert!(
                resumed.len() <= 1,
                "{scenario}: session {} resumed {} times after the kill",
                session.id,
                resumed.len()
            );
        }
    }
    assert!(
        winners.values().sum::<usize>() >= 1,
        "{scenario}: no run was taken over after the kill"
    );
    report(
        scenario,
        format!(
            "runs ended {ended:?} after both racers started ({:?} since); resumes by replica: \
             {winners:?}; {summary:?}",
            raced.elapsed()
        ),
    );
}
