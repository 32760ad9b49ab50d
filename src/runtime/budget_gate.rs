//! The tenant budget gate: what a prompt and a run's next turn ask before they spend.
//!
//! Every check reads the store (the operator's budget row, then the running spend totals of
//! the current UTC day and month: two primary-key reads), so budgets hold across replicas
//! and an operator's change applies to the next check on every replica; nothing is cached.
//! A tenant without any budget costs one read.

use crate::budgets::{Budget, BudgetExceeded, BudgetSource, Spend, TenantSpend};
use crate::ids::TenantId;
use crate::store::{Store, StoreError};
use crate::usage::UsageMeter;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// Why the gate refused.
#[derive(Debug, thiserror::Error)]
pub enum BudgetRefusal {
    #[error(transparent)]
    Exceeded(#[from] BudgetExceeded),
    #[error(
        "the model {provider}/{model} has no price in the price table, and this tenant has a \
         cost budget: its calls could not be counted (the operator adds it to `[[prices]]`)"
    )]
    NotPriced { provider: String, model: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The budgets of every tenant: the configured default and the operator's overrides.
#[derive(Clone)]
pub struct BudgetGate {
    store: Arc<dyn Store>,
    default: Budget,
}

impl BudgetGate {
    pub fn new(store: Arc<dyn Store>, default: Budget) -> Self {
        Self { store, default }
    }

    /// The tenant's budget in force and where it comes from.
    pub async fn effective(&self, tenant: &TenantId) -> Result<(Budget, BudgetSource), StoreError> {
        Ok(match self.store.tenant_budget(tenant).await? {
            Some(budget) => (budget, BudgetSource::Operator),
            None => (self.default, BudgetSource::Default),
        })
    }

    /// What the tenant spent in the current UTC day and month.
    pub async fn spend(
        &self,
        tenant: &TenantId,
        now: DateTime<Utc>,
    ) -> Result<TenantSpend, StoreError> {
        self.store.tenant_spend(tenant, now).await
    }

    /// `Err` when one of the tenant's budgets is spent, counting `pending` (what the turn
    /// that just ended used and is not committed yet), or when `meter` names a model without
    /// a price while the tenant has a cost budget.
    pub async fn check(
        &self,
        tenant: &TenantId,
        meter: Option<&UsageMeter>,
        pending: Spend,
    ) -> Result<(), BudgetRefusal> {
        let (budget, _) = self.effective(tenant).await?;
        if budget.is_unlimited() {
            return Ok(());
        }
        if let Some(meter) = meter {
            ensure_priced(&budget, meter)?;
        }
        let now = Utc::now();
        let spend = self.spend(tenant, now).await?.plus(pending);
        budget.check(&spend, now)?;
        Ok(())
    }

    /// `Err(NotPriced)` when the tenant has a cost budget and `meter`'s model has no price.
    pub async fn ensure_priced(
        &self,
        tenant: &TenantId,
        meter: &UsageMeter,
    ) -> Result<(), BudgetRefusal> {
        let (budget, _) = self.effective(tenant).await?;
        ensure_priced(&budget, meter)
    }
}

fn ensure_priced(budget: &Budget, meter: &UsageMeter) -> Result<(), BudgetRefusal> {
    if budget.has_cost() && meter.price.is_none() {
        return Err(BudgetRefusal::NotPriced {
            provider: meter.provider.clone(),
            model: meter.model.clone(),
        });
    }
    Ok(())
}
