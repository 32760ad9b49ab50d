//! Replicas sharing the store: the registry of live replicas and the signals they send each
//! other.

use crate::ids::{RunId, SessionId, TenantId};

pub(in crate::store) mod postgres;
pub(in crate::store) mod sqlite;

/// A change made by one replica that the others sharing the store may need to act on.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "signal", rename_all = "snake_case")]
pub enum Signal {
    /// Events `first..=last` of a session were committed.
    Events {
        tenant: TenantId,
        session: SessionId,
        first: i64,
        last: i64,
    },
    /// An approval was decided (by REST, webhook or the system).
    ApprovalDecided { id: String },
    /// A grant was revoked: runs of other replicas that hold it in force withdraw it.
    GrantRevoked { id: String },
    /// The replica running `run` should cancel it.
    CancelRun { session: SessionId, run: RunId },
    /// A stopping replica released the leases of its unfinished runs: live replicas take them
    /// over now instead of at their next sweep.
    RunsReleased { replica: String },
    /// A replica started (and registered): the others send it their `events` signals from
    /// now on, even if they believed they were alone (see [`super::Store::set_other_replicas`]).
    ReplicaStarted { replica: String },
    /// The operator changed a tenant's budget. The store acts on it itself (it keeps budget
    /// rows while it hears every change); the runtime has nothing to do.
    BudgetChanged { tenant: TenantId },
    /// Local only (never sent by a replica): the listening connection was lost and is back,
    /// so signals sent meanwhile may be missing and the replica reconciles from the store.
    Reconnected,
}

/// A replica in the registry (see [`Store::register_replica`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaRecord {
    pub name: String,
    /// `local`, `shared` or `snapshot` (`workspace.storage`).
    pub workspace_storage: String,
    pub heartbeat_at: chrono::DateTime<chrono::Utc>,
}
