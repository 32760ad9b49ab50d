//! Remote hooks (D4): the event is POSTed as JSON to a configured URL, signed like a Standard
//! Webhook ([`crate::signing`]); the answer is a JSON [`HookResponse`] (an empty 2xx body means
//! "continue"). Redirects are never followed (a 3xx is a failure), the answer is size-capped,
//! and any transport or status error is a hook failure handled by the runner's policy.

use super::{Hook, HookError, HookEvent, HookResponse};
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
    #[error("hook secret: {0}")]
    Secret(#[from] SecretError),
    #[error("could not build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// A hook answered over HTTP.
#[derive(Debug, Clone)]
pub struct RemoteHook {
    url: url::Url,
    secret: WebhookSecret,
    client: reqwest::Client,
}

impl RemoteHook {
    /// A remote hook posting to `url`, signing with `secret`, giving up after `timeout`.
    pub fn new(url: &str, secret: &str, timeout: Duration) -> Result<Self, RemoteHookError> {
        let url = url::Url::parse(url)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(RemoteHookError::UnsupportedScheme(url.scheme().to_owned()));
        }
        let secret = WebhookSecret::parse(secret)?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .build()?;
        Ok(Self {
            url,
            secret,
            client,
        })
    }

    /// The URL events are posted to.
    pub fn url(&self) -> &url::Url {
        &self.url
    }
}

#[async_trait]
impl Hook for RemoteHook {
    async fn handle(&self, event: &HookEvent) -> Result<HookResponse, HookError> {
        let body = serde_json::to_vec(event)
            .map_err(|error| HookError::Failed(format!("could not encode the event: {error}")))?;
        let signed = signing::sign_message(&self.secret, &body, chrono::Utc::now().timestamp());
        let mut headers = reqwest::header::HeaderMap::new();
        signed.apply(&mut headers);
        let mut response = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|error| HookError::Failed(format!("request failed: {error}")))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(HookError::Failed(format!(
                "hook answered {status}; redirects are not followed"
            )));
        }
        if !status.is_success() {
            return Err(HookError::Failed(format!("hook answered {status}")));
        }
        let mut answer = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| HookError::Failed(format!("reading the answer failed: {error}")))?
        {
            if answer.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(HookError::Failed(format!(
                    "answer is larger than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            answer.extend_from_slice(&chunk);
        }
        if answer.iter().all(u8::is_ascii_whitespace) {
            return Ok(HookResponse::proceed());
        }
        serde_json::from_slice(&answer)
            .map_err(|error| HookError::Failed(format!("answer is not a hook response: {error}")))
    }
}
