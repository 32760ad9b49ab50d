//! Postgres tenant connections (`store::pg_conns`): reused across tenants without a ping,
//! row-level security still per tenant (also after a rolled-back transaction of another
//! tenant), uncommitted work rolled back before reuse, a
//! statement cancelled mid-reply never leaks into the next user's results, a bounded wait for
//! a connection, tenant ids outside their alphabet refused before any SQL is sent, the
//! limits lock taken with `BEGIN` holding up the same tenant only, connections used a
//! moment before the server dropped them never taken again, and a tenant's workspace
//! measurements not waiting for each other (its total kept in shards).

use norma::ids::{SessionId, TenantId};
use norma::store::postgres::PgStore;
use norma::store::{ConnectOptions, NewSession, Store, StoreError};
use serde_json::json;
use std::time::Duration;

async fn store(options: ConnectOptions) -> Option<PgStore> {
    Some(store_and_url(options).await?.0)
}

/// A store whose tenant pool has one connection: every use reuses it.
async fn one_connection_store() -> Option<PgStore> {
    store(ConnectOptions {
        max_connections: 1,
        ..ConnectOptions::default()
    })
    .await
}

pub(crate) async fn store_and_url(options: ConnectOptions) -> Option<(PgStore, String)> {
    let url = crate::helpers::fresh_pg_database().await?;
    Some((PgStore::connect(&url, &options).await.unwrap(), url))
}

pub(crate) async fn session(store: &PgStore, tenant: &str) -> SessionId {
    let id = SessionId::generate();
    store
        .create_session(NewSession {
            id: id.clone(),
            tenant: TenantId::new(tenant),
            config: json!({}),
        })
        .await
        .unwrap();
    id
}

async fn backend_and_visible(store: &PgStore, tenant: &str) -> (i32, Vec<String>) {
    let mut conn = store.tenant_conn(&TenantId::new(tenant)).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    // No tenant filter: row-level security alone decides what is visible.
    let tenants: Vec<String> = sqlx::query_scalar("SELECT DISTINCT tenant_id FROM sessions")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    conn.commit().await.unwrap();
    (pid, tenants)
}

#[tokio::test]
async fn one_connection_serves_tenant_after_tenant_each_seeing_only_its_rows() {
    let Some(store) = one_connection_store().await else {
        return;
    };
    session(&store, "alpha").await;
    session(&store, "beta").await;
    let (first, alpha) = backend_and_visible(&store, "alpha").await;
    let (second, beta) = backend_and_visible(&store, "beta").await;
    let (third, alpha_again) = backend_and_visible(&store, "alpha").await;
    assert_eq!(alpha, vec!["alpha".to_owned()]);
    assert_eq!(beta, vec!["beta".to_owned()]);
    assert_eq!(alpha_again, alpha);
    // The same backend each time: given back by `commit`, taken again without reconnecting.
    assert_eq!((first, second), (third, third));
    // A transaction for another tenant than the connection last served sees that tenant.
    let mut tx = store.tenant_tx(&TenantId::new("beta")).await.unwrap();
    let seen: Vec<String> = sqlx::query_scalar("SELECT tenant_id FROM sessions")
        .fetch_all(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(seen, vec!["beta".to_owned()]);
}

#[tokio::test]
async fn a_transaction_given_back_without_commit_is_rolled_back_before_reuse() {
    let Some(store) = one_connection_store().await else {
        return;
    };
    let tenant = TenantId::new("alpha");
    let id = session(&store, "alpha").await;
    let mut tx = store.tenant_tx(&tenant).await.unwrap();
    sqlx::query("UPDATE sessions SET last_append_id = 'uncommitted' WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await
        .unwrap();
    // A failing statement leaves the transaction aborted; the caller returns its error.
    assert!(sqlx::query("SELECT 1/0").execute(&mut *tx).await.is_err());
    drop(tx);
    // The only connection comes back rolled back and usable.
    let mut conn = store.tenant_conn(&tenant).await.unwrap();
    let append: Option<String> =
        sqlx::query_scalar("SELECT last_append_id FROM sessions WHERE id = $1")
            .bind(id.as_str())
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    conn.commit().await.unwrap();
    assert_eq!(append, None);
    assert!(store.get_session(&tenant, &id).await.unwrap().is_some());

    // A rolled-back transaction for another tenant leaves the connection's own tenant as it
    // was: the next work for either tenant sees that tenant's rows and no other's.
    session(&store, "beta").await;
    let tx = store.tenant_tx(&TenantId::new("beta")).await.unwrap();
    tx.rollback().await.unwrap();
    let mut tx = store.tenant_tx(&TenantId::new("beta")).await.unwrap();
    assert!(sqlx::query("SELECT 1/0").execute(&mut *tx).await.is_err());
    drop(tx);
    for tenant in ["beta", "alpha", "beta"] {
        let (_, visible) = backend_and_visible(&store, tenant).await;
        assert_eq!(visible, vec![tenant.to_owned()]);
    }
}

#[tokio::test]
async fn a_statement_cancelled_mid_reply_never_answers_the_next_user() {
    let Some(store) = store(ConnectOptions {
        max_connections: 1,
        acquire_timeout: Duration::from_secs(10),
    })
    .await
    else {
        return;
    };
    let tenant = TenantId::new("alpha");
    let mut conn = store.tenant_conn(&tenant).await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        sqlx::query_scalar::<_, i32>("SELECT 7 FROM pg_sleep(0.3)").fetch_one(&mut *conn),
    )
    .await;
    assert!(cancelled.is_err(), "the statement was still running");
    drop(conn);
    // The next user of the single connection waits for it to be made usable, then gets its
    // own answer, not the 7 the cancelled statement left behind.
    let mut conn = store.tenant_conn(&tenant).await.unwrap();
    let answer: i32 = sqlx::query_scalar("SELECT 42")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    conn.commit().await.unwrap();
    assert_eq!(answer, 42);
}

#[tokio::test]
async fn waiting_for_a_connection_is_bounded_and_ends_in_unavailable() {
    let Some(store) = store(ConnectOptions {
        max_connections: 1,
        acquire_timeout: Duration::from_millis(200),
    })
    .await
    else {
        return;
    };
    let tenant = TenantId::new("alpha");
    let held = store.tenant_tx(&tenant).await.unwrap();
    let started = std::time::Instant::now();
    let waited = store.tenant_conn(&tenant).await;
    assert!(
        matches!(waited, Err(StoreError::Unavailable(_))),
        "{:?}",
        waited.err()
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    held.commit().await.unwrap();
    let conn = store.tenant_conn(&tenant).await.unwrap();
    conn.commit().await.unwrap();
}

#[tokio::test]
async fn a_tenant_id_outside_its_alphabet_is_refused_before_any_sql() {
    let Some(store) = store(ConnectOptions::default()).await else {
        return;
    };
    let id = session(&store, "alpha").await;
    for hostile in ["x'; DROP TABLE sessions; --", "", "a\\b", "a\0b"] {
        let tenant = TenantId::new(hostile);
        assert!(matches!(
            store.tenant_tx(&tenant).await,
            Err(StoreError::Internal(_))
        ));
        assert!(matches!(
            store.tenant_conn(&tenant).await,
            Err(StoreError::Internal(_))
        ));
    }
    // Nothing ran: the table and its row are still there.
    let alpha = TenantId::new("alpha");
    assert!(store.get_session(&alpha, &id).await.unwrap().is_some());
}

#[tokio::test]
async fn the_limits_lock_taken_with_begin_serializes_one_tenant_only() {
    let Some(store) = store(ConnectOptions::default()).await else {
        return;
    };
    let (alpha, beta) = (TenantId::new("alpha"), TenantId::new("beta"));
    let first = store.tenant_tx_admitting(&alpha, true).await.unwrap();
    // Another tenant's limits are not held up.
    let other = tokio::time::timeout(
        Duration::from_secs(2),
        store.tenant_tx_admitting(&beta, true),
    )
    .await
    .expect("another tenant's lock is free")
    .unwrap();
    other.commit().await.unwrap();
    // The same tenant's next limited transaction waits for the first to end.
    let waiting = {
        let store = store.clone();
        let alpha = alpha.clone();
        tokio::spawn(async move { store.tenant_tx_admitting(&alpha, true).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the second transaction got the lock"
    );
    first.commit().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the lock is given up at commit")
        .unwrap()
        .unwrap();
    second.commit().await.unwrap();
}

#[tokio::test]
async fn connections_the_server_dropped_are_never_taken_even_when_just_used() {
    use sqlx::Connection;
    let Some((store, url)) = store_and_url(ConnectOptions::default()).await else {
        return;
    };
    let mut signals = store.signals().await.unwrap().expect("Postgres signals");
    let tenant = TenantId::new("alpha");
    session(&store, "alpha").await;
    // A connection used a moment ago is trusted for the next statement without a check.
    let (before, _) = backend_and_visible(&store, "alpha").await;
    // The server drops every connection of the database (as a restart does), faster than
    // the pool would check a connection on its own.
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let dropped: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(dropped.len() >= 2, "the tenant connection and the listener");
    // The listener sees its connection go and reconnects; by then the idle connections are
    // gone, so the next statement runs on a new connection instead of failing on a dead one.
    let reconnected = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(signal) = signals.recv().await {
            if matches!(signal, norma::store::Signal::Reconnected) {
                return;
            }
        }
    })
    .await;
    assert!(reconnected.is_ok(), "the listener never reconnected");
    let mut conn = store.tenant_conn(&tenant).await.unwrap();
    let (after, visible): (i32, Vec<String>) = (
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await
            .unwrap(),
        sqlx::query_scalar("SELECT tenant_id FROM sessions")
            .fetch_all(&mut *conn)
            .await
            .unwrap(),
    );
    conn.commit().await.unwrap();
    assert_ne!(after, before);
    assert_eq!(visible, vec!["alpha".to_owned()]);
}

/// Holds commit without waiting for their flush (migration 0023), and only they: the setting
/// ends with the hold's own transaction, so the next user of the same connection commits
/// with the flush again.
#[tokio::test]
async fn a_hold_commits_without_waiting_for_its_flush_and_the_setting_ends_with_it() {
    use norma::limits::{HoldCaps, HoldKind, Limit, NewHold};
    let Some(store) = one_connection_store().await else {
        return;
    };
    let tenant = TenantId::new("acme");
    let session = session(&store, "acme").await;
    let synchronous_commit = || async {
        let mut conn = store.tenant_conn(&tenant).await.unwrap();
        let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        conn.commit().await.unwrap();
        setting
    };
    // Inside a transaction block the take's setting is still in force after it.
    let mut conn = store.tenant_conn(&tenant).await.unwrap();
    sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
    let (inserted, setting): (i64, String) = sqlx::query_as(
        "SELECT (SELECT inserted FROM norma_take_hold(7, 'acme', 'sse_stream', $1, 'hold_in_tx', \
         'replica-a', now() + interval '1 minute', now(), NULL, 10)), \
         current_setting('synchronous_commit')",
    )
    .bind(session.as_str())
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!((inserted, setting.as_str()), (1, "off"));
    sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    conn.commit().await.unwrap();
    assert_eq!(synchronous_commit().await, "on");

    // Through the store: taken, counted, released; the one connection commits with the
    // flush again afterwards.
    let caps = HoldCaps {
        per_session: None,
        per_tenant: (Limit::SseStreams, 1),
    };
    let hold = NewHold {
        id: "hold_stream".into(),
        kind: HoldKind::SseStream,
        session: session.clone(),
        replica: "replica-a".into(),
        lease: Duration::from_secs(60),
    };
    store
        .acquire_hold(&tenant, hold.clone(), caps)
        .await
        .unwrap();
    assert_eq!(synchronous_commit().await, "on");
    let second = NewHold {
        id: "hold_stream_2".into(),
        ..hold.clone()
    };
    assert!(matches!(
        store.acquire_hold(&tenant, second.clone(), caps).await,
        Err(StoreError::TenantLimit(_))
    ));
    store.release_hold(&tenant, &hold.id).await.unwrap();
    assert_eq!(synchronous_commit().await, "on");
    store.acquire_hold(&tenant, second, caps).await.unwrap();
}

/// A session's workspace measurement not yet committed locks its shard of the tenant's total
/// only: a measurement of the tenant's session on another shard goes through at once (with one
/// row per tenant it waited for the first transaction's end), and the total is the sum.
#[tokio::test]
async fn a_tenants_workspace_measurements_do_not_wait_for_each_other() {
    let Some(store) = store(ConnectOptions::default()).await else {
        return;
    };
    let alpha = TenantId::new("alpha");
    let shard = |session: SessionId| {
        let store = store.clone();
        async move {
            let mut conn = store.tenant_conn(&TenantId::new("alpha")).await.unwrap();
            let shard: i32 = sqlx::query_scalar("SELECT hashtext($1) & 15")
                .bind(session.as_str())
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            conn.commit().await.unwrap();
            shard
        }
    };
    let first = session(&store, "alpha").await;
    let first_shard = shard(first.clone()).await;
    let second = loop {
        let candidate = session(&store, "alpha").await;
        if shard(candidate.clone()).await != first_shard {
            break candidate;
        }
    };
    let mut open = store.tenant_tx(&alpha).await.unwrap();
    sqlx::query(
        "INSERT INTO workspace_usage (session_id, tenant_id, bytes, updated_at) \
         VALUES ($1, 'alpha', 100, now())",
    )
    .bind(first.as_str())
    .execute(&mut *open)
    .await
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(2),
        store.record_workspace_bytes(&alpha, &second, 50),
    )
    .await
    .expect("the other shard is not held up")
    .unwrap();
    assert_eq!(store.workspace_bytes(&alpha).await.unwrap(), 50);
    open.commit().await.unwrap();
    assert_eq!(store.workspace_bytes(&alpha).await.unwrap(), 150);
    store.close_session(&alpha, &first).await.unwrap();
    assert_eq!(store.workspace_bytes(&alpha).await.unwrap(), 50);
}
