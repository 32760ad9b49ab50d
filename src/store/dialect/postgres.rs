//! Postgres: tenant-scoped work runs in transactions that switch to the `norma_app` role and
//! set `norma.tenant_id`, so row-level security hides every other tenant's rows even from a
//! query that forgets its tenant filter; replicas signal each other with LISTEN/NOTIFY.

use crate::ids::TenantId;
use crate::store::postgres::PgStore;
use crate::store::{Signal, StoreError, StoreResult};
use sqlx::{Postgres, Transaction};

/// The row-level-security role tenant-scoped transactions run as.
pub const TENANT_ROLE: &str = "norma_app";

impl PgStore {
    /// Begins a transaction that sees only `tenant`'s rows (row-level security).
    pub async fn tenant_tx(
        &self,
        tenant: &TenantId,
    ) -> StoreResult<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('role', $1, true), set_config('norma.tenant_id', $2, true)")
            .bind(TENANT_ROLE)
            .bind(tenant.as_str())
            .execute(&mut *tx)
            .await?;
        Ok(tx)
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
    signal: &Signal,
) -> StoreResult<()> {
    let payload =
        serde_json::to_string(signal).map_err(|error| StoreError::Internal(error.to_string()))?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(SIGNAL_CHANNEL)
        .bind(payload)
        .execute(conn)
        .await?;
    Ok(())
}
