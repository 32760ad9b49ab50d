//! Remote hooks (D4): the event is POSTed as JSON to a configured URL, signed like a Standard
//! Webhook ([`crate::signing`]); the answer is a JSON [`HookResponse`] (an empty 2xx body means
//! "continue"). Requests go through the shared outbound client ([`crate::egress`]): non-public
//! destinations are refused unless the server allows them, redirects are never followed (a 3xx
//! is a failure), proxies are ignored, and the answer is size-capped. Any failure is a hook
//! failure handled by the runner's policy; its detail is for the server log only (the runner
//! shows the tenant a generic `HOOK_FAILED`).

use super::{Hook, HookError, HookEvent, HookResponse};
use crate::egress::{EgressClient, Purpose, RequestLimits};
use crate::signing::{self, SecretError, WebhookSecret};
use async_trait::async_trait;
use std::time::Duration;

/// The largest answer body accepted.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// A remote hook that cannot be configured.
#[derive(Debug, thiserror::Error)]
pub enum RemoteHookError {
    #[error("invalid hook URL: {0}")]
    InvalidUrl(#[from] url::ParseError),
    #[error("hook URL must use http or https, not {0:?}")]
    UnsupportedScheme(String),
    #[error("hook URL has no host")]
    NoHost,
    #[error("hook secret: {0}")]
    Secret(#[from] SecretError),
}

/// Where a remote hook posts, and how it signs: a checked configuration, no client yet.
#[derive(Clone)]
pub struct RemoteTarget {
    url: url::Url,
    secret: WebhookSecret,
}

impl std::fmt::Debug for RemoteTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTarget")
            .field("url", &self.url.as_str())
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl RemoteTarget {
    /// Checks what can be checked without the network: the URL's scheme and host, the secret.
    pub fn parse(url: &str, secret: &str) -> Result<Self, RemoteHookError> {
        let url = url::Url::parse(url)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(RemoteHookError::UnsupportedScheme(url.scheme().to_owned()));
        }
        if url.host().is_none() {
            return Err(RemoteHookError::NoHost);
        }
        let secret = WebhookSecret::parse(secret)?;
        Ok(Self { url, secret })
    }

    /// The URL events are posted to.
    pub fn url(&self) -> &url::Url {
        &self.url
    }
}

/// A hook answered over HTTP.
#[derive(Clone, Debug)]
pub struct RemoteHook {
    target: RemoteTarget,
    client: EgressClient,
    timeout: Duration,
}

impl RemoteHook {
    /// A remote hook posting to `target` through `client`, giving up after `timeout`.
    pub fn new(target: RemoteTarget, client: EgressClient, timeout: Duration) -> Self {
        Self {
            target,
            client,
            timeout,
        }
    }

    /// The URL events are posted to.
    pub fn url(&self) -> &url::Url {
        self.target.url()
    }
}

#[async_trait]
impl Hook for RemoteHook {
    async fn handle(&self, event: &HookEvent) -> Result<HookResponse, HookError> {
        let body = serde_json::to_vec(event)
            .map_err(|error| HookError::Failed(format!("could not encode the event: {error}")))?;
        let signed =
            signing::sign_message(&self.target.secret, &body, chrono::Utc::now().timestamp());
        let mut headers = reqwest::header::HeaderMap::new();
        signed.apply(&mut headers);
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        let limits = RequestLimits {
            timeout: self.timeout,
            max_response_bytes: MAX_RESPONSE_BYTES,
        };
        let answer = self
            .client
            .post(Purpose::RemoteHook, &self.target.url, headers, body, limits)
            .await
            .map_err(|error| HookError::Failed(error.to_string()))?;
        let status = answer.status;
        if status.is_redirection() {
            return Err(HookError::Failed(format!(
                "hook answered {status}; redirects are not followed"
            )));
        }
        if !status.is_success() {
            return Err(HookError::Failed(format!("hook answered {status}")));
        }
        if answer.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(HookResponse::proceed());
        }
        serde_json::from_slice(&answer.body)
            .map_err(|error| HookError::Failed(format!("answer is not a hook response: {error}")))
    }
}
