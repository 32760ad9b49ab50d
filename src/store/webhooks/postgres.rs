//! Outbound webhooks on Postgres: subscriptions and deliveries under row-level security for
//! tenant work; the worker's claims are system-level and use `FOR UPDATE SKIP LOCKED` plus a
//! lease column, so several replicas on one database share the outbox without sending one
//! attempt twice. The outbox rows of an append are written by the statement that inserts its
//! events (see [`insert_events`]): an append notifying nobody costs nothing more.

use crate::store::postgres::PgStore;
use crate::store::*;
use crate::webhooks::{DeliveryAttempt, DeliveryStatus, Notice, WebhookEvent};
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgConnection, Row};

/// A fresh `webhook-id`, made by the database inside the inserting statement.
const NEW_DELIVERY_ID: &str = "'msg_' || replace(gen_random_uuid()::text, '-', '')";

/// Inserts the events of an append (`seqs`, `kinds`, `payloads`, `runs`: one entry per
/// event) and, in the same statement, one outbox row per notice and subscription of the
/// tenant (or of the session) to the notice's event. Returns the outbox rows written (the
/// caller signals the events to the other replicas after its commit).
#[allow(clippy::too_many_arguments)]
pub(in crate::store) async fn insert_events(
    conn: &mut PgConnection,
    tenant: &TenantId,
    session: &SessionId,
    at: DateTime<Utc>,
    seqs: &[i64],
    kinds: &[&str],
    payloads: &[&str],
    runs: &[Option<&str>],
    notices: &[Notice],
) -> StoreResult<u64> {
    // Data-modifying WITHs run to completion whatever the main statement reads; the main
    // statement counts the outbox rows.
    const EVENTS: &str = "WITH inserted AS (INSERT INTO events (session_id, tenant_id, \
             created_at, seq, kind, payload, run_id) \
         SELECT $1, $2, $3, seq, kind, payload::jsonb, run_id \
         FROM UNNEST($4::bigint[], $5::text[], $6::text[], $7::text[]) \
             AS t(seq, kind, payload, run_id))";
    let query = if notices.is_empty() {
        format!("{EVENTS} SELECT 0::bigint")
    } else {
        format!(
            "{EVENTS}, delivered AS ( \
             INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, session_id, event_type, \
                 body, next_attempt_at, created_at) \
             SELECT {NEW_DELIVERY_ID}, $2, s.id, $1, n.event_type, n.body, $3, $3 \
             FROM UNNEST($8::text[], $9::text[]) AS n(event_type, body) \
             JOIN webhook_subscriptions s ON s.tenant_id = $2 \
                 AND (s.session_id IS NULL OR s.session_id = $1) \
                 AND n.event_type = ANY(s.events) \
             RETURNING 1) \
             SELECT (SELECT count(*) FROM delivered)"
        )
    };
    let mut statement = sqlx::query_scalar::<_, i64>(&query)
        .bind(session.as_str())
        .bind(tenant.as_str())
        .bind(at)
        .bind(seqs)
        .bind(kinds)
        .bind(payloads)
        .bind(runs);
    if !notices.is_empty() {
        let events: Vec<&str> = notices.iter().map(|n| n.event.as_str()).collect();
        let bodies: Vec<&str> = notices.iter().map(|n| n.body.as_str()).collect();
        statement = statement.bind(events).bind(bodies);
    }
    let notified = statement.fetch_one(conn).await?;
    Ok(notified as u64)
}

/// The `UPDATE` of a session close that also writes the `session.closed` outbox rows when
/// this close is the one that closed it (`$1` session, `$2` tenant, `$3` now, `$4` body).
/// Returns the session columns plus `notified` (outbox rows written).
pub(in crate::store) fn close_session_sql(session_columns: &str) -> String {
    format!(
        "WITH closed AS ( \
             UPDATE sessions SET status = 'closed', \
                 closed_at = COALESCE(closed_at, $3), updated_at = $3 \
             WHERE id = $1 AND tenant_id = $2 \
             RETURNING {session_columns}, closed_at = $3 AS newly), \
         notified AS ( \
             INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, session_id, event_type, \
                 body, next_attempt_at, created_at) \
             SELECT {NEW_DELIVERY_ID}, $2, s.id, $1, 'session.closed', $4, $3, $3 \
             FROM closed JOIN webhook_subscriptions s ON closed.newly AND s.tenant_id = $2 \
                 AND (s.session_id IS NULL OR s.session_id = $1) \
                 AND 'session.closed' = ANY(s.events) \
             RETURNING 1) \
         SELECT closed.*, (SELECT count(*) FROM notified) AS notified FROM closed"
    )
}

const WEBHOOK_COLUMNS: &str = "id, session_id, url, events, created_at";

fn webhook_from_row(row: &PgRow) -> StoreResult<WebhookRecord> {
    let names: Vec<String> = row.try_get("events")?;
    Ok(WebhookRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        url: row.try_get("url")?,
        events: names
            .iter()
            .filter_map(|name| WebhookEvent::parse(name))
            .collect(),
        created_at: row.try_get("created_at")?,
    })
}

const DELIVERY_COLUMNS: &str = "position, id, webhook_id, session_id, event_type, status, \
     attempts, created_at, next_attempt_at, delivered_at, attempt_log";

fn delivery_from_row(row: &PgRow) -> StoreResult<DeliveryRecord> {
    let status: String = row.try_get("status")?;
    let status = DeliveryStatus::parse(&status)
        .ok_or_else(|| StoreError::Internal(format!("unknown delivery status {status}")))?;
    Ok(DeliveryRecord {
        id: row.try_get("id")?,
        position: row.try_get("position")?,
        webhook_id: row.try_get("webhook_id")?,
        session_id: row.try_get("session_id")?,
        event_type: row.try_get("event_type")?,
        status,
        attempts: row.try_get::<i32, _>("attempts")?.max(0) as u32,
        created_at: row.try_get("created_at")?,
        next_attempt_at: (status == DeliveryStatus::Pending)
            .then(|| row.try_get("next_attempt_at"))
            .transpose()?,
        delivered_at: row.try_get("delivered_at")?,
        attempt_log: row
            .try_get::<Json<Vec<DeliveryAttempt>>, _>("attempt_log")?
            .0,
    })
}

impl PgStore {
    pub(in crate::store) async fn create_webhook_tx(
        &self,
        tenant: &TenantId,
        webhook: NewWebhook,
        caps: WebhookCaps,
    ) -> StoreResult<Result<WebhookRecord, WebhookCapReached>> {
        let mut tx = self.tenant_tx(tenant).await?;
        crate::store::limits::postgres::lock_tenant(&mut tx, tenant).await?;
        let (count, cap) = match &webhook.session {
            Some(session) => {
                sqlx::query("SELECT 1 FROM sessions WHERE id = $1 AND tenant_id = $2")
                    .bind(session.as_str())
                    .bind(tenant.as_str())
                    .fetch_optional(&mut *tx)
                    .await?
                    .ok_or(StoreError::NotFound)?;
                let count: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM webhook_subscriptions \
                     WHERE tenant_id = $1 AND session_id = $2",
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
                     WHERE tenant_id = $1 AND session_id IS NULL",
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
                 created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {WEBHOOK_COLUMNS}"
        ))
        .bind(&webhook.id)
        .bind(tenant.as_str())
        .bind(webhook.session.as_ref().map(|s| s.as_str()))
        .bind(&webhook.url)
        .bind(&events)
        .bind(&webhook.secret)
        .bind(Utc::now())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Ok(webhook_from_row(&row)?))
    }

    pub(in crate::store) async fn list_webhooks_tx(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> StoreResult<Vec<WebhookRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhook_subscriptions \
             WHERE tenant_id = $1 AND session_id IS NOT DISTINCT FROM $2 \
             ORDER BY created_at, id"
        ))
        .bind(tenant.as_str())
        .bind(session.map(|s| s.as_str()))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(webhook_from_row).collect()
    }

    pub(in crate::store) async fn get_webhook_tx(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> StoreResult<Option<WebhookRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row = sqlx::query(&format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhook_subscriptions WHERE id = $1 AND tenant_id = $2"
        ))
        .bind(id)
        .bind(tenant.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        row.as_ref().map(webhook_from_row).transpose()
    }

    pub(in crate::store) async fn delete_webhook_tx(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> StoreResult<bool> {
        let mut tx = self.tenant_tx(tenant).await?;
        let deleted =
            sqlx::query("DELETE FROM webhook_subscriptions WHERE id = $1 AND tenant_id = $2")
                .bind(id)
                .bind(tenant.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
        tx.commit().await?;
        Ok(deleted == 1)
    }

    pub(in crate::store) async fn list_deliveries_tx(
        &self,
        tenant: &TenantId,
        webhook: &str,
        before: Option<i64>,
        limit: u32,
    ) -> StoreResult<Vec<DeliveryRecord>> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE tenant_id = $1 AND webhook_id = $2 AND position < $3 \
             ORDER BY position DESC LIMIT $4"
        ))
        .bind(tenant.as_str())
        .bind(webhook)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        rows.iter().map(delivery_from_row).collect()
    }

    pub(in crate::store) async fn claim_deliveries(
        &self,
        lease: Duration,
        limit: u32,
        shares: &DeliveryShares,
    ) -> StoreResult<Vec<DueDelivery>> {
        let now = Utc::now();
        let (busy_tenants, busy): (Vec<&str>, Vec<i32>) = shares
            .busy
            .iter()
            .map(|(tenant, n)| (tenant.as_str(), (*n).min(i32::MAX as u32) as i32))
            .unzip();
        let rows = sqlx::query(CLAIM)
            .bind(now + crate::store::dialect::lease_span(lease))
            .bind(now)
            .bind(i64::from(limit))
            .bind(&busy_tenants)
            .bind(&busy)
            .bind(i64::from(shares.per_tenant))
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|row| {
                Ok(DueDelivery {
                    id: row.try_get("id")?,
                    tenant: TenantId::new(row.try_get::<String, _>("tenant_id")?),
                    webhook_id: row.try_get("webhook_id")?,
                    session_id: row.try_get("session_id")?,
                    event_type: row.try_get("event_type")?,
                    body: row.try_get("body")?,
                    attempt: row.try_get::<i32, _>("attempts")?.max(0) as u32,
                    created_at: row.try_get("created_at")?,
                    url: row.try_get("url")?,
                    secret: row.try_get("secret")?,
                })
            })
            .collect()
    }

    pub(in crate::store) async fn trim_backlogs(&self, max_pending: u32) -> StoreResult<u64> {
        let at = Utc::now();
        Ok(sqlx::query(TRIM_BACKLOGS)
            .bind(at)
            .bind(i64::from(max_pending))
            .bind(Json(vec![DeliveryAttempt::backlog(at)]))
            .execute(self.pool())
            .await?
            .rows_affected())
    }

    pub(in crate::store) async fn finish_attempt(&self, result: &AttemptResult) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET status = $2, \
                 next_attempt_at = COALESCE($3, next_attempt_at), lease_until = NULL, \
                 delivered_at = CASE WHEN $2 = 'delivered' THEN $4 END, \
                 attempt_log = attempt_log || $5 \
             WHERE id = $1 AND attempts = $6 AND status = 'pending'",
        )
        .bind(&result.delivery_id)
        .bind(result.status.as_str())
        .bind(result.next_attempt_at)
        .bind(result.log.at)
        .bind(Json(vec![&result.log]))
        .bind(result.log.attempt as i32)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub(in crate::store) async fn next_due(
        &self,
        after: DateTime<Utc>,
    ) -> StoreResult<Option<DateTime<Utc>>> {
        Ok(sqlx::query_scalar(NEXT_DUE)
            .bind(after)
            .fetch_one(self.pool())
            .await?)
    }

    pub(in crate::store) async fn purge_deliveries(
        &self,
        before: DateTime<Utc>,
    ) -> StoreResult<u64> {
        Ok(sqlx::query(
            "DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < $1",
        )
        .bind(before)
        .execute(self.pool())
        .await?
        .rows_affected())
    }
}

/// Claims at most `$3` due deliveries until `$1` (`$2` is now), shared among tenants: the
/// tenants with pending deliveries are found by a loose scan (`pending_tenants_cte!`), each tenant's
/// oldest due ones are locked up to its room (`$6` less its deliveries in flight, `$4`/`$5`),
/// and the claimed ones are taken in turns (see [`DeliveryShares`]).
pub(in crate::store) const CLAIM: &str = concat!(
    pending_tenants_cte!(),
    ", busy (tenant_id, n) AS (SELECT * FROM UNNEST($4::text[], $5::int[])), \
     picked AS ( \
         SELECT due.position FROM tenants t \
         LEFT JOIN busy b ON b.tenant_id = t.tenant_id \
         CROSS JOIN LATERAL ( \
             SELECT o.position, o.next_attempt_at, \
                 row_number() OVER (ORDER BY o.next_attempt_at, o.position) AS rank \
             FROM (SELECT position, next_attempt_at FROM webhook_deliveries \
                   WHERE tenant_id = t.tenant_id AND status = 'pending' \
                       AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until <= $2) \
                   ORDER BY next_attempt_at \
                   LIMIT GREATEST(LEAST($6 - COALESCE(b.n, 0), $3), 0) \
                   FOR UPDATE SKIP LOCKED) o) due \
         WHERE t.tenant_id IS NOT NULL \
         ORDER BY COALESCE(b.n, 0) + due.rank, due.next_attempt_at \
         LIMIT $3) \
     UPDATE webhook_deliveries d SET attempts = d.attempts + 1, lease_until = $1 \
     FROM webhook_subscriptions s, picked \
     WHERE d.position = picked.position AND s.id = d.webhook_id \
     RETURNING d.id, d.tenant_id, d.webhook_id, d.session_id, d.event_type, d.body, \
         d.attempts, d.created_at, s.url, s.secret"
);

/// Fails unsent (log note `$3`) each tenant's pending deliveries not in flight at `$1` past its
/// first `$2`, those due soonest kept: the tenants found by the claim's loose scan, each read
/// through its range of `webhook_deliveries_tenant_due`.
const TRIM_BACKLOGS: &str = concat!(
    pending_tenants_cte!(),
    ", over AS ( \
         SELECT o.position FROM tenants t \
         CROSS JOIN LATERAL ( \
             SELECT position FROM webhook_deliveries \
             WHERE tenant_id = t.tenant_id AND status = 'pending' \
                 AND (lease_until IS NULL OR lease_until <= $1) \
             ORDER BY next_attempt_at OFFSET $2 \
             FOR UPDATE SKIP LOCKED) o \
         WHERE t.tenant_id IS NOT NULL) \
     UPDATE webhook_deliveries d SET status = 'failed', lease_until = NULL, \
         attempt_log = d.attempt_log || $3 \
     FROM over WHERE d.position = over.position AND d.status = 'pending'"
);

/// The earliest time after `$1` a pending delivery comes due or a claim's lease ends.
pub(in crate::store) const NEXT_DUE: &str = "SELECT LEAST( \
         (SELECT min(next_attempt_at) FROM webhook_deliveries \
             WHERE status = 'pending' AND next_attempt_at > $1), \
         (SELECT min(lease_until) FROM webhook_deliveries \
             WHERE lease_until IS NOT NULL AND lease_until > $1))";
