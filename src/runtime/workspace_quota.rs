//! The tenant's workspace quota (`limits.workspace_bytes`): per-file limits cannot cap a
//! directory, so after every mutating tool call (Bash, file writes, task and shell starts …)
//! the session's workspace and its background-task logs are measured by a bounded walk and
//! the bytes are stored per session (task logs count inside the quota); the tenant's usage is
//! the sum over its open sessions. At or over the quota every further mutating call answers
//! `WORKSPACE_QUOTA_EXCEEDED` (read-only calls still run); the tenant gets room back by
//! closing sessions. One call may overshoot by what it writes itself, and background tasks
//! are measured at the session's next mutating call.
//!
//! A measurement is stored with the run's next write (the turn's commit that carries the
//! call's result, or the run's lingering write), not in a transaction of its own; the session's next
//! mutating call writes a measurement still waiting before it reads the tenant's usage, so it
//! is judged on every byte its session's earlier calls left.

use super::session_writer::SessionWriter;
use crate::ids::{SessionId, TenantId};
use crate::limits::{Limit, TenantLimits};
use crate::store::Store;
use crate::tools::pipeline::MutationQuota;
use crate::tools::{ToolError, codes};
use async_trait::async_trait;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Entries one measurement visits at most; a workspace with more counts as full.
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// The quota of one session's run.
pub struct WorkspaceQuota {
    pub store: Arc<dyn Store>,
    pub tenant: TenantId,
    pub session: SessionId,
    pub workspace: PathBuf,
    /// The session's background-task logs (server-owned, outside the workspace).
    pub task_logs: PathBuf,
    pub limits: TenantLimits,
    /// The run's writer: measurements go with its next write.
    pub writer: Arc<SessionWriter>,
}

/// Bytes of regular files under `root`, symlinks not followed; `None` past `max_entries`.
pub fn measure(root: &Path, max_entries: usize) -> Option<u64> {
    let mut bytes = 0u64;
    let mut entries = 0usize;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in listing.flatten() {
            entries += 1;
            if entries > max_entries {
                return None;
            }
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.is_file() {
                bytes = bytes.saturating_add(meta.len());
            }
        }
    }
    Some(bytes)
}

#[async_trait]
impl MutationQuota for WorkspaceQuota {
    async fn admit(&self, _tool_name: &str) -> Result<(), ToolError> {
        let unavailable = |error: &dyn std::fmt::Display| {
            tracing::warn!(%error, "cannot read workspace usage");
            ToolError::new(codes::TOOL_FAILED, "the store is unavailable; try again")
        };
        if self.writer.workspace_bytes_pending() {
            self.writer
                .write(vec![], vec![])
                .await
                .map_err(|error| unavailable(&error.0))?;
        }
        let used = self
            .store
            .workspace_bytes(&self.tenant)
            .await
            .map_err(|error| unavailable(&error))?;
        self.limits
            .check(Limit::WorkspaceBytes, used)
            .map_err(|exceeded| {
                ToolError::new(
                    codes::WORKSPACE_QUOTA_EXCEEDED,
                    format!(
                        "the tenant's workspaces hold {used} bytes, at or over the quota of {} \
                         bytes: free space (close sessions) before writing more",
                        exceeded.max
                    ),
                )
            })
    }

    async fn account(&self, _tool_name: &str) {
        let (root, logs) = (self.workspace.clone(), self.task_logs.clone());
        let measured = tokio::task::spawn_blocking(move || {
            let workspace = measure(&root, MAX_WALK_ENTRIES)?;
            Some(workspace.saturating_add(measure(&logs, MAX_WALK_ENTRIES)?))
        })
        .await;
        let bytes = match measured {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                tracing::warn!(session_id = %self.session, "workspace has too many entries to measure; counted as full");
                self.limits.workspace_bytes
            }
            Err(error) => {
                tracing::warn!(%error, "workspace measurement failed");
                return;
            }
        };
        self.writer.push_workspace_bytes(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_sums_files_without_following_symlinks_and_stops_at_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![0u8; 24]).unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        assert_eq!(measure(dir.path(), 100), Some(1024));
        assert_eq!(measure(dir.path(), 2), None);
    }
}
