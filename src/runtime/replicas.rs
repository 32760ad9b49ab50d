//! The replica registry: every replica records its name, how it stores workspaces
//! (`workspace.storage`) and a heartbeat in the store (at start-up and on every lease
//! heartbeat). With `local` storage a run taken over by another replica does not find the
//! files its calls wrote, so a replica warns at start-up when it sees another live replica
//! (a heartbeat within three lease periods) and either of them stores workspaces locally.
//!
//! The registry also tells the store whether other replicas share it (at start-up and on
//! every lease heartbeat): a Postgres store alone sends no `events` signal per append, since
//! nobody would hear it. A replica that starts announces itself ([`Signal::ReplicaStarted`]),
//! so the others send their signals again at once rather than at their next heartbeat; its SSE
//! clients catch up from the store on its reconcile meanwhile (signals are advisory).

use super::SessionRuntime;
use crate::config::WorkspaceStorage;
use crate::store::{ReplicaRecord, Signal, StoreResult};
use std::sync::atomic::Ordering;

/// The warning for `others` (live replicas other than this one), if any applies.
pub fn local_storage_warning(this: WorkspaceStorage, others: &[ReplicaRecord]) -> Option<String> {
    let local = WorkspaceStorage::Local.as_str();
    let clashing: Vec<String> = others
        .iter()
        .filter(|other| this == WorkspaceStorage::Local || other.workspace_storage == local)
        .map(|other| format!("{} ({})", other.name, other.workspace_storage))
        .collect();
    (!clashing.is_empty()).then(|| {
        format!(
            "other replicas share this store ({}) and workspaces are not shared by all of them: \
             a run taken over by another replica will not find its files; set \
             workspace.storage = \"shared\" or \"snapshot\" on every replica (README \
             \"Deployment\")",
            clashing.join(", ")
        )
    })
}

impl SessionRuntime {
    /// Records this replica as alive in the registry (a failure is logged, not fatal).
    pub(super) async fn register_replica(&self) {
        let storage = self.settings.workspace_storage.as_str();
        if let Err(error) = self
            .store
            .register_replica(&self.settings.replica_id, storage)
            .await
        {
            tracing::warn!(%error, "cannot record this replica in the replica registry");
        }
    }

    /// Registers this replica, warns when another live replica and `local` storage meet, and
    /// announces this replica to the others.
    pub(super) async fn check_replicas(&self) {
        self.register_replica().await;
        match self.other_replicas().await {
            Ok(others) => {
                if let Some(warning) =
                    local_storage_warning(self.settings.workspace_storage, &others)
                {
                    tracing::warn!("{warning}");
                }
            }
            Err(error) => tracing::warn!(%error, "cannot read the replica registry"),
        }
        let started = Signal::ReplicaStarted {
            replica: self.settings.replica_id.clone(),
        };
        if let Err(error) = self.store.signal(started).await {
            tracing::warn!(%error, "cannot announce this replica to the others");
        }
    }

    /// This replica's heartbeat in the registry, and whether others share the store.
    pub(super) async fn heartbeat_replica(&self) {
        self.register_replica().await;
        if let Err(error) = self.other_replicas().await {
            tracing::debug!(%error, "cannot read the replica registry");
        }
    }

    /// Another replica announced itself: the store signals again.
    pub(super) fn replica_started(&self) {
        self.replicas_started.fetch_add(1, Ordering::SeqCst);
        self.store.set_other_replicas(true);
    }

    /// The live replicas other than this one; tells the store whether there are any (when the
    /// registry cannot be read: that there may be). A replica announced while the registry was
    /// being read may be missing from what was read (it registered after the read): then the
    /// store keeps signalling.
    async fn other_replicas(&self) -> StoreResult<Vec<ReplicaRecord>> {
        let started_before = self.replicas_started.load(Ordering::SeqCst);
        let live = self.store.live_replicas(self.settings.run_lease * 3).await;
        let announced_meanwhile = self.replicas_started.load(Ordering::SeqCst) != started_before;
        let others: Vec<ReplicaRecord> = live
            .as_ref()
            .map(|live| {
                live.iter()
                    .filter(|replica| replica.name != self.settings.replica_id)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        self.store
            .set_other_replicas(live.is_err() || !others.is_empty() || announced_meanwhile);
        live.map(|_| others)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str, storage: &str) -> ReplicaRecord {
        ReplicaRecord {
            name: name.into(),
            workspace_storage: storage.into(),
            heartbeat_at: chrono::Utc::now(),
        }
    }

    #[test]
    fn local_storage_next_to_another_replica_is_warned_about() {
        assert_eq!(local_storage_warning(WorkspaceStorage::Local, &[]), None);
        assert_eq!(
            local_storage_warning(WorkspaceStorage::Shared, &[replica("b", "shared")]),
            None
        );
        let warning =
            local_storage_warning(WorkspaceStorage::Local, &[replica("b", "shared")]).unwrap();
        assert!(warning.contains("b (shared)"), "{warning}");
        let warning =
            local_storage_warning(WorkspaceStorage::Shared, &[replica("c", "local")]).unwrap();
        assert!(warning.contains("c (local)"), "{warning}");
    }
}
