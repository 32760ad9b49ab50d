//! The registries on SQLite: writes on the one writer connection, reads from the read pool. A
//! new row is inserted first, so the transaction holds the write lock before it counts the
//! tenant's entries (and rolls the insert back past the limit).

use super::*;
use crate::ids::TenantId;
use crate::store::dialect::now;
use crate::store::dialect::sqlite::ts;
use crate::store::sqlite::SqliteStore;
use crate::store::{NewSkill, StoreResult};
use sqlx::query::QueryAs;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{FromRow, Sqlite};

/// Inserts a row (`insert`, its parameters bound by `bind` after the tenant) when the tenant
/// has fewer than `max` entries.
#[allow(clippy::too_many_arguments)]
async fn create<'q, Row, Item, Rec>(
    store: &SqliteStore,
    registry: &Registry<Row, Item>,
    tenant: &'q TenantId,
    name: &str,
    max: u32,
    insert: &'q str,
    bind: impl FnOnce(
        QueryAs<'q, Sqlite, Row, SqliteArguments<'q>>,
    ) -> QueryAs<'q, Sqlite, Row, SqliteArguments<'q>>
    + Send,
) -> StoreResult<Rec>
where
    Row: for<'r> FromRow<'r, SqliteRow> + Send + Unpin + Into<Rec>,
{
    let mut turn = store.writer().sqlx().await?;
    let mut tx = turn.begin().await?;
    // A write first, so the transaction holds the write lock before it counts.
    let row = bind(sqlx::query_as(insert).bind(tenant.as_str()))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| registry.taken(name))?;
    let count: i64 = sqlx::query_scalar(&registry.count_sql())
        .bind(tenant.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if count > i64::from(max) {
        // Dropping the transaction rolls the insert back.
        return Err(registry.at_limit(max));
    }
    tx.commit().await?;
    Ok(row.into())
}

pub(in crate::store) async fn get<Row, Item, Rec>(
    store: &SqliteStore,
    registry: &Registry<Row, Item>,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<Option<Rec>>
where
    Row: for<'r> FromRow<'r, SqliteRow> + Send + Unpin + Into<Rec>,
{
    let row: Option<Row> = sqlx::query_as(&registry.get_sql())
        .bind(tenant.as_str())
        .bind(name)
        .fetch_optional(store.reader())
        .await?;
    Ok(row.map(Into::into))
}

pub(in crate::store) async fn list<Row, Item, Rec>(
    store: &SqliteStore,
    registry: &Registry<Row, Item>,
    tenant: &TenantId,
    limit: u32,
) -> StoreResult<Vec<Rec>>
where
    Item: for<'r> FromRow<'r, SqliteRow> + Send + Unpin + Into<Rec>,
{
    let rows: Vec<Item> = sqlx::query_as(&registry.list_sql())
        .bind(tenant.as_str())
        .bind(i64::from(limit))
        .fetch_all(store.reader())
        .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

pub(in crate::store) async fn delete<Row, Item>(
    store: &SqliteStore,
    registry: &Registry<Row, Item>,
    tenant: &TenantId,
    name: &str,
) -> StoreResult<bool> {
    let mut turn = store.writer().sqlx().await?;
    let mut tx = turn.begin().await?;
    let done = sqlx::query(&registry.delete_sql())
        .bind(tenant.as_str())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected() > 0)
}

pub(in crate::store) async fn create_mcp_server(
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
    max: u32,
) -> StoreResult<McpServerRecord> {
    let at = ts(now());
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
    store: &SqliteStore,
    tenant: &TenantId,
    name: &str,
    config: &Value,
) -> StoreResult<Option<McpServerRecord>> {
    let mut turn = store.writer().sqlx().await?;
    let mut tx = turn.begin().await?;
    let row: Option<McpServerRow> = sqlx::query_as(REPLACE_MCP_SERVER)
        .bind(tenant.as_str())
        .bind(name)
        .bind(Json(config))
        .bind(ts(now()))
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(row.map(Into::into))
}

pub(in crate::store) async fn create_skill(
    store: &SqliteStore,
    tenant: &TenantId,
    skill: &NewSkill,
    max: u32,
) -> StoreResult<SkillRecord> {
    let at = ts(now());
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
