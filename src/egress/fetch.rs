//! The broker's GET: what WebFetch (and search backends) send through.
//!
//! - Every hop is decided by [`EgressPolicy::decide`] and connects only to the addresses it
//!   returned: each hop's client resolves nothing itself (its resolver refuses every name; the
//!   checked addresses are handed to it with `resolve_to_addrs`).
//! - Redirects are followed here, never by `reqwest`, at most `max_redirects` hops, each hop
//!   decided again. A hop to another origin (scheme, host or port) is followed only when an
//!   allow rule lists its host; otherwise the answer is `redirect_denied` naming the target, so
//!   the model can ask for it directly — through the permission ladder. Credentials (URL
//!   user info) are dropped on a cross-origin hop; no other credential is ever sent.
//! - One overall deadline bounds the whole fetch (every hop, every byte), and the body is
//!   capped while streaming (a larger `Content-Length` is refused before reading).
//! - Proxy variables of the environment are ignored.
//! - Every hop is recorded as an `egress` event through the [`EgressRecorder`].

use super::policy::{EgressContext, EgressPolicy, EgressRefusal, RefusalReason};
use reqwest::dns::{Name, Resolve, Resolving};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The bounds of one fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchLimits {
    /// One deadline for the whole fetch: every hop, connecting, and reading every byte.
    pub deadline: Duration,
    /// The largest body read.
    pub max_bytes: usize,
    /// Redirects followed before `redirect_denied`.
    pub max_redirects: usize,
}

/// A fetched answer (2xx).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The URL that answered (after same-origin or listed redirects).
    pub url: url::Url,
    pub status: u16,
    /// The `Content-Type` header, lowercase, without parameters.
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// One outbound request as recorded in the session's transcript (event kind `egress`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EgressEvent {
    /// `web_fetch`, `web_search`, …
    pub purpose: &'static str,
    pub host: String,
    pub port: u16,
    /// `allowed` or `denied` (`failed` for hooks and webhooks, see the client).
    pub decision: &'static str,
    /// Why it was denied or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<RefusalReason>,
    /// The egress rule that listed or denied the host, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The HTTP status, when an answer came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Body bytes read (for a command's connection, every byte relayed in).
    pub bytes: u64,
    /// Bytes sent, where counted (a request body, a command's connection).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_out: Option<u64>,
    /// 0 for the request itself, 1.. for redirect hops.
    pub hop: usize,
    /// The tool call that made the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
}

impl From<EgressEvent> for crate::run_event::Egress {
    fn from(event: EgressEvent) -> Self {
        Self {
            purpose: event.purpose.to_owned(),
            host: event.host,
            port: event.port,
            decision: event.decision.to_owned(),
            reason: event.reason.map(|reason| reason.as_str().to_owned()),
            rule: event.rule,
            status: event.status,
            bytes: event.bytes,
            bytes_out: event.bytes_out,
            hop: event.hop,
            tool_use_id: event.tool_use_id,
        }
    }
}

/// Where egress events go (the run's transcript).
#[async_trait::async_trait]
pub trait EgressRecorder: Send + Sync {
    async fn record(&self, event: EgressEvent);
}

/// Judges a redirect hop to another origin that no allow rule lists: the caller's permission
/// ladder (WebFetch: `WebFetch(domain:…)` rules and the session's grants).
pub trait HopGate: Send + Sync {
    /// What allows following a hop to `url` (a rule or a grant), or `Err` with why not.
    fn allows(&self, url: &url::Url) -> Result<String, String>;
}

impl<F> HopGate for F
where
    F: Fn(&url::Url) -> Result<String, String> + Send + Sync,
{
    fn allows(&self, url: &url::Url) -> Result<String, String> {
        self(url)
    }
}

/// Follows no unlisted cross-origin hop (search backends, tests).
pub struct NoHops;

impl HopGate for NoHops {
    fn allows(&self, _url: &url::Url) -> Result<String, String> {
        Err("no allow rule lists it".into())
    }
}

/// Records nothing (tests, callers without a transcript).
pub struct NoRecorder;

#[async_trait::async_trait]
impl EgressRecorder for NoRecorder {
    async fn record(&self, _event: EgressEvent) {}
}

/// The egress broker: the policy plus the request machinery.
#[derive(Clone, Debug)]
pub struct EgressBroker {
    policy: Arc<EgressPolicy>,
}

/// A resolver that resolves nothing: hop clients only reach the addresses handed to them.
struct NoResolver;

impl Resolve for NoResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move { Err(format!("{host} was not decided by the egress policy").into()) })
    }
}

impl EgressBroker {
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        Self { policy }
    }

    pub fn policy(&self) -> &Arc<EgressPolicy> {
        &self.policy
    }

    /// GETs `url` for `purpose`, within `limits`, recording each hop.
    pub async fn get(
        &self,
        ctx: &EgressContext<'_>,
        purpose: &'static str,
        url: &url::Url,
        limits: FetchLimits,
        recorder: &dyn EgressRecorder,
        hops: &dyn HopGate,
    ) -> Result<Fetched, EgressRefusal> {
        let headers = reqwest::header::HeaderMap::new();
        let request = GetRequest {
            purpose,
            url,
            headers: &headers,
            limits,
        };
        self.get_with(ctx, request, recorder, hops).await
    }

    /// [`EgressBroker::get`] sending `headers` too (a search backend's key): only to the
    /// origin of `url`, never on a hop to another origin.
    pub async fn get_with(
        &self,
        ctx: &EgressContext<'_>,
        request: GetRequest<'_>,
        recorder: &dyn EgressRecorder,
        hops: &dyn HopGate,
    ) -> Result<Fetched, EgressRefusal> {
        let GetRequest {
            purpose,
            url,
            limits,
            ..
        } = request;
        let mut current = (host_of(url), url.port_or_known_default().unwrap_or(0), 0);
        let result = tokio::time::timeout(
            limits.deadline,
            self.follow(ctx, &request, recorder, hops, &mut current),
        )
        .await;
        match result {
            Ok(done) => done,
            Err(_) => {
                let (host, port, hop) = current;
                recorder
                    .record(EgressEvent {
                        purpose,
                        host,
                        port,
                        decision: "denied",
                        reason: Some(RefusalReason::Timeout),
                        rule: None,
                        status: None,
                        bytes: 0,
                        bytes_out: None,
                        hop,
                        tool_use_id: None,
                    })
                    .await;
                Err(EgressRefusal::new(
                    RefusalReason::Timeout,
                    format!("no complete answer within {:?}", limits.deadline),
                ))
            }
        }
    }

    async fn follow(
        &self,
        ctx: &EgressContext<'_>,
        request: &GetRequest<'_>,
        recorder: &dyn EgressRecorder,
        hops: &dyn HopGate,
        current: &mut (String, u16, usize),
    ) -> Result<Fetched, EgressRefusal> {
        let GetRequest {
            purpose,
            url: start,
            headers,
            limits,
        } = *request;
        let mut url = start.clone();
        for hop in 0..=limits.max_redirects {
            let host = host_of(&url);
            let port = url.port_or_known_default().unwrap_or(0);
            *current = (host.clone(), port, hop);
            let event = |decision, reason, rule: Option<String>, status, bytes| EgressEvent {
                purpose,
                host: host.clone(),
                port,
                decision,
                reason,
                rule,
                status,
                bytes,
                bytes_out: None,
                hop,
                tool_use_id: None,
            };
            let pinned = match self.policy.decide(ctx, url.scheme(), &host, port).await {
                Ok(pinned) => pinned,
                Err(mut refusal) => {
                    recorder
                        .record(event(
                            "denied",
                            Some(refusal.reason),
                            refusal.rule.clone(),
                            None,
                            0,
                        ))
                        .await;
                    if hop > 0 {
                        refusal.message = format!(
                            "a redirect led to {url}, which is refused: {}",
                            refusal.message
                        );
                        refusal.reason = RefusalReason::RedirectDenied;
                    }
                    return Err(refusal);
                }
            };
            let mut rule = pinned.listed_by.clone();
            if hop > 0 && !same_origin(start, &url) && rule.is_none() {
                match hops.allows(&url) {
                    Ok(allowed_by) => rule = Some(allowed_by),
                    Err(why) => {
                        recorder
                            .record(event(
                                "denied",
                                Some(RefusalReason::RedirectDenied),
                                None,
                                None,
                                0,
                            ))
                            .await;
                        return Err(EgressRefusal::new(
                            RefusalReason::RedirectDenied,
                            format!(
                                "{start} redirects to another site, {url}, which is not \
                                 allowed ({why}); fetch that URL directly to ask for it"
                            ),
                        ));
                    }
                }
            }
            let empty = reqwest::header::HeaderMap::new();
            let headers = if same_origin(start, &url) {
                headers
            } else {
                &empty
            };
            let response = match send(&url, &pinned.addrs, headers).await {
                Ok(response) => response,
                Err(refusal) => {
                    recorder
                        .record(event("denied", Some(refusal.reason), rule, None, 0))
                        .await;
                    return Err(refusal);
                }
            };
            let status = response.status();
            if status.is_redirection() {
                recorder
                    .record(event("allowed", None, rule, Some(status.as_u16()), 0))
                    .await;
                let next = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|location| location.to_str().ok())
                    .and_then(|location| url.join(location).ok())
                    .ok_or_else(|| {
                        EgressRefusal::new(
                            RefusalReason::Unreachable,
                            format!("{url} answered {status} without a usable Location"),
                        )
                    })?;
                let mut next = next;
                if !same_origin(&url, &next) {
                    // Credentials never cross origins.
                    let _ = next.set_username("");
                    let _ = next.set_password(None);
                }
                url = next;
                continue;
            }
            if !status.is_success() {
                recorder
                    .record(event(
                        "allowed",
                        Some(RefusalReason::Unreachable),
                        rule,
                        Some(status.as_u16()),
                        0,
                    ))
                    .await;
                return Err(EgressRefusal::new(
                    RefusalReason::Unreachable,
                    format!("{url} answered HTTP {}", status.as_u16()),
                ));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .map(|value| {
                    value
                        .split(';')
                        .next()
                        .unwrap_or_default()
                        .trim()
                        .to_ascii_lowercase()
                });
            return match read_capped(response, limits.max_bytes).await {
                Ok(body) => {
                    recorder
                        .record(event(
                            "allowed",
                            None,
                            rule,
                            Some(status.as_u16()),
                            body.len() as u64,
                        ))
                        .await;
                    Ok(Fetched {
                        url,
                        status: status.as_u16(),
                        content_type,
                        body,
                    })
                }
                Err((refusal, bytes)) => {
                    recorder
                        .record(event(
                            "denied",
                            Some(refusal.reason),
                            rule,
                            Some(status.as_u16()),
                            bytes,
                        ))
                        .await;
                    Err(refusal)
                }
            };
        }
        recorder
            .record(EgressEvent {
                purpose,
                host: host_of(&url),
                port: url.port_or_known_default().unwrap_or(0),
                decision: "denied",
                reason: Some(RefusalReason::RedirectDenied),
                rule: None,
                status: None,
                bytes: 0,
                bytes_out: None,
                hop: limits.max_redirects + 1,
                tool_use_id: None,
            })
            .await;
        Err(EgressRefusal::new(
            RefusalReason::RedirectDenied,
            format!("more than {} redirects", limits.max_redirects),
        ))
    }
}

/// One GET of the broker: what for, where, extra headers (sent to the first origin only),
/// and its bounds.
#[derive(Clone, Copy)]
pub struct GetRequest<'a> {
    pub purpose: &'static str,
    pub url: &'a url::Url,
    pub headers: &'a reqwest::header::HeaderMap,
    pub limits: FetchLimits,
}

/// The URL's host as the policy sees it (IPv6 in brackets).
fn host_of(url: &url::Url) -> String {
    url.host().map(|host| host.to_string()).unwrap_or_default()
}

fn same_origin(a: &url::Url, b: &url::Url) -> bool {
    a.origin() == b.origin()
}

/// Sends one GET to `url`, connecting only to `addrs`.
async fn send(
    url: &url::Url,
    addrs: &[std::net::SocketAddr],
    headers: &reqwest::header::HeaderMap,
) -> Result<reqwest::Response, EgressRefusal> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .user_agent(concat!("norma-webfetch/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(NoResolver));
    if let Some(url::Host::Domain(name)) = url.host() {
        builder = builder.resolve_to_addrs(name, addrs);
    }
    let client = builder.build().map_err(|error| {
        EgressRefusal::new(RefusalReason::Unreachable, "the request could not be built")
            .with_detail(error.to_string())
    })?;
    client
        .get(url.clone())
        .header(
            reqwest::header::ACCEPT,
            "text/html, text/markdown, text/plain, application/json;q=0.9, */*;q=0.5",
        )
        .headers(headers.clone())
        .send()
        .await
        .map_err(|error| {
            EgressRefusal::new(
                RefusalReason::Unreachable,
                format!("{} could not be reached", host_of(url)),
            )
            .with_detail(error.to_string())
        })
}

/// Reads the body, refusing it past `cap` bytes (before reading, when `Content-Length` says
/// so). On error, also the bytes read.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, (EgressRefusal, u64)> {
    let too_large = || {
        EgressRefusal::new(
            RefusalReason::TooLarge,
            format!("the answer is larger than {cap} bytes"),
        )
    };
    if response
        .content_length()
        .is_some_and(|length| length > cap as u64)
    {
        return Err((too_large(), 0));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err((too_large(), body.len() as u64));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) => {
                return Err((
                    EgressRefusal::new(RefusalReason::Unreachable, "the answer broke off")
                        .with_detail(error.to_string()),
                    body.len() as u64,
                ));
            }
        }
    }
}
