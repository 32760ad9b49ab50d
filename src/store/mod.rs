//! The store: the source of truth for sessions, history, transcripts and evidence.
//!
//! One interface, two implementations on sqlx: Postgres (production, row-level security keyed
//! on a per-transaction tenant setting) and SQLite (the embedded zero-setup default). Every
//! tenant-owned row carries `tenant_id`, and every tenant-scoped method takes the tenant
//! explicitly.

mod models;
pub mod postgres;
pub mod sqlite;

pub use models::*;

use crate::ids::{OutputId, SessionId, TenantId};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// Errors of the store layer, classified at the source.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached right now (connection refused, pool timeout, I/O).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("not found")]
    NotFound,
    /// A uniqueness or state conflict.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("store error: {0}")]
    Internal(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::RowNotFound => Self::NotFound,
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => Self::Unavailable(error.to_string()),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Self::Conflict(db.message().to_owned())
            }
            // Postgres "admin shutdown" / "cannot connect now" while a server stops or starts.
            sqlx::Error::Database(db)
                if db
                    .code()
                    .is_some_and(|code| code.starts_with("57P") || code.starts_with("08")) =>
            {
                Self::Unavailable(db.message().to_owned())
            }
            _ => Self::Internal(error.to_string()),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        Self::Internal(format!("migration failed: {error}"))
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Everything the server keeps durably.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which backend this is (`postgres` or `sqlite`).
    fn backend(&self) -> &'static str;

    /// A cheap round trip proving the database answers.
    async fn ping(&self) -> StoreResult<()>;

    async fn create_session(&self, session: NewSession) -> StoreResult<SessionRecord>;

    /// The session if it exists AND belongs to `tenant`.
    async fn get_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>>;

    /// The tenant's sessions, newest first, strictly after `cursor` when given.
    async fn list_sessions(
        &self,
        tenant: &TenantId,
        cursor: Option<&SessionCursor>,
        limit: u32,
    ) -> StoreResult<Vec<SessionRecord>>;

    /// Marks the session closed (idempotent); `None` when it does not exist for `tenant`.
    async fn close_session(
        &self,
        tenant: &TenantId,
        id: &SessionId,
    ) -> StoreResult<Option<SessionRecord>>;

    /// Writes messages, events and spilled outputs of one session in ONE transaction. Events
    /// and messages get the session's next sequence numbers, in the order given.
    async fn append(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        batch: AppendBatch,
    ) -> StoreResult<AppendResult>;

    /// Events with `seq > after`, in order, at most `limit`.
    async fn list_events(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<EventRecord>>;

    /// History messages with `seq > after`, in order, at most `limit`.
    async fn list_messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        after: i64,
        limit: u32,
    ) -> StoreResult<Vec<MessageRecord>>;

    /// A spilled output of one of the tenant's sessions.
    async fn get_output(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &OutputId,
    ) -> StoreResult<Option<OutputRecord>>;

    /// Deletes spilled outputs older than `older_than`; returns how many were deleted.
    async fn purge_outputs(&self, older_than: Duration) -> StoreResult<u64>;
}

/// Opens the store named by `url` (`postgres://…` or `sqlite://…`) and applies migrations.
pub async fn connect(url: &str, options: &ConnectOptions) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(postgres::PgStore::connect(url, options).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(sqlite::SqliteStore::connect(url, options).await?))
    } else {
        Err(StoreError::Internal(
            "database_url must start with postgres:// or sqlite://".into(),
        ))
    }
}

/// Pool options shared by both backends.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(3),
        }
    }
}
