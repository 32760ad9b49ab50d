//! The registries on Postgres: tenant-scoped transactions (row-level security); a new row is
//! counted against the tenant's limit under the tenant's advisory lock, so replicas sharing
//! the database cannot both take the last slot.

use super::*;
use crate::ids::TenantId;
use crate::store::dialect::now;
use crate::store::postgres::PgStore;
use crate::store::{NewSkill, StoreResult};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{FromRow, Postgres};

/// Inserts a row (`insert`, its parameters bound by `bind` after the tenant) when the tenant
/// has fewer than `max` entries.
#[allow(clippy::too_many_arguments)]
async fn create<'q, Row, Item, Rec>(
    store: &PgStore,
    registry: &Registry<Row, Item>,
    tenant: &'q TenantId,
    name: &str,
    max: u32,
    insert: &'q str,
    bind: impl FnOnce(
        QueryAs<'q, Postgres, Row, PgArguments>,
    ) -> QueryAs<'q, Postgres, Row, PgArguments>
    + Send,
) -> StoreResult<Rec>
where
    Row: for<'r> FromRow<'r, PgRow> + Send + Unpin + Into<Rec>,
{
    let mut tx = store.tenant_tx(tenant).await?;
    crate::store::limits::postgres::lock_tenant(&mut tx, tenant).await?;
    let count: i64 = sqlx::query_scalar(&registry.count_sql())
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if count >= i64::from(max) {
        return Err(registry.at_limit(max));
    }
    let row = bind(sqlx::query_as(insert).bind(tenant.as_str()))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| registry.taken(name))?;
    tx.commit().await?;
    Ok(row.into())
}

pub(in crate::store) async fn get<Row, Item, Rec>(
    store: &PgStore,
    registry: &Registry<Row, Item>,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<Option<Rec>>
where
    Row: for<'r> FromRow<'r, PgRow> + Send + Unpin + Into<Rec>,
{
    let mut conn = store.tenant_conn(tenant).await?;
    let row: Option<Row> = sqlx::query_as(&registry.get_sql())
        .bind(tenant.as_str())
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?;
    conn.commit().await?;
    Ok(row.map(Into::into))
}

pub(in crate::store) async fn list<Row, Item, Rec>(
    store: &PgStore,
    registry: &Registry<Row, Item>,
    tenant: &TenantId,
    limit: u32,
) -> StoreResult<Vec<Rec>>
where
    Item: for<'r> FromRow<'r, PgRow> + Send + Unpin + Into<Rec>,
{
    let mut conn = store.tenant_conn(tenant).await?;
    let rows: Vec<Item> = sqlx::query_as(&registry.list_sql())
        .bind(tenant.as_str())
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await?;
    conn.commit().await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(in crate::store) async fn delete<Row, Item>(
    store: &PgStore,
    registry: &Registry<Row, Item>,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<bool> {
    let mut tx = store.tenant_tx(tenant).await?;
    let done = sqlx::query(&registry.delete_sql())
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

pub(in crate::store) async fn create_mcp_server(
    store: &PgStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
    max: u32,
) -> StoreResult<McpServerRecord> {
    let at = now();
    create(
        store,
        &MCP_SERVERS,
        tenant,
        name,
        max,
        INSERT_MCP_SERVER,
        |query| query.bind(name).bind(Json(config)).bind(at),
    )
    .await
}

pub(in crate::store) async fn replace_mcp_server(
    store: &PgStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
) -> StoreResult<Option<McpServerRecord>> {
    let mut tx = store.tenant_tx(tenant).await?;
    let row: Option<McpServerRow> = sqlx::query_as(REPLACE_MCP_SERVER)
        .bind(tenant.as_str())
        .bind(name)
        .bind(Json(config))
        .bind(now())
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(row.map(Into::into))
}

pub(in crate::store) async fn create_skill(
    store: &PgStore,
    tenant: &TenantId,
    skill: &NewSkill,
    max: u32,
) -> StoreResult<SkillRecord> {
    let at = now();
    create(
        store,
        &SKILLS,
        tenant,
        &skill.name,
        max,
        INSERT_SKILL,
        |query| {
            query
                .bind(&skill.name)
                .bind(&skill.description)
                .bind(Json(&skill.tools))
                .bind(&skill.content)
                .bind(Json(&skill.files))
                .bind(skill.size_bytes())
                .bind(at)
        },
    )
    .await
}
