//! Approval webhooks: an approval request is POSTed to the session's policy service, signed in
//! the Standard Webhooks style (`webhook-id`, `webhook-timestamp`, `webhook-signature` =
//! HMAC-SHA256), retried with backoff a bounded number of times. Redirects are not followed,
//! and URLs that resolve to loopback, private, link-local (metadata) or otherwise special
//! addresses are refused unless the server allows them; the checked address is pinned for the
//! connection. The policy service may answer synchronously in its response body
//! (`{"decision": "allow"|"deny", "reason"?, "updated_input"?}`); otherwise the answer arrives
//! over REST. A delivery failure never loses the request: it stays answerable over REST.

use crate::signing::{WebhookSecret, sign_message};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use utoipa::ToSchema;

/// Where a session's approval requests are posted.
#[derive(Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `https://…` (or `http://…`) endpoint of the policy service.
    pub url: String,
    /// Signing secret, `whsec_<base64>` or raw text. Never returned by the API.
    pub secret: String,
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl WebhookConfig {
    /// Checks what can be checked without the network: scheme, host, secret, and literal IPs.
    pub fn validate(&self, allow_private: bool) -> Result<(), String> {
        let url = url::Url::parse(&self.url).map_err(|e| format!("invalid url: {e}"))?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err("the url must be http(s)".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("the url must not carry credentials".into());
        }
        WebhookSecret::parse(&self.secret).map_err(|e| format!("invalid secret: {e}"))?;
        match url.host() {
            None => Err("the url has no host".into()),
            Some(url::Host::Ipv4(ip)) if !allow_private && !is_public(IpAddr::V4(ip)) => {
                Err(format!("{ip} is not a public address"))
            }
            Some(url::Host::Ipv6(ip)) if !allow_private && !is_public(IpAddr::V6(ip)) => {
                Err(format!("{ip} is not a public address"))
            }
            Some(_) => Ok(()),
        }
    }
}

/// True for addresses a webhook may reach without `allow_private_webhooks`.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || v4.octets()[0] == 0
                || (v4.octets()[0] == 100 && (64..128).contains(&v4.octets()[1])))
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public(IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                !(v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80)
            }
        },
    }
}

/// A synchronous answer found in the webhook's response body.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct SyncAnswer {
    pub decision: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub updated_input: Option<Value>,
}

/// Delivery failures (logged and recorded; the request stays answerable over REST).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("refused url: {0}")]
    Refused(String),
    #[error("delivery failed after {attempts} attempts: {last}")]
    Failed { attempts: u32, last: String },
}

/// Posts `body` to the webhook, retrying network errors, 429 and 5xx with backoff
/// (0.5 s, 1 s, 2 s; 4 attempts). Returns the synchronous answer, if the service gave one.
pub async fn deliver(
    config: &WebhookConfig,
    body: &Value,
    allow_private: bool,
) -> Result<Option<SyncAnswer>, WebhookError> {
    config
        .validate(allow_private)
        .map_err(WebhookError::Refused)?;
    let url = url::Url::parse(&config.url).map_err(|e| WebhookError::Refused(e.to_string()))?;
    let host = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| WebhookError::Refused(format!("cannot resolve {host}: {e}")))?
        .collect();
    let Some(pinned) = resolved
        .iter()
        .copied()
        .find(|a| allow_private || is_public(a.ip()))
    else {
        return Err(WebhookError::Refused(format!(
            "{host} resolves only to non-public addresses"
        )));
    };
    if !allow_private && resolved.iter().any(|a| !is_public(a.ip())) {
        return Err(WebhookError::Refused(format!(
            "{host} resolves to a non-public address"
        )));
    }
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .resolve(&host, pinned)
        .build()
        .map_err(|e| WebhookError::Refused(e.to_string()))?;
    let secret =
        WebhookSecret::parse(&config.secret).map_err(|e| WebhookError::Refused(e.to_string()))?;
    let payload = serde_json::to_vec(body).unwrap_or_default();
    let mut last = String::new();
    let attempts = 4;
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << (attempt - 1))).await;
        }
        let mut headers = reqwest::header::HeaderMap::new();
        sign_message(&secret, &payload, chrono::Utc::now().timestamp()).apply(&mut headers);
        let sent = client
            .post(url.clone())
            .headers(headers)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(payload.clone())
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => {
                let text = response.text().await.unwrap_or_default();
                return Ok(serde_json::from_str::<SyncAnswer>(&text).ok());
            }
            Ok(response)
                if response.status().as_u16() == 429 || response.status().is_server_error() =>
            {
                last = format!("HTTP {}", response.status());
            }
            Ok(response) => {
                return Err(WebhookError::Failed {
                    attempts: attempt + 1,
                    last: format!("HTTP {}", response.status()),
                });
            }
            Err(error) => last = error.to_string(),
        }
    }
    Err(WebhookError::Failed { attempts, last })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn validation_refuses_bad_urls() {
        let config = |url: &str| WebhookConfig {
            url: url.into(),
            secret: "s3cret".into(),
        };
        assert!(
            config("https://policy.example/hook")
                .validate(false)
                .is_ok()
        );
        assert!(config("http://127.0.0.1:9/hook").validate(false).is_err());
        assert!(config("http://127.0.0.1:9/hook").validate(true).is_ok());
        assert!(
            config("http://[::ffff:10.0.0.1]/hook")
                .validate(false)
                .is_err()
        );
        assert!(config("ftp://policy.example/").validate(false).is_err());
        assert!(
            config("https://user:pw@policy.example/")
                .validate(false)
                .is_err()
        );
    }
}
