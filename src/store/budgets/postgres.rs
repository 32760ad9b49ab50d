//! Tenant budgets on Postgres: the operator's budget per tenant and the running spend totals
//! per UTC day and month, added to in the usage ledger's transaction (row-level security
//! scopes every statement to the tenant).

use crate::budgets::{Budget, Period, Spend, SpendDelta, TenantSpend};
use crate::store::postgres::PgStore;
use crate::store::*;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};

/// How many rows each period's totals of a tenant are spread over (migration 0021).
const SPEND_SHARDS: u32 = 16;

/// The shard of the tenant's spend rows a session adds to: concurrent appends of different
/// sessions mostly add to different rows, so they do not wait for each other's commits.
pub(in crate::store) fn spend_shard(session: &SessionId) -> i16 {
    let hash = session.as_str().bytes().fold(0u32, |hash, byte| {
        hash.wrapping_mul(31).wrapping_add(u32::from(byte))
    });
    (hash % SPEND_SHARDS) as i16
}

/// Adds `deltas` to the tenant's running totals (in the caller's transaction), in the
/// session's shard. Concurrent appends of a shard take turns on its two rows (day first, then
/// month: no deadlock); totals saturate at `BIGINT`'s maximum instead of failing the append.
pub(in crate::store) async fn add_spend(
    conn: &mut PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    deltas: &[SpendDelta],
) -> StoreResult<()> {
    if deltas.is_empty() {
        return Ok(());
    }
    let shard = spend_shard(session);
    let mut insert = sqlx::QueryBuilder::<sqlx::Postgres>::new(
        "INSERT INTO tenant_spend (tenant_id, period, period_key, shard, tokens, cost_pico) ",
    );
    insert.push_values(deltas, |mut row, delta| {
        row.push_bind(tenant.as_str())
            .push_bind(delta.period.as_str())
            .push_bind(delta.key.as_str())
            .push_bind(shard)
            .push_bind(delta.tokens)
            .push_bind(delta.cost_pico);
    });
    insert.push(
        " ON CONFLICT (tenant_id, period, period_key, shard) DO UPDATE SET \
         tokens = LEAST(tenant_spend.tokens::numeric + EXCLUDED.tokens, \
             9223372036854775807)::bigint, \
         cost_pico = LEAST(tenant_spend.cost_pico::numeric + EXCLUDED.cost_pico, \
             9223372036854775807)::bigint",
    );
    insert.build().execute(conn).await?;
    Ok(())
}

/// The tenant's budget row: kept ones answer without a round trip (see `budgets::cache`).
pub(in crate::store) async fn budget(
    store: &PgStore,
    tenant: &TenantId,
) -> StoreResult<Option<Budget>> {
    let ticket = match store.budgets.get(tenant) {
        Ok(kept) => return Ok(kept),
        Err(ticket) => ticket,
    };
    let budget = read_budget(store, tenant).await?;
    store.budgets.keep(ticket, tenant, budget);
    Ok(budget)
}

async fn read_budget(store: &PgStore, tenant: &TenantId) -> StoreResult<Option<Budget>> {
    let mut conn = store.tenant_conn(tenant).await?;
    let row = sqlx::query(
        "SELECT tokens_per_day, tokens_per_month, cost_micros_per_day, cost_micros_per_month \
         FROM tenant_budgets WHERE tenant_id = $1",
    )
    .bind(tenant.as_str())
    .fetch_optional(&mut *conn)
    .await?;
    conn.commit().await?;
    row.map(|row| {
        let get = |column: &str| -> StoreResult<Option<u64>> {
            Ok(row
                .try_get::<Option<i64>, _>(column)?
                .map(|value| u64::try_from(value).unwrap_or(0)))
        };
        Ok(Budget {
            tokens_per_day: get("tokens_per_day")?,
            tokens_per_month: get("tokens_per_month")?,
            cost_micros_per_day: get("cost_micros_per_day")?,
            cost_micros_per_month: get("cost_micros_per_month")?,
        })
    })
    .transpose()
}

pub(in crate::store) async fn set_budget(
    store: &PgStore,
    tenant: &TenantId,
    budget: Option<&Budget>,
) -> StoreResult<()> {
    let mut tx = store.tenant_tx(tenant).await?;
    match budget {
        None => {
            sqlx::query("DELETE FROM tenant_budgets WHERE tenant_id = $1")
                .bind(tenant.as_str())
                .execute(&mut *tx)
                .await?;
        }
        Some(budget) => {
            let sql = |value: Option<u64>| value.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
            sqlx::query(
                "INSERT INTO tenant_budgets (tenant_id, tokens_per_day, tokens_per_month, \
                     cost_micros_per_day, cost_micros_per_month, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (tenant_id) DO UPDATE SET \
                     tokens_per_day = EXCLUDED.tokens_per_day, \
                     tokens_per_month = EXCLUDED.tokens_per_month, \
                     cost_micros_per_day = EXCLUDED.cost_micros_per_day, \
                     cost_micros_per_month = EXCLUDED.cost_micros_per_month, \
                     updated_at = EXCLUDED.updated_at",
            )
            .bind(tenant.as_str())
            .bind(sql(budget.tokens_per_day))
            .bind(sql(budget.tokens_per_month))
            .bind(sql(budget.cost_micros_per_day))
            .bind(sql(budget.cost_micros_per_month))
            .bind(Utc::now())
            .execute(&mut *tx)
            .await?;
        }
    }
    // Every replica forgets its kept row when this commits; this one at once.
    let changed = Signal::BudgetChanged {
        tenant: tenant.clone(),
    };
    crate::store::dialect::postgres::notify(&mut tx, &store.origin, &changed).await?;
    tx.commit().await?;
    store.budgets.forget(tenant);
    Ok(())
}

pub(in crate::store) async fn spend(
    store: &PgStore,
    tenant: &TenantId,
    at: DateTime<Utc>,
) -> StoreResult<TenantSpend> {
    let mut conn = store.tenant_conn(tenant).await?;
    // The shards summed (saturating like each row).
    let rows = sqlx::query(
        "SELECT period, LEAST(SUM(tokens::numeric), 9223372036854775807)::bigint AS tokens, \
             LEAST(SUM(cost_pico::numeric), 9223372036854775807)::bigint AS cost_pico \
         FROM tenant_spend WHERE tenant_id = $1 \
         AND ((period = 'day' AND period_key = $2) OR (period = 'month' AND period_key = $3)) \
         GROUP BY period",
    )
    .bind(tenant.as_str())
    .bind(Period::Day.key(at))
    .bind(Period::Month.key(at))
    .fetch_all(&mut *conn)
    .await?;
    conn.commit().await?;
    let mut spend = TenantSpend::default();
    for row in rows {
        let period: String = row.try_get("period")?;
        let value = Spend {
            tokens: u64::try_from(row.try_get::<i64, _>("tokens")?).unwrap_or(0),
            cost_pico: u64::try_from(row.try_get::<i64, _>("cost_pico")?).unwrap_or(0),
        };
        match period.as_str() {
            "day" => spend.day = value,
            _ => spend.month = value,
        }
    }
    Ok(spend)
}
