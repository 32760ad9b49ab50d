//! Noa state and archives on SQLite (see `crate::store::noa`).

use crate::store::sqlite::{SqliteStore, parse_ts, ts};
use crate::store::*;
use sqlx::Row;

pub(in crate::store) async fn state(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
) -> StoreResult<Option<NoaStateRecord>> {
    let row =
        sqlx::query("SELECT version, state FROM noa_states WHERE session_id = ? AND tenant_id = ?")
            .bind(session.as_str())
            .bind(tenant.as_str())
            .fetch_optional(store.reader())
            .await?;
    row.map(|row| {
        Ok(NoaStateRecord {
            version: row.try_get("version")?,
            state: serde_json::from_str(&row.try_get::<String, _>("state")?)
                .map_err(|error| StoreError::Internal(format!("bad noa state: {error}")))?,
        })
    })
    .transpose()
}

pub(in crate::store) async fn commit(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    archives: &[NewNoaArchive],
    state: &serde_json::Value,
    expected: i64,
) -> StoreResult<i64> {
    let now = ts(chrono::Utc::now());
    let mut turn = store.writer().sqlx().await?;
    let mut tx = turn.begin().await?;
    let written = if expected == 0 {
        sqlx::query(
            "INSERT INTO noa_states (session_id, tenant_id, version, state, updated_at) \
             SELECT id, tenant_id, 1, ?, ? FROM sessions WHERE id = ? AND tenant_id = ? \
             ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(state.to_string())
        .bind(&now)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .execute(&mut *tx)
        .await?
    } else {
        sqlx::query(
            "UPDATE noa_states SET version = version + 1, state = ?, updated_at = ? \
             WHERE session_id = ? AND tenant_id = ? AND version = ?",
        )
        .bind(state.to_string())
        .bind(&now)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(expected)
        .execute(&mut *tx)
        .await?
    };
    if written.rows_affected() == 0 {
        let owned: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")
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
             summary, message_count, tokens, messages, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(i64::from(archive.ordinal))
        .bind(&archive.from_ref)
        .bind(&archive.to_ref)
        .bind(&archive.summary)
        .bind(i64::from(archive.message_count))
        .bind(i64::try_from(archive.tokens).unwrap_or(i64::MAX))
        .bind(archive.messages.to_string())
        .bind(&now)
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

fn record(row: &sqlx::sqlite::SqliteRow, with_messages: bool) -> StoreResult<NoaArchiveRecord> {
    let ordinal: i64 = row.try_get("ordinal")?;
    Ok(NoaArchiveRecord {
        id: format!("a{ordinal}"),
        from_ref: row.try_get("from_ref")?,
        to_ref: row.try_get("to_ref")?,
        summary: row.try_get("summary")?,
        message_count: u32::try_from(row.try_get::<i64, _>("message_count")?).unwrap_or(0),
        tokens: u64::try_from(row.try_get::<i64, _>("tokens")?).unwrap_or(0),
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        messages: if with_messages {
            Some(
                serde_json::from_str(&row.try_get::<String, _>("messages")?).map_err(|error| {
                    StoreError::Internal(format!("bad archive messages: {error}"))
                })?,
            )
        } else {
            None
        },
    })
}

pub(in crate::store) async fn list(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    after: u32,
    limit: u32,
) -> StoreResult<Vec<NoaArchiveRecord>> {
    let rows = sqlx::query(
        "SELECT ordinal, from_ref, to_ref, summary, message_count, tokens, created_at \
         FROM noa_archives WHERE session_id = ? AND tenant_id = ? AND ordinal > ? \
         ORDER BY ordinal LIMIT ?",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(i64::from(after))
    .bind(i64::from(limit))
    .fetch_all(store.reader())
    .await?;
    rows.iter().map(|row| record(row, false)).collect()
}

pub(in crate::store) async fn get(
    store: &SqliteStore,
    tenant: &TenantId,
    session: &SessionId,
    ordinal: u32,
) -> StoreResult<Option<NoaArchiveRecord>> {
    let row = sqlx::query(
        "SELECT ordinal, from_ref, to_ref, summary, message_count, tokens, created_at, messages \
         FROM noa_archives WHERE session_id = ? AND tenant_id = ? AND ordinal = ?",
    )
    .bind(session.as_str())
    .bind(tenant.as_str())
    .bind(i64::from(ordinal))
    .fetch_optional(store.reader())
    .await?;
    row.map(|row| record(&row, true)).transpose()
}
