//! The webhook outbox survives `kill -9` of the real binary: a run's `run.completed`
//! notification is committed with its `terminal` event; the server is killed while the
//! delivery is in flight (the receiver holds the connection without answering); after a
//! restart on the same store the claim's lease runs out and the notification is delivered,
//! with the same `webhook-id` the delivery log showed before the crash, and verified with the
//! PyPI `standardwebhooks` library. On SQLite and on Postgres.

#[path = "support/pg.rs"]
mod pg;
#[path = "support/server.rs"]
mod server;
#[path = "support/webhook_receiver.rs"]
mod webhook_receiver;

use serde_json::{Value, json};
use server::{ServerProcess, count, free_port};
use std::time::Duration;
use webhook_receiver::{Receiver, verify_with_standardwebhooks};

const TENANT: &str = "acme";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    outbox_survives_kill(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    if let Some(url) = pg::fresh_pg_database().await {
        outbox_survives_kill(Some(url)).await;
    }
}

/// A listener that accepts connections and never answers; counts them.
async fn hanging_listener(
    port: u16,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Receiver<usize>,
) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (count, seen) = tokio::sync::watch::channel(0usize);
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
            count.send_replace(held.len());
        }
    });
    (task, seen)
}

async fn outbox_survives_kill(database_url: Option<String>) {
    let mut server = ServerProcess::new(database_url)
        .env("NORMA_REPLICA_ID", "webhook-crash-1")
        .env("NORMA_ALLOW_PRIVATE_WEBHOOKS", "true")
        .env("NORMA_WEBHOOKS__LEASE_SECONDS", "15")
        .env("NORMA_WEBHOOKS__RETRY_BASE_MS", "500");
    server.start().await;
    let token = server.token(TENANT);
    let port = free_port();
    let (hanging, mut connections) = hanging_listener(port).await;
    let url = format!("http://127.0.0.1:{port}/hook");

    let (status, session) = server
        .post(
            "/v1/sessions",
            &token,
            &json!({"model": {"script": {"turns": [{"text": "finished"}]}}}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap().to_owned();
    let (status, created) = server
        .post(
            "/v1/webhooks",
            &token,
            &json!({"url": url, "events": ["run.completed"], "session_id": id}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let webhook = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let (status, accepted) = server
        .post(
            &format!("/v1/sessions/{id}/prompts"),
            &token,
            &json!({"text": "go"}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    server
        .wait_for_events(&token, &id, Duration::from_secs(30), "terminal", |e| {
            count(e, "terminal") == 1
        })
        .await;
    // The attempt is in flight: the receiver holds its connection.
    tokio::time::timeout(Duration::from_secs(30), connections.wait_for(|n| *n >= 1))
        .await
        .expect("the delivery reached the receiver")
        .unwrap();
    let (status, log) = server
        .get(&format!("/v1/webhooks/{webhook}/deliveries"), &token)
        .await;
    assert_eq!(status, 200, "{log}");
    let before: Vec<Value> = log["deliveries"].as_array().unwrap().clone();
    assert_eq!(before.len(), 1, "{log}");
    assert_eq!(before[0]["status"], "pending", "{log}");
    let delivery_id = before[0]["id"].as_str().unwrap().to_owned();

    server.kill();
    hanging.abort();
    let _ = hanging.await;
    let receiver = Receiver::start_on(port).await;
    server.start().await;

    let received = receiver
        .wait_for(Duration::from_secs(60), |r| !r.is_empty())
        .await;
    assert_eq!(
        received[0].id, delivery_id,
        "the same webhook-id after the crash"
    );
    let verified = verify_with_standardwebhooks(&secret, &received[..1]);
    assert_eq!(verified[0]["type"], "run.completed");
    assert_eq!(verified[0]["data"]["session_id"], id.as_str());
    assert_eq!(verified[0]["data"]["run_id"], accepted["run_id"]);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, log) = server
            .get(&format!("/v1/webhooks/{webhook}/deliveries"), &token)
            .await;
        let delivery = &log["deliveries"][0];
        if delivery["status"] == "delivered" {
            assert_eq!(delivery["id"], delivery_id.as_str());
            assert_eq!(delivery["attempts"], 2, "{delivery}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not recorded as delivered: {log}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
