//! The usage ledger on SQLite: rows written inside an append's transaction, sums read from
//! the read pool.

use crate::store::sqlite::ts;
use crate::store::*;
use crate::usage::{RawSums, SUMS_SQL, UsageGroup, UsageQuery, UsageScope, UsageTotals};
use sqlx::{FromRow, Row};

/// Totals of a run's or a session's rows.
pub(in crate::store) async fn totals(
    store: &crate::store::sqlite::SqliteStore,
    tenant: &TenantId,
    scope: UsageScope<'_>,
) -> StoreResult<UsageTotals> {
    let (sql, session, run) = super::totals_sql(scope);
    let mut query = sqlx::query(&sql).bind(tenant.as_str()).bind(session);
    if let Some(run) = run {
        query = query.bind(run);
    }
    let row = query.fetch_one(store.reader()).await?;
    Ok(RawSums::from_row(&row)?.into())
}

/// The tenant's rows in `[from, to)`, grouped, ordered by key, at most `limit` groups.
pub(in crate::store) async fn report(
    store: &crate::store::sqlite::SqliteStore,
    tenant: &TenantId,
    query: &UsageQuery,
) -> StoreResult<Vec<UsageGroup>> {
    let key = query.group_by.key_sql();
    let rows = sqlx::query(&format!(
        "SELECT {key} AS key, {SUMS_SQL} FROM usage_records \
         WHERE tenant_id = ? AND created_at >= ? AND created_at < ? \
         GROUP BY 1 ORDER BY 1 LIMIT ?"
    ))
    .bind(tenant.as_str())
    .bind(ts(query.from))
    .bind(ts(query.to))
    .bind(i64::from(query.limit))
    .fetch_all(store.reader())
    .await?;
    rows.iter()
        .map(|row| {
            Ok(UsageGroup {
                key: row.try_get("key")?,
                totals: RawSums::from_row(row)?.into(),
            })
        })
        .collect()
}
