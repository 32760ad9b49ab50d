//! Postgres: tenant-scoped work runs in transactions that switch to the `norma_app` role and
//! set `norma.tenant_id`, so row-level security hides every other tenant's rows even from a
//! query that forgets its tenant filter; replicas signal each other with LISTEN/NOTIFY.

use crate::ids::TenantId;
pub use crate::store::pg_conns::TenantTx;
use crate::store::postgres::PgStore;
use crate::store::{Signal, StoreError, StoreResult};

/// The row-level-security role tenant-scoped transactions run as.
pub const TENANT_ROLE: &str = "norma_app";

impl PgStore {
    /// Begins a transaction that sees only `tenant`'s rows (row-level security; see
    /// `store::pg_conns`). End it with `commit`; dropped, it rolls back.
    pub async fn tenant_tx(&self, tenant: &TenantId) -> StoreResult<TenantTx> {
        self.tenants.transaction(tenant).await
    }

    /// [`PgStore::tenant_tx`] for a write whose admission checks a cap: when `capped`, it
    /// holds the tenant's limits lock (see `limits::postgres`) from its start, taken in the
    /// round trip of its `BEGIN`.
    pub async fn tenant_tx_admitting(
        &self,
        tenant: &TenantId,
        capped: bool,
    ) -> StoreResult<TenantTx> {
        if !capped {
            return self.tenant_tx(tenant).await;
        }
        self.tenants
            .transaction_locked(tenant, crate::store::limits::postgres::LIMITS_LOCK_SPACE)
            .await
    }

    /// A connection for one statement (its own transaction: a read, or a write that is one
    /// statement) that sees only `tenant`'s rows. Give it back with `commit`.
    pub async fn tenant_conn(&self, tenant: &TenantId) -> StoreResult<TenantTx> {
        self.tenants.autocommit(tenant).await
    }

    /// A fresh listening connection on the signal channel.
    pub(in crate::store) async fn listen(&self) -> StoreResult<sqlx::postgres::PgListener> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(SIGNAL_CHANNEL).await?;
        Ok(listener)
    }
}

/// The LISTEN/NOTIFY channel replicas signal each other on.
pub(in crate::store) const SIGNAL_CHANNEL: &str = "norma_signals";

pub(in crate::store) async fn notify(
    conn: &mut sqlx::PgConnection,
    origin: &str,
    signal: &Signal,
) -> StoreResult<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SIGNAL_CHANNEL)
        .bind(signal_payload(origin, signal)?)
        .execute(conn)
        .await?;
    Ok(())
}

/// A signal as sent: the signal's own fields plus `origin`, the sending store instance's
/// random id. A replica drops the `events` signals it sent itself: it published those events
/// to its own streams when it committed them (reading them back would cost a query each).
#[derive(serde::Serialize)]
struct Outgoing<'a> {
    #[serde(flatten)]
    signal: &'a Signal,
    origin: &'a str,
}

/// A signal as received (`origin` absent from older senders).
#[derive(serde::Deserialize)]
pub(in crate::store) struct Incoming {
    #[serde(flatten)]
    pub signal: Signal,
    #[serde(default)]
    pub origin: Option<String>,
}

impl Incoming {
    /// Whether a listener of the store `origin` acts on it.
    pub(in crate::store) fn concerns(&self, origin: &str) -> bool {
        !(matches!(self.signal, Signal::Events { .. }) && self.origin.as_deref() == Some(origin))
    }
}

pub(in crate::store) fn signal_payload(origin: &str, signal: &Signal) -> StoreResult<String> {
    serde_json::to_string(&Outgoing { signal, origin })
        .map_err(|error| StoreError::Internal(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{SessionId, TenantId};

    #[test]
    fn a_listener_drops_only_the_event_signals_its_own_store_sent() {
        let events = Signal::Events {
            tenant: TenantId::new("acme"),
            session: SessionId::generate(),
            first: 3,
            last: 5,
        };
        let decided = Signal::ApprovalDecided { id: "apr_1".into() };
        for signal in [events, decided] {
            let sent = signal_payload("store-a", &signal).unwrap();
            let received: Incoming = serde_json::from_str(&sent).unwrap();
            assert_eq!(received.signal, signal);
            assert!(received.concerns("store-b"));
            let own = matches!(signal, Signal::Events { .. });
            assert_eq!(received.concerns("store-a"), !own, "{sent}");
        }
        // A signal from a sender without `origin` concerns everyone.
        let bare: Incoming = serde_json::from_str(r#"{"signal":"reconnected"}"#).unwrap();
        assert!(bare.concerns("store-a"));
    }
}
