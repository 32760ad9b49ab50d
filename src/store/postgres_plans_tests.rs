//! Query plans on Postgres: a run's start reads, of the tenant's live grants, only those that
//! apply to its session (migration 0031), however many session-scoped grants the tenant's
//! other sessions hold; the outbox claim reads a tenant's backlog only to its room (0033). Measured as the rows the statements read in one transaction
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
    let before = rows_read(&mut tx, "grants").await;
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
    let read = rows_read(&mut tx, "grants").await - before;
    tx.commit().await.unwrap();
    // Two rows per read; through the tenant's live grants it was every one of them (41).
    assert!(
        read <= (2 * MEASURED * 2) as i64,
        "{read} grant rows read for {} reads of a session's grants among {} live grants",
        2 * MEASURED,
        SESSIONS + 1
    );
}

/// The outbox worker's claim reads, of a tenant with a long backlog of due deliveries, only
/// as many as that tenant has room for (migration 0033: the tenants found by a loose scan, each
/// read from its own range of the index by tenant and due time) — never the whole backlog, as
/// ranking every due delivery per tenant would — and still reaches the other tenant's
/// delivery behind that backlog (the claim by due time alone took the backlog's head only).
#[tokio::test]
async fn the_outbox_claim_reads_a_tenants_backlog_only_to_its_room() {
    let Some(url) = pg::fresh_pg_database().await else {
        return;
    };
    let store = PgStore::connect(&url, &ConnectOptions::default())
        .await
        .unwrap();
    let mut owner = sqlx::PgConnection::connect(&url).await.unwrap();
    for sql in [
        "INSERT INTO webhook_subscriptions (id, tenant_id, url, events, secret, created_at) \
         VALUES ('wh_noisy', 'noisy', 'https://a.example/', '{run.completed}', 's', now()), \
                ('wh_quiet', 'quiet', 'https://b.example/', '{run.completed}', 's', now())",
        "INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, event_type, body, \
             next_attempt_at, created_at) \
         SELECT 'msg_' || i, 'noisy', 'wh_noisy', 'run.completed', '{}', \
             now() - interval '1 hour' + i * interval '1 ms', now() \
         FROM generate_series(1, 5000) AS i",
        "INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, event_type, body, \
             next_attempt_at, created_at) \
         VALUES ('msg_quiet', 'quiet', 'wh_quiet', 'run.completed', '{}', now(), now())",
        "ANALYZE webhook_deliveries",
    ] {
        sqlx::query(sql).execute(&mut owner).await.unwrap();
    }
    drop(store);

    let mut tx = owner.begin().await.unwrap();
    let before = rows_read(&mut tx, "webhook_deliveries").await;
    let now = chrono::Utc::now();
    let claimed: Vec<String> = sqlx::query(super::webhooks::postgres::CLAIM)
        .bind(now + chrono::Duration::seconds(60))
        .bind(now)
        .bind(8_i64)
        .bind(vec!["noisy"])
        .bind(vec![2_i32])
        .bind(4_i64)
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        .iter()
        .map(|row| sqlx::Row::get(row, "id"))
        .collect();
    let read = rows_read(&mut tx, "webhook_deliveries").await - before;
    tx.commit().await.unwrap();
    // Two of the noisy tenant's (two more in flight), and the quiet one's.
    assert_eq!(claimed.len(), 3, "{claimed:?}");
    assert!(claimed.contains(&"msg_quiet".to_owned()), "{claimed:?}");
    assert!(
        claimed.contains(&"msg_1".to_owned()) && claimed.contains(&"msg_2".to_owned()),
        "the noisy tenant's oldest: {claimed:?}"
    );
    assert!(read < 50, "{read} delivery rows read for a backlog of 5000");
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
