//! What the store keeps of webhooks: subscriptions, and the outbox rows that are also the
//! delivery log.

use super::WebhookEvent;
use crate::ids::{SessionId, TenantId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use utoipa::ToSchema;

/// A subscription to write (its id and secret issued by the server).
#[derive(Clone)]
pub struct NewWebhook {
    pub id: String,
    /// Only this session's events; `None`: every session of the tenant.
    pub session: Option<SessionId>,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    /// `whsec_<base64>`; never logged, returned once.
    pub secret: String,
}

impl std::fmt::Debug for NewWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewWebhook")
            .field("id", &self.id)
            .field("session", &self.session)
            .field("url", &self.url)
            .field("events", &self.events)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// How many subscriptions a tenant may keep: tenant-wide ones, and per session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookCaps {
    pub per_tenant: u32,
    pub per_session: u32,
}

/// A subscription was refused: the tenant (or the session) already has `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at most {max} webhook subscriptions are allowed {scope}")]
pub struct WebhookCapReached {
    pub max: u32,
    /// `per tenant` or `per session`.
    pub scope: &'static str,
}

/// A stored subscription, as the API shows it (never its secret).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WebhookRecord {
    /// `wh_…`.
    pub id: String,
    /// The session whose events it receives; absent: every session of the tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub url: String,
    pub events: Vec<WebhookEvent>,
    pub created_at: DateTime<Utc>,
}

/// Where a delivery is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not delivered yet: due now or at `next_attempt_at`.
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// Given up: attempts or age exhausted, or the destination is refused.
    Failed,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "pending" => Some(Self::Pending),
            "delivered" => Some(Self::Delivered),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// One attempt of a delivery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryAttempt {
    /// 1-based; 0 for the note of a delivery failed without a request
    /// ([`WEBHOOK_BACKLOG`]).
    pub attempt: u32,
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// `WEBHOOK_FAILED` (no answer: refused address, connection, timeout, oversized answer)
    /// or `WEBHOOK_HTTP_STATUS` (a non-2xx answer); the detail is in the server log only.
    /// `WEBHOOK_BACKLOG` (attempt 0): failed unsent, its tenant being over
    /// `webhooks.max_pending_per_tenant`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: u64,
}

/// The code of a delivery failed without a request because its tenant had more than
/// `webhooks.max_pending_per_tenant` pending (see `Store::trim_webhook_backlogs`).
pub const WEBHOOK_BACKLOG: &str = "WEBHOOK_BACKLOG";

impl DeliveryAttempt {
    /// The log entry of a delivery failed at `at` for its tenant's backlog.
    pub fn backlog(at: DateTime<Utc>) -> Self {
        Self {
            attempt: 0,
            at,
            status_code: None,
            error: Some(WEBHOOK_BACKLOG.to_owned()),
            duration_ms: 0,
        }
    }
}

/// A notification and its delivery log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DeliveryRecord {
    /// The stable message id, sent as `webhook-id` on every attempt.
    pub id: String,
    /// Position in the subscription's log (the `before` cursor of the next page).
    pub position: i64,
    pub webhook_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `run.completed`, …
    pub event_type: String,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub created_at: DateTime<Utc>,
    /// When the next attempt is due (pending only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<DateTime<Utc>>,
    /// Every attempt so far, oldest first.
    pub attempt_log: Vec<DeliveryAttempt>,
}

/// A delivery claimed by a worker for one attempt.
#[derive(Clone)]
pub struct DueDelivery {
    pub id: String,
    pub tenant: TenantId,
    pub webhook_id: String,
    pub session_id: Option<String>,
    pub event_type: String,
    /// The exact bytes to sign and send.
    pub body: String,
    /// The number of this attempt (1-based).
    pub attempt: u32,
    pub created_at: DateTime<Utc>,
    pub url: String,
    pub secret: String,
}

impl std::fmt::Debug for DueDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DueDelivery")
            .field("id", &self.id)
            .field("tenant", &self.tenant)
            .field("webhook_id", &self.webhook_id)
            .field("event_type", &self.event_type)
            .field("attempt", &self.attempt)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// How a worker's free delivery slots are shared among tenants when it claims (see
/// `Store::claim_webhook_deliveries`): no tenant gets more than `per_tenant` in flight, and
/// slots go in turns — a tenant's `n`-th claimed delivery has turn `busy + n`, lower turns
/// first, the older due first on a tie — so the tenant with the fewest in flight gets the
/// next free slot however old another tenant's backlog is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeliveryShares {
    /// The most deliveries of one tenant in flight at once.
    pub per_tenant: u32,
    /// Deliveries in flight per tenant (tenants with none are absent).
    pub busy: HashMap<TenantId, u32>,
}

impl DeliveryShares {
    pub fn new(per_tenant: u32) -> Self {
        Self {
            per_tenant,
            busy: HashMap::new(),
        }
    }

    /// The tenant's deliveries in flight.
    pub fn busy(&self, tenant: &TenantId) -> u32 {
        self.busy.get(tenant).copied().unwrap_or(0)
    }

    /// How many more of the tenant's deliveries may be claimed.
    pub fn room(&self, tenant: &TenantId) -> u32 {
        self.per_tenant.saturating_sub(self.busy(tenant))
    }

    /// The turn of the tenant's `rank`-th claimed delivery (1-based).
    pub fn turn(&self, tenant: &TenantId, rank: u32) -> u32 {
        self.busy(tenant).saturating_add(rank)
    }

    /// One more of the tenant's deliveries is in flight.
    pub fn started(&mut self, tenant: &TenantId) {
        *self.busy.entry(tenant.clone()).or_insert(0) += 1;
    }

    /// One of the tenant's deliveries is done.
    pub fn finished(&mut self, tenant: &TenantId) {
        if let Some(busy) = self.busy.get_mut(tenant) {
            *busy = busy.saturating_sub(1);
            if *busy == 0 {
                self.busy.remove(tenant);
            }
        }
    }
}

/// What one attempt ended with, to record.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptResult {
    pub delivery_id: String,
    pub log: DeliveryAttempt,
    /// `Pending` (retry at `next_attempt_at`), `Delivered` or `Failed`.
    pub status: DeliveryStatus,
    pub next_attempt_at: Option<DateTime<Utc>>,
}
