//! Store faults on Postgres: the server restarted under it (a private cluster), its connection
//! cut and restored through the fault proxy during runs, approvals and webhook deliveries, and
//! the store slowed past the lease period while a second replica stands by.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::invariants::assert_invariants;
use crate::pg;
use crate::pg_cluster::PgCluster;
use crate::proxy::FaultProxy;
use crate::server::ServerProcess;
use crate::workload::{
    Shape, TENANT, drive_to_end, report, seeded_sessions, session_config, start_session,
    upstream_of, wait_ready, wait_until_seen,
};

/// Bound for the work to end once the fault is over.
const FINISH_WITHIN: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Postgres restarted under load
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load() {
    let scenario = "Postgres restarted under load";
    let Some(cluster) = PgCluster::start().await else {
        return;
    };
    let url = cluster.create_database().await;
    let mut rng = StdRng::seed_from_u64(0x5eed_0101);
    let mut server = ServerProcess::new(Some(url))
        .env("NORMA_REPLICA_ID", "fault-restart-replica")
        .env("NORMA_DATABASE_ACQUIRE_TIMEOUT_MS", "1000")
        .env("NORMA_APPROVAL_PARK_AFTER_MS", "400");
    server.start().await;
    let token = server.token(TENANT);
    let urls = vec![server.url("")];
    // Three restarts, each at another moment of the load: while tools run, right after the
    // prompts were accepted (runs being prepared), and while approvals wait.
    let moments = [
        ("tool_executing", 2),
        ("run_started", 0),
        ("approval_requested", 1),
    ];
    let mut tracked = Vec::new();
    for (round, (kind, n)) in moments.into_iter().enumerate() {
        let batch = seeded_sessions(&server, &token, &mut rng, 6, 0.5, &urls).await;
        wait_until_seen(&batch, kind, n, Duration::from_secs(10)).await;
        tracked.extend(batch);
        let restarted = Instant::now();
        cluster.restart();
        let down = restarted.elapsed();
        let ready = wait_ready(&server, Duration::from_secs(30)).await;
        report(
            scenario,
            format!(
                "restart {round} (at {kind}): Postgres back after {down:?}, /readyz 200 \
                 {ready:?} after that"
            ),
        );
        assert!(
            ready.is_some(),
            "{scenario}: never ready again\n{}\n{}",
            server.logs(),
            cluster.logs()
        );
    }
    let ended = drive_to_end(&server, Some(&server), &token, &tracked, FINISH_WITHIN).await;
    let summary = assert_invariants(scenario, &[&server], &token, &tracked).await;
    report(
        scenario,
        format!("all runs ended {ended:?} after; {summary:?}"),
    );
}

// ---------------------------------------------------------------------------------------------
// The store connection cut and restored during runs, approvals and webhook deliveries
// ---------------------------------------------------------------------------------------------

/// A policy service on loopback that allows every approval request in its response, counting
/// the deliveries.
async fn allowing_webhook() -> (String, Arc<AtomicUsize>) {
    let deliveries = Arc::new(AtomicUsize::new(0));
    let counter = deliveries.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |Json(_body): Json<Value>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                Json(json!({"decision": "allow", "reason": "policy service"}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/hook"), deliveries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_connection_cut_during_runs_approvals_and_webhooks() {
    let scenario = "store connection cut and restored";
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let proxy = FaultProxy::start(upstream_of(&url)).await;
    let (hook_url, deliveries) = allowing_webhook().await;
    let mut rng = StdRng::seed_from_u64(0x5eed_0201);
    let mut server = ServerProcess::new(Some(proxy.proxied_url(&url)))
        .env("NORMA_REPLICA_ID", "fault-cut-replica")
        .env("NORMA_DATABASE_ACQUIRE_TIMEOUT_MS", "1000")
        .env("NORMA_APPROVAL_PARK_AFTER_MS", "400")
        .env("NORMA_ALLOW_PRIVATE_WEBHOOKS", "true");
    server.start().await;
    let token = server.token(TENANT);
    let urls = vec![server.url("")];
    let webhook = json!({"url": hook_url, "secret": "fault-campaign-webhook-secret-0123"});
    let mut tracked = Vec::new();
    for shape in [
        Shape::Tools,
        Shape::Tools,
        Shape::Approval,
        Shape::Approval,
        Shape::Webhook,
        Shape::Webhook,
        Shape::Webhook,
        Shape::Text,
    ] {
        let config = session_config(shape, 0.4, Some(&webhook));
        tracked.push(start_session(&server, &token, &config, shape, &urls).await);
    }

    // Seeded outages and blips while the runs, approvals and deliveries are under way; the
    // REST approvals are answered (and retried) throughout.
    let mut recoveries = Vec::new();
    for _ in 0..4 {
        let up_for = Duration::from_millis(rng.gen_range(200..700));
        let answer_until = Instant::now() + up_for;
        while Instant::now() < answer_until {
            for session in tracked.iter().filter(|t| t.shape == Shape::Approval) {
                crate::workload::allow_pending(&server, &token, &session.id).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if rng.gen_bool(0.5) {
            proxy.cut_all();
        } else {
            proxy.go_down();
            tokio::time::sleep(Duration::from_millis(rng.gen_range(300..1500))).await;
            proxy.come_back();
        }
        let ready = wait_ready(&server, Duration::from_secs(30)).await;
        assert!(
            ready.is_some(),
            "{scenario}: never ready again\n{}",
            server.logs()
        );
        recoveries.push(ready.unwrap());
    }
    let ended = drive_to_end(&server, Some(&server), &token, &tracked, FINISH_WITHIN).await;
    let summary = assert_invariants(scenario, &[&server], &token, &tracked).await;
    report(
        scenario,
        format!(
            "/readyz 200 again after each fault: {recoveries:?}; all runs ended {ended:?} after; \
             {} webhook deliveries; {summary:?}",
            deliveries.load(Ordering::SeqCst)
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// The store slowed past the lease period
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_slowed_past_the_lease_period() {
    let scenario = "store slowed past the lease period";
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let proxy = FaultProxy::start(upstream_of(&url)).await;
    let mut rng = StdRng::seed_from_u64(0x5eed_0301);
    let replica = |url: String, name: &str| {
        ServerProcess::new(Some(url))
            .env("NORMA_REPLICA_ID", name)
            .env("NORMA_RUN_LEASE_SECONDS", "2")
            .env("NORMA_APPROVAL_PARK_AFTER_MS", "400")
            .env("NORMA_DATABASE_ACQUIRE_TIMEOUT_MS", "10000")
    };
    let mut slow = replica(proxy.proxied_url(&url), "fault-slow-replica");
    let mut standby = replica(url.clone(), "fault-standby-replica");
    slow.start().await;
    standby.start().await;
    let token = slow.token(TENANT);
    let urls = vec![slow.url(""), standby.url("")];
    let tracked = seeded_sessions(&slow, &token, &mut rng, 8, 0.8, &urls).await;
    wait_until_seen(&tracked, "tool_executing", 2, Duration::from_secs(10)).await;

    // Every chunk to and from the store waits 1.5 s: a round trip takes longer than the 2 s
    // lease, so the slow replica cannot renew in time and the standby's sweep takes over.
    proxy.set_latency(Duration::from_millis(1500));
    tokio::time::sleep(Duration::from_secs(6)).await;
    proxy.set_latency(Duration::ZERO);
    let ended = drive_to_end(&standby, Some(&standby), &token, &tracked, FINISH_WITHIN).await;
    let summary = assert_invariants(scenario, &[&standby, &slow], &token, &tracked).await;
    assert!(
        summary.resumes.contains_key("fault-standby-replica"),
        "{scenario}: the standby never took a run over: {summary:?}"
    );
    report(
        scenario,
        format!("all runs ended {ended:?} after the latency was removed; {summary:?}"),
    );
}
