//! Outbound webhooks on SQLite. The store is this process's alone, so it keeps, in memory,
//! which tenants have subscriptions ([`Outbox`]): an append of a tenant with none writes no
//! outbox statement at all; one with some writes one `INSERT … SELECT` per notice, in the
//! append's transaction. The one writer connection claims due deliveries.

use crate::store::sqlite::{SqliteStore, parse_ts, ts};
use crate::store::*;
use crate::webhooks::{DeliveryAttempt, DeliveryStatus, Notice, WebhookEvent};
use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection, SqlitePool};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the SQLite store knows about the outbox in memory.
#[derive(Default)]
pub(in crate::store) struct Outbox {
    /// Subscriptions per tenant (tenants with none are absent).
    subscribed: Mutex<HashMap<String, u64>>,
    /// Set when a write put rows into the outbox; the writer wakes the worker after its
    /// commit.
    written: AtomicBool,
    pub(in crate::store) wakeup: Arc<tokio::sync::Notify>,
}

impl Outbox {
    /// Reads which tenants have subscriptions.
    pub(in crate::store) async fn load(pool: &SqlitePool) -> StoreResult<Self> {
        let rows = sqlx::query(
            "SELECT tenant_id, count(*) AS n FROM webhook_subscriptions GROUP BY tenant_id",
        )
        .fetch_all(pool)
        .await?;
        let mut subscribed = HashMap::new();
        for row in rows {
            subscribed.insert(
                row.try_get::<String, _>("tenant_id")?,
                row.try_get::<i64, _>("n")?.max(0) as u64,
            );
        }
        Ok(Self {
            subscribed: Mutex::new(subscribed),
            ..Self::default()
        })
    }

    fn has(&self, tenant: &TenantId) -> bool {
        self.subscribed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(tenant.as_str())
    }

    fn adjust(&self, tenant: &TenantId, up: bool) {
        let mut subscribed = self.subscribed.lock().unwrap_or_else(|e| e.into_inner());
        let count = subscribed.entry(tenant.as_str().to_owned()).or_insert(0);
        if up {
            *count += 1;
        } else {
            *count = count.saturating_sub(1);
            if *count == 0 {
                subscribed.remove(tenant.as_str());
            }
        }
    }

    /// Wakes the worker when a write since the last call put rows into the outbox (called
    /// after commits; a rolled-back write only costs the worker one empty claim).
    pub(in crate::store) fn wake_if_written(&self) {
        if self.written.swap(false, Ordering::SeqCst) {
            self.wakeup.notify_one();
        }
    }

    /// [`Outbox::insert_sync`] through sqlx, in the caller's transaction.
    pub(in crate::store) async fn insert(
        &self,
        conn: &mut SqliteConnection,
        tenant: &TenantId,
        session: &SessionId,
        at: &str,
        notices: &[Notice],
    ) -> StoreResult<()> {
        if notices.is_empty() || !self.has(tenant) {
            return Ok(());
        }
        for notice in notices {
            let written = sqlx::query(OUTBOX_INSERT)
                .bind(tenant.as_str())
                .bind(session.as_str())
                .bind(notice.event.as_str())
                .bind(&notice.body)
                .bind(at)
                .bind(format!(",{},", notice.event.as_str()))
                .execute(&mut *conn)
                .await?
                .rows_affected();
            if written > 0 {
                self.written.store(true, Ordering::SeqCst);
            }
        }
        Ok(())
    }

    /// Writes one outbox row per notice and subscription of the tenant (or the session) to
    /// the notice's event, in the caller's transaction (the group writer's synchronous
    /// connection); nothing when the tenant has none.
    pub(in crate::store) fn insert_sync(
        &self,
        db: &rusqlite::Connection,
        tenant: &TenantId,
        session: &SessionId,
        at: &str,
        notices: &[Notice],
    ) -> StoreResult<()> {
        if notices.is_empty() || !self.has(tenant) {
            return Ok(());
        }
        let mut insert = db.prepare_cached(OUTBOX_INSERT)?;
        for notice in notices {
            let written = insert.execute(rusqlite::params![
                tenant.as_str(),
                session.as_str(),
                notice.event.as_str(),
                notice.body,
                at,
                format!(",{},", notice.event.as_str()),
            ])?;
            if written > 0 {
                self.written.store(true, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}

/// One outbox row per subscription of tenant `?1` (or its session `?2`) to event `?3`.
const OUTBOX_INSERT: &str = "INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, \
         session_id, event_type, body, next_attempt_at, created_at) \
     SELECT 'msg_' || lower(hex(randomblob(16))), ?1, s.id, ?2, ?3, ?4, ?5, ?5 \
     FROM webhook_subscriptions s WHERE s.tenant_id = ?1 \
         AND (s.session_id IS NULL OR s.session_id = ?2) AND instr(s.events, ?6) > 0";

const WEBHOOK_COLUMNS: &str = "id, session_id, url, events, created_at";

fn webhook_from_row(row: &SqliteRow) -> StoreResult<WebhookRecord> {
    let names: String = row.try_get("events")?;
    Ok(WebhookRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        url: row.try_get("url")?,
        events: names.split(',').filter_map(WebhookEvent::parse).collect(),
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
    })
}

const DELIVERY_COLUMNS: &str = "position, id, webhook_id, session_id, event_type, status, \
     attempts, created_at, next_attempt_at, delivered_at, attempt_log";

fn delivery_from_row(row: &SqliteRow) -> StoreResult<DeliveryRecord> {
    let status: String = row.try_get("status")?;
    let status = DeliveryStatus::parse(&status)
        .ok_or_else(|| StoreError::Internal(format!("unknown delivery status {status}")))?;
    let log: String = row.try_get("attempt_log")?;
    Ok(DeliveryRecord {
        id: row.try_get("id")?,
        position: row.try_get("position")?,
        webhook_id: row.try_get("webhook_id")?,
        session_id: row.try_get("session_id")?,
        event_type: row.try_get("event_type")?,
        status,
        attempts: row.try_get::<i64, _>("attempts")?.max(0) as u32,
        created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
        next_attempt_at: match status {
            DeliveryStatus::Pending => {
                Some(parse_ts(&row.try_get::<String, _>("next_attempt_at")?)?)
            }
            DeliveryStatus::Delivered | DeliveryStatus::Failed => None,
        },
        delivered_at: row
            .try_get::<Option<String>, _>("delivered_at")?
            .as_deref()
            .map(parse_ts)
            .transpose()?,
        attempt_log: serde_json::from_str::<Vec<DeliveryAttempt>>(&log)
            .map_err(|error| StoreError::Internal(format!("bad attempt log: {error}")))?,
    })
}

impl SqliteStore {
    pub(in crate::store) async fn create_webhook_tx(
        &self,
        tenant: &TenantId,
        webhook: NewWebhook,
        caps: WebhookCaps,
    ) -> StoreResult<Result<WebhookRecord, WebhookCapReached>> {
        // The one writer connection serializes this check with every other write.
        let mut turn = self.writer().sqlx().await?;
        let mut tx = turn.begin().await?;
        let (count, cap) = match &webhook.session {
            Some(session) => {
                sqlx::query("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?")
                    .bind(session.as_str())
                    .bind(tenant.as_str())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                let count: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM webhook_subscriptions \
                     WHERE tenant_id = ? AND session_id = ?",
                )
                .bind(tenant.as_str())
                .bind(session.as_str())
                .fetch_one(&mut *tx)
                .await?;
                (
                    count,
                    WebhookCapReached {
                        max: caps.per_session,
                        scope: "per session",
                    },
                )
            }
            None => {
                let count: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM webhook_subscriptions \
                     WHERE tenant_id = ? AND session_id IS NULL",
                )
                .bind(tenant.as_str())
                .fetch_one(&mut *tx)
                .await?;
                (
                    count,
                    WebhookCapReached {
                        max: caps.per_tenant,
                        scope: "per tenant",
                    },
                )
            }
        };
        if count >= i64::from(cap.max) {
            return Ok(Err(cap));
        }
        let events: Vec<&str> = webhook.events.iter().map(|e| e.as_str()).collect();
        let row = sqlx::query(&format!(
            "INSERT INTO webhook_subscriptions (id, tenant_id, session_id, url, events, secret, \
                 created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {WEBHOOK_COLUMNS}"
        ))
        .bind(&webhook.id)
        .bind(tenant.as_str())
        .bind(webhook.session.as_ref().map(|s| s.as_str()))
        .bind(&webhook.url)
        .bind(format!(",{},", events.join(",")))
        .bind(&webhook.secret)
        .bind(ts(Utc::now()))
        .fetch_one(&mut *tx)
        .await?;
        let record = webhook_from_row(&row)?;
        // Counted before the commit: an append committed right after it must see the
        // tenant as subscribed (counting a subscription that then fails to commit only costs
        // appends an empty `INSERT … SELECT` until it is undone below).
        self.outbox().adjust(tenant, true);
        if let Err(error) = tx.commit().await {
            self.outbox().adjust(tenant, false);
            return Err(error.into());
        }
        Ok(Ok(record))
    }

    pub(in crate::store) async fn list_webhooks_tx(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> StoreResult<Vec<WebhookRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhook_subscriptions \
             WHERE tenant_id = ? AND session_id IS ? ORDER BY created_at, id"
        ))
        .bind(tenant.as_str())
        .bind(session.map(|s| s.as_str()))
        .fetch_all(self.reader())
        .await?;
        rows.iter().map(webhook_from_row).collect()
    }

    pub(in crate::store) async fn get_webhook_tx(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> StoreResult<Option<WebhookRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhook_subscriptions WHERE id = ? AND tenant_id = ?"
        ))
        .bind(id)
        .bind(tenant.as_str())
        .fetch_optional(self.reader())
        .await?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    pub(in crate::store) async fn delete_webhook_tx(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> StoreResult<bool> {
        let mut turn = self.writer().sqlx().await?;
        let mut tx = turn.begin().await?;
        let deleted =
            sqlx::query("DELETE FROM webhook_subscriptions WHERE id = ? AND tenant_id = ?")
                .bind(id)
                .bind(tenant.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
        tx.commit().await?;
        if deleted == 1 {
            self.outbox().adjust(tenant, false);
        }
        Ok(deleted == 1)
    }

    pub(in crate::store) async fn list_deliveries_tx(
        &self,
        tenant: &TenantId,
        webhook: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE tenant_id = ? AND webhook_id = ? AND position < ? \
             ORDER BY position DESC LIMIT ?"
        ))
        .bind(tenant.as_str())
        .bind(webhook)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(self.reader())
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }

    pub(in crate::store) async fn claim_deliveries(
        &self,
        lease: Duration,
        limit: u32,
    ) -> StoreResult<Vec<DueDelivery>> {
        let now = Utc::now();
        let mut turn = self.writer().sqlx().await?;
        let mut tx = turn.begin().await?;
        let claimed = sqlx::query(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, lease_until = ?1 \
             WHERE position IN ( \
                 SELECT position FROM webhook_deliveries \
                 WHERE status = 'pending' AND next_attempt_at <= ?2 \
                     AND (lease_until IS NULL OR lease_until <= ?2) \
                 ORDER BY next_attempt_at LIMIT ?3) \
             RETURNING id, tenant_id, webhook_id, session_id, event_type, body, attempts, \
                 created_at",
        )
        .bind(ts(now + crate::store::dialect::lease_span(lease)))
        .bind(ts(now))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        let mut due = Vec::with_capacity(claimed.len());
        for row in &claimed {
            let webhook: String = row.try_get("webhook_id")?;
            let Some(target) =
                sqlx::query("SELECT url, secret FROM webhook_subscriptions WHERE id = ?")
                    .bind(&webhook)
                    .fetch_optional(&mut *tx)
                    .await?
            else {
                continue;
            };
            due.push(DueDelivery {
                id: row.try_get("id")?,
                tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
                webhook_id: webhook,
                session_id: row.try_get("session_id")?,
                event_type: row.try_get("event_type")?,
                body: row.try_get("body")?,
                attempt: row.try_get::<i64, _>("attempts")?.max(0) as u32,
                created_at: parse_ts(&row.try_get::<String, _>("created_at")?)?,
                url: target.try_get("url")?,
                secret: target.try_get("secret")?,
            });
        }
        tx.commit().await?;
        Ok(due)
    }

    pub(in crate::store) async fn finish_attempt(&self, result: &AttemptResult) -> StoreResult<()> {
        let log = serde_json::to_string(&result.log)
            .map_err(|error| StoreError::Internal(error.to_string()))?;
        let mut turn = self.writer().sqlx().await?;
        let mut tx = turn.begin().await?;
        sqlx::query(
            "UPDATE webhook_deliveries SET status = ?2, \
                 next_attempt_at = COALESCE(?3, next_attempt_at), lease_until = NULL, \
                 delivered_at = CASE WHEN ?2 = 'delivered' THEN ?4 END, \
                 attempt_log = json_insert(attempt_log, '$[#]', json(?5)) \
             WHERE id = ?1 AND attempts = ?6 AND status = 'pending'",
        )
        .bind(&result.delivery_id)
        .bind(result.status.as_str())
        .bind(result.next_attempt_at.map(ts))
        .bind(ts(result.log.at))
        .bind(log)
        .bind(i64::from(result.log.attempt))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(in crate::store) async fn next_due(&self) -> StoreResult<Option<DateTime<Utc>>> {
        let next: Option<String> = sqlx::query_scalar(
            "SELECT min(max(next_attempt_at, COALESCE(lease_until, next_attempt_at))) \
             FROM webhook_deliveries WHERE status = 'pending'",
        )
        .fetch_one(self.reader())
        .await?;
        next.as_deref().map(parse_ts).transpose()
    }

    pub(in crate::store) async fn purge_deliveries(
        &self,
        before: DateTime<Utc>,
    ) -> StoreResult<u64> {
        let mut turn = self.writer().sqlx().await?;
        let mut tx = turn.begin().await?;
        let purged = sqlx::query(
            "DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < ?",
        )
        .bind(ts(before))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(purged)
    }
}
