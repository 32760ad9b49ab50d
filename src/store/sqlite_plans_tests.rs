//! Query plans on SQLite: the statements a run, an admission or a heartbeat executes read the
//! rows they need through an index, never by scanning a table that grows with the tenant's
//! history (every run, approval, event or message ever stored). A scan there costs nothing in a
//! fresh database and grows without bound: a tenant with a long history would slow every
//! admission of every tenant on the one writer. SQLite chooses a partial index only when the
//! query repeats the index's condition, which is easy to miss (`status = 'running'` against
//! `status IN ('queued', 'running')`), so the plans are checked here against the migrated
//! schema.

use super::approvals::{DECIDE_APPROVAL, GET_APPROVAL, LIVE_GRANTS, PERMISSION_STATE, RUN_REQUEST};
use super::events::{GET_OUTPUT, LIST_EVENTS, LIST_MESSAGES};
use super::limits::sqlite::{COUNT_PENDING_APPROVALS, COUNT_QUEUED, COUNT_RUNNING};
use super::runs::{
    RELEASE_LEASES, RENEW_LEASES, REQUEST_CANCEL, REQUESTED_CANCELS, UNFINISHED_RUNS,
};
use super::sessions::{COUNT_OPEN_SESSIONS, IDLE_SESSIONS, SELECT_SESSION, WORKSPACE_SNAPSHOT};
use super::tool_state::{GET_MODE, GET_TODOS, SESSION_OWNED};
use super::webhooks::sqlite::{DUE_OF_TENANT, NEXT_DUE, OVER_BACKLOG, PENDING_TENANTS};
use crate::usage::UsageScope;

/// Tables that grow with use; a statement may scan only the others (a handful of replicas).
const GROWING: &[&str] = &[
    "runs",
    "approvals",
    "grants",
    "events",
    "messages",
    "outputs",
    "sessions",
    "usage_records",
    "webhook_deliveries",
];

/// The plan steps of `sql`.
fn plan(db: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut explain = db
        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .unwrap_or_else(|error| panic!("{error}: {sql}"));
    // Unbound parameters are NULL; the plan does not depend on their values.
    let nulls = std::iter::repeat_n(rusqlite::types::Null, explain.parameter_count());
    let steps: Vec<String> = explain
        .query_map(rusqlite::params_from_iter(nulls), |row| {
            row.get::<_, String>(3)
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    steps
}

/// The plan steps of `sql` that scan a growing table.
fn growing_scans(db: &rusqlite::Connection, sql: &str) -> Vec<String> {
    plan(db, sql)
        .into_iter()
        .filter(|step| {
            GROWING.iter().any(|table| {
                // `SCAN runs` or `SCAN runs USING INDEX …` (an index scan in full); a
                // `SEARCH` reads only the matching entries.
                step.strip_prefix("SCAN ")
                    .is_some_and(|rest| rest.split(' ').next() == Some(table))
            })
        })
        .collect()
}

/// A database with every migration applied (the directory and the store keep it).
async fn migrated() -> (
    (tempfile::TempDir, super::sqlite::SqliteStore),
    rusqlite::Connection,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plans.db");
    let url = format!("sqlite://{}", path.display());
    let store = super::sqlite::SqliteStore::connect(&url, &super::ConnectOptions::default())
        .await
        .unwrap();
    let db = rusqlite::Connection::open(&path).unwrap();
    ((dir, store), db)
}

#[tokio::test]
async fn hot_statements_read_through_an_index() {
    let (_dir, db) = migrated().await;
    let statements = [
        COUNT_RUNNING,
        COUNT_QUEUED,
        COUNT_PENDING_APPROVALS,
        RENEW_LEASES,
        RELEASE_LEASES,
        REQUEST_CANCEL,
        REQUESTED_CANCELS,
        UNFINISHED_RUNS,
        COUNT_OPEN_SESSIONS,
        IDLE_SESSIONS,
        SELECT_SESSION,
        WORKSPACE_SNAPSHOT,
        LIST_EVENTS,
        LIST_MESSAGES,
        GET_OUTPUT,
        GET_APPROVAL,
        RUN_REQUEST,
        DECIDE_APPROVAL,
        LIVE_GRANTS,
        PERMISSION_STATE,
        GET_TODOS,
        GET_MODE,
        SESSION_OWNED,
        PENDING_TENANTS,
        DUE_OF_TENANT,
        NEXT_DUE,
        OVER_BACKLOG,
    ];
    // A run's and a session's usage totals: through the ledger's (session_id, run_id) index.
    let run = UsageScope::Run {
        session: "s",
        run: "r",
    };
    for scope in [run, UsageScope::Session("s")] {
        let (sql, _, _) = super::usage::totals_sql(scope);
        let steps = plan(&db, &sql).join("; ");
        assert!(steps.contains("usage_records_session_run"), "{steps}");
    }
    let scans: Vec<(String, Vec<String>)> = statements
        .iter()
        .map(|sql| (sql.to_string(), growing_scans(&db, sql)))
        .filter(|(_, scans)| !scans.is_empty())
        .collect();
    assert!(
        scans.is_empty(),
        "statements scanning a growing table: {scans:#?}"
    );
}

/// The grants a run's start reads are those that apply to its session: the tenant-wide ones
/// and the session's own, each through its index (migration 0025), never every live grant of
/// the tenant (the index by tenant alone that preceded them read those too).
#[tokio::test]
async fn a_sessions_grants_are_read_through_their_own_indexes() {
    let (_dir, db) = migrated().await;
    for sql in [LIVE_GRANTS, PERMISSION_STATE] {
        let steps = plan(&db, sql);
        let grants: Vec<&String> = steps
            .iter()
            .filter(|step| step.split(' ').any(|word| word == "grants"))
            .collect();
        let through = |index: &str| grants.iter().any(|step| step.contains(index));
        assert!(
            grants.len() == 2
                && through("grants_live_tenant_wide (tenant_id=?)")
                && through("grants_live_session (session_id=?)"),
            "{steps:#?}"
        );
    }
}

/// The outbox worker's claim finds the tenants with pending deliveries one index probe each
/// and reads each tenant's due deliveries from its own range of the index (migration 0027): a
/// tenant's backlog is never read whole, and one tenant's rows are never read for another.
#[tokio::test]
async fn the_outbox_claim_reads_each_tenant_through_the_index_by_tenant() {
    let (_dir, db) = migrated().await;
    for sql in [PENDING_TENANTS, DUE_OF_TENANT, OVER_BACKLOG] {
        let steps = plan(&db, sql).join("; ");
        assert!(
            steps.contains("webhook_deliveries_tenant_due (tenant_id")
                && !steps.contains("webhook_deliveries_due"),
            "{steps}"
        );
    }
}

#[test]
fn the_check_sees_a_scan() {
    let db = rusqlite::Connection::open_in_memory().unwrap();
    db.execute_batch(
        "CREATE TABLE runs (id TEXT PRIMARY KEY, tenant_id TEXT, status TEXT); \
         CREATE INDEX runs_unfinished ON runs (tenant_id, status) \
             WHERE status IN ('queued', 'running');",
    )
    .unwrap();
    // The partial index's condition is not the query's: SQLite scans.
    assert_eq!(
        growing_scans(
            &db,
            "SELECT count(*) FROM runs WHERE tenant_id = ?1 AND status = 'running'"
        ),
        vec!["SCAN runs".to_string()]
    );
    assert!(
        growing_scans(
            &db,
            "SELECT count(*) FROM runs WHERE tenant_id = ?1 \
                 AND status IN ('queued', 'running') AND status = 'running'"
        )
        .is_empty()
    );
}
