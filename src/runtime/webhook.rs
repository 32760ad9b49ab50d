//! Approval webhooks: an approval request is POSTed to the session's policy service, signed in
//! the Standard Webhooks style (`webhook-id`, `webhook-timestamp`, `webhook-signature` =
//! HMAC-SHA256), retried with backoff a bounded number of times, through the shared outbound
//! client ([`crate::egress`]): redirects are not followed, proxies are ignored, answers are
//! capped, and URLs that are or resolve to loopback, private, link-local (metadata) or otherwise
//! non-public addresses are refused unless the server allows them, the connection pinned to the
//! checked addresses. A failed delivery shows the tenant only [`WEBHOOK_FAILED`]; the detail
//! goes to the server log. The policy service may answer synchronously in its response body
//! (`{"decision": "allow"|"deny", "reason"?, "updated_input"?}`); otherwise the answer arrives
//! over REST. A delivery failure never loses the request: it stays answerable over REST.

use crate::egress::{EgressClient, Purpose, RequestLimits};
use crate::signing::{WebhookSecret, sign_message};
use serde::Deserialize;
use serde_json::Value;
use std::time::Duration;

pub use crate::session_config::WebhookConfig;

/// A synchronous answer found in the webhook's response body.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct SyncAnswer {
    pub decision: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub updated_input: Option<Value>,
}

impl SyncAnswer {
    /// The answer in a response body, if it holds one the server takes: JSON of this shape
    /// whose `updated_input`, if any, nests at most [`crate::message::MAX_TOOL_INPUT_DEPTH`]
    /// levels (it is stored in the approval and its event). Anything else is no answer: the
    /// request stays answerable over REST.
    pub fn parse(body: &[u8]) -> Option<Self> {
        serde_json::from_slice::<Self>(body).ok().filter(|answer| {
            answer
                .updated_input
                .as_ref()
                .is_none_or(crate::message::tool_input_within_depth)
        })
    }
}

/// What the tenant sees of a failed delivery (`approval_webhook_failed` event's `code`); the
/// detail goes to the server log only.
pub const WEBHOOK_FAILED: &str = "WEBHOOK_FAILED";

/// How many times a delivery is tried.
pub const DELIVERY_ATTEMPTS: u32 = 4;
/// The time one attempt may take, answer included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer body read (a synchronous answer is small).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Delivery failures (logged; the tenant sees [`WEBHOOK_FAILED`]; the request stays answerable
/// over REST).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("refused url: {0}")]
    Refused(String),
    #[error("delivery failed after {attempts} attempts: {last}")]
    Failed { attempts: u32, last: String },
}

/// Posts `body` to the webhook through `egress`, retrying network errors, 429 and 5xx with
/// backoff (0.5 s, 1 s, 2 s; 4 attempts of at most 10 s each). A refused destination is not
/// retried. Returns the synchronous answer, if the service gave one.
pub async fn deliver(
    egress: &EgressClient,
    config: &WebhookConfig,
    body: &Value,
) -> Result<Option<SyncAnswer>, WebhookError> {
    config
        .validate(egress.policy())
        .map_err(WebhookError::Refused)?;
    let url = url::Url::parse(&config.url).map_err(|e| WebhookError::Refused(e.to_string()))?;
    let secret =
        WebhookSecret::parse(&config.secret).map_err(|e| WebhookError::Refused(e.to_string()))?;
    let payload = serde_json::to_vec(body).unwrap_or_default();
    let limits = RequestLimits {
        timeout: ATTEMPT_TIMEOUT,
        max_response_bytes: MAX_ANSWER_BYTES,
    };
    let mut last = String::new();
    for attempt in 0..DELIVERY_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 << (attempt - 1))).await;
        }
        let mut headers = reqwest::header::HeaderMap::new();
        sign_message(&secret, &payload, chrono::Utc::now().timestamp()).apply(&mut headers);
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        let sent = egress
            .post(
                Purpose::ApprovalWebhook,
                &url,
                headers,
                payload.clone(),
                limits,
            )
            .await;
        match sent {
            Ok(answer) if answer.status.is_success() => {
                return Ok(SyncAnswer::parse(&answer.body));
            }
            Ok(answer) if answer.status.as_u16() == 429 || answer.status.is_server_error() => {
                last = format!("HTTP {}", answer.status);
            }
            Ok(answer) => {
                return Err(WebhookError::Failed {
                    attempts: attempt + 1,
                    last: format!("HTTP {}", answer.status),
                });
            }
            Err(error) if error.is_permanent() => {
                return Err(WebhookError::Refused(error.to_string()));
            }
            Err(error) => last = error.to_string(),
        }
    }
    Err(WebhookError::Failed {
        attempts: DELIVERY_ATTEMPTS,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::AddressPolicy;

    #[test]
    fn validation_refuses_bad_urls() {
        let config = |url: &str| WebhookConfig {
            url: url.into(),
            secret: "s3cret".into(),
        };
        assert!(
            config("https://policy.example/hook")
                .validate(&AddressPolicy::PublicOnly)
                .is_ok()
        );
        assert!(
            config("http://127.0.0.1:9/hook")
                .validate(&AddressPolicy::PublicOnly)
                .is_err()
        );
        assert!(
            config("http://127.0.0.1:9/hook")
                .validate(&AddressPolicy::AllowPrivate)
                .is_ok()
        );
        assert!(
            config("http://[::ffff:10.0.0.1]/hook")
                .validate(&AddressPolicy::PublicOnly)
                .is_err()
        );
        assert!(
            config("ftp://policy.example/")
                .validate(&AddressPolicy::PublicOnly)
                .is_err()
        );
        assert!(
            config("https://user:pw@policy.example/")
                .validate(&AddressPolicy::PublicOnly)
                .is_err()
        );
    }

    #[test]
    fn a_sync_answer_is_taken_only_with_an_updated_input_within_the_depth_bound() {
        let nested = |levels: usize| {
            (0..levels).fold(
                serde_json::json!(1),
                |inner, _| serde_json::json!({ "k": inner }),
            )
        };
        let body = |updated: Value| {
            serde_json::to_vec(&serde_json::json!({"decision": "allow", "updated_input": updated}))
                .unwrap()
        };
        let within = SyncAnswer::parse(&body(nested(crate::message::MAX_TOOL_INPUT_DEPTH)));
        assert_eq!(within.expect("an answer").decision, "allow");
        let deeper = body(nested(crate::message::MAX_TOOL_INPUT_DEPTH + 1));
        assert_eq!(SyncAnswer::parse(&deeper), None);
        assert_eq!(
            SyncAnswer::parse(br#"{"decision": "deny"}"#)
                .unwrap()
                .decision,
            "deny"
        );
        assert_eq!(SyncAnswer::parse(b"not json"), None);
    }
}
