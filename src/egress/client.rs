//! The outbound HTTP client: one `reqwest` client whose DNS resolver checks every address
//! it returns, so the connection is pinned to the checked addresses.
//!
//! - **Addresses.** A host name is resolved once, by [`CheckedResolver`]; if any of its
//!   addresses is refused by the [`AddressPolicy`] the whole name is refused (a name that
//!   mixes a public and a private address cannot be used to reach the private one), and the
//!   connector only ever connects to the addresses the resolver returned — there is no second
//!   lookup between the check and the connection. A URL whose host is an IP literal never
//!   reaches a resolver, so [`EgressClient::post`] checks it the same way before sending.
//! - **No proxies, no redirects.** Proxy variables of the environment (`HTTP_PROXY`,
//!   `HTTPS_PROXY`, `ALL_PROXY`) are ignored, so a request goes straight to the checked address;
//!   a 3xx answer is returned as it is, never followed.
//! - **Bounded.** Each request has a total deadline (connect, send, and reading the answer)
//!   and a cap on the answer's body, enforced while streaming (the body is never buffered past
//!   the cap; a larger `Content-Length` is refused before reading). Idle pooled connections
//!   are few per host ([`MAX_IDLE_PER_HOST`]) and short-lived ([`IDLE_TIMEOUT`]), so tenants
//!   pointing hooks at many hosts cannot pile up open sockets.

use super::address::AddressPolicy;
use super::fetch::{EgressEvent, EgressRecorder};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::error::Error as StdError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Idle pooled connections kept per host.
pub const MAX_IDLE_PER_HOST: usize = 4;
/// How long an idle pooled connection is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// What an outbound request is for (log lines name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A session's remote hook.
    RemoteHook,
    /// A session's approval webhook (policy service).
    ApprovalWebhook,
    /// An event notification to a tenant's webhook subscription.
    EventWebhook,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RemoteHook => "remote_hook",
            Self::ApprovalWebhook => "approval_webhook",
            Self::EventWebhook => "event_webhook",
        }
    }
}

/// The bounds of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Total time: resolving, connecting, sending, and reading the whole answer.
    pub timeout: Duration,
    /// The largest answer body read.
    pub max_response_bytes: usize,
}

/// An answer: its status and, for a 2xx, its body (capped). The body of any other status is
/// discarded unread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: reqwest::StatusCode,
    pub body: Vec<u8>,
}

/// Why an outbound request failed. The text names hosts and addresses: it is for the server
/// log, never for a tenant.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("invalid url: {0}")]
    InvalidUrl(String),
    #[error("{host} is refused: {ip} is {range}")]
    Refused {
        host: String,
        ip: IpAddr,
        range: &'static str,
    },
    #[error("cannot resolve {host}: {detail}")]
    Resolve { host: String, detail: String },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("request failed: {0}")]
    Transport(String),
    #[error("could not build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    #[error("invalid egress settings: {0}")]
    Config(String),
}

impl EgressError {
    /// A failure that retrying cannot fix (the destination is refused or malformed).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Self::InvalidUrl(_) | Self::Refused { .. } | Self::Build(_) | Self::Config(_)
        )
    }
}

/// The bounds of a streaming answer (a model provider's): no single deadline, but a limit on
/// the silence between two reads and a limit on the whole exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// The longest wait for the next bytes (of the answer's head or body).
    pub idle: Duration,
    /// The longest whole exchange, from connecting to the last byte.
    pub total: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(120),
            total: Duration::from_secs(900),
        }
    }
}

/// The shared outbound client. Cheap to clone (one connection pool behind an `Arc`).
#[derive(Clone)]
pub struct EgressClient {
    http: reqwest::Client,
    /// The client of model providers: the same resolver, no proxies, no redirects, with
    /// [`StreamLimits`] instead of one deadline.
    streaming: reqwest::Client,
    policy: AddressPolicy,
    /// Where each request is recorded as an `egress` event (a run's transcript), if anywhere.
    recorder: Option<Arc<dyn EgressRecorder>>,
}

impl std::fmt::Debug for EgressClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressClient")
            .field("policy", &self.policy)
            .field("records", &self.recorder.is_some())
            .finish()
    }
}

impl EgressClient {
    /// A client that may reach what `policy` allows (streams with default [`StreamLimits`]).
    pub fn new(policy: AddressPolicy) -> Result<Self, EgressError> {
        Self::with_stream_limits(policy, StreamLimits::default())
    }

    /// A client that may reach what `policy` allows, streaming within `limits`.
    pub fn with_stream_limits(
        policy: AddressPolicy,
        limits: StreamLimits,
    ) -> Result<Self, EgressError> {
        let base = || {
            reqwest::Client::builder()
                .no_proxy()
                .redirect(reqwest::redirect::Policy::none())
                .pool_idle_timeout(IDLE_TIMEOUT)
                .dns_resolver(Arc::new(CheckedResolver {
                    policy: policy.clone(),
                }))
        };
        let http = base()
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .build()
            .map_err(EgressError::Build)?;
        let streaming = base()
            .read_timeout(limits.idle)
            .timeout(limits.total)
            .build()
            .map_err(EgressError::Build)?;
        Ok(Self {
            http,
            streaming,
            policy,
            recorder: None,
        })
    }

    /// The HTTP client of model providers (infrastructure traffic): every name it resolves is
    /// checked and pinned like any other request here, it ignores proxies and never follows
    /// redirects, and it bounds a streaming answer by [`StreamLimits`]. An IP-literal
    /// endpoint never reaches the resolver: check it with [`EgressClient::check_endpoint`]
    /// when the provider is built.
    pub fn provider_http(&self) -> reqwest::Client {
        self.streaming.clone()
    }

    /// The checked client (same resolver, pool, no proxies, no redirects) without a deadline
    /// of its own, for a caller that bounds each exchange itself: MCP over Streamable HTTP
    /// (each call has its server's timeout; event streams live as long as the connection).
    /// An IP-literal URL never reaches the resolver: check it with
    /// [`EgressClient::check_endpoint`] before each request.
    pub fn self_bounded_http(&self) -> reqwest::Client {
        self.http.clone()
    }

    /// Refuses an endpoint URL the policy refuses when its host is an IP literal (a host
    /// name is checked when it is resolved), or that is not `http(s)` with a host.
    pub fn check_endpoint(&self, url: &str) -> Result<(), EgressError> {
        let url =
            url::Url::parse(url).map_err(|error| EgressError::InvalidUrl(error.to_string()))?;
        self.check_url(&url)
    }

    /// The same client (same pool), recording each request into `recorder`.
    pub fn recording(&self, recorder: Arc<dyn EgressRecorder>) -> Self {
        Self {
            recorder: Some(recorder),
            ..self.clone()
        }
    }

    /// The address policy every request is checked against.
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }

    /// POSTs `body` to `url` with `headers`, within `limits`.
    pub async fn post(
        &self,
        purpose: Purpose,
        url: &url::Url,
        headers: reqwest::header::HeaderMap,
        body: Vec<u8>,
        limits: RequestLimits,
    ) -> Result<Answer, EgressError> {
        let sent = body.len() as u64;
        let result = self
            .post_unrecorded(purpose, url, headers, body, limits)
            .await;
        if let Some(recorder) = &self.recorder {
            recorder
                .record(infrastructure_event(purpose, url, sent, &result))
                .await;
        }
        result
    }

    async fn post_unrecorded(
        &self,
        purpose: Purpose,
        url: &url::Url,
        headers: reqwest::header::HeaderMap,
        body: Vec<u8>,
        limits: RequestLimits,
    ) -> Result<Answer, EgressError> {
        self.check_url(url)?;
        let request = self
            .http
            .post(url.clone())
            .headers(headers)
            .body(body)
            .send();
        let exchange = async {
            let response = request.await.map_err(|error| classify(url, &error))?;
            read_answer(url, response, limits.max_response_bytes).await
        };
        let answer = tokio::time::timeout(limits.timeout, exchange)
            .await
            .map_err(|_| EgressError::Timeout(limits.timeout))??;
        tracing::debug!(
            purpose = purpose.as_str(),
            host = url.host_str().unwrap_or_default(),
            status = answer.status.as_u16(),
            bytes = answer.body.len(),
            "outbound request"
        );
        Ok(answer)
    }

    /// Scheme, host, and an IP-literal host checked against the policy (a
    /// host name is checked by the resolver).
    fn check_url(&self, url: &url::Url) -> Result<(), EgressError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(EgressError::InvalidUrl(format!(
                "scheme {:?} is not http(s)",
                url.scheme()
            )));
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        let literal = match url.host() {
            None => return Err(EgressError::InvalidUrl("no host".into())),
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            Some(url::Host::Domain(name)) => name.parse::<IpAddr>().ok(),
        };
        if let Some(ip) = literal {
            self.policy
                .check(ip)
                .map_err(|range| EgressError::Refused { host, ip, range })?;
        }
        Ok(())
    }
}

/// The `egress` event of a hook or webhook request. It tells the tenant no more than the
/// tenant-facing codes do (`HOOK_FAILED`, `WEBHOOK_FAILED`): a 2xx answer is `allowed` with
/// its status and size; every failure — a refused address, a closed or silent port, another
/// status, an oversized answer — is the same `failed`, without reason or status, so events
/// cannot be used to learn which internal addresses or ports answer (the detail is logged).
fn infrastructure_event(
    purpose: Purpose,
    url: &url::Url,
    sent: u64,
    result: &Result<Answer, EgressError>,
) -> EgressEvent {
    let (decision, status, bytes) = match result {
        Ok(answer) if answer.status.is_success() => (
            "allowed",
            Some(answer.status.as_u16()),
            answer.body.len() as u64,
        ),
        _ => ("failed", None, 0),
    };
    EgressEvent {
        purpose: purpose.as_str(),
        host: url.host().map(|host| host.to_string()).unwrap_or_default(),
        port: url.port_or_known_default().unwrap_or(0),
        decision,
        reason: None,
        rule: None,
        status,
        bytes,
        bytes_out: Some(sent),
        hop: 0,
        tool_use_id: None,
    }
}

/// Reads the answer of `response`: the body of a 2xx, streamed and capped.
async fn read_answer(
    url: &url::Url,
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Answer, EgressError> {
    let status = response.status();
    if !status.is_success() {
        return Ok(Answer {
            status,
            body: Vec::new(),
        });
    }
    if response
        .content_length()
        .is_some_and(|length| length > cap as u64)
    {
        return Err(EgressError::TooLarge(cap));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| classify(url, &error))?
    {
        if body.len() + chunk.len() > cap {
            return Err(EgressError::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer { status, body })
}

/// What a failed request of [`EgressClient::self_bounded_http`] was: an address the policy
/// refuses, a name that does not resolve, or another transport failure.
pub fn classify_error(url: &url::Url, error: &reqwest::Error) -> EgressError {
    classify(url, error)
}

/// Turns a `reqwest` error into an [`EgressError`], recognising the resolver's refusals.
fn classify(url: &url::Url, error: &reqwest::Error) -> EgressError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<ResolveError>() {
            return match refused {
                ResolveError::Refused { host, ip, range } => EgressError::Refused {
                    host: host.clone(),
                    ip: *ip,
                    range,
                },
                ResolveError::Lookup { host, detail } => EgressError::Resolve {
                    host: host.clone(),
                    detail: detail.clone(),
                },
            };
        }
        source = cause.source();
    }
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    let host = url.host_str().unwrap_or_default();
    EgressError::Transport(format!("{host}: {text}"))
}

/// Why the resolver gave no address.
#[derive(Debug, thiserror::Error)]
enum ResolveError {
    #[error("{host} is refused: {ip} is {range}")]
    Refused {
        host: String,
        ip: IpAddr,
        range: &'static str,
    },
    #[error("cannot resolve {host}: {detail}")]
    Lookup { host: String, detail: String },
}

/// Resolves a host once and refuses it when any of its addresses is refused by the policy.
struct CheckedResolver {
    policy: AddressPolicy,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addresses = resolve_checked(&policy, &host).await?;
            Ok(Box::new(addresses.into_iter()) as Addrs)
        })
    }
}

async fn resolve_checked(
    policy: &AddressPolicy,
    host: &str,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let lookup = |detail: String| ResolveError::Lookup {
        host: host.to_owned(),
        detail,
    };
    let mut addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
        .await
        .map_err(|error| lookup(error.to_string()))?
        .collect();
    addresses.dedup();
    check_addresses(policy, host, &addresses)?;
    Ok(addresses)
}

/// Refuses `host` when it has no address or when any of them is refused by `policy`.
fn check_addresses(
    policy: &AddressPolicy,
    host: &str,
    addresses: &[SocketAddr],
) -> Result<(), ResolveError> {
    if addresses.is_empty() {
        return Err(ResolveError::Lookup {
            host: host.to_owned(),
            detail: "no address".into(),
        });
    }
    for address in addresses {
        policy
            .check(address.ip())
            .map_err(|range| ResolveError::Refused {
                host: host.to_owned(),
                ip: address.ip(),
                range,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_unless_private_is_allowed() {
        let error = resolve_checked(&AddressPolicy::PublicOnly, "localhost")
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ResolveError::Refused { host, range, .. }
                if host == "localhost" && range.contains("loopback")),
            "{error}"
        );
        let addresses = resolve_checked(&AddressPolicy::AllowPrivate, "localhost")
            .await
            .unwrap();
        assert!(addresses.iter().all(|a| a.ip().is_loopback()));
    }

    #[test]
    fn one_non_public_address_refuses_the_whole_name() {
        let public: SocketAddr = "93.184.216.34:0".parse().unwrap();
        let metadata: SocketAddr = "169.254.169.254:0".parse().unwrap();
        let ula: SocketAddr = "[fd00::1]:0".parse().unwrap();
        let strict = &AddressPolicy::PublicOnly;
        assert!(check_addresses(strict, "ok.example", &[public]).is_ok());
        for mixed in [[public, metadata], [metadata, public], [public, ula]] {
            let error = check_addresses(strict, "rebind.example", &mixed).unwrap_err();
            assert!(
                matches!(error, ResolveError::Refused { ip, .. } if ip != public.ip()),
                "{error}"
            );
        }
        assert!(check_addresses(&AddressPolicy::AllowPrivate, "lab", &[public, metadata]).is_ok());
        assert!(matches!(
            check_addresses(strict, "empty.example", &[]),
            Err(ResolveError::Lookup { .. })
        ));
    }

    #[tokio::test]
    async fn ip_literal_urls_are_checked_before_sending() {
        let client = EgressClient::new(AddressPolicy::PublicOnly).unwrap();
        for url in [
            "http://127.0.0.1:1/x",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]:1/",
            "http://[::ffff:10.0.0.1]/",
            "http://0x7f.1:1/",
        ] {
            let url = url::Url::parse(url).unwrap();
            let error = client.check_url(&url).unwrap_err();
            assert!(
                matches!(error, EgressError::Refused { .. }),
                "{url}: {error}"
            );
            assert!(error.is_permanent());
        }
        let url = url::Url::parse("ftp://example.com/").unwrap();
        assert!(matches!(
            client.check_url(&url),
            Err(EgressError::InvalidUrl(_))
        ));
        let url = url::Url::parse("https://example.com/hook").unwrap();
        assert!(client.check_url(&url).is_ok());
    }
}
