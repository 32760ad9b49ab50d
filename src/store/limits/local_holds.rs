//! Holds on SQLite, kept in this process's memory.
//!
//! A hold counts something a replica keeps open for a tenant (an SSE stream, a background
//! task, a shell) against the tenant's caps, across replicas. SQLite's store is this
//! process's alone, so there is no other replica to count with: the holds live here, with the
//! same rules as the Postgres rows (caps per session and per tenant and kind, a lease the
//! heartbeat renews per replica, expired holds not counted and swept), and without the two
//! commits a row cost every stream (its insert on opening, its delete on closing). A restart
//! starts with none, as the streams, tasks and shells they counted ended with the process.
//!
//! Bounded: a tenant's live holds of a kind stay under its cap; expired ones are swept when
//! the tenant takes a hold and on every heartbeat; a tenant with none has no entry. The lock
//! is held for a count and an insert, never across an await.

use super::over;
use crate::ids::{SessionId, TenantId};
use crate::limits::{HoldCaps, HoldKind, NewHold};
use crate::store::StoreResult;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The holds of this process's tenants.
#[derive(Default)]
pub(in crate::store) struct LocalHolds {
    by_tenant: Mutex<HashMap<TenantId, HashMap<String, Held>>>,
}

/// One hold, by id within its tenant.
struct Held {
    session: SessionId,
    kind: HoldKind,
    replica: String,
    taken_at: DateTime<Utc>,
    expires: Instant,
}

impl LocalHolds {
    /// Takes `hold` when the tenant's live holds of its kind stay under `caps` (its expired
    /// ones swept first); `TenantLimit` otherwise, and nothing taken.
    pub(in crate::store) fn acquire(
        &self,
        tenant: &TenantId,
        hold: NewHold,
        caps: HoldCaps,
    ) -> StoreResult<()> {
        let now = Instant::now();
        let mut by_tenant = self.lock();
        let held = by_tenant.entry(tenant.clone()).or_default();
        held.retain(|_, h| h.expires > now);
        let (mut in_session, mut in_tenant) = (0i64, 0i64);
        for h in held.values().filter(|h| h.kind == hold.kind) {
            in_tenant += 1;
            in_session += i64::from(h.session == hold.session);
        }
        let refused = caps
            .per_session
            .map_or(Ok(()), |(limit, max)| over(limit, max, in_session))
            .and_then(|()| over(caps.per_tenant.0, caps.per_tenant.1, in_tenant));
        if let Err(refusal) = refused {
            if held.is_empty() {
                by_tenant.remove(tenant);
            }
            return Err(refusal);
        }
        held.insert(
            hold.id,
            Held {
                session: hold.session,
                kind: hold.kind,
                replica: hold.replica,
                taken_at: Utc::now(),
                expires: until(now, hold.lease),
            },
        );
        Ok(())
    }

    /// Gives back a hold (idempotent).
    pub(in crate::store) fn release(&self, tenant: &TenantId, id: &str) {
        let mut by_tenant = self.lock();
        if let Some(held) = by_tenant.get_mut(tenant) {
            held.remove(id);
            if held.is_empty() {
                by_tenant.remove(tenant);
            }
        }
    }

    /// The tenant's live holds of `kind` (`session`: in that session only).
    pub(in crate::store) fn count(
        &self,
        tenant: &TenantId,
        kind: HoldKind,
        session: Option<&SessionId>,
    ) -> u64 {
        let now = Instant::now();
        self.lock().get(tenant).map_or(0, |held| {
            held.values()
                .filter(|h| h.kind == kind && h.expires > now)
                .filter(|h| session.is_none_or(|s| &h.session == s))
                .count() as u64
        })
    }

    /// Gives back the holds `replica` took before `before`; answers how many.
    pub(in crate::store) fn release_replica(&self, replica: &str, before: DateTime<Utc>) -> u64 {
        let mut released = 0;
        self.retain(|h| {
            let gone = h.replica == replica && h.taken_at < before;
            released += u64::from(gone);
            !gone
        });
        released
    }

    /// Extends every hold of `replica` by `lease` (the heartbeat) and sweeps the expired ones
    /// of every tenant.
    pub(in crate::store) fn renew(&self, replica: &str, lease: Duration) {
        let now = Instant::now();
        self.retain(|h| {
            if h.replica == replica && h.expires > now {
                h.expires = until(now, lease);
            }
            h.expires > now
        });
    }

    /// Keeps, across every tenant, the holds `keep` answers true for (it may change them); a
    /// tenant left with none loses its entry.
    fn retain(&self, mut keep: impl FnMut(&mut Held) -> bool) {
        self.lock().retain(|_, held| {
            held.retain(|_, h| keep(h));
            !held.is_empty()
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, HashMap<String, Held>>> {
        self.by_tenant.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `now + lease`, a lease capped at a day (as the rows' expiry on Postgres).
fn until(now: Instant, lease: Duration) -> Instant {
    now + lease.min(Duration::from_secs(86_400))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limit;
    use crate::store::StoreError;

    fn hold(session: &SessionId, kind: HoldKind, lease: Duration) -> NewHold {
        NewHold {
            id: format!("hold_{}", uuid::Uuid::new_v4().simple()),
            kind,
            session: session.clone(),
            replica: "replica".into(),
            lease,
        }
    }

    #[test]
    fn a_refused_hold_leaves_no_entry_and_a_released_tenant_none() {
        let holds = LocalHolds::default();
        let tenant = TenantId::new("acme");
        let session = SessionId::generate();
        let none = HoldCaps {
            per_session: None,
            per_tenant: (Limit::SseStreams, 0),
        };
        let refused = holds.acquire(
            &tenant,
            hold(&session, HoldKind::SseStream, Duration::from_secs(60)),
            none,
        );
        assert!(matches!(refused, Err(StoreError::TenantLimit(_))));
        assert!(holds.lock().is_empty(), "a refusal keeps nothing");
        let one = HoldCaps {
            per_session: None,
            per_tenant: (Limit::SseStreams, 1),
        };
        let taken = hold(&session, HoldKind::SseStream, Duration::from_secs(60));
        let id = taken.id.clone();
        holds.acquire(&tenant, taken, one).expect("under the cap");
        assert_eq!(holds.count(&tenant, HoldKind::SseStream, Some(&session)), 1);
        holds.release(&tenant, &id);
        holds.release(&tenant, &id);
        assert!(
            holds.lock().is_empty(),
            "a tenant without holds has no entry"
        );
    }

    #[test]
    fn the_heartbeat_sweeps_expired_holds_of_every_tenant() {
        let holds = LocalHolds::default();
        let caps = HoldCaps {
            per_session: None,
            per_tenant: (Limit::Shells, 10),
        };
        for name in ["a", "b", "c"] {
            let tenant = TenantId::new(name);
            let expired = hold(&SessionId::generate(), HoldKind::Shell, Duration::ZERO);
            holds.acquire(&tenant, expired, caps).expect("taken");
        }
        holds.renew("replica", Duration::from_secs(60));
        assert!(holds.lock().is_empty(), "expired holds are gone");
    }
}
