//! Retry and rate limiting for one logical model request (N19–N20), in ONE place used by every
//! HTTP provider.
//!
//! Per logical request the provider's rate limiter is acquired once; then the same body is sent
//! up to `1 + retries` times. A 2xx response is returned BEFORE its body is read, so stream
//! consumption never starts inside the retry loop and a dropped stream is never re-sent.
//! Network errors (no response) and 408, 429, 500, 502, 503, 504 are retried after 0.5 s, 1 s,
//! 2 s, … (doubling, capped at 8 s); a `retry-after` header in seconds replaces the computed
//! delay, within the same cap. Cancellation stops the loop at once. The separate, default-off
//! "empty response → resend" retry is [`resend_on_empty`].

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota};
use reqwest::header::RETRY_AFTER;
use reqwest::{Client, RequestBuilder, Response};
use tokio_util::sync::CancellationToken;

use super::{ItemStream, ProviderError, StreamItem};

/// Delay before the first re-send.
pub const BASE_DELAY: Duration = Duration::from_millis(500);
/// Upper bound of any delay, computed or from `retry-after`.
pub const MAX_DELAY: Duration = Duration::from_secs(8);
/// Statuses worth re-sending (N19).
pub const RETRYABLE_STATUSES: [u16; 6] = [408, 429, 500, 502, 503, 504];

/// Logs one provider answer for the operator (`purpose=provider`): the host is the
/// operator's configuration, so it goes to the server log, not to the tenant's transcript.
fn log_answer(response: &Response, resend: u32) {
    tracing::debug!(
        purpose = "provider",
        host = response.url().host_str().unwrap_or_default(),
        status = response.status().as_u16(),
        resend,
        "outbound request"
    );
}

/// Whether an HTTP status is retried.
pub fn is_retryable_status(status: u16) -> bool {
    RETRYABLE_STATUSES.contains(&status)
}

/// The delay a `retry-after` header asks for: whole or fractional seconds, capped at
/// [`MAX_DELAY`]. HTTP-date values and garbage are ignored (`None`).
pub fn retry_after_delay(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    let delay = Duration::try_from_secs_f64(secs).ok()?;
    Some(delay.min(MAX_DELAY))
}

/// How many times, and after which delays, one logical request is re-sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Re-sends allowed; negative disables retry (same as 0).
    pub retries: i32,
}

impl RetryPolicy {
    /// A policy allowing `retries` re-sends.
    pub fn new(retries: i32) -> Self {
        Self { retries }
    }

    /// Re-sends allowed (0 when disabled).
    pub fn max_resends(&self) -> u32 {
        u32::try_from(self.retries).unwrap_or(0)
    }

    /// Computed delay before re-send number `resend` (0-based): 0.5 s doubling, capped at 8 s.
    pub fn delay(&self, resend: u32) -> Duration {
        let factor = 2u32.saturating_pow(resend.min(16));
        BASE_DELAY.saturating_mul(factor).min(MAX_DELAY)
    }

    /// The whole schedule of delays when no `retry-after` header is sent.
    pub fn delays(&self) -> Vec<Duration> {
        (0..self.max_resends()).map(|n| self.delay(n)).collect()
    }
}

/// Builds the per-provider rate limiter; `None` when unlimited.
pub fn rate_limiter(
    requests_per_second: Option<u32>,
) -> Result<Option<Arc<DefaultDirectRateLimiter>>, ProviderError> {
    match requests_per_second {
        None => Ok(None),
        Some(rps) => {
            let rps = NonZeroU32::new(rps).ok_or_else(|| {
                ProviderError::Config("requests_per_second must be at least 1".into())
            })?;
            Ok(Some(Arc::new(DefaultDirectRateLimiter::direct(
                Quota::per_second(rps),
            ))))
        }
    }
}

/// Sends one logical HTTP request with rate limiting and retry. Shared by the HTTP providers.
#[derive(Clone)]
pub struct RetryingSender {
    http: Client,
    policy: RetryPolicy,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    request_timeout: Duration,
}

impl std::fmt::Debug for RetryingSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryingSender")
            .field("policy", &self.policy)
            .field("rate_limited", &self.limiter.is_some())
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl RetryingSender {
    /// A sender over `http`; `request_timeout` bounds the wait for response headers of each
    /// attempt (a timeout counts as a network error).
    pub fn new(
        http: Client,
        policy: RetryPolicy,
        limiter: Option<Arc<DefaultDirectRateLimiter>>,
        request_timeout: Duration,
    ) -> Self {
        Self {
            http,
            policy,
            limiter,
            request_timeout,
        }
    }

    /// Sends the request built by `build` until a 2xx arrives (returned with its body unread),
    /// a non-retryable outcome occurs, the re-sends run out, or `cancel` fires. Non-2xx final
    /// answers are turned into errors by `classify(status, body)`.
    pub async fn send(
        &self,
        cancel: &CancellationToken,
        build: impl Fn(&Client) -> RequestBuilder,
        classify: impl Fn(u16, String) -> ProviderError,
    ) -> Result<Response, ProviderError> {
        self.acquire(cancel).await?;
        let mut resend = 0u32;
        loop {
            let attempt = tokio::time::timeout(self.request_timeout, build(&self.http).send());
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                outcome = attempt => outcome,
            };
            let retry_delay = match outcome {
                Ok(Ok(response)) if response.status().is_success() => {
                    log_answer(&response, resend);
                    return Ok(response);
                }
                Ok(Ok(response)) => {
                    log_answer(&response, resend);
                    let status = response.status().as_u16();
                    if !is_retryable_status(status) || resend >= self.policy.max_resends() {
                        let body = tokio::select! {
                            biased;
                            () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                            body = error_body(response, self.request_timeout) => body,
                        };
                        return Err(classify(status, body));
                    }
                    let header = response
                        .headers()
                        .get(RETRY_AFTER)
                        .and_then(|value| value.to_str().ok())
                        .and_then(retry_after_delay);
                    tracing::warn!(status, resend, "provider answered a retryable status");
                    header.unwrap_or_else(|| self.policy.delay(resend))
                }
                Ok(Err(error)) => {
                    if error.is_builder() {
                        return Err(ProviderError::Config(error.to_string()));
                    }
                    let message = error_chain(&error);
                    if resend >= self.policy.max_resends() {
                        return Err(ProviderError::Network(message));
                    }
                    tracing::warn!(resend, error = %message, "provider request failed");
                    self.policy.delay(resend)
                }
                Err(_elapsed) => {
                    let message = format!("no response headers within {:?}", self.request_timeout);
                    if resend >= self.policy.max_resends() {
                        return Err(ProviderError::Network(message));
                    }
                    tracing::warn!(resend, error = %message, "provider request timed out");
                    self.policy.delay(resend)
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                () = tokio::time::sleep(retry_delay) => {}
            }
            resend += 1;
        }
    }

    /// Waits for the rate limiter (once per logical request), honouring cancellation.
    async fn acquire(&self, cancel: &CancellationToken) -> Result<(), ProviderError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        loop {
            if cancel.is_cancelled() {
                return Err(ProviderError::Cancelled);
            }
            match limiter.check() {
                Ok(()) => return Ok(()),
                Err(not_until) => {
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return Err(ProviderError::Cancelled),
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }
}

/// The error and its sources on one line (reqwest hides the useful part in the sources).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Whether an item carries model output (anything but usage and the stop reason).
fn is_content(item: &StreamItem) -> bool {
    !matches!(item, StreamItem::Usage(_) | StreamItem::Stop(_))
}

/// What [`peek_content`] found at the head of a stream.
enum Peeked {
    /// Content (or an error) arrived: the stream, replayed from its start.
    Content(ItemStream),
    /// The stream ended without any content.
    Empty,
}

/// Reads items until the first content item or error, without losing any.
async fn peek_content(mut stream: ItemStream) -> Peeked {
    let mut head = Vec::new();
    while let Some(item) = stream.next().await {
        let decisive = match &item {
            Ok(item) => is_content(item),
            Err(_) => true,
        };
        head.push(item);
        if decisive {
            return Peeked::Content(futures::stream::iter(head).chain(stream).boxed());
        }
    }
    Peeked::Empty
}

/// The separate, default-off "empty response → resend" retry (N20). With `enabled`, the head of
/// the stream is read until the first content item; a stream that ends with no content at all
/// is opened once more with `open`, and a second empty stream is [`ProviderError::EmptyResponse`].
/// Nothing has been handed to the caller before the resend, so no partial event is duplicated.
pub async fn resend_on_empty<F, Fut>(enabled: bool, open: F) -> Result<ItemStream, ProviderError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<ItemStream, ProviderError>>,
{
    let stream = open().await?;
    if !enabled {
        return Ok(stream);
    }
    if let Peeked::Content(stream) = peek_content(stream).await {
        return Ok(stream);
    }
    tracing::warn!("provider returned an empty response; re-sending once");
    match peek_content(open().await?).await {
        Peeked::Content(stream) => Ok(stream),
        Peeked::Empty => Err(ProviderError::EmptyResponse),
    }
}

/// The most of an error answer's body read: it becomes the error's text (the terminal
/// event's message), and a provider's URL may be a tenant's (see "Providers").
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The first [`MAX_ERROR_BODY_BYTES`] of an error answer's body as text (lossy), read for at
/// most `within`: an endless or stalled error body ends the read, not the run.
async fn error_body(mut response: reqwest::Response, within: Duration) -> String {
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_ERROR_BODY_BYTES - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() == MAX_ERROR_BODY_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    String::from_utf8_lossy(&body).into_owned()
}
