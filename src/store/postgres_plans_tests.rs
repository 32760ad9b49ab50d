//! Query plans on Postgres: a run's start reads, of the tenant's live grants, only those that
//! apply to its session (migration 0031), however many session-scoped grants the tenant's
//! other sessions hold. Measured as the rows the statements read in one transaction
//! (`pg_stat_xact_user_tables`) on a connection that runs them past its custom plans, so the
//! generic plans it keeps are the ones counted.

#[path = "../../tests/support/pg.rs"]
mod pg;

use super::ConnectOptions;
use super::approvals::{LIVE_GRANTS, PERMISSION_STATE};
use super::postgres::PgStore;
use crate::ids::TenantId;
use sqlx::Connection;

/// Sessions of the tenant, each holding a session-scoped grant.
const SESSIONS: usize = 40;
/// Reads measured per statement, past the five custom plans.
const MEASURED: usize = 8;

#[tokio::test]
async fn a_run_reads_the_grants_of_its_session_not_those_of_every_session() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let options = ConnectOptions {
        max_connections: 1,
        ..ConnectOptions::default()
    };
    let store = PgStore::connect(&url, &options).await.unwrap();
    let mut owner = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in [
        "INSERT INTO sessions (id, tenant_id, config, created_at, updated_at) \
         SELECT 'ses_' || i, 'acme', '{}', now(), now() FROM generate_series(1, $1) AS i",
        "INSERT INTO grants (id, tenant_id, session_id, scope, rule, created_by, created_at) \
         SELECT 'grant_' || i, 'acme', 'ses_' || i, 'session', 'Read', 'test', now() \
         FROM generate_series(1, $1) AS i",
    ] {
        sqlx::query(sql)
            .bind(SESSIONS as i32)
            .execute(&mut owner)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO grants (id, tenant_id, session_id, scope, rule, created_by, created_at) \
         VALUES ('grant_tenant', 'acme', 'ses_1', 'tenant', 'Grep', 'test', now())",
    )
    .execute(&mut owner)
    .await
    .unwrap();

    let mut tx = store.tenant_tx(&TenantId::new("acme")).await.unwrap();
    let before = rows_read(&mut tx).await;
    for n in 1..=MEASURED {
        let session = format!("ses_{}", n * 2);
        for sql in [LIVE_GRANTS, PERMISSION_STATE] {
            let rows = sqlx::query(sql)
                .bind("acme")
                .bind(&session)
                .bind(chrono::Utc::now())
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            // The session's own grant and the tenant-wide one.
            assert_eq!(rows.len(), 2, "{sql}");
        }
    }
    let read = rows_read(&mut tx).await - before;
    tx.commit().await.unwrap();
    // Two rows per read; through the tenant's live grants it was every one of them (41).
    assert!(
        read <= (2 * MEASURED * 2) as i64,
        "{read} grant rows read for {} reads of a session's grants among {} live grants",
        2 * MEASURED,
        SESSIONS + 1
    );
}

/// Rows of `grants` the current transaction has read (index fetches and sequential reads).
async fn rows_read(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT (idx_tup_fetch + seq_tup_read)::bigint FROM pg_stat_xact_user_tables \
         WHERE relname = 'grants'",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}
