//! Sessions that move between replicas keep their files (`workspace.storage = "shared"`).
//!
//! Two real `norma serve` processes on one Postgres database, each with its own data dir and
//! both with the same shared workspace root (the settings deploy/kubernetes/norma.yaml and
//! deploy/compose.yaml set: `NORMA_WORKSPACE__STORAGE=shared`, a shared root, distinct
//! replica ids). A short run lease (3 s) keeps takeovers quick.
//!
//! - a run killed (SIGKILL) in the middle of a turn that had written a file is taken over by
//!   the other replica, which reads the file;
//! - a run parked on an approval on a replica that dies is answered on the other replica,
//!   whose command sees the file;
//! - a replica cut off from the store (connections refused, or stalled with queries hanging)
//!   stops its command before the other replica takes the run over (self-fencing): the two
//!   never write one workspace;
//! - with `local` storage (the default) the takeover does not find the file, and the replica
//!   warns at start-up that another replica shares the store.

#[path = "support/pg.rs"]
mod pg;
#[path = "support/replicas.rs"]
mod replicas;
#[path = "support/server.rs"]
mod server;

use replicas::result_of;
use serde_json::{Value, json};
use server::{ServerProcess, count, of_kind, summarize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

const TENANT: &str = "acme";
const LEASE_SECONDS: &str = "3";
/// Bound for a taken-over run to reach `terminal`.
const FINISH_WITHIN: Duration = Duration::from_secs(45);

/// A not-yet-started replica on `database_url`; with `shared_root`, shared storage.
fn replica(database_url: &str, name: &str, shared_root: Option<&Path>) -> ServerProcess {
    let server = ServerProcess::new(Some(database_url.to_owned()))
        .env("NORMA_REPLICA_ID", name)
        .env("NORMA_RUN_LEASE_SECONDS", LEASE_SECONDS)
        .env("NORMA_APPROVAL_PARK_AFTER_MS", "200");
    match shared_root {
        Some(root) => server
            .env("NORMA_WORKSPACE__STORAGE", "shared")
            .env("NORMA_WORKSPACE__SHARED_ROOT", root.display().to_string()),
        None => server,
    }
}

fn shared_workspace(root: &Path, session: &str) -> PathBuf {
    root.join("workspaces").join(TENANT).join(session)
}

/// The session whose turn writes `notes.txt`, then runs a long command (killed mid-way),
/// then reads the file back.
fn write_then_sleep_then_read() -> Value {
    json!({
        "permission": {"allow": ["Bash", "Write"]},
        "model": {"script": {"turns": [
            {"tool_calls": [
                {"name": "Write", "input": {"file_path": "notes.txt", "content": "remember the lighthouse"}},
                {"name": "Bash", "input": {"command": "sleep 60"}}
            ]},
            {"tool_calls": [{"name": "Read", "input": {"file_path": "notes.txt"}}]},
            {"text": "done"}
        ]}}
    })
}

/// Starts A and B, runs [`write_then_sleep_then_read`] on A, kills A mid-command, and returns
/// B's events once the run ended there.
async fn takeover_mid_turn(url: &str, shared_root: Option<&Path>) -> (Vec<Value>, String) {
    let mut a = replica(url, "replica-a", shared_root);
    a.start().await;
    let mut b = replica(url, "replica-b", shared_root);
    b.start().await;
    let token = a.token(TENANT);
    let (id, run) = a
        .session_with_prompt(&token, &write_then_sleep_then_read(), "go")
        .await;
    a.wait_for_events(
        &token,
        &id,
        Duration::from_secs(20),
        "Write done and Bash executing",
        |e| count(e, "tool_result") == 1 && count(e, "tool_executing") == 2,
    )
    .await;
    a.kill();
    let events = b
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal on B", |e| {
            count(e, "terminal") == 1
        })
        .await;
    let resumed = of_kind(&events, "run_resumed");
    assert_eq!(resumed.len(), 1, "{}", summarize(&events));
    assert_eq!(resumed[0]["payload"]["replica"], "replica-b");
    assert_eq!(resumed[0]["payload"]["run_id"], run.as_str());
    assert_eq!(
        result_of(&events, "Bash")["code"],
        "INTERRUPTED",
        "the killed command is not run again"
    );
    assert!(
        result_of(&events, "Write")["is_error"] != true,
        "the finished write keeps its result"
    );
    (events, b.logs())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_storage_a_run_taken_over_mid_turn_reads_the_file_it_wrote() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let (events, logs) = takeover_mid_turn(&url, Some(shared.path())).await;
    let read = result_of(&events, "Read");
    assert!(
        read.to_string().contains("remember the lighthouse"),
        "B reads what A wrote: {read}\n{}",
        summarize(&events)
    );
    assert!(
        !logs.contains("will not find its files"),
        "no local-storage warning with shared storage\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_storage_a_taken_over_run_misses_the_file_and_the_replica_warns() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let (events, logs) = takeover_mid_turn(&url, None).await;
    let read = result_of(&events, "Read");
    assert_eq!(read["code"], "FILE_NOT_FOUND", "{read}");
    assert!(
        logs.contains("replica-a (local)") && logs.contains("will not find its files"),
        "B warns about A at start-up\n{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_storage_a_parked_run_is_answered_on_the_other_replica() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let shared = tempfile::tempdir().unwrap();
    let mut a = replica(&url, "replica-a", Some(shared.path()));
    a.start().await;
    let mut b = replica(&url, "replica-b", Some(shared.path()));
    b.start().await;
    let token = a.token(TENANT);
    let config = json!({
        "permission": {"allow": ["Write"]},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Write", "input": {"file_path": "notes.txt", "content": "parked but kept"}}]},
            {"tool_calls": [{"name": "Bash", "input": {"command": "cat notes.txt"}}]},
            {"text": "saw: {{last_tool_result}}"}
        ]}}
    });
    let (id, _run) = a.session_with_prompt(&token, &config, "go").await;
    a.wait_for_events(
        &token,
        &id,
        Duration::from_secs(20),
        "approval_requested",
        |e| count(e, "approval_requested") == 1,
    )
    .await;
    a.kill();
    let (status, pending) = b
        .get(
            &format!("/v1/sessions/{id}/approvals?status=pending"),
            &token,
        )
        .await;
    assert_eq!(status, 200, "{pending}");
    let approval = pending["approvals"][0]["id"]
        .as_str()
        .expect("a pending approval")
        .to_owned();
    let (status, answered) = b
        .post(
            &format!("/v1/sessions/{id}/approvals/{approval}"),
            &token,
            &json!({ "decision": "allow" }),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let events = b
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal on B", |e| {
            count(e, "terminal") == 1
        })
        .await;
    assert_eq!(
        of_kind(&events, "run_resumed")
            .last()
            .map(|e| e["payload"]["replica"].clone()),
        Some(json!("replica-b")),
        "{}",
        summarize(&events)
    );
    let bash = result_of(&events, "Bash");
    assert!(
        bash.to_string().contains("parked but kept"),
        "the command on B sees A's file: {bash}\n{}",
        summarize(&events)
    );
    assert!(
        shared_workspace(shared.path(), &id)
            .join("notes.txt")
            .is_file()
    );
}

/// A TCP proxy to Postgres that can drop every connection and refuse new ones, or stall
/// them (keep them open, forward nothing: a network partition, where queries hang).
struct CutProxy {
    port: u16,
    down: Arc<AtomicBool>,
    stall: Arc<AtomicBool>,
    cut: Arc<Notify>,
}

/// How the replica loses the store.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// Connections drop, new ones are refused: queries fail at once.
    Refused,
    /// Connections stay open and nothing answers: queries hang.
    Stalled,
}

impl CutProxy {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let stall = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(Notify::new());
        let (down2, stall2, cut2) = (down.clone(), stall.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if down2.load(Ordering::SeqCst) {
                    if stall2.load(Ordering::SeqCst) {
                        tokio::spawn(async move {
                            let _held = client;
                            std::future::pending::<()>().await;
                        });
                    }
                    continue;
                }
                let (upstream, cut, stall) = (upstream.clone(), cut2.clone(), stall2.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = cut.notified() => {
                            if stall.load(Ordering::SeqCst) {
                                let _held = (client, server);
                                std::future::pending::<()>().await;
                            }
                        }
                    }
                });
            }
        });
        Self {
            port,
            down,
            stall,
            cut,
        }
    }

    fn go_down(&self, outage: Outage) {
        self.stall
            .store(matches!(outage, Outage::Stalled), Ordering::SeqCst);
        self.down.store(true, Ordering::SeqCst);
        self.cut.notify_waiters();
    }
}

/// The last line of the heartbeat file a command appends to (nanoseconds since the epoch).
fn last_beat(path: &Path) -> Option<i128> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .next_back()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_storage_a_replica_refused_by_the_store_stops_its_command_before_the_takeover() {
    cut_off_replica_fences_itself(Outage::Refused).await;
}

/// The renewal hangs (no answer, no error): the fencing watchdog must not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_storage_a_replica_whose_store_stalls_stops_its_command_before_the_takeover() {
    cut_off_replica_fences_itself(Outage::Stalled).await;
}

async fn cut_off_replica_fences_itself(outage: Outage) {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let (prefix, database) = url.rsplit_once('/').unwrap();
    let host = prefix.rsplit_once('@').map_or(prefix, |(_, host)| host);
    let proxy = CutProxy::start(host.to_owned()).await;
    let through_proxy = format!(
        "{}127.0.0.1:{}/{database}",
        prefix.strip_suffix(host).unwrap(),
        proxy.port
    );
    let shared = tempfile::tempdir().unwrap();
    let mut a = replica(&through_proxy, "replica-a", Some(shared.path()));
    a.start().await;
    let mut b = replica(&url, "replica-b", Some(shared.path()));
    b.start().await;
    let token = a.token(TENANT);
    let config = json!({
        "permission": {"allow": ["Bash"]},
        "model": {"script": {"turns": [
            {"tool_calls": [{"name": "Bash", "input": {
                "command": "while true; do date +%s%N >> beat; sleep 0.05; done",
                "timeout": 600000
            }}]},
            {"text": "done"}
        ]}}
    });
    let (id, _run) = a.session_with_prompt(&token, &config, "go").await;
    let beat = shared_workspace(shared.path(), &id).join("beat");
    a.wait_for_events(
        &token,
        &id,
        Duration::from_secs(20),
        "Bash executing",
        |e| count(e, "tool_executing") == 1,
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while last_beat(&beat).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never wrote\n{}",
            a.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    proxy.go_down(outage);

    let events = b
        .wait_for_events(&token, &id, FINISH_WITHIN, "terminal on B", |e| {
            count(e, "terminal") == 1
        })
        .await;
    let resumed = of_kind(&events, "run_resumed");
    assert_eq!(resumed.len(), 1, "{}", summarize(&events));
    assert_eq!(resumed[0]["payload"]["replica"], "replica-b");
    assert_eq!(result_of(&events, "Bash")["code"], "INTERRUPTED");
    let taken_over: chrono::DateTime<chrono::Utc> = resumed[0]["created_at"]
        .as_str()
        .expect("created_at")
        .parse()
        .expect("timestamp");
    let last = last_beat(&beat).expect("beats");
    assert!(
        last < i128::from(taken_over.timestamp_nanos_opt().unwrap()),
        "A's command wrote after B took the run over (last beat {last}, takeover {taken_over})\n{}",
        a.logs()
    );
    // And it stays stopped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(last_beat(&beat), Some(last), "A's command still runs");
    assert!(
        a.logs().contains("self-fencing"),
        "A says why it stopped\n{}",
        a.logs()
    );
}
