//! Replicas on Postgres.

use super::*;
use crate::store::dialect::postgres::{Incoming, notify};
use crate::store::dialect::{lease_span, now};
use crate::store::postgres::PgStore;
use crate::store::*;
use sqlx::Row;

// --- signals between replicas ---
pub(in crate::store) async fn signals(
    store: &PgStore,
) -> StoreResult<Option<tokio::sync::mpsc::UnboundedReceiver<Signal>>> {
    let mut listener = store.listen().await?;
    store.budgets.listening(true);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let store = store.clone();
    tokio::spawn(async move {
        // However this task ends, nobody hears budget changes any more.
        let _deaf = Deaf(store.budgets.clone());
        loop {
            // Signals sent while the connection is down are lost: after reconnecting, the
            // runtime is told (`Reconnected`) and reconciles from the store.
            match listener.try_recv().await {
                Ok(Some(notification)) => {
                    match serde_json::from_str::<Incoming>(notification.payload()) {
                        Ok(incoming) if !incoming.concerns(&store.origin) => {}
                        Ok(Incoming {
                            signal: Signal::Reconnected,
                            ..
                        }) => {}
                        Ok(Incoming {
                            signal: Signal::BudgetChanged { tenant },
                            ..
                        }) => store.budgets.forget(&tenant),
                        Ok(Incoming { signal, .. }) => {
                            if tx.send(signal).is_err() {
                                return; // nobody follows the signals any more
                            }
                        }
                        Err(error) => tracing::warn!(%error, "malformed signal"),
                    }
                }
                lost => {
                    // The tenant connections talk to the same server: the idle ones are as
                    // dead as this one (see `store::pg_conns`).
                    store.tenants.forget_idle();
                    store.budgets.listening(false);
                    if let Err(error) = lost {
                        tracing::warn!(%error, "signal listener failed; reconnecting");
                    } else {
                        tracing::warn!("signal listener lost its connection; reconnecting");
                    }
                    let mut pause = std::time::Duration::from_millis(100);
                    listener = loop {
                        if tx.is_closed() {
                            return;
                        }
                        match store.listen().await {
                            Ok(listener) => break listener,
                            Err(error) => {
                                tracing::debug!(%error, "signal listener cannot reconnect yet");
                                tokio::time::sleep(pause).await;
                                pause = (pause * 2).min(std::time::Duration::from_secs(1));
                            }
                        }
                    };
                    tracing::info!("signal listener reconnected; reconciling from the store");
                    store.budgets.listening(true);
                    if tx.send(Signal::Reconnected).is_err() {
                        return;
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Ok(Some(rx))
}

/// Stops the keeping of budget rows when dropped (the listener's task ended).
struct Deaf(std::sync::Arc<crate::store::budgets::cache::BudgetCache>);

impl Drop for Deaf {
    fn drop(&mut self) {
        self.0.listening(false);
    }
}

pub(in crate::store) async fn signal(store: &PgStore, signal: Signal) -> StoreResult<()> {
    let mut conn = store.pool.acquire().await?;
    notify(&mut conn, &store.origin, &signal).await
}

pub(in crate::store) async fn register_replica(
    store: &PgStore,
    name: &str,
    workspace_storage: &str,
) -> StoreResult<()> {
    // System-level (login role), like the heartbeat.
    sqlx::query(
        "INSERT INTO replicas (name, workspace_storage, heartbeat_at) VALUES ($1, $2, $3) \
         ON CONFLICT (name) DO UPDATE SET workspace_storage = excluded.workspace_storage, \
         heartbeat_at = excluded.heartbeat_at",
    )
    .bind(name)
    .bind(workspace_storage)
    .bind(now())
    .execute(&store.pool)
    .await?;
    Ok(())
}

pub(in crate::store) async fn live_replicas(
    store: &PgStore,
    within: Duration,
) -> StoreResult<Vec<ReplicaRecord>> {
    let rows = sqlx::query(
        "SELECT name, workspace_storage, heartbeat_at FROM replicas \
         WHERE heartbeat_at >= $1 ORDER BY name",
    )
    .bind(now() - lease_span(within))
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(ReplicaRecord {
                name: row.try_get("name")?,
                workspace_storage: row.try_get("workspace_storage")?,
                heartbeat_at: row.try_get("heartbeat_at")?,
            })
        })
        .collect()
}
