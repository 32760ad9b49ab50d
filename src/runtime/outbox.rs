//! The outbox worker: delivers the outbound webhook notifications the store wrote with the
//! events they report (see [`crate::webhooks`]).
//!
//! One task per replica claims due deliveries (as many as it has free slots, at most
//! `webhooks.concurrency` in flight), shared among tenants: at most
//! `webhooks.per_tenant_concurrency` of one tenant in flight (half the slots unless set), and
//! a free slot goes to the tenant with the fewest in flight, its oldest due delivery first
//! ([`DeliveryShares`]) — so a tenant whose receiver is slow or dead, with any backlog, keeps
//! no other tenant's deliveries waiting for its own. It sends each through the shared
//! outbound client — the same address checks, pinning and bounds as the approval webhook's: a
//! URL that is or resolves to a non-public address is refused unless
//! `egress.allow_private_cidrs` lists it — signed in the Standard Webhooks format with the
//! delivery's stable id, and records the attempt. A 2xx answer delivers; any other answer, a timeout or a connection failure is
//! retried after an exponential, jittered delay, until `webhooks.max_attempts` or
//! `webhooks.max_age_seconds`; a refused destination fails at once. It sleeps until a commit
//! writes outbox rows (the store wakes it), the next retry is due, or the periodic sweep
//! (`webhooks.sweep_seconds`), which also picks up deliveries a crashed worker had claimed
//! once their lease ran out — so delivery is at least once, and a receiver de-duplicates on
//! `webhook-id`.
//!
//! What the tenant sees of a failed attempt (the delivery log) is its HTTP status or the code
//! `WEBHOOK_FAILED`; the detail (host, address, error) goes to the server log only. Every
//! attempt is counted in `norma_webhook_deliveries_total{kind="outbound"}` (`delivered`,
//! `failed` — retried or not — or `refused` by the address checks).

use crate::egress::{EgressClient, EgressError, Purpose, RequestLimits};
use crate::ids::TenantId;
use crate::metrics::{DeliveryOutcome, Metrics, WebhookKind};
use crate::signing::{SignedHeaders, WebhookSecret, sign};
use crate::store::{
    AttemptResult, DeliveryShares, DueDelivery, Store, TRANSIENT_RETRY_WINDOW, retry_transient,
};
use crate::webhooks::{DeliveryAttempt, DeliveryStatus, WebhookSettings};
use rand::Rng;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The time one attempt may take, answer included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a 2xx answer read (and ignored); a larger one fails the attempt.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The code of an attempt that got no answer (refused, unreachable, timed out, oversized).
pub const WEBHOOK_FAILED: &str = "WEBHOOK_FAILED";
/// The code of an attempt answered with a non-2xx status.
pub const WEBHOOK_HTTP_STATUS: &str = "WEBHOOK_HTTP_STATUS";
/// How often delivered and failed deliveries past retention are deleted.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Delivers the outbox until `stop` is cancelled (deliveries in flight are then abandoned;
/// their lease runs out and they are sent again).
pub async fn run(
    store: Arc<dyn Store>,
    egress: EgressClient,
    settings: WebhookSettings,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let wakeup = store.webhook_wakeup();
    let settings = Arc::new(settings);
    let lease = Duration::from_secs(settings.lease_seconds);
    let sweep = Duration::from_secs(settings.sweep_seconds);
    let mut in_flight: JoinSet<()> = JoinSet::new();
    // Whose delivery each task is, and how many each tenant has in flight.
    let mut tenant_of: HashMap<tokio::task::Id, TenantId> = HashMap::new();
    let mut shares = DeliveryShares::new(settings.per_tenant() as u32);
    let mut last_purge: Option<tokio::time::Instant> = None;
    let mut last_trim: Option<tokio::time::Instant> = None;
    loop {
        if settings.retention_hours > 0 && last_purge.is_none_or(|at| at.elapsed() >= PURGE_EVERY) {
            last_purge = Some(tokio::time::Instant::now());
            purge(&store, settings.retention_hours).await;
        }
        if last_trim.is_none_or(|at| at.elapsed() >= sweep) {
            last_trim = Some(tokio::time::Instant::now());
            trim(&store, settings.max_pending_per_tenant).await;
        }
        let free = settings.concurrency.saturating_sub(in_flight.len());
        let mut full = free == 0;
        let claimed_at = chrono::Utc::now();
        if free > 0 {
            match store
                .claim_webhook_deliveries(lease, free as u32, &shares)
                .await
            {
                Ok(claimed) => {
                    full = claimed.len() == free;
                    for due in claimed {
                        let span = tracing::info_span!("webhook_delivery",
                            tenant = %due.tenant, session_id = due.session_id.as_deref(),
                            webhook_id = %due.webhook_id, delivery_id = %due.id,
                            event = %due.event_type, attempt = due.attempt);
                        shares.started(&due.tenant);
                        let tenant = due.tenant.clone();
                        let task = in_flight.spawn(
                            deliver(
                                store.clone(),
                                egress.clone(),
                                settings.clone(),
                                metrics.clone(),
                                due,
                            )
                            .instrument(span),
                        );
                        tenant_of.insert(task.id(), tenant);
                    }
                }
                Err(error) => tracing::warn!(%error, "claiming webhook deliveries failed"),
            }
        }
        // Sleep until the next delivery comes due, at most one sweep; with every slot taken,
        // until a delivery finishes (more may be due). Deliveries left due by the claim are
        // over their tenant's share: one of that tenant's finishing wakes the loop.
        let mut wait = sweep;
        if !full {
            match store.next_webhook_due(claimed_at).await {
                Ok(Some(due)) => {
                    let until = (due - chrono::Utc::now())
                        .to_std()
                        .unwrap_or(Duration::ZERO);
                    wait = wait.min(until.max(Duration::from_millis(20)));
                }
                Ok(None) => {}
                Err(error) => tracing::warn!(%error, "reading the next webhook delivery failed"),
            }
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = wakeup.notified(), if !full => {}
            () = tokio::time::sleep(wait), if !full => {}
            Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                let task = match done {
                    Ok((task, ())) => task,
                    Err(error) => error.id(),
                };
                if let Some(tenant) = tenant_of.remove(&task) {
                    shares.finished(&tenant);
                }
            }
        }
    }
}

async fn purge(store: &Arc<dyn Store>, hours: u64) {
    let before = chrono::Utc::now() - chrono::Duration::hours(hours.min(1_000_000) as i64);
    match store.purge_webhook_deliveries(before).await {
        Ok(0) => {}
        Ok(purged) => tracing::info!(purged, "webhook deliveries past retention deleted"),
        Err(error) => tracing::warn!(%error, "webhook delivery retention sweep failed"),
    }
}

/// Fails unsent what each tenant has pending past `max_pending` (see
/// `Store::trim_webhook_backlogs`).
async fn trim(store: &Arc<dyn Store>, max_pending: u32) {
    match store.trim_webhook_backlogs(max_pending).await {
        Ok(0) => {}
        Ok(failed) => {
            tracing::warn!(
                failed,
                max_pending,
                "webhook deliveries failed unsent for their tenant's backlog"
            )
        }
        Err(error) => tracing::warn!(%error, "trimming webhook backlogs failed"),
    }
}

/// One attempt of `due`, recorded.
async fn deliver(
    store: Arc<dyn Store>,
    egress: EgressClient,
    settings: Arc<WebhookSettings>,
    metrics: Arc<Metrics>,
    due: DueDelivery,
) {
    let (result, outcome) = attempt(&egress, &settings, &due).await;
    // Counted before the attempt is recorded: whoever reads the delivery log afterwards finds
    // it counted too.
    metrics.webhook_delivery(WebhookKind::outbound, outcome);
    match result.status {
        DeliveryStatus::Delivered => tracing::info!("webhook delivered"),
        DeliveryStatus::Pending => {
            tracing::info!(next_attempt_at = ?result.next_attempt_at, "webhook delivery will be retried");
        }
        DeliveryStatus::Failed => tracing::warn!("webhook delivery failed for good"),
    }
    if let Err(error) = retry_transient(TRANSIENT_RETRY_WINDOW, || {
        store.finish_webhook_attempt(&result)
    })
    .await
    {
        // The claim's lease runs out and the delivery is attempted again.
        tracing::warn!(%error, "recording a webhook attempt failed");
    }
}

/// Sends `due` once and decides what follows; how the attempt ended, for the metrics.
async fn attempt(
    egress: &EgressClient,
    settings: &WebhookSettings,
    due: &DueDelivery,
) -> (AttemptResult, DeliveryOutcome) {
    let started = chrono::Utc::now();
    let clock = tokio::time::Instant::now();
    let sent = send(egress, due, started.timestamp()).await;
    let duration_ms = clock.elapsed().as_millis() as u64;
    let mut outcome = DeliveryOutcome::failed;
    let (delivered, permanent, status_code, error) = match sent {
        Ok(status) if (200..300).contains(&status) => (true, false, Some(status), None),
        Ok(status) => (false, false, Some(status), Some(WEBHOOK_HTTP_STATUS)),
        Err(Failure {
            permanent,
            refused,
            detail,
        }) => {
            tracing::warn!(%detail, permanent, "webhook attempt failed");
            if refused {
                outcome = DeliveryOutcome::refused;
            }
            (false, permanent, None, Some(WEBHOOK_FAILED))
        }
    };
    let log = DeliveryAttempt {
        attempt: due.attempt,
        at: started,
        status_code,
        error: error.map(str::to_owned),
        duration_ms,
    };
    if delivered {
        let result = AttemptResult {
            delivery_id: due.id.clone(),
            log,
            status: DeliveryStatus::Delivered,
            next_attempt_at: None,
        };
        return (result, DeliveryOutcome::delivered);
    }
    let delay = settings.backoff(due.attempt, rand::thread_rng().r#gen::<f64>());
    let next = chrono::Utc::now()
        + chrono::Duration::from_std(delay).unwrap_or_else(|_| chrono::Duration::hours(1));
    let deadline = due.created_at + chrono::Duration::seconds(settings.max_age_seconds as i64);
    let retry = !permanent && due.attempt < settings.max_attempts && next <= deadline;
    let result = AttemptResult {
        delivery_id: due.id.clone(),
        log,
        status: if retry {
            DeliveryStatus::Pending
        } else {
            DeliveryStatus::Failed
        },
        next_attempt_at: retry.then_some(next),
    };
    (result, outcome)
}

/// Why an attempt got no answer (for the server log).
struct Failure {
    permanent: bool,
    /// The destination itself is refused: a malformed URL or secret, or an address the
    /// outbound checks do not allow.
    refused: bool,
    detail: String,
}

/// POSTs the body signed under the delivery's id; the answer's status.
async fn send(egress: &EgressClient, due: &DueDelivery, timestamp: i64) -> Result<u16, Failure> {
    let permanent = |detail: String| Failure {
        permanent: true,
        refused: true,
        detail,
    };
    let url = url::Url::parse(&due.url).map_err(|error| permanent(error.to_string()))?;
    let secret = WebhookSecret::parse(&due.secret).map_err(|error| permanent(error.to_string()))?;
    let body = due.body.as_bytes().to_vec();
    let mut headers = reqwest::header::HeaderMap::new();
    SignedHeaders {
        id: due.id.clone(),
        timestamp,
        signature: sign(&secret, &due.id, timestamp, &body),
    }
    .apply(&mut headers);
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        reqwest::header::HeaderValue::from_static("application/json"),
    );
    let limits = RequestLimits {
        timeout: ATTEMPT_TIMEOUT,
        max_response_bytes: MAX_ANSWER_BYTES,
    };
    egress
        .post(Purpose::EventWebhook, &url, headers, body, limits)
        .await
        .map(|answer| answer.status.as_u16())
        .map_err(|error| Failure {
            permanent: error.is_permanent(),
            refused: matches!(
                error,
                EgressError::Refused { .. } | EgressError::InvalidUrl(_)
            ),
            detail: error.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(attempt: u32, url: &str) -> DueDelivery {
        DueDelivery {
            id: "msg_1".into(),
            tenant: TenantId::new("acme"),
            webhook_id: "wh_1".into(),
            session_id: None,
            event_type: "run.completed".into(),
            body: "{}".into(),
            attempt,
            created_at: chrono::Utc::now(),
            url: url.into(),
            secret: crate::webhooks::generate_secret(),
        }
    }

    #[tokio::test]
    async fn a_refused_address_fails_at_once_and_a_dead_port_is_retried_until_the_last_attempt() {
        let public = EgressClient::new(crate::egress::AddressPolicy::PublicOnly).unwrap();
        let settings = WebhookSettings::default();
        let (refused, outcome) =
            attempt(&public, &settings, &due(1, "http://127.0.0.1:9/in")).await;
        assert_eq!(outcome, DeliveryOutcome::refused);
        assert_eq!(refused.status, DeliveryStatus::Failed);
        assert_eq!(refused.log.error.as_deref(), Some(WEBHOOK_FAILED));
        assert_eq!(refused.log.status_code, None);

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/in", closed.local_addr().unwrap());
        drop(closed);
        let open = EgressClient::new(crate::egress::AddressPolicy::AllowPrivate).unwrap();
        let (retried, outcome) = attempt(&open, &settings, &due(1, &url)).await;
        assert_eq!(outcome, DeliveryOutcome::failed);
        assert_eq!(retried.status, DeliveryStatus::Pending);
        assert!(retried.next_attempt_at.unwrap() > chrono::Utc::now());
        let (last, outcome) = attempt(&open, &settings, &due(settings.max_attempts, &url)).await;
        assert_eq!(outcome, DeliveryOutcome::failed);
        assert_eq!(last.status, DeliveryStatus::Failed);
        assert_eq!(last.next_attempt_at, None);
    }
}
