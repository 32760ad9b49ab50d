//! The tenant budget gate: what a prompt and a run's next turn ask before they spend.
//!
//! Every check asks the store (the operator's budget row, then the running spend totals of
//! the current UTC day and month: two primary-key reads), so budgets hold across replicas
//! and an operator's change applies to the next check on every replica (on Postgres the
//! store keeps budget rows and forgets one when the change's signal arrives, milliseconds
//! after its commit; see `store::budgets::cache`). A tenant without any
//! budget costs one read per check — with one exception, a run's own checks ([`RunBudget`]):
//! once a read found no budget for its tenant, the run trusts that for
//! [`NO_BUDGET_RECHECK`] (its start and its turns within that time read nothing). A tenant
//! with a budget is read at every check, so crossings are found at once.

use crate::budgets::{Budget, BudgetExceeded, BudgetSource, Spend, TenantSpend};
use crate::ids::TenantId;
use crate::store::{Store, StoreError};
use crate::usage::UsageMeter;
use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a run trusts a read that found no budget for its tenant: a budget set while such
/// a run goes on applies to it at its first turn end this long after its last read (to new
/// prompts and runs at once).
pub const NO_BUDGET_RECHECK: Duration = Duration::from_secs(1);

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
    /// a price while the tenant has a cost budget (`meter` is only asked for when the tenant
    /// has a budget).
    pub async fn check(
        &self,
        tenant: &TenantId,
        meter: impl FnOnce() -> Option<UsageMeter>,
        pending: Spend,
    ) -> Result<(), BudgetRefusal> {
        let (budget, _) = self.effective(tenant).await?;
        if budget.is_unlimited() {
            return Ok(());
        }
        if let Some(meter) = meter() {
            ensure_priced(&budget, &meter)?;
        }
        let now = Utc::now();
        let spend = self.spend(tenant, now).await?.plus(pending);
        budget.check(&spend, now)?;
        Ok(())
    }

    /// The budget checks of one run (see [`RunBudget`]).
    pub fn for_run(&self) -> RunBudget {
        RunBudget {
            gate: self.clone(),
            recheck: NO_BUDGET_RECHECK,
            unlimited_at: Mutex::new(None),
        }
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

/// The budget checks of one run (its start and every turn end). They read the store like
/// [`BudgetGate::check`], except that after a read found no budget for the tenant, the checks
/// of the next [`NO_BUDGET_RECHECK`] read nothing: a tenant without budgets (the common case)
/// costs one read per run, not one per turn, while a budget set meanwhile still stops a long
/// run within about that time.
pub struct RunBudget {
    gate: BudgetGate,
    recheck: Duration,
    /// When a read last found the tenant without any budget.
    unlimited_at: Mutex<Option<Instant>>,
}

impl RunBudget {
    /// The budget in force, unless a read less than `recheck` ago found none (`None`).
    async fn effective(&self, tenant: &TenantId) -> Result<Option<Budget>, StoreError> {
        let fresh = self
            .unlimited_at
            .lock()
            .map(|at| at.is_some_and(|at| at.elapsed() < self.recheck))
            .unwrap_or(false);
        if fresh {
            return Ok(None);
        }
        let (budget, _) = self.gate.effective(tenant).await?;
        let unlimited = budget.is_unlimited();
        if let Ok(mut at) = self.unlimited_at.lock() {
            *at = unlimited.then(Instant::now);
        }
        Ok((!unlimited).then_some(budget))
    }

    /// [`BudgetGate::ensure_priced`], at the run's start (its read serves the first turn's
    /// check too when the tenant has no budget).
    pub async fn ensure_priced(
        &self,
        tenant: &TenantId,
        meter: &UsageMeter,
    ) -> Result<(), BudgetRefusal> {
        match self.effective(tenant).await? {
            Some(budget) => ensure_priced(&budget, meter),
            None => Ok(()),
        }
    }

    /// [`BudgetGate::check`] between two turns of the run (`pending`: what the turn that
    /// just ended used and is not committed yet).
    pub async fn check(&self, tenant: &TenantId, pending: Spend) -> Result<(), BudgetRefusal> {
        let Some(budget) = self.effective(tenant).await? else {
            return Ok(());
        };
        let now = Utc::now();
        let spend = self.gate.spend(tenant, now).await?.plus(pending);
        budget.check(&spend, now)?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ConnectOptions;

    async fn gate() -> (BudgetGate, Arc<dyn Store>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("norma.db").display());
        let store = crate::store::connect(&url, &ConnectOptions::default())
            .await
            .unwrap();
        (
            BudgetGate::new(store.clone(), Budget::default()),
            store,
            dir,
        )
    }

    fn spent_at_once() -> Budget {
        Budget {
            tokens_per_day: Some(0),
            ..Budget::default()
        }
    }

    #[tokio::test]
    async fn a_run_without_budget_reads_once_per_recheck_and_one_with_a_budget_every_time() {
        let (gate, store, _dir) = gate().await;
        let tenant = TenantId::new("acme");
        let run = gate.for_run();
        // No budget: the start's read serves the next checks.
        run.check(&tenant, Spend::default()).await.unwrap();
        store
            .set_tenant_budget(&tenant, Some(&spent_at_once()))
            .await
            .unwrap();
        run.check(&tenant, Spend::default())
            .await
            .expect("within the recheck time, no read: still no budget");
        // The gate itself (prompts) and a new run read at once.
        assert!(matches!(
            gate.check(&tenant, || None, Spend::default()).await,
            Err(BudgetRefusal::Exceeded(_))
        ));
        assert!(matches!(
            gate.for_run().check(&tenant, Spend::default()).await,
            Err(BudgetRefusal::Exceeded(_))
        ));
        // Once the recheck time passed, the running run reads again and stops.
        let stale = RunBudget {
            recheck: Duration::ZERO,
            ..gate.for_run()
        };
        *stale.unlimited_at.lock().unwrap() = Some(Instant::now());
        assert!(matches!(
            stale.check(&tenant, Spend::default()).await,
            Err(BudgetRefusal::Exceeded(_))
        ));
        // A run that found a budget reads at every check: removing it applies at once.
        let with_budget = gate.for_run();
        assert!(with_budget.check(&tenant, Spend::default()).await.is_err());
        store.set_tenant_budget(&tenant, None).await.unwrap();
        with_budget.check(&tenant, Spend::default()).await.unwrap();
    }

    #[tokio::test]
    async fn the_recheck_time_is_counted_from_the_read_that_found_no_budget() {
        let (gate, store, _dir) = gate().await;
        let tenant = TenantId::new("acme");
        let run = RunBudget {
            recheck: Duration::from_millis(200),
            ..gate.for_run()
        };
        run.check(&tenant, Spend::default()).await.unwrap();
        store
            .set_tenant_budget(&tenant, Some(&spent_at_once()))
            .await
            .unwrap();
        run.check(&tenant, Spend::default()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(matches!(
            run.check(&tenant, Spend::default()).await,
            Err(BudgetRefusal::Exceeded(_))
        ));
    }
}
