//! Outbound webhooks on SQLite. The store is this process's alone, so it keeps, in memory,
//! which tenants have subscriptions ([`Outbox`]): an append of a tenant with none writes no
//! outbox statement at all; one with some writes one `INSERT … SELECT` per notice, in the
//! append's transaction. The one writer connection claims due deliveries.

use crate::store::sqlite::{SqliteStore, parse_ts, ts};
use crate::store::*;
use crate::webhooks::{DeliveryAttempt, DeliveryStatus, Notice, WebhookEvent};
use chrono::{DateTime, Utc};
use rusqlite::OptionalExtension;
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
        shares: &DeliveryShares,
    ) -> StoreResult<Vec<DueDelivery>> {
        let at = Utc::now();
        let now = ts(at);
        let until = ts(at + crate::store::dialect::lease_span(lease));
        self.writer()
            .transaction(|db| {
                let picked = pick_due(db, &now, limit, shares)?;
                if picked.is_empty() {
                    return Ok(Vec::new());
                }
                let positions = serde_json::to_string(&picked)
                    .map_err(|error| StoreError::Internal(error.to_string()))?;
                let mut target = db
                    .prepare_cached("SELECT url, secret FROM webhook_subscriptions WHERE id = ?")?;
                let mut claim = db.prepare_cached(CLAIM)?;
                let mut rows = claim.query(rusqlite::params![until, positions])?;
                let mut due = Vec::with_capacity(picked.len());
                while let Some(row) = rows.next()? {
                    let webhook_id: String = row.get("webhook_id")?;
                    let Some((url, secret)) = target
                        .query_row([&webhook_id], |row| Ok((row.get(0)?, row.get(1)?)))
                        .optional()?
                    else {
                        continue;
                    };
                    due.push(DueDelivery {
                        id: row.get("id")?,
                        tenant: TenantId::new(row.get::<_, String>("tenant_id")?),
                        webhook_id,
                        session_id: row.get("session_id")?,
                        event_type: row.get("event_type")?,
                        body: row.get("body")?,
                        attempt: row.get::<_, i64>("attempts")?.max(0) as u32,
                        created_at: parse_ts(&row.get::<_, String>("created_at")?)?,
                        url,
                        secret,
                    });
                }
                Ok(due)
            })
            .await
    }

    pub(in crate::store) async fn trim_backlogs(&self, max_pending: u32) -> StoreResult<u64> {
        let at = Utc::now();
        let (now, note) = (ts(at), backlog_note(at)?);
        self.writer()
            .transaction(|db| {
                let tenants = pending_tenants(db)?;
                let mut over = db.prepare_cached(OVER_BACKLOG)?;
                let mut fail = db.prepare_cached(FAIL_UNSENT)?;
                let mut failed = 0;
                for tenant in tenants {
                    let positions: Vec<i64> = over
                        .query_map(rusqlite::params![tenant, now, max_pending], |row| {
                            row.get(0)
                        })?
                        .collect::<Result<_, _>>()?;
                    for position in positions {
                        failed += fail.execute(rusqlite::params![position, note])? as u64;
                    }
                }
                Ok(failed)
            })
            .await
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

    pub(in crate::store) async fn next_due(
        &self,
        after: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        let next: Option<String> = sqlx::query_scalar(NEXT_DUE)
            .bind(ts(after))
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

/// The tenants with pending deliveries, one index probe each (a loose scan of
/// `webhook_deliveries_tenant_due`, migration 0027).
pub(in crate::store) const PENDING_TENANTS: &str = concat!(
    pending_tenants_cte!(),
    "SELECT tenant_id FROM tenants WHERE tenant_id IS NOT NULL"
);

/// A tenant's (`?1`) oldest deliveries due at `?2` and not claimed, at most `?3`.
pub(in crate::store) const DUE_OF_TENANT: &str = "SELECT position, next_attempt_at \
     FROM webhook_deliveries WHERE tenant_id = ?1 AND status = 'pending' \
         AND next_attempt_at <= ?2 AND (lease_until IS NULL OR lease_until <= ?2) \
     ORDER BY next_attempt_at, position LIMIT ?3";

/// A tenant's (`?1`) pending deliveries not in flight at `?2` past its first `?3`, those due
/// soonest first.
pub(in crate::store) const OVER_BACKLOG: &str = "SELECT position FROM webhook_deliveries \
     WHERE tenant_id = ?1 AND status = 'pending' AND (lease_until IS NULL OR lease_until <= ?2) \
     ORDER BY next_attempt_at, position LIMIT -1 OFFSET ?3";

/// Fails the pending delivery at `?1` unsent, with the note `?2`.
const FAIL_UNSENT: &str = "UPDATE webhook_deliveries SET status = 'failed', lease_until = NULL, \
         attempt_log = json_insert(attempt_log, '$[#]', json(?2)) \
     WHERE position = ?1 AND status = 'pending'";

/// The JSON of the log note of a delivery failed at `at` for its tenant's backlog.
fn backlog_note(at: DateTime<Utc>) -> StoreResult<String> {
    serde_json::to_string(&DeliveryAttempt::backlog(at))
        .map_err(|error| StoreError::Internal(error.to_string()))
}

/// Claims the deliveries at the positions of the JSON array `?2` until `?1` (a delivery's
/// subscription is deleted with it, in the same transaction as its deliveries).
const CLAIM: &str = "UPDATE webhook_deliveries SET attempts = attempts + 1, lease_until = ?1 \
     WHERE position IN (SELECT value FROM json_each(?2)) \
     RETURNING id, tenant_id, webhook_id, session_id, event_type, body, attempts, created_at";

/// The earliest time after `?1` a pending delivery comes due or a claim's lease ends.
pub(in crate::store) const NEXT_DUE: &str = "SELECT min(at) FROM ( \
         SELECT min(next_attempt_at) AS at FROM webhook_deliveries \
             WHERE status = 'pending' AND next_attempt_at > ?1 \
         UNION ALL \
         SELECT min(lease_until) FROM webhook_deliveries \
             WHERE lease_until IS NOT NULL AND lease_until > ?1)";

/// The tenants with pending deliveries ([`PENDING_TENANTS`]).
fn pending_tenants(db: &rusqlite::Connection) -> StoreResult<Vec<String>> {
    Ok(db
        .prepare_cached(PENDING_TENANTS)?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?)
}

/// The positions of the deliveries to claim: each tenant's oldest due ones up to its room in
/// `shares`, taken in turns (see [`DeliveryShares`]), at most `limit`.
fn pick_due(
    db: &rusqlite::Connection,
    now: &str,
    limit: u32,
    shares: &DeliveryShares,
) -> StoreResult<Vec<i64>> {
    let tenants = pending_tenants(db)?;
    let mut due_of_tenant = db.prepare_cached(DUE_OF_TENANT)?;
    // (turn, due time, position) of every candidate.
    let mut candidates: Vec<(u32, String, i64)> = Vec::new();
    for tenant in tenants {
        let tenant = TenantId::new(tenant);
        let room = shares.room(&tenant).min(limit);
        if room == 0 {
            continue;
        }
        let due = due_of_tenant
            .query_map(rusqlite::params![tenant.as_str(), now, room], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })?;
        for (rank, row) in (1..).zip(due) {
            let (position, at) = row?;
            candidates.push((shares.turn(&tenant, rank), at, position));
        }
    }
    candidates.sort_unstable();
    candidates.truncate(limit as usize);
    Ok(candidates
        .into_iter()
        .map(|(_, _, position)| position)
        .collect())
}
