//! Event throughput and fan-out: events persisted (group-committed batches) and published per
//! second on SQLite and Postgres, and in-process delivery latency from commit to 1,000
//! subscribers of one session. Run: `cargo bench --bench events` (Postgres part needs
//! 127.0.0.1:5432 or NORMA_TEST_PG_URL; it is skipped with a message otherwise).

use norma::ids::{SessionId, TenantId};
use norma::run_event::{AssistantDelta, RunEvent};
use norma::runtime::bus::EventBus;
use norma::runtime::session_writer::SessionWriter;
use norma::store::{ConnectOptions, NewSession, Store};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: usize = 64;
const BATCHES: usize = 300;
const SESSIONS: usize = 8;

async fn throughput(store: Arc<dyn Store>, label: &str) {
    let bus = Arc::new(EventBus::default());
    let tenant = TenantId::new("bench");
    let mut writers = Vec::new();
    for _ in 0..SESSIONS {
        let id = SessionId::generate();
        store
            .create_session(NewSession {
                id: id.clone(),
                tenant: tenant.clone(),
                config: json!({}),
            })
            .await
            .expect("session");
        writers.push(SessionWriter::new(
            store.clone(),
            bus.clone(),
            tenant.clone(),
            id,
        ));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in writers {
        tasks.push(tokio::spawn(async move {
            for b in 0..BATCHES {
                let events = (0..BATCH)
                    .map(|i| {
                        RunEvent::AssistantDelta(AssistantDelta {
                            text: format!("token {b}-{i}"),
                        })
                    })
                    .collect();
                writer.write(vec![], events).await.expect("write");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let elapsed = started.elapsed();
    let total = SESSIONS * BATCHES * BATCH;
    println!(
        "  {label:<9} {total} events in {:>6.2} s = {:>8.0} events/s ({SESSIONS} sessions, {BATCH} events per transaction)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
}

async fn fan_out() {
    let bus = Arc::new(EventBus::default());
    let session = SessionId::generate();
    let subscribers = 1_000;
    let events = 200;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
    for _ in 0..subscribers {
        let mut live = bus.subscribe(&session);
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok(event) = live.recv().await {
                let sent: u128 = event.payload.value()["sent_ns"]
                    .as_str()
                    .unwrap_or("0")
                    .parse()
                    .unwrap_or(0);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                let _ = tx.send(Duration::from_nanos(now.saturating_sub(sent) as u64));
            }
        });
    }
    drop(tx);
    for seq in 1..=events {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let record = norma::store::EventRecord {
            seq,
            kind: "assistant_delta".into(),
            payload: json!({ "sent_ns": now.to_string() }).into(),
            run_id: None,
            created_at: chrono::Utc::now(),
        };
        bus.publish(&session, vec![record]);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut latencies = Vec::new();
    while latencies.len() < subscribers * events as usize {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(latency)) => latencies.push(latency),
            _ => break,
        }
    }
    latencies.sort();
    let at = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize];
    println!(
        "  fan-out to {subscribers} subscribers, {events} events: {} deliveries, p50 {:?}, p99 {:?}",
        latencies.len(),
        at(0.5),
        at(0.99)
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        println!("events persisted and published per second");
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let sqlite = norma::store::connect(&url, &ConnectOptions::default())
            .await
            .expect("sqlite");
        throughput(sqlite, "sqlite").await;
        let admin = std::env::var("NORMA_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        match sqlx_create(&admin).await {
            Some(url) => {
                let pg = norma::store::connect(&url, &ConnectOptions::default())
                    .await
                    .expect("postgres");
                throughput(pg, "postgres").await;
            }
            None => println!("  postgres  skipped: unreachable at {admin}"),
        }
        println!("in-process SSE fan-out latency (commit → subscriber)");
        fan_out().await;
    });
}

async fn sqlx_create(admin: &str) -> Option<String> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin).await.ok()?;
    let name = format!("norma_test_bench_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .ok()?;
    let base = admin.rsplit_once('/').map_or(admin, |(base, _)| base);
    Some(format!("{base}/{name}"))
}
