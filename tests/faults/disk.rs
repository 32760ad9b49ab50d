//! Disk full for SQLite: the server runs in its own user and mount namespace
//! (`unshare --user --map-root-user --mount`, no host change) with a small tmpfs mounted on its
//! data dir. The test fills the tmpfs (through `/proc/<pid>/root`), expects clear errors and
//! no corrupted store, frees the space, and expects the service to work again by itself.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Connection;
use tokio::time::Instant;

use crate::invariants::assert_invariants;
use crate::server::ServerProcess;
use crate::workload::{Shape, TENANT, drive_to_end, report, session_config, start_session};

/// Mounts a 24 MiB tmpfs on the data dir, then runs the server in the same namespaces.
const IN_SMALL_TMPFS: &[&str] = &[
    "unshare",
    "--user",
    "--map-root-user",
    "--mount",
    "sh",
    "-c",
    "mount -t tmpfs -o size=24m tmpfs \"$NORMA_DATA_DIR\" && exec \"$@\"",
    "sh",
];

/// Whether this machine lets an unprivileged user+mount namespace mount a tmpfs.
fn namespaces_available() -> bool {
    std::process::Command::new("unshare")
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            "mount -t tmpfs tmpfs /mnt",
        ])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// The server's data dir as seen from outside its mount namespace.
fn data_dir_inside(server: &ServerProcess) -> PathBuf {
    let pid = server.pid().expect("server running");
    PathBuf::from(format!("/proc/{pid}/root")).join(
        server
            .data_dir()
            .strip_prefix("/")
            .expect("absolute data dir"),
    )
}

/// Writes `filler` until the file system is full; how many bytes went in.
fn fill(filler: &PathBuf) -> usize {
    let mut file = std::fs::File::create(filler).expect("filler");
    let chunk = vec![0x5a_u8; 256 * 1024];
    let mut written = 0;
    loop {
        match file.write(&chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n,
        }
    }
    // Whatever is left in smaller pieces.
    while let Ok(n) = file.write(&chunk[..512]) {
        if n == 0 {
            break;
        }
        written += n;
    }
    let _ = file.sync_all();
    written
}

/// A POST that reports `(status, body)` without panicking on a broken connection.
async fn post(server: &ServerProcess, path: &str, token: &str, body: &Value) -> (u16, Value) {
    match server
        .client
        .post(server.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
    {
        Ok(response) => {
            let status = response.status().as_u16();
            (status, response.json().await.unwrap_or(Value::Null))
        }
        Err(error) => panic!("POST {path}: the server broke the connection: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_disk_full_is_a_clear_error_and_recovers() {
    let scenario = "SQLite disk full";
    if !namespaces_available() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{scenario}: user and mount namespaces are required in CI");
        }
        eprintln!("\n!!!!!!!! SKIPPING {scenario}: no user+mount namespaces here !!!!!!!!\n");
        return;
    }
    let mut server = ServerProcess::new(None)
        .env("NORMA_REPLICA_ID", "fault-disk-replica")
        .wrapped(IN_SMALL_TMPFS);
    server.start().await;
    let token = server.token(TENANT);
    let urls = vec![server.url("")];
    let text = session_config(Shape::Text, 0.0, None);

    // Before: a run works.
    let mut tracked = vec![start_session(&server, &token, &text, Shape::Text, &urls).await];
    drive_to_end(&server, None, &token, &tracked, Duration::from_secs(20)).await;

    let filler = data_dir_inside(&server).join("filler");
    let filled = fill(&filler);
    assert!(filled > 0, "nothing written to fill the disk");

    // While full: writes are refused with a clear error (a status and a stable code) once the
    // store's free pages are used up (prompts of 190,000 characters get there fast); a prompt
    // accepted meanwhile is held to the same invariants as every run.
    let big = "x".repeat(190_000);
    let mut refused = Vec::new();
    let mut accepted_while_full = 0;
    for _ in 0..100 {
        let (status, body) = post(&server, "/v1/sessions", &token, &text).await;
        if status != 201 {
            refused.push((status, body.clone()));
            break;
        }
        let id = body["id"].as_str().unwrap().to_owned();
        let witness = crate::invariants::Witness::follow(urls.clone(), &token, &id, 1);
        let (status, body) = post(
            &server,
            &format!("/v1/sessions/{id}/prompts"),
            &token,
            &json!({ "text": big }),
        )
        .await;
        if status != 202 {
            refused.push((status, body.clone()));
            break;
        }
        accepted_while_full += 1;
        tracked.push(crate::workload::Tracked {
            id,
            shape: Shape::Text,
            runs: vec![body["run_id"].as_str().unwrap().to_owned()],
            witness,
        });
    }
    let (status, body) = refused.last().cloned().unwrap_or_default();
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("STORE_UNAVAILABLE")),
        "{scenario}: a clear error when the disk is full (after {accepted_while_full} \
         accepted prompts): {body}"
    );
    let refused: Vec<(u16, Value)> = refused
        .into_iter()
        .map(|(status, body)| (status, body["code"].clone()))
        .collect();
    assert!(server.is_running(), "the server died of a full disk");

    // Space returns: the service recovers by itself.
    std::fs::remove_file(&filler).expect("free the space");
    let freed = Instant::now();
    let recovered = loop {
        let (status, body) = post(&server, "/v1/sessions", &token, &text).await;
        if status == 201 {
            break freed.elapsed();
        }
        assert!(
            freed.elapsed() < Duration::from_secs(20),
            "{scenario}: no recovery 20 s after the space returned: {status} {body}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    tracked.push(start_session(&server, &token, &text, Shape::Text, &urls).await);
    let ended = drive_to_end(&server, None, &token, &tracked, Duration::from_secs(30)).await;
    let summary = assert_invariants(scenario, &[&server], &token, &tracked).await;

    // The store is not corrupted: a copy of its files (taken while the server is idle; SQLite
    // itself cannot open a path through `/proc/<pid>/root`) passes `PRAGMA integrity_check`.
    let copy = tempfile::tempdir().expect("tempdir");
    for file in ["norma.db", "norma.db-wal"] {
        let from = data_dir_inside(&server).join(file);
        if from.exists() {
            std::fs::copy(&from, copy.path().join(file)).expect("copy the store");
        }
    }
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(copy.path().join("norma.db"));
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("open the copy of the store");
    let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .expect("integrity check");
    assert_eq!(integrity, "ok", "{scenario}: the store is corrupted");
    report(
        scenario,
        format!(
            "{filled} bytes filled; {accepted_while_full} prompts still fit; refused with \
             {refused:?}; a write worked again \
             {recovered:?} after the space returned; runs ended {ended:?}; integrity ok; \
             {summary:?}"
        ),
    );
}
