//! Idle expiry: sessions idle past `session_idle_expiry_seconds` are closed.

use super::SessionRuntime;
use crate::run_event::{RunEvent, SessionExpired};
use crate::store::{Store, StoreError};
use std::sync::Arc;

/// Closes open sessions idle for `seconds` (not running anything): their background work is
/// stopped, a `session_expired` event is recorded and SessionEnd hooks are started with reason
/// `expired` (the sweep does not wait for them).
pub async fn expire_idle_sessions(
    store: &Arc<dyn Store>,
    runtime: &Arc<SessionRuntime>,
    seconds: u64,
) -> Result<usize, StoreError> {
    let idle_before = chrono::Utc::now() - chrono::Duration::seconds(seconds as i64);
    let mut expired = 0;
    for session in store.list_idle_sessions(idle_before, 100).await? {
        if runtime.is_busy(&session.id) {
            continue;
        }
        let Some(closed) = store.close_session(&session.tenant, &session.id).await? else {
            continue;
        };
        runtime.close(&session.tenant, &session.id).await;
        if crate::subagents::defines_agents(&closed.config) {
            runtime.close_subagents(&session.tenant, &session.id).await;
        }
        let written = store
            .append(
                &session.tenant,
                &session.id,
                crate::store::AppendBatch {
                    events: vec![
                        RunEvent::SessionExpired(SessionExpired {
                            idle_seconds: seconds,
                        })
                        .into_row(None),
                    ],
                    ..Default::default()
                },
            )
            .await?;
        // Live subscribers on this replica see it at once (on SQLite there is no other way;
        // on Postgres the notification of the same seq is then a duplicate the bus drops).
        runtime.bus().publish(&session.id, written.events);
        // A subagent's session runs no SessionEnd hooks (its top-level session does). The
        // hooks run on a task of their own: one tenant's hook that answers slowly (up to its
        // timeout, 32 hooks of 10 minutes) must not hold up the sweep, and with it every
        // other tenant's expiry. Each task ends within its hooks' timeouts; there is at most
        // one per expired session.
        if closed.config.get("subagent").is_none() {
            let runtime = runtime.clone();
            tokio::spawn(async move {
                runtime
                    .session_hooks(
                        &closed,
                        crate::hooks::HookPayload::SessionEnd {
                            reason: "expired".into(),
                        },
                    )
                    .await;
            });
        }
        tracing::info!(session_id = %session.id, tenant = %session.tenant, "idle session expired");
        expired += 1;
    }
    Ok(expired)
}
