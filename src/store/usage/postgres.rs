//! The usage ledger on Postgres: rows written inside an append's transaction, sums read in a
//! tenant-scoped transaction (row-level security).

use crate::store::postgres::PgStore;
use crate::store::*;
use crate::usage::{
    NewUsageRecord, RawSums, SUMS_SQL, UsageGroup, UsageQuery, UsageScope, UsageTotals, sql_count,
};
use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, Row};

/// Writes `records` of one session (in the caller's transaction).
pub(in crate::store) async fn insert(
    conn: &mut PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    records: &[NewUsageRecord],
    at: DateTime<Utc>,
) -> StoreResult<()> {
    if records.is_empty() {
        return Ok(());
    }
    let day = at.format("%Y-%m-%d").to_string();
    let mut insert = sqlx::QueryBuilder::<sqlx::Postgres>::new(
        "INSERT INTO usage_records (tenant_id, session_id, run_id, provider, model, \
         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_pico, day, \
         created_at) ",
    );
    insert.push_values(records, |mut row, record| {
        row.push_bind(tenant.as_str())
            .push_bind(session.as_str())
            .push_bind(record.run_id.as_str())
            .push_bind(record.provider.as_str())
            .push_bind(record.model.as_str())
            .push_bind(sql_count(record.tokens.input_tokens))
            .push_bind(sql_count(record.tokens.output_tokens))
            .push_bind(sql_count(record.tokens.cache_read_tokens))
            .push_bind(sql_count(record.tokens.cache_write_tokens))
            .push_bind(record.cost_pico)
            .push_bind(day.as_str())
            .push_bind(at);
    });
    insert.build().execute(&mut *conn).await?;
    // The tenant's budget totals, in the same transaction: they always equal the ledger.
    crate::store::budgets::postgres::add_spend(
        conn,
        tenant,
        session,
        &crate::budgets::spend_deltas(records, at),
    )
    .await
}

/// Totals of a run's or a session's rows.
pub(in crate::store) async fn totals(
    store: &PgStore,
    tenant: &TenantId,
    scope: UsageScope<'_>,
) -> StoreResult<UsageTotals> {
    let (sql, session, run) = super::totals_sql(scope);
    let mut conn = store.tenant_conn(tenant).await?;
    let mut query = sqlx::query(&sql).bind(tenant.as_str()).bind(session);
    if let Some(run) = run {
        query = query.bind(run);
    }
    let row = query.fetch_one(&mut *conn).await?;
    conn.commit().await?;
    Ok(RawSums::from_row(&row)?.into())
}

/// The tenant's rows in `[from, to)`, grouped, ordered by key, at most `limit` groups.
pub(in crate::store) async fn report(
    store: &PgStore,
    tenant: &TenantId,
    query: &UsageQuery,
) -> StoreResult<Vec<UsageGroup>> {
    let key = query.group_by.key_sql();
    let mut conn = store.tenant_conn(tenant).await?;
    let rows = sqlx::query(&format!(
        "SELECT {key} AS key, {SUMS_SQL} FROM usage_records \
         WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3 \
         GROUP BY 1 ORDER BY 1 LIMIT $4"
    ))
    .bind(tenant.as_str())
    .bind(query.from)
    .bind(query.to)
    .bind(i64::from(query.limit))
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    rows.iter()
        .map(|row| {
            Ok(UsageGroup {
                key: row.try_get("key")?,
                totals: RawSums::from_row(row)?.into(),
            })
        })
        .collect()
}
