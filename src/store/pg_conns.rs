//! Tenant connections on Postgres: the connections tenant-scoped work runs on, kept by a small
//! pool of their own (system-level work — leases, the outbox, expiry, migrations — uses sqlx's
//! pool as the owner role).
//!
//! Row-level security is the same as ever: every tenant-scoped statement runs as `norma_app`
//! with `norma.tenant_id` naming the caller's tenant. What changes is how often that is said:
//! - a connection takes the role once, when it is opened;
//! - a transaction sets the tenant for itself alone (`SET LOCAL`-like `set_config(…, true)`)
//!   in the same round trip as its `BEGIN`. It never changes the connection's own setting:
//!   a session-level `set_config` sent in the round trip of a `BEGIN` would become part of
//!   that transaction and be undone by its rollback, leaving the connection's setting other
//!   than what the pool believes;
//! - work that is one statement (a read, or a write of one statement;
//!   [`TenantConns::autocommit`]) runs without `BEGIN`/`COMMIT`, on the connection's own
//!   setting: the pool remembers which tenant that names (set by a statement of its own,
//!   committed before it is remembered), so work for the tenant the connection last served
//!   this way is one round trip where `BEGIN`, the setting, the statement and `COMMIT` were
//!   four;
//! - a connection given back by `commit` is idle again at once. sqlx's pool sends a ping (a
//!   round trip) on every release, to catch connections a cancelled statement left mid-reply;
//!   here only a connection given back *without* `commit` (an error, a request cancelled while
//!   it waited) is checked: a background task rolls it back (which also reads whatever reply
//!   was left) and returns it, or closes it when that fails, before anyone else can take it.
//!
//! The pool holds at most `database_max_connections` connections; a caller waits at most the
//! acquire timeout for one (then `Unavailable`). An idle connection older than
//! [`IDLE_LIFETIME`] is closed instead of reused; one that fails its first round trip when
//! taken (after a restart or a network cut) is dropped and the next one is tried.
//!
//! A connection found dead tells about its siblings: they talk to the same server over the
//! same path. So when one fails (its setup when taken, or its recovery after an error) or the
//! replica-signal listener loses its connection ([`TenantConns::forget_idle`]), every idle
//! connection is closed. That matters for the connections trusted without a check (used
//! within [`UNCHECKED_IDLE`]): a Postgres restart can take less than that, and the listener,
//! always reading, sees the server go away before any request can pick up a dead one.

use crate::ids::TenantId;
use crate::store::{StoreError, StoreResult};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// An idle connection unused this long is closed rather than reused (a server, a proxy or a
/// firewall may have dropped it meanwhile).
pub(in crate::store) const IDLE_LIFETIME: Duration = Duration::from_secs(300);
/// A connection idle longer than this proves it is alive (its setting statement) before an
/// autocommit statement is sent on it; one used more recently is trusted (transactions always
/// send their `BEGIN` first, which proves it).
const UNCHECKED_IDLE: Duration = Duration::from_millis(500);
/// Bound on making a connection given back without `commit` usable again.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub(in crate::store) struct TenantConns {
    shared: Arc<Shared>,
}

struct Shared {
    options: PgConnectOptions,
    role: &'static str,
    idle: Mutex<Vec<Idle>>,
    slots: Arc<Semaphore>,
    acquire_timeout: Duration,
}

struct Idle {
    conn: PgConnection,
    /// The tenant the connection's session-level setting names, if any.
    tenant: Option<String>,
    since: Instant,
}

impl TenantConns {
    pub(in crate::store) fn new(
        options: PgConnectOptions,
        role: &'static str,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                options,
                role,
                idle: Mutex::new(Vec::new()),
                slots: Arc::new(Semaphore::new(max_connections.max(1) as usize)),
                acquire_timeout,
            }),
        }
    }

    /// A transaction that sees only `tenant`'s rows.
    pub(in crate::store) async fn transaction(&self, tenant: &TenantId) -> StoreResult<TenantTx> {
        self.take(tenant, Mode::Transaction { lock: None }).await
    }

    /// [`TenantConns::transaction`] that also holds the transaction-scoped advisory lock
    /// `(space, hashtext(tenant))` from its start, taken in the same round trip as its `BEGIN`
    /// (before any statement of the transaction takes its snapshot).
    pub(in crate::store) async fn transaction_locked(
        &self,
        tenant: &TenantId,
        space: i32,
    ) -> StoreResult<TenantTx> {
        self.take(tenant, Mode::Transaction { lock: Some(space) })
            .await
    }

    /// A connection for one statement that sees only `tenant`'s rows, outside any transaction
    /// (the statement is its own). Give it back with `commit`, like a transaction.
    pub(in crate::store) async fn autocommit(&self, tenant: &TenantId) -> StoreResult<TenantTx> {
        self.take(tenant, Mode::Autocommit).await
    }

    /// Closes every idle connection: the server they talk to went away (a restart, a cut), so
    /// none of them is to be taken again, not even one used a moment ago.
    pub(in crate::store) fn forget_idle(&self) {
        self.shared.forget_idle();
    }

    async fn take(&self, tenant: &TenantId, mode: Mode) -> StoreResult<TenantTx> {
        let shared = &self.shared;
        let literal = literal(tenant.as_str())?;
        let permit =
            tokio::time::timeout(shared.acquire_timeout, shared.slots.clone().acquire_owned())
                .await
                .map_err(|_| {
                    StoreError::Unavailable("timed out waiting for a database connection".into())
                })?
                .map_err(|_| {
                    StoreError::Unavailable("the database connections are closed".into())
                })?;
        // An idle connection may have died meanwhile (a restart, a network cut): one that
        // fails its setup is dropped and the next is tried, at worst a new one, whose failure
        // is the answer.
        let (conn, current) = loop {
            let (mut conn, current, idle_for) = match shared.fresh_idle() {
                Some(idle) => (idle.conn, idle.tenant, Some(idle.since.elapsed())),
                None => (shared.connect().await?, None, None),
            };
            let setup = if let Mode::Transaction { lock } = mode {
                let mut setup =
                    format!("BEGIN; SELECT set_config('norma.tenant_id', '{literal}', true)");
                if let Some(space) = lock {
                    setup.push_str(&format!(
                        "; SELECT pg_advisory_xact_lock({space}, hashtext('{literal}'))"
                    ));
                }
                Some(setup)
            } else if current.as_deref() != Some(literal)
                || idle_for.is_none_or(|idle| idle > UNCHECKED_IDLE)
            {
                Some(format!(
                    "SELECT set_config('norma.tenant_id', '{literal}', false)"
                ))
            } else {
                None
            };
            let Some(setup) = setup else {
                break (conn, current);
            };
            match conn.execute(setup.as_str()).await {
                Ok(_) if mode != Mode::Autocommit => break (conn, current),
                Ok(_) => break (conn, Some(literal.to_owned())),
                Err(error) if idle_for.is_some() => {
                    tracing::debug!(%error, "an idle Postgres connection failed; closing the idle ones");
                    shared.forget_idle();
                }
                Err(error) => return Err(error.into()),
            }
        };
        Ok(TenantTx {
            conn: Some((conn, current)),
            permit: Some(permit),
            shared: self.shared.clone(),
            mode,
        })
    }
}

/// How a tenant connection is taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// For one statement, outside any transaction.
    Autocommit,
    /// In a transaction, holding the advisory lock of space `lock` (if any) from its start.
    Transaction { lock: Option<i32> },
}

impl Shared {
    /// The most recently used idle connection still young enough; older ones are closed.
    fn fresh_idle(&self) -> Option<Idle> {
        let mut idle = self.idle.lock().expect("idle connections");
        // Usually none: collecting nothing allocates nothing.
        let stale: Vec<Idle> = idle
            .extract_if(.., |c| c.since.elapsed() >= IDLE_LIFETIME)
            .collect();
        let taken = idle.pop();
        drop(idle);
        for old in stale {
            close_in_background(old.conn);
        }
        taken
    }

    fn forget_idle(&self) {
        let gone = std::mem::take(&mut *self.idle.lock().expect("idle connections"));
        for idle in gone {
            close_in_background(idle.conn);
        }
    }

    async fn connect(&self) -> StoreResult<PgConnection> {
        let mut conn = PgConnection::connect_with(&self.options).await?;
        conn.execute(format!("SET ROLE {}", self.role).as_str())
            .await?;
        Ok(conn)
    }

    fn put(&self, conn: PgConnection, tenant: Option<String>) {
        self.idle.lock().expect("idle connections").push(Idle {
            conn,
            tenant,
            since: Instant::now(),
        });
    }
}

fn close_in_background(conn: PgConnection) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = tokio::time::timeout(RECOVERY_TIMEOUT, conn.close()).await;
        });
    }
}

/// The tenant id as a string literal: ids outside their alphabet
/// ([`TenantId::is_well_formed`], checked where they enter) are refused here rather than
/// escaped.
fn literal(tenant: &str) -> StoreResult<&str> {
    if TenantId::is_well_formed(tenant) {
        Ok(tenant)
    } else {
        Err(StoreError::Internal(
            "a tenant id outside its alphabet reached the store".into(),
        ))
    }
}

/// A tenant-scoped connection, in a transaction ([`TenantConns::transaction`]) or not
/// ([`TenantConns::autocommit`]). `commit` ends it; dropped without `commit`, it is rolled back.
pub struct TenantTx {
    /// The connection and the tenant its session-level setting names.
    conn: Option<(PgConnection, Option<String>)>,
    permit: Option<OwnedSemaphorePermit>,
    shared: Arc<Shared>,
    /// A transaction (with the advisory lock it took at its start, if any), or one statement.
    mode: Mode,
}

impl TenantTx {
    /// Whether the transaction holds the advisory lock of `space` since its start.
    pub(in crate::store) fn holds_lock(&self, space: i32) -> bool {
        self.mode == Mode::Transaction { lock: Some(space) }
    }

    fn in_transaction(&self) -> bool {
        self.mode != Mode::Autocommit
    }

    /// Commits (when in a transaction) and gives the connection back.
    pub async fn commit(mut self) -> StoreResult<()> {
        if self.in_transaction() {
            // A failed or cancelled commit leaves the connection to `Drop`.
            let conn: &mut PgConnection = &mut self;
            conn.execute("COMMIT").await?;
        }
        self.give_back();
        Ok(())
    }

    /// Rolls back (when in a transaction) and gives the connection back.
    pub async fn rollback(mut self) -> StoreResult<()> {
        if self.in_transaction() {
            let conn: &mut PgConnection = &mut self;
            conn.execute("ROLLBACK").await?;
        }
        self.give_back();
        Ok(())
    }

    fn give_back(&mut self) {
        if let Some((conn, tenant)) = self.conn.take() {
            self.shared.put(conn, tenant);
        }
        self.permit.take();
    }
}

impl Deref for TenantTx {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn.as_ref().expect("a live tenant connection").0
    }
}

impl DerefMut for TenantTx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn.as_mut().expect("a live tenant connection").0
    }
}

impl Drop for TenantTx {
    fn drop(&mut self) {
        let Some((mut conn, tenant)) = self.conn.take() else {
            return;
        };
        // Not committed: an error, or the caller was cancelled (perhaps mid-statement). The
        // connection keeps its slot until it is known to be usable again.
        let permit = self.permit.take();
        let shared = self.shared.clone();
        let in_transaction = self.in_transaction();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let recovered = tokio::time::timeout(RECOVERY_TIMEOUT, async {
                if in_transaction {
                    conn.execute("ROLLBACK").await.map(drop)
                } else {
                    conn.ping().await
                }
            })
            .await;
            match recovered {
                Ok(Ok(())) => shared.put(conn, tenant),
                _ => {
                    close_in_background(conn);
                    shared.forget_idle();
                }
            }
            drop(permit);
        });
    }
}
