//! Noa state and archives on Postgres (see `crate::store::noa`), in tenant-scoped transactions.

use crate::store::postgres::PgStore;
use crate::store::*;
use sqlx::Row;
use sqlx::types::Json;

pub(in crate::store) async fn state(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Option<NoaStateRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(
        "SELECT version, state FROM noa_states WHERE session_id = $1 AND tenant_id = $2",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    conn.commit().await?;
    row.map(|row| {
        Ok(NoaStateRecord {
            version: row.try_get("version")?,
            state: row.try_get::<Json<serde_json::Value>, _>("state")?.0,
        })
    })
    .transpose()
}

pub(in crate::store) async fn commit(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    archives: &[NewNoaArchive],
    state: &serde_json::Value,
    expected: i64,
) -> StoreResult<i64> {
    let mut tx = store.tenant_tx(tenant).await?;
    let written = if expected == 0 {
        sqlx::query(
            "INSERT INTO noa_states (session_id, tenant_id, version, state) \
             SELECT id, tenant_id, 1, $3 FROM sessions WHERE id = $1 AND tenant_id = $2 \
             ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(Json(state))
        .execute(&mut *tx)
        .await?
    } else {
        sqlx::query(
            "UPDATE noa_states SET version = version + 1, state = $3, updated_at = now() \
             WHERE session_id = $1 AND tenant_id = $2 AND version = $4",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(Json(state))
        .bind(expected)
        .execute(&mut *tx)
        .await?
    };
    if written.rows_affected() == 0 {
        let owned: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2")
                .bind(session.as_str())
                .bind(tenant.as_str())
                .fetch_optional(&mut *tx)
                .await?;
        return Err(match owned {
            None => StoreError::NotFound,
            Some(_) => StoreError::Conflict(format!("noa state is not at version {expected}")),
        });
    }
    for archive in archives {
        sqlx::query(
            "INSERT INTO noa_archives (session_id, tenant_id, ordinal, from_ref, to_ref, \
             summary, message_count, tokens, messages) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(i64::from(archive.ordinal))
        .bind(&archive.from_ref)
        .bind(&archive.to_ref)
        .bind(&archive.summary)
        .bind(i64::from(archive.message_count))
        .bind(i64::try_from(archive.tokens).unwrap_or(i64::MAX))
        .bind(Json(&archive.messages))
        .execute(&mut *tx)
        .await
        .map_err(|error| match StoreError::from(error) {
            StoreError::Unavailable(message) => StoreError::Unavailable(message),
            other => StoreError::Conflict(format!("archive a{}: {other}", archive.ordinal)),
        })?;
    }
    tx.commit().await?;
    Ok(expected + 1)
}

fn record(row: &sqlx::postgres::PgRow, with_messages: bool) -> StoreResult<NoaArchiveRecord> {
    let ordinal: i64 = row.try_get("ordinal")?;
    Ok(NoaArchiveRecord {
        id: format!("a{ordinal}"),
        from_ref: row.try_get("from_ref")?,
        to_ref: row.try_get("to_ref")?,
        summary: row.try_get("summary")?,
        message_count: u32::try_from(row.try_get::<i64, _>("message_count")?).unwrap_or(0),
        tokens: u64::try_from(row.try_get::<i64, _>("tokens")?).unwrap_or(0),
        created_at: row.try_get("created_at")?,
        messages: if with_messages {
            Some(row.try_get::<Json<serde_json::Value>, _>("messages")?.0)
        } else {
            None
        },
    })
}

pub(in crate::store) async fn list(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    after: u32,
    limit: u32,
) -> StoreResult<Vec<NoaArchiveRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let rows = sqlx::query(
        "SELECT ordinal, from_ref, to_ref, summary, message_count, tokens, created_at \
         FROM noa_archives WHERE session_id = $1 AND tenant_id = $2 AND ordinal > $3 \
         ORDER BY ordinal LIMIT $4",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(i64::from(after))
    .bind(i64::from(limit))
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    rows.iter().map(|row| record(row, false)).collect()
}

pub(in crate::store) async fn get(
    store: &PgStore,
    tenant: &TenantId,
    session: &SessionId,
    ordinal: u32,
) -> StoreResult<Option<NoaArchiveRecord>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(
        "SELECT ordinal, from_ref, to_ref, summary, message_count, tokens, created_at, messages \
         FROM noa_archives WHERE session_id = $1 AND tenant_id = $2 AND ordinal = $3",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(i64::from(ordinal))
    .fetch_optional(&mut *conn)
    .await?;
    conn.commit().await?;
    row.map(|row| record(&row, true)).transpose()
}
