//! Subscribing: what a request may ask for (bounded URL and event list, the URL checked
//! against the outbound address policy like the approval webhook's), the generated secret,
//! and the operator's settings (`[webhooks]`).

use super::WebhookEvent;
use crate::egress::AddressPolicy;
use crate::session_config::WebhookConfig;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The longest subscription URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Random bytes in a generated secret.
pub const SECRET_BYTES: usize = 32;

/// The operator's webhook settings (`[webhooks]`, `NORMA_WEBHOOKS__*`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSettings {
    /// Tenant-wide subscriptions per tenant.
    pub max_per_tenant: u32,
    /// Subscriptions per session.
    pub max_per_session: u32,
    /// Attempts of one delivery before it is marked failed.
    pub max_attempts: u32,
    /// A delivery older than this is not retried any more (marked failed).
    pub max_age_seconds: u64,
    /// Delay before the second attempt; each later one doubles, with jitter (a random
    /// 50–100 % of the delay).
    pub retry_base_ms: u64,
    /// The longest delay between two attempts.
    pub retry_max_ms: u64,
    /// Pending deliveries one tenant may have: past it, those whose next attempt is furthest
    /// away are failed unsent (`WEBHOOK_BACKLOG`) at the next sweep.
    pub max_pending_per_tenant: u32,
    /// Deliveries sent at once by one replica.
    pub concurrency: usize,
    /// Deliveries of one tenant sent at once by one replica (unset: half of `concurrency`,
    /// at least 1), so one tenant's slow or dead receiver never takes every slot.
    pub per_tenant_concurrency: Option<usize>,
    /// How often the outbox is swept for due retries and for deliveries a crashed worker
    /// held (new notifications wake the worker at once).
    pub sweep_seconds: u64,
    /// How long a claimed delivery is reserved for its worker (longer than an attempt); a
    /// worker that dies loses its claim after this.
    pub lease_seconds: u64,
    /// Delivered and failed deliveries older than this are deleted (0 keeps them).
    pub retention_hours: u64,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            max_per_tenant: 20,
            max_per_session: 5,
            max_attempts: 12,
            max_age_seconds: 86_400,
            retry_base_ms: 5_000,
            retry_max_ms: 3_600_000,
            max_pending_per_tenant: 10_000,
            concurrency: 8,
            per_tenant_concurrency: None,
            sweep_seconds: 60,
            lease_seconds: 60,
            retention_hours: 168,
        }
    }
}

impl WebhookSettings {
    /// Refuses settings that would never deliver or never stop.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_attempts == 0 || self.max_attempts > 100 {
            return Err("webhooks.max_attempts must be between 1 and 100".into());
        }
        if self.concurrency == 0 || self.concurrency > 256 {
            return Err("webhooks.concurrency must be between 1 and 256".into());
        }
        if self.max_pending_per_tenant == 0 || self.max_pending_per_tenant > 10_000_000 {
            return Err("webhooks.max_pending_per_tenant must be between 1 and 10000000".into());
        }
        if self
            .per_tenant_concurrency
            .is_some_and(|n| n == 0 || n > self.concurrency)
        {
            return Err(
                "webhooks.per_tenant_concurrency must be between 1 and webhooks.concurrency".into(),
            );
        }
        if self.retry_base_ms == 0 || self.retry_max_ms < self.retry_base_ms {
            return Err(
                "webhooks.retry_base_ms must be positive and at most webhooks.retry_max_ms".into(),
            );
        }
        if self.sweep_seconds == 0 || self.lease_seconds < 15 {
            return Err(
                "webhooks.sweep_seconds must be positive and webhooks.lease_seconds at least 15"
                    .into(),
            );
        }
        if self.max_per_tenant > 1_000 || self.max_per_session > 100 {
            return Err(
                "webhooks.max_per_tenant must be at most 1000 and max_per_session at most 100"
                    .into(),
            );
        }
        Ok(())
    }

    /// The most deliveries of one tenant in flight at once on one replica.
    pub fn per_tenant(&self) -> usize {
        self.per_tenant_concurrency
            .unwrap_or(self.concurrency / 2)
            .clamp(1, self.concurrency.max(1))
    }

    /// The subscription caps.
    pub fn caps(&self) -> super::WebhookCaps {
        super::WebhookCaps {
            per_tenant: self.max_per_tenant,
            per_session: self.max_per_session,
        }
    }

    /// The delay after failed attempt `attempt` (1-based): `retry_base_ms · 2^(attempt−1)`,
    /// capped at `retry_max_ms`, then a random 50–100 % of it (`jitter` in 0..=1 picks where).
    pub fn backoff(&self, attempt: u32, jitter: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        let full = self
            .retry_base_ms
            .saturating_mul(1u64 << exponent)
            .min(self.retry_max_ms);
        let factor = 0.5 + 0.5 * jitter.clamp(0.0, 1.0);
        Duration::from_millis((full as f64 * factor) as u64)
    }
}

/// Why a subscription request was refused (`422 INVALID_REQUEST`, with the field).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SubscriptionError {
    pub field: &'static str,
    pub message: String,
}

fn refuse(field: &'static str, message: impl Into<String>) -> SubscriptionError {
    SubscriptionError {
        field,
        message: message.into(),
    }
}

/// Checks a subscription request: the URL (at most [`MAX_URL_BYTES`], `http(s)`, no
/// credentials, an IP-literal host allowed by `policy` — a host name is checked whenever it
/// is resolved, at delivery) and the events (1 to 5 known names, no repeats). Returns the
/// events parsed and a fresh secret.
pub fn check_request(
    url: &str,
    events: &[String],
    policy: &AddressPolicy,
) -> Result<(Vec<WebhookEvent>, String), SubscriptionError> {
    if url.len() > MAX_URL_BYTES {
        return Err(refuse(
            "url",
            format!("the url is longer than {MAX_URL_BYTES} bytes"),
        ));
    }
    let secret = generate_secret();
    WebhookConfig {
        url: url.to_owned(),
        secret: secret.clone(),
    }
    .validate(policy)
    .map_err(|message| refuse("url", message))?;
    if events.is_empty() || events.len() > WebhookEvent::ALL.len() {
        return Err(refuse(
            "events",
            format!(
                "list 1 to {} of {}",
                WebhookEvent::ALL.len(),
                names().join(", ")
            ),
        ));
    }
    let mut parsed = Vec::with_capacity(events.len());
    for name in events {
        let event = WebhookEvent::parse(name).ok_or_else(|| {
            refuse(
                "events",
                format!(
                    "unknown event {:?} (known: {})",
                    name.chars().take(64).collect::<String>(),
                    names().join(", ")
                ),
            )
        })?;
        if parsed.contains(&event) {
            return Err(refuse("events", format!("{name} is listed twice")));
        }
        parsed.push(event);
    }
    Ok((parsed, secret))
}

fn names() -> Vec<&'static str> {
    WebhookEvent::ALL.iter().map(|e| e.as_str()).collect()
}

/// A fresh signing secret: `whsec_` and the base64 of [`SECRET_BYTES`] random bytes.
pub fn generate_secret() -> String {
    let mut key = [0u8; SECRET_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut key);
    format!("{}{}", crate::signing::SECRET_PREFIX, BASE64.encode(key))
}

/// A fresh subscription id.
pub fn webhook_id() -> String {
    format!("wh_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn requests_are_bounded_and_checked() {
        let public = &AddressPolicy::PublicOnly;
        let (parsed, secret) = check_request(
            "https://hooks.example/in",
            &events(&["run.completed"]),
            public,
        )
        .unwrap();
        assert_eq!(parsed, [WebhookEvent::RunCompleted]);
        assert!(crate::signing::WebhookSecret::parse(&secret).is_ok());
        assert!(secret.starts_with("whsec_"));
        let field = |url: &str, names: &[&str]| {
            check_request(url, &events(names), public)
                .unwrap_err()
                .field
        };
        assert_eq!(field("http://127.0.0.1:9/in", &["run.completed"]), "url");
        assert_eq!(field("http://10.1.2.3/in", &["run.completed"]), "url");
        assert_eq!(field("ftp://hooks.example/", &["run.completed"]), "url");
        assert_eq!(field("not a url", &["run.completed"]), "url");
        let long = format!("https://hooks.example/{}", "a".repeat(MAX_URL_BYTES));
        assert_eq!(field(&long, &["run.completed"]), "url");
        assert_eq!(field("https://hooks.example/", &[]), "events");
        assert_eq!(field("https://hooks.example/", &["run.exploded"]), "events");
        assert_eq!(
            field("https://hooks.example/", &["run.failed", "run.failed"]),
            "events"
        );
        assert!(
            check_request(
                "http://127.0.0.1:9/in",
                &events(&["session.closed"]),
                &AddressPolicy::AllowPrivate
            )
            .is_ok()
        );
    }

    #[test]
    fn secrets_differ() {
        assert_ne!(generate_secret(), generate_secret());
    }

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let settings = WebhookSettings {
            retry_base_ms: 1_000,
            retry_max_ms: 10_000,
            ..WebhookSettings::default()
        };
        assert_eq!(settings.backoff(1, 1.0), Duration::from_secs(1));
        assert_eq!(settings.backoff(2, 1.0), Duration::from_secs(2));
        assert_eq!(settings.backoff(3, 0.0), Duration::from_secs(2));
        assert_eq!(settings.backoff(20, 1.0), Duration::from_secs(10));
        assert_eq!(settings.backoff(u32::MAX, 1.0), Duration::from_secs(10));
    }

    #[test]
    fn one_tenant_gets_half_the_slots_unless_set_within_the_total() {
        let with = |concurrency, per_tenant| WebhookSettings {
            concurrency,
            per_tenant_concurrency: per_tenant,
            ..WebhookSettings::default()
        };
        assert_eq!(with(8, None).per_tenant(), 4);
        assert_eq!(with(1, None).per_tenant(), 1);
        assert_eq!(with(3, None).per_tenant(), 1);
        assert_eq!(with(8, Some(8)).per_tenant(), 8);
        assert!(with(8, Some(8)).validate().is_ok());
        let backlog = |max| WebhookSettings {
            max_pending_per_tenant: max,
            ..WebhookSettings::default()
        };
        assert!(backlog(1).validate().is_ok());
        for refused in [0, 10_000_001] {
            let error = backlog(refused).validate().unwrap_err();
            assert!(error.contains("max_pending_per_tenant"), "{error}");
        }
        for refused in [Some(0), Some(9)] {
            let error = with(8, refused).validate().unwrap_err();
            assert!(error.contains("per_tenant_concurrency"), "{error}");
        }
    }
}
