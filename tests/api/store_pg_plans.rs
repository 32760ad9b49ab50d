//! Postgres: what a run's statements read does not grow with what the tenant has (migration
//! 0029). A run's admission reads its own session's row, not every open session of the
//! tenant; a write's lease check finds its run by id, not among every running run of the
//! tenant — both were planned on the tenant's partial indexes while the tables had no
//! statistics (a new database), in the generic plans a connection keeps. And a session an
//! operator deletes takes its events, history and usage rows with it (a trigger, where a
//! foreign key checked every inserted row), and every shape of the append's one statement
//! writes what its batch holds.

use norma::ids::{RunId, SessionId, TenantId};
use norma::limits::RunCaps;
use norma::store::postgres::PgStore;
use norma::store::{
    AppendBatch, ConnectOptions, NewEvent, NewMessage, NewRun, RunEnd, RunRecord, RunStatus, Store,
};
use norma::usage::{NewUsageRecord, TokenCounts};
use serde_json::json;
use sqlx::Connection;

const TENANT: &str = "acme";
/// Open sessions of the tenant beside the ones measured.
const OPEN: usize = 40;
/// Measured operations, more than the five custom plans a connection makes before it may
/// keep a generic one.
const MEASURED: usize = 8;

async fn one_connection_store() -> Option<(PgStore, String)> {
    crate::store_pg_conns::store_and_url(ConnectOptions {
        max_connections: 1,
        ..ConnectOptions::default()
    })
    .await
}

async fn sessions(store: &PgStore, n: usize) -> Vec<SessionId> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(crate::store_pg_conns::session(store, TENANT).await);
    }
    ids
}

/// A run started at once in `session` (`Store::start_run`, as the server starts one).
async fn start(store: &PgStore, session: &SessionId, caps: RunCaps) -> RunRecord {
    store
        .start_run(
            &TenantId::new(TENANT),
            NewRun {
                id: RunId::generate(),
                session: session.clone(),
                prompt: "go".into(),
            },
            ("replica-a", std::time::Duration::from_secs(60)),
            caps,
            None,
        )
        .await
        .unwrap()
        .run
}

/// A user message of `run`.
fn message(run: Option<String>) -> NewMessage {
    NewMessage {
        message: norma::message::Message::user_text("hello"),
        run_id: run,
        compaction_boundary: false,
    }
}

/// A model call of `run` that read 3 input tokens.
fn usage_row(run: &str) -> NewUsageRecord {
    NewUsageRecord {
        run_id: run.into(),
        provider: "anthropic".into(),
        model: "m".into(),
        tokens: TokenCounts {
            input_tokens: 3,
            ..TokenCounts::default()
        },
        cost_pico: None,
    }
}

/// Rows of `table` the current transaction has read (index fetches and sequential reads).
async fn rows_read(conn: &mut sqlx::PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT (idx_tup_fetch + seq_tup_read)::bigint FROM pg_stat_xact_user_tables \
         WHERE relname = $1",
    )
    .bind(table)
    .fetch_one(conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_runs_admission_reads_its_session_not_every_open_session_of_the_tenant() {
    let Some((store, _)) = one_connection_store().await else {
        return;
    };
    let tenant = TenantId::new(TENANT);
    let ids = sessions(&store, OPEN + MEASURED).await;
    // The admission as the server makes it (`Store::start_run`, capped), on the store's one
    // connection, for a few sessions first.
    let caps = RunCaps {
        concurrent_runs: 64,
        queued_per_session: 8,
        queued_per_tenant: 64,
    };
    for session in &ids[..MEASURED] {
        start(&store, session, caps).await;
    }
    // Then the admitting function itself in one transaction on that connection, where
    // Postgres counts the rows it reads.
    let mut tx = store.tenant_tx(&tenant).await.unwrap();
    let before = rows_read(&mut tx, "sessions").await;
    for session in &ids[OPEN..] {
        let admitted: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM norma_create_run(7, 64, NULL, NULL, $1, $2, $3, 'go', \
             'running', 'replica-a', now() + interval '1 minute', 1, now(), now())",
        )
        .bind(RunId::generate().as_str())
        .bind(session.as_str())
        .bind(TENANT)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        assert_eq!(admitted, 1);
    }
    let read = rows_read(&mut tx, "sessions").await - before;
    tx.commit().await.unwrap();
    // Its own row (and the run's reference to it) per admission; on the tenant's open
    // sessions' index it was ~OPEN per admission.
    assert!(
        read <= 3 * MEASURED as i64,
        "{read} session rows read for {MEASURED} admissions among {} open sessions",
        OPEN + MEASURED
    );
}

#[tokio::test]
async fn a_lease_check_finds_its_run_not_every_running_run_of_the_tenant() {
    let Some((store, _)) = one_connection_store().await else {
        return;
    };
    let tenant = TenantId::new(TENANT);
    let mut leases = Vec::new();
    for session in sessions(&store, OPEN).await {
        let started = start(&store, &session, RunCaps::UNLIMITED).await;
        leases.push(started.lease().unwrap());
    }
    // The check every write of a run makes (`store::events`), prepared once and run past
    // the custom plans, on a tenant connection.
    let mut tx = store.tenant_tx(&tenant).await.unwrap();
    let before = rows_read(&mut tx, "runs").await;
    for lease in leases.iter().take(MEASURED) {
        let held: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM runs WHERE id = $1 AND owner = $2 AND fence = $3 \
             AND status = 'running' FOR SHARE",
        )
        .bind(lease.run_id.as_str())
        .bind(&lease.owner)
        .bind(lease.fence)
        .fetch_optional(&mut *tx)
        .await
        .unwrap();
        assert_eq!(held, Some(1));
    }
    let read = rows_read(&mut tx, "runs").await - before;
    tx.commit().await.unwrap();
    assert!(
        read <= 2 * MEASURED as i64,
        "{read} run rows read for {MEASURED} lease checks among {OPEN} running runs"
    );
}

#[tokio::test]
async fn a_session_deleted_by_an_operator_takes_its_history_with_it() {
    let Some((store, url)) = one_connection_store().await else {
        return;
    };
    let tenant = TenantId::new(TENANT);
    let ids = sessions(&store, 2).await;
    for session in &ids {
        store
            .append(
                &tenant,
                session,
                AppendBatch {
                    events: vec![NewEvent {
                        kind: "note".into(),
                        payload: json!({"n": 1}).into(),
                        run_id: None,
                    }],
                    messages: vec![message(None)],
                    usage: vec![usage_row("run_x")],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let mut owner = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("DELETE FROM sessions WHERE id = $1")
        .bind(ids[0].as_str())
        .execute(&mut owner)
        .await
        .unwrap();
    for table in ["events", "messages", "usage_records"] {
        let counts: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT session_id, count(*) FROM {table} GROUP BY session_id"
        ))
        .fetch_all(&mut owner)
        .await
        .unwrap();
        // The other session's rows stay.
        assert_eq!(counts, vec![(ids[1].as_str().to_owned(), 1)], "{table}");
    }
}

/// Every shape of the append's one statement (`store::events::postgres_single`: history,
/// usage, workspace bytes, the run's end and a notifying event, each present or not — 32
/// statements) writes what its batch holds, each in a session of its own.
#[tokio::test]
async fn every_shape_of_an_append_writes_what_its_batch_holds() {
    let Some((store, _)) = one_connection_store().await else {
        return;
    };
    let tenant = TenantId::new(TENANT);
    for shape in 0u8..32 {
        let [messages, usage, workspace, end, notifies] =
            [1, 2, 4, 8, 16].map(|bit| shape & bit != 0);
        let session = sessions(&store, 1).await.remove(0);
        let run = start(&store, &session, RunCaps::UNLIMITED).await;
        let run_id = RunId::from_string(run.id.clone());
        let batch = AppendBatch {
            events: vec![NewEvent {
                kind: if notifies { "run_parked" } else { "note" }.into(),
                payload: json!({"shape": shape}).into(),
                run_id: Some(run.id.clone()),
            }],
            messages: if messages {
                vec![message(Some(run.id.clone()))]
            } else {
                Vec::new()
            },
            usage: if usage {
                vec![usage_row(&run.id)]
            } else {
                Vec::new()
            },
            workspace_bytes: workspace.then_some(42),
            run_end: end.then(|| RunEnd {
                status: RunStatus::Completed,
                terminal: json!({"reason": "end_turn"}),
            }),
            lease: run.lease(),
            ..Default::default()
        };
        let written = store.append(&tenant, &session, batch).await;
        let written = written.unwrap_or_else(|error| panic!("shape {shape}: {error}"));
        assert_eq!(
            (written.events.len(), written.messages.len()),
            (1, usize::from(messages)),
            "shape {shape}"
        );
        let stored_messages = store.list_messages(&tenant, &session, 0, 10).await.unwrap();
        assert_eq!(
            stored_messages.len(),
            usize::from(messages),
            "shape {shape}"
        );
        let totals = store
            .usage_totals(&tenant, norma::usage::UsageScope::Session(session.as_str()))
            .await
            .unwrap();
        assert_eq!(
            totals.input_tokens,
            if usage { 3 } else { 0 },
            "shape {shape}"
        );
        let status = store
            .get_run(&tenant, &session, &run_id)
            .await
            .unwrap()
            .unwrap()
            .status;
        let expected = if end {
            RunStatus::Completed
        } else {
            RunStatus::Running
        };
        assert_eq!(status, expected, "shape {shape}");
    }
}
