//! The skill registry on SQLite: writes on the one writer connection (so the count of a
//! tenant's skills and the insert are one serialized transaction), reads from the read pool.

use super::skills::{NewSkill, SkillRecord, SkillSummary};
use super::sqlite::{SqliteStore, parse_ts, ts};
use super::*;
use chrono::{SubsecRound, Utc};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

const SUMMARY: &str = "name, description, tools, size_bytes, created_at";

fn json<T: serde::de::DeserializeOwned>(row: &SqliteRow, column: &str) -> StoreResult<T> {
    let text: String = row.try_get(column)?;
    serde_json::from_str(&text)
        .map_err(|error| StoreError::Internal(format!("bad skill row ({column}): {error}")))
}

fn summary(row: &SqliteRow) -> StoreResult<SkillSummary> {
    Ok(SkillSummary {
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        tools: json(row, "tools")?,
        size_bytes: row.try_get("size_bytes")?,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}

fn record(row: &SqliteRow) -> StoreResult<SkillRecord> {
    let summary = summary(row)?;
    Ok(SkillRecord {
        name: summary.name,
        description: summary.description,
        tools: summary.tools,
        content: row.try_get("content")?,
        files: json(row, "files")?,
        size_bytes: summary.size_bytes,
        created_at: summary.created_at,
    })
}

fn to_json<T: serde::Serialize>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value).map_err(|error| StoreError::Internal(error.to_string()))
}

pub(super) async fn create(
    store: &SqliteStore,
    tenant: &TenantId,
    skill: &NewSkill,
    max: u32,
) -> StoreResult<SkillRecord> {
    let at = ts(Utc::now().trunc_subsecs(6));
    let mut tx = store.writer().begin().await?;
    // A write first, so the transaction holds the write lock before it counts.
    let row = sqlx::query(&format!(
        "INSERT INTO skills (tenant_id, name, description, tools, content, files, size_bytes, \
         created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, name) DO NOTHING \
         RETURNING {SUMMARY}, content, files"
    ))
    .bind(tenant.as_str())
    .bind(&skill.name)
    .bind(&skill.description)
    .bind(to_json(&skill.tools)?)
    .bind(&skill.content)
    .bind(to_json(&skill.files)?)
    .bind(skill.size_bytes())
    .bind(&at)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(StoreError::Conflict(format!(
            "a skill named `{}` is registered",
            skill.name
        )));
    };
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM skills WHERE tenant_id = ?")
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if count > i64::from(max) {
        // Dropping the transaction rolls the insert back.
        return Err(crate::limits::LimitExceeded {
            limit: crate::limits::Limit::Skills,
            max: u64::from(max),
        }
        .into());
    }
    tx.commit().await?;
    record(&row)
}

pub(super) async fn get(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<Option<SkillRecord>> {
    let row = sqlx::query(&format!(
        "SELECT {SUMMARY}, content, files FROM skills WHERE tenant_id = ? AND name = ?"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .fetch_optional(store.reader())
    .await?;
    row.as_ref().map(record).transpose()
}

pub(super) async fn list(
    store: &SqliteStore,
    tenant: &TenantId,
    limit: u32,
) -> StoreResult<Vec<SkillSummary>> {
    let rows = sqlx::query(&format!(
        "SELECT {SUMMARY} FROM skills WHERE tenant_id = ? ORDER BY name LIMIT ?"
    ))
    .bind(tenant.as_str())
    .bind(i64::from(limit))
    .fetch_all(store.reader())
    .await?;
    rows.iter().map(summary).collect()
}

pub(super) async fn delete(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<bool> {
    let mut tx = store.writer().begin().await?;
    let done = sqlx::query("DELETE FROM skills WHERE tenant_id = ? AND name = ?")
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}
