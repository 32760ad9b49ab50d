//! The operator's budget rows as last read from Postgres, kept while this replica hears every
//! budget change.
//!
//! Every session creation, prompt and run start asks for its tenant's budget; on Postgres
//! each ask was a round trip for a row that almost never changes. A budget write
//! ([`Store::set_tenant_budget`](crate::store::Store::set_tenant_budget)) sends a
//! `budget_changed` signal in its transaction, so every replica sharing the database hears of
//! it when it commits. A kept row is therefore good until that signal arrives — as long as
//! the listening connection is up: while it is down (signals sent meanwhile are lost) nothing
//! is kept and every ask reads the row, and what was kept before is dropped.
//!
//! A read that began before a change (or before the listener came back) must not keep what it
//! read: every forgetting bumps a generation, and a read keeps its row only when the
//! generation is still the one it saw when it began. The writing replica forgets its own
//! change at once, after its commit, without waiting for its signal. At most
//! [`MAX_KEPT`] tenants are kept (when full, the kept rows are dropped and kept anew).

use crate::budgets::Budget;
use crate::ids::TenantId;
use std::collections::HashMap;
use std::sync::Mutex;

/// Bound on the tenants whose budget row is kept.
pub(in crate::store) const MAX_KEPT: usize = 4096;

#[derive(Default)]
pub(in crate::store) struct BudgetCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Whether the replica-signal listener is connected (nothing is kept otherwise).
    listening: bool,
    generation: u64,
    /// The tenant's row, `None` when it has none (the configured default applies).
    kept: HashMap<TenantId, Option<Budget>>,
}

/// A read in progress: what it saw when it began.
#[derive(Clone, Copy)]
pub(in crate::store) struct ReadTicket {
    generation: u64,
}

impl BudgetCache {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kept row of `tenant`, or a ticket to keep the one about to be read.
    pub(in crate::store) fn get(&self, tenant: &TenantId) -> Result<Option<Budget>, ReadTicket> {
        let state = self.state();
        match state.kept.get(tenant) {
            Some(budget) if state.listening => Ok(*budget),
            _ => Err(ReadTicket {
                generation: state.generation,
            }),
        }
    }

    /// Keeps what a read begun with `ticket` found, unless something was forgotten since.
    pub(in crate::store) fn keep(
        &self,
        ticket: ReadTicket,
        tenant: &TenantId,
        budget: Option<Budget>,
    ) {
        let mut state = self.state();
        if !state.listening || state.generation != ticket.generation {
            return;
        }
        if state.kept.len() >= MAX_KEPT && !state.kept.contains_key(tenant) {
            state.kept.clear();
        }
        state.kept.insert(tenant.clone(), budget);
    }

    /// `tenant`'s budget changed (here or on another replica).
    pub(in crate::store) fn forget(&self, tenant: &TenantId) {
        let mut state = self.state();
        state.generation += 1;
        state.kept.remove(tenant);
    }

    /// The listener connected (`true`: from now on every change is heard) or lost its
    /// connection (`false`: changes may go unheard). Either way nothing kept so far is
    /// trusted, nor any read begun before.
    pub(in crate::store) fn listening(&self, listening: bool) {
        let mut state = self.state();
        state.generation += 1;
        state.kept.clear();
        state.listening = listening;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: u64) -> Option<Budget> {
        Some(Budget {
            tokens_per_day: Some(tokens),
            ..Budget::default()
        })
    }

    #[test]
    fn nothing_is_kept_unless_every_change_is_heard() {
        let cache = BudgetCache::default();
        let tenant = TenantId::new("alpha");
        let ticket = cache.get(&tenant).unwrap_err();
        cache.keep(ticket, &tenant, budget(5));
        assert!(cache.get(&tenant).is_err(), "kept while not listening");
        cache.listening(true);
        let ticket = cache.get(&tenant).unwrap_err();
        cache.keep(ticket, &tenant, budget(5));
        assert_eq!(cache.get(&tenant).ok(), Some(budget(5)));
        // The listener lost its connection: what was kept goes, and nothing new is kept.
        cache.listening(false);
        assert!(cache.get(&tenant).is_err());
        let ticket = cache.get(&tenant).unwrap_err();
        cache.keep(ticket, &tenant, budget(5));
        assert!(cache.get(&tenant).is_err());
    }

    #[test]
    fn a_read_begun_before_a_change_or_a_reconnect_is_not_kept() {
        let cache = BudgetCache::default();
        cache.listening(true);
        let (alpha, beta) = (TenantId::new("alpha"), TenantId::new("beta"));
        let ticket = cache.get(&alpha).unwrap_err();
        cache.forget(&alpha);
        cache.keep(ticket, &alpha, None);
        assert!(cache.get(&alpha).is_err(), "a stale read was kept");
        // A change of another tenant also bumps the generation: conservative, never stale.
        let ticket = cache.get(&alpha).unwrap_err();
        cache.forget(&beta);
        cache.keep(ticket, &alpha, None);
        assert!(cache.get(&alpha).is_err());
        let ticket = cache.get(&alpha).unwrap_err();
        cache.listening(true);
        cache.keep(ticket, &alpha, None);
        assert!(
            cache.get(&alpha).is_err(),
            "a read from before the reconnect was kept"
        );
        // A row kept, then changed: forgotten.
        let ticket = cache.get(&alpha).unwrap_err();
        cache.keep(ticket, &alpha, None);
        assert_eq!(cache.get(&alpha).ok(), Some(None));
        cache.forget(&alpha);
        assert!(cache.get(&alpha).is_err());
    }

    #[test]
    fn the_kept_tenants_are_bounded() {
        let cache = BudgetCache::default();
        cache.listening(true);
        for n in 0..MAX_KEPT + 10 {
            let tenant = TenantId::new(format!("t{n}"));
            let ticket = cache.get(&tenant).unwrap_err();
            cache.keep(ticket, &tenant, None);
            assert!(cache.state().kept.len() <= MAX_KEPT);
        }
        let last = TenantId::new(format!("t{}", MAX_KEPT + 9));
        assert_eq!(cache.get(&last).ok(), Some(None));
    }
}
