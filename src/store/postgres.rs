//! The Postgres store: the pool, migrations, and the `Store` facade, each method one line
//! delegating to its aggregate (`sessions`, `runs`, `events` …). Tenant-scoped work runs in
//! transactions that switch to the `norma_app` role and set `norma.tenant_id` (see
//! `dialect::postgres`), so row-level security hides every other tenant's rows even from a
//! query that forgets its tenant filter.

use super::*;
use crate::ids::{ApprovalId, GrantId, OutputId, RunId, SessionId, TenantId};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::str::FromStr;

// What `sqlite_writer` imports from here.
pub(super) use super::events::role_str;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

pub use super::dialect::postgres::TENANT_ROLE;

#[derive(Clone)]
pub struct PgStore {
    /// System-level work (as the owner role: leases, the outbox, expiry, migrations).
    pub(super) pool: PgPool,
    /// Tenant-scoped work (as `norma_app`, one tenant at a time).
    pub(super) tenants: super::pg_conns::TenantConns,
    /// This store instance's id in the signals it sends (see `dialect::postgres::Incoming`).
    pub(super) origin: std::sync::Arc<str>,
    /// Notified after a commit that wrote outbox rows.
    pub(super) webhook_wakeup: std::sync::Arc<tokio::sync::Notify>,
    /// Sends the `events` signals after their commits (see `pg_notifier`).
    pub(super) notifier: super::pg_notifier::Notifier,
    /// The operator's budget rows, kept while every change is heard (see `budgets::cache`).
    pub(super) budgets: std::sync::Arc<super::budgets::cache::BudgetCache>,
}

impl PgStore {
    /// Connects lazily (the server starts even while Postgres is down) and migrates when the
    /// database answers.
    pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Self> {
        let connect = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Internal(format!("invalid database url: {error}")))?
            .application_name("norma");
        let tenants = super::pg_conns::TenantConns::new(
            connect.clone(),
            TENANT_ROLE,
            options.max_connections,
            options.acquire_timeout,
        );
        // No ping before every acquire: it is one more round trip to Postgres per
        // transaction; a broken connection fails its statement instead (and is dropped).
        let pool = PgPoolOptions::new()
            .max_connections(system_connections(options.max_connections))
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Self {
            pool,
            tenants,
            origin: uuid::Uuid::new_v4().to_string().into(),
            webhook_wakeup: Default::default(),
            budgets: Default::default(),
            notifier: super::pg_notifier::Notifier::start(connect),
        })
    }

    /// The pool, for tests that need to look under the hood.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The owner's pool serves system-level work only (a few statements per lease tick, outbox
/// batch or expiry sweep): a quarter of the tenant connections, at least 2.
fn system_connections(max_connections: u32) -> u32 {
    (max_connections / 4).max(2)
}

super::facade::store_facade!(PgStore, postgres, {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn signals(&self) -> StoreResult<Option<tokio::sync::mpsc::UnboundedReceiver<Signal>>> {
        replicas::postgres::signals(self).await
    }

    async fn settled_approvals(&self, ids: &[String]) -> StoreResult<Vec<String>> {
        approvals::postgres::settled_approvals(self, ids).await
    }

    async fn signal(&self, signal: Signal) -> StoreResult<()> {
        replicas::postgres::signal(self, signal).await
    }

    fn set_other_replicas(&self, present: bool) {
        self.notifier.set_others(present);
    }

    fn webhook_wakeup(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.webhook_wakeup.clone()
    }
});
