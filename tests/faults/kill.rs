//! `kill -9` of a replica at seeded points of runs, then a restart that resumes them; the last
//! cycle stops the replica with SIGTERM instead.
//!
//! Each cycle starts a batch of sessions of seeded shapes in one server process, picks a trigger
//! (an event kind and an ordinal N, a target session) from a seeded RNG, and kills the process
//! the moment the target's SSE stream shows the Nth event of that kind. Every session of the
//! batch that had not ended is one kill point, at the last event its stream showed. The process
//! is restarted (same port, data dir, database and replica id: resume at once), the batch is
//! driven to its end and the invariants are checked. On SQLite and on Postgres.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::invariants::assert_invariants;
use crate::pg;
use crate::server::ServerProcess;
use crate::workload::{
    Shape, TENANT, Tracked, allow_pending, drive_to_end, report, session_config, start_session,
};

/// Cycles per backend (the last one is the SIGTERM).
const CYCLES: usize = 24;
/// Sessions per cycle.
const SESSIONS: usize = 6;
/// Kill points per backend the campaign must reach (two backends: at least 100).
const MIN_POINTS: usize = 60;
/// Bound for a batch to end after the restart.
const FINISH_WITHIN: Duration = Duration::from_secs(60);

/// Event kinds to kill at, and the largest ordinal N to wait for.
const TRIGGERS: &[(&str, usize)] = &[
    ("run_started", 1),
    ("model_request", 3),
    ("assistant_delta", 40),
    ("tool_call", 3),
    ("tool_started", 3),
    ("permission_decision", 3),
    ("approval_requested", 1),
    ("approval_decided", 1),
    ("tool_executing", 3),
    ("tool_result", 3),
    ("assistant_message", 3),
    ("tool_results", 2),
    ("continue", 2),
    ("usage", 1),
    ("run_parked", 1),
];

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_seeded_points_on_sqlite() {
    campaign(Backend::Sqlite, 0x5eed_0001).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_seeded_points_on_postgres() {
    campaign(Backend::Postgres, 0x5eed_0002).await;
}

async fn campaign(backend: Backend, seed: u64) {
    let database_url = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => match pg::fresh_pg_database().await {
            Some(url) => Some(url),
            None => return,
        },
    };
    let scenario = format!("kill -9 ({backend:?}, seed {seed:#x})");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut server = ServerProcess::new(database_url)
        .env("NORMA_REPLICA_ID", "fault-kill-replica")
        // Far longer than any wait: resuming must not wait for a lease to expire.
        .env("NORMA_RUN_LEASE_SECONDS", "300")
        .env("NORMA_APPROVAL_PARK_AFTER_MS", "400")
        .env("NORMA_SHUTDOWN_GRACE_SECONDS", "2");
    server.start().await;
    let token = server.token(TENANT);
    let stream_urls = vec![server.url("")];

    let mut points: BTreeMap<String, usize> = BTreeMap::new();
    let mut restarts = Vec::new();
    let mut finishes = Vec::new();
    for cycle in 0..CYCLES {
        let sigterm = cycle == CYCLES - 1;
        let mut batch: Vec<Tracked> = Vec::new();
        for _ in 0..SESSIONS {
            let shape = Shape::pick(&mut rng);
            let sleep = [0.2, 0.5, 0.8][rng.gen_range(0..3)];
            let config = session_config(shape, sleep, None);
            batch.push(start_session(&server, &token, &config, shape, &stream_urls).await);
        }
        let (kind, max) = TRIGGERS[rng.gen_range(0..TRIGGERS.len())];
        let nth = rng.gen_range(1..=max);
        let target = rng.gen_range(0..batch.len());
        // Approvals are answered at once in some cycles, after the run parked in others.
        let answer_after = Duration::from_millis([0, 900][rng.gen_range(0..2)]);

        let started = Instant::now();
        let mut last_answer = Instant::now();
        loop {
            let witness = &batch[target].witness;
            if witness.count(kind) >= nth
                || witness.count("terminal") >= 1
                || started.elapsed() > Duration::from_secs(15)
            {
                break;
            }
            if started.elapsed() >= answer_after
                && last_answer.elapsed() > Duration::from_millis(150)
            {
                last_answer = Instant::now();
                for session in batch.iter().filter(|s| s.shape == Shape::Approval) {
                    allow_pending(&server, &token, &session.id).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        if sigterm {
            let status = server.terminate(Duration::from_secs(30)).await;
            assert!(status.success(), "SIGTERM exit status {status}");
        } else {
            server.kill();
        }
        for session in &batch {
            if session.witness.count("terminal") == 0 {
                let at = session.witness.last_kind().unwrap_or_else(|| "none".into());
                *points.entry(at).or_default() += 1;
            }
        }

        let restart = Instant::now();
        server.start().await;
        restarts.push(restart.elapsed());
        let finished = drive_to_end(&server, Some(&server), &token, &batch, FINISH_WITHIN).await;
        if let Some(took) = finished {
            finishes.push(took);
        }
        let summary = assert_invariants(
            &format!("{scenario}, cycle {cycle} ({kind} #{nth})"),
            &[&server],
            &token,
            &batch,
        )
        .await;
        report(
            &scenario,
            format!(
                "cycle {cycle}: {} at {kind} #{nth}, restart {:?}, batch ended {finished:?} \
                 after it; {summary:?}",
                if sigterm { "SIGTERM" } else { "kill -9" },
                restarts.last().unwrap()
            ),
        );
    }
    let total: usize = points.values().sum();
    report(
        &scenario,
        format!(
            "{total} kill points (sessions stopped mid-run) by last event seen: {points:?}; \
             restart to ready max {:?}; resumed batch ended within max {:?}",
            restarts.iter().max(),
            finishes.iter().max()
        ),
    );
    assert!(
        total >= MIN_POINTS,
        "only {total} kill points (want {MIN_POINTS}): {points:?}"
    );
}
