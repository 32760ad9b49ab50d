//! Tenant budgets on SQLite: the operator's budget per tenant and the running spend totals
//! per UTC day and month, added to in the usage ledger's transaction (the one writer
//! connection serializes them).

use crate::budgets::{Budget, Period, Spend, TenantSpend};
use crate::store::sqlite::{SqliteStore, ts};
use crate::store::*;
use chrono::{DateTime, Utc};
use rusqlite::OptionalExtension;
use sqlx::Row;

/// A point read on the caller's thread (see `sqlite_reads`).
pub(in crate::store) async fn budget(
    store: &SqliteStore,
    tenant: &TenantId,
) -> StoreResult<Option<Budget>> {
    store.reads.read(|db| {
        let limit = |value: Option<i64>| value.map(|value| u64::try_from(value).unwrap_or(0));
        Ok(db
            .prepare_cached(
                "SELECT tokens_per_day, tokens_per_month, cost_micros_per_day, \
                     cost_micros_per_month FROM tenant_budgets WHERE tenant_id = ?1",
            )?
            .query_row(rusqlite::params![tenant.as_str()], |row| {
                Ok(Budget {
                    tokens_per_day: limit(row.get(0)?),
                    tokens_per_month: limit(row.get(1)?),
                    cost_micros_per_day: limit(row.get(2)?),
                    cost_micros_per_month: limit(row.get(3)?),
                })
            })
            .optional()?)
    })
}

pub(in crate::store) async fn set_budget(
    store: &SqliteStore,
    tenant: &TenantId,
    budget: Option<&Budget>,
) -> StoreResult<()> {
    match budget {
        None => {
            sqlx::query("DELETE FROM tenant_budgets WHERE tenant_id = ?")
                .bind(tenant.as_str())
                .execute(&mut *store.writer().sqlx().await?)
                .await?;
        }
        Some(budget) => {
            let sql = |value: Option<u64>| value.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
            sqlx::query(
                "INSERT INTO tenant_budgets (tenant_id, tokens_per_day, tokens_per_month, \
                     cost_micros_per_day, cost_micros_per_month, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?) \
                 ON CONFLICT (tenant_id) DO UPDATE SET \
                     tokens_per_day = excluded.tokens_per_day, \
                     tokens_per_month = excluded.tokens_per_month, \
                     cost_micros_per_day = excluded.cost_micros_per_day, \
                     cost_micros_per_month = excluded.cost_micros_per_month, \
                     updated_at = excluded.updated_at",
            )
            .bind(tenant.as_str())
            .bind(sql(budget.tokens_per_day))
            .bind(sql(budget.tokens_per_month))
            .bind(sql(budget.cost_micros_per_day))
            .bind(sql(budget.cost_micros_per_month))
            .bind(ts(Utc::now()))
            .execute(&mut *store.writer().sqlx().await?)
            .await?;
        }
    }
    Ok(())
}

pub(in crate::store) async fn spend(
    store: &SqliteStore,
    tenant: &TenantId,
    at: DateTime<Utc>,
) -> StoreResult<TenantSpend> {
    let rows = sqlx::query(
        "SELECT period, tokens, cost_pico FROM tenant_spend WHERE tenant_id = ? \
         AND ((period = 'day' AND period_key = ?) OR (period = 'month' AND period_key = ?))",
    )
    .bind(tenant.as_str())
    .bind(Period::Day.key(at))
    .bind(Period::Month.key(at))
    .fetch_all(store.reader())
    .await?;
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
