//! The skill registry on Postgres: tenant-scoped transactions (row-level security); a new
//! row is counted against the tenant's limit under the tenant's advisory lock, so replicas
//! sharing the database cannot both take the last slot.

use super::postgres::PgStore;
use super::skills::{NewSkill, SkillRecord, SkillSummary};
use super::*;
use chrono::{SubsecRound, Utc};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::types::Json;

const SUMMARY: &str = "name, description, tools, size_bytes, created_at";

fn summary(row: &PgRow) -> StoreResult<SkillSummary> {
    Ok(SkillSummary {
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        tools: row.try_get::<Json<Vec<String>>, _>("tools")?.0,
        size_bytes: row.try_get("size_bytes")?,
        created_at: row.try_get("created_at")?,
    })
}

fn record(row: &PgRow) -> StoreResult<SkillRecord> {
    let summary = summary(row)?;
    Ok(SkillRecord {
        name: summary.name,
        description: summary.description,
        tools: summary.tools,
        content: row.try_get("content")?,
        files: row
            .try_get::<Json<Vec<crate::skills::SkillFile>>, _>("files")?
            .0,
        size_bytes: summary.size_bytes,
        created_at: summary.created_at,
    })
}

pub(super) async fn create(
    store: &PgStore,
    tenant: &TenantId,
    skill: &NewSkill,
    max: u32,
) -> StoreResult<SkillRecord> {
    let mut tx = store.tenant_tx(tenant).await?;
    super::postgres_limits::lock_tenant(&mut tx, tenant).await?;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM skills WHERE tenant_id = $1")
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if count >= i64::from(max) {
        return Err(crate::limits::LimitExceeded {
            limit: crate::limits::Limit::Skills,
            max: u64::from(max),
        }
        .into());
    }
    let row = sqlx::query(&format!(
        "INSERT INTO skills (tenant_id, name, description, tools, content, files, size_bytes, \
         created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (tenant_id, name) DO NOTHING RETURNING {SUMMARY}, content, files"
    ))
    .bind(tenant.as_str())
    .bind(&skill.name)
    .bind(&skill.description)
    .bind(Json(&skill.tools))
    .bind(&skill.content)
    .bind(Json(&skill.files))
    .bind(skill.size_bytes())
    .bind(Utc::now().trunc_subsecs(6))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Err(StoreError::Conflict(format!(
            "a skill named `{}` is registered",
            skill.name
        )));
    };
    tx.commit().await?;
    record(&row)
}

pub(super) async fn get(
    store: &PgStore,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<Option<SkillRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row = sqlx::query(&format!(
        "SELECT {SUMMARY}, content, files FROM skills WHERE tenant_id = $1 AND name = $2"
    ))
    .bind(tenant.as_str())
    .bind(name)
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    row.as_ref().map(record).transpose()
}

pub(super) async fn list(
    store: &PgStore,
    tenant: &TenantId,
    limit: u32,
) -> StoreResult<Vec<SkillSummary>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let rows = sqlx::query(&format!(
        "SELECT {SUMMARY} FROM skills WHERE tenant_id = $1 ORDER BY name LIMIT $2"
    ))
    .bind(tenant.as_str())
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    rows.iter().map(summary).collect()
}

pub(super) async fn delete(store: &PgStore, tenant: &TenantId, name: &str) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query("DELETE FROM skills WHERE tenant_id = $1 AND name = $2")
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}
