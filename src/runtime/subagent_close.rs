//! Closing a session closes its subagent sessions, recursively: each is closed in the store
//! (it stops counting against the tenant's `sessions`), its run is cancelled and its
//! background work stopped, like a `DELETE` of it would — without SessionEnd hooks, which
//! run for the top-level session only. The subagents are found through the parent's
//! `subagent_started` events.

use super::SessionRuntime;
use super::subagent_usage::children_of;
use crate::ids::{RunId, SessionId, TenantId};
use crate::subagents::MAX_DEPTH;
use futures::future::BoxFuture;

impl SessionRuntime {
    /// Closes every subagent session `session`'s runs started, and theirs.
    pub async fn close_subagents(&self, tenant: &TenantId, session: &SessionId) {
        self.close_children(tenant, session, 0).await;
    }

    /// Closes one subagent session (its run cancelled) and its own subagents.
    pub async fn close_subagent(&self, tenant: &TenantId, child: &SessionId, run: Option<&RunId>) {
        self.close_child(tenant, child, run, 1).await;
    }

    fn close_children<'a>(
        &'a self,
        tenant: &'a TenantId,
        session: &'a SessionId,
        depth: u8,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if depth >= MAX_DEPTH {
                return;
            }
            let children = match children_of(self.store.as_ref(), tenant, session).await {
                Ok(children) => children,
                Err(error) => {
                    tracing::warn!(%error, session_id = %session, "cannot list the subagents to close");
                    return;
                }
            };
            for (child, run) in children {
                self.close_child(tenant, &child, Some(&run), depth + 1)
                    .await;
            }
        })
    }

    fn close_child<'a>(
        &'a self,
        tenant: &'a TenantId,
        child: &'a SessionId,
        run: Option<&'a RunId>,
        depth: u8,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match self.store.close_session(tenant, child).await {
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(%error, session_id = %child, "cannot close a subagent session");
                    return;
                }
            }
            // Its run, wherever it runs (a parked or remote run included); then what this
            // replica holds for it.
            if let Some(run) = run
                && let Err(error) = self.cancel(tenant, child, run).await
            {
                tracing::debug!(%error, run_id = %run, "subagent run already over");
            }
            self.close(tenant, child).await;
            self.close_children(tenant, child, depth).await;
        })
    }
}
