//! `snapshot` workspace storage in the runtime: before a run of a session goes on (a new
//! prompt, a resume after a crash or restart, a takeover, a parked run answered), the
//! session's workspace is brought to its head snapshot (see [`crate::workspace_snapshot`]);
//! snapshots after mutating calls are taken by the run's host ([`super::host::StoreHost`]).

use super::{RuntimeError, SessionEnv, SessionRuntime};
use crate::ids::{SessionId, TenantId};
use crate::workspace_snapshot::SnapshotError;
use std::time::Duration;

/// Attempts of a restore that failed on the object store (it may be a passing outage).
const RESTORE_ATTEMPTS: u32 = 3;

impl SessionRuntime {
    /// Restores the session's head snapshot unless the local copy is known to be it.
    pub(super) async fn restore_workspace(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        env: &SessionEnv,
    ) -> Result<(), RuntimeError> {
        let Some(snapshots) = &env.snapshots else {
            return Ok(());
        };
        let head = self.store.workspace_snapshot(tenant, session).await?;
        let max_bytes = self.settings.limits.workspace_bytes;
        let mut attempt = 0;
        let restored = loop {
            attempt += 1;
            match snapshots.restore(head.as_deref(), max_bytes).await {
                Err(SnapshotError::Store(error)) if attempt < RESTORE_ATTEMPTS => {
                    tracing::warn!(%error, session_id = %session, "workspace restore failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                }
                other => break other,
            }
        };
        match restored {
            Ok(None) => Ok(()),
            Ok(Some(restored)) => {
                if restored.written + restored.removed > 0 {
                    tracing::info!(
                    session_id = %session,
                    tenant = %tenant,
                    snapshot = head.as_deref().unwrap_or("none"),
                    written = restored.written,
                    removed = restored.removed,
                    "restored the session's workspace from its snapshot"
                    );
                }
                if let Err(error) = self
                    .store
                    .record_workspace_bytes(tenant, session, restored.bytes)
                    .await
                {
                    tracing::warn!(%error, "cannot record workspace usage");
                }
                Ok(())
            }
            Err(error) => Err(RuntimeError::Setup(format!(
                "cannot restore the session's workspace from its snapshot: {error}"
            ))),
        }
    }
}
