//! Sessions on Postgres.

use super::*;
use crate::ids::{SessionId, TenantId};
use crate::limits::Limit;
use crate::store::dialect::now;
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::types::Json;

pub(in crate::store) async fn create_session_keyed(
    store: &PgStore,
    session: NewSession,
    max_open: u32,
    key: Option<&NewIdempotencyKey>,
) -> StoreResult<SessionRecord> {
    // Without a key the admitting insert is the whole write: its own transaction.
    let mut tx = match key {
        Some(_) => store.tenant_tx(&session.tenant).await?,
        None => store.tenant_conn(&session.tenant).await?,
    };
    let created = now();
    if let Some(key) = key {
        crate::store::idempotency::postgres::insert(
            &mut tx,
            &session.tenant,
            key,
            session.id.as_str(),
            created,
        )
        .await?;
    }
    let record = insert_admitted(&mut tx, &session, max_open, created).await?;
    tx.commit().await?;
    Ok(record)
}

/// A new session: `$1` cap on the tenant's open sessions (NULL: none), `$2` id, `$3` tenant,
/// `$4` config, `$5` time (`norma_create_session`, migration 0022).
const CREATE_SESSION: &str = concat!(
    "SELECT ",
    session_columns!(),
    " FROM norma_create_session($1, $2, $3, $4, $5)"
);

/// Inserts `session` if the tenant has fewer than `max_open` open sessions, in one statement
/// (`TenantLimit` otherwise; a duplicate id is a `Conflict`).
async fn insert_admitted(
    conn: &mut sqlx::PgConnection,
    session: &NewSession,
    max_open: u32,
    created: DateTime<Utc>,
) -> StoreResult<SessionRecord> {
    let row = sqlx::query(CREATE_SESSION)
        .bind((max_open != u32::MAX).then_some(i64::from(max_open)))
        .bind(session.id.as_str())
        .bind(session.tenant.as_str())
        .bind(Json(&session.config))
        .bind(created)
        .fetch_one(conn)
        .await
        .map_err(|error| {
            crate::store::limits::postgres::refusal(error, &[(Limit::Sessions, max_open)])
        })?;
    session_from_row(&row)
}

/// The fork in one tenant-scoped transaction (the append is the runs' own).
pub(in crate::store) async fn fork_session(store: &PgStore, mut fork: NewFork) -> StoreResult<()> {
    let batch = StorableBatch::new(std::mem::take(&mut fork.batch));
    let NewSession { id, tenant, .. } = &fork.session;
    let mut tx = store.tenant_tx(tenant).await?;
    insert_admitted(&mut tx, &fork.session, fork.max_open, now()).await?;
    let (appended, notified) =
        crate::store::events::postgres::append_in(&mut tx, tenant, id, &batch).await?;
    if let Some(noa) = &fork.noa {
        sqlx::query(
            "INSERT INTO noa_states (session_id, tenant_id, version, state) VALUES ($1, $2, 1, $3)",
        )
        .bind(id.as_str())
        .bind(tenant.as_str())
        .bind(Json(&noa.state))
        .execute(&mut *tx)
        .await?;
        let ordinals: Vec<i64> = noa.archives.iter().map(|o| i64::from(*o)).collect();
        let copied = sqlx::query(
            "INSERT INTO noa_archives (session_id, tenant_id, ordinal, from_ref, to_ref, summary, \
                 message_count, tokens, messages, created_at) \
             SELECT $1, tenant_id, ordinal, from_ref, to_ref, summary, message_count, tokens, \
                 messages, created_at FROM noa_archives \
             WHERE session_id = $2 AND tenant_id = $3 AND ordinal = ANY($4)",
        )
        .bind(id.as_str())
        .bind(fork.source.as_str())
        .bind(tenant.as_str())
        .bind(&ordinals)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        super::archives_copied(copied, noa)?;
    }
    tx.commit().await?;
    store.signal_events(tenant, id, &appended, batch.events.len());
    if notified > 0 {
        store.webhook_wakeup.notify_one();
    }
    Ok(())
}

pub(in crate::store) async fn get_session(
    store: &PgStore,
    tenant: &TenantId,
    id: &SessionId,
) -> StoreResult<Option<SessionRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(SELECT_SESSION)
        .bind(id.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    row.as_ref().map(session_from_row).transpose()
}

pub(in crate::store) async fn list_sessions(
    store: &PgStore,
    tenant: &TenantId,
    cursor: Option<&SessionCursor>,
    limit: u32,
) -> StoreResult<Vec<SessionRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let rows = match cursor {
        Some(cursor) => {
            sqlx::query(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = $1 \
                 AND (created_at, id) < ($2, $3) ORDER BY created_at DESC, id DESC LIMIT $4"
            ))
            .bind(tenant.as_str())
            .bind(cursor.created_at)
            .bind(cursor.id.as_str())
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?
        }
        None => {
            sqlx::query(LIST_SESSIONS)
                .bind(tenant.as_str())
                .bind(i64::from(limit))
                .fetch_all(&mut *tx)
                .await?
        }
    };
    tx.commit().await?;
    rows.iter().map(session_from_row).collect()
}

pub(in crate::store) async fn close_session(
    store: &PgStore,
    tenant: &TenantId,
    id: &SessionId,
) -> StoreResult<Option<SessionRecord>> {
    let at = now();
    let mut tx = store.tenant_tx(tenant).await?;
    // The close and its `session.closed` outbox rows, in one statement.
    let row = sqlx::query(&crate::store::webhooks::postgres::close_session_sql(
        SESSION_COLUMNS,
    ))
    .bind(id.as_str())
    .bind(tenant.as_str())
    .bind(at)
    .bind(crate::webhooks::session_closed(id.as_str(), at).body)
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    if let Some(row) = &row
        && row.try_get::<i64, _>("notified")? > 0
    {
        store.webhook_wakeup.notify_one();
    }
    row.as_ref().map(session_from_row).transpose()
}

pub(in crate::store) async fn list_idle_sessions(
    store: &PgStore,
    idle_before: DateTime<Utc>,
    limit: u32,
) -> StoreResult<Vec<IdleSession>> {
    // Runs as the login role (the schema owner), outside any tenant's row-level security.
    let rows: Vec<IdleRow> = sqlx::query_as(IDLE_SESSIONS)
        .bind(idle_before)
        .bind(i64::from(limit))
        .fetch_all(&store.pool)
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(in crate::store) async fn count_open_sessions(
    store: &PgStore,
    tenant: &TenantId,
) -> StoreResult<i64> {
    let mut conn = store.tenant_conn(tenant).await?;
    let count: i64 = sqlx::query_scalar(COUNT_OPEN_SESSIONS)
        .bind(tenant.as_str())
        .fetch_one(&mut *conn)
        .await?;
    conn.commit().await?;
    Ok(count)
}

pub(in crate::store) async fn last_event_seqs(
    store: &PgStore,
    sessions: &[SessionId],
) -> StoreResult<Vec<(SessionId, i64)>> {
    if sessions.is_empty() {
        return Ok(Vec::new());
    }
    // System-level (login role): the sessions this replica's SSE subscribers follow.
    let ids: Vec<&str> = sessions.iter().map(SessionId::as_str).collect();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT id, last_event_seq FROM sessions WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&store.pool)
            .await?;
    Ok(seqs(rows))
}

pub(in crate::store) async fn workspace_snapshot(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Option<String>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let head: Option<Option<String>> = sqlx::query_scalar(WORKSPACE_SNAPSHOT)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    Ok(head.flatten())
}
