//! The egress policy: whether a destination (scheme, host, port) may be reached, and at which
//! addresses. One function, [`EgressPolicy::decide`], answers for every caller: WebFetch, and
//! the command proxy that gives Bash network (it calls `decide` for each CONNECT or plain-HTTP
//! request and connects only to the addresses it returns).
//!
//! The decision, in order:
//!
//! 1. **Scheme.** Only `http` and `https` (reason `invalid_url`).
//! 2. **Lists** (tool traffic only). Domain rules of the server (`[egress] allow/deny`), of the
//!    tenant (`[egress.tenants.<id>]`) and of the session (`egress.allow/deny` in its config):
//!    `domain:docs.rs`, `domain:*.example.com` (any subdomain, not the name itself), optionally
//!    with an exact port, `domain:docs.rs:443`. **Deny wins**: a host matched by any deny rule
//!    is refused (reason `not_allowed`, the rule named), whatever any allow rule says. A host
//!    an allow rule matches is *listed*; a host no rule matches is *unlisted*, and the caller
//!    sends it up the permission ladder like any tool call (`WebFetch(domain:…)` rules, grants,
//!    the approval callback, the policy webhook) — so "allow this domain for the session" is
//!    a grant.
//! 3. **Addresses.** The host is resolved once; if **any** of its addresses is not public (see
//!    [`super::address`]) and not inside a block the operator lists (`allow_private_cidrs`),
//!    the whole name is refused (reason `private_address`). An IP-literal host is checked the
//!    same way. The checked addresses are returned, and the caller connects only to them
//!    (there is no second resolution between the check and the connection: no DNS rebinding).
//!
//! Infrastructure traffic (operator-configured providers and search backends, session hooks
//! and webhooks) skips step 2 — it never goes up the permission ladder — but gets step 3.

use super::address::AddressPolicy;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Why a request was refused or failed; stable names shown to tenants in tool results and in
/// `egress` events (`reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Not an `http(s)` URL with a host.
    InvalidUrl,
    /// The host resolves to (or is) a non-public address outside the operator's list.
    PrivateAddress,
    /// A deny rule matches the host, or the permission ladder refused it.
    NotAllowed,
    /// A redirect led to a refused or unlisted destination, or past the hop limit.
    RedirectDenied,
    /// The answer is larger than the cap.
    TooLarge,
    /// No complete answer within the deadline.
    Timeout,
    /// The URL appeared nowhere in the conversation (exfiltration guard of WebFetch).
    UrlNotInContext,
    /// The answer's content type is not one WebFetch reads (binaries, PDF).
    UnsupportedContent,
    /// The host name does not resolve.
    Unresolvable,
    /// The connection failed or the server answered with an error status.
    Unreachable,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidUrl => "invalid_url",
            Self::PrivateAddress => "private_address",
            Self::NotAllowed => "not_allowed",
            Self::RedirectDenied => "redirect_denied",
            Self::TooLarge => "too_large",
            Self::Timeout => "timeout",
            Self::UrlNotInContext => "url_not_in_context",
            Self::UnsupportedContent => "unsupported_content",
            Self::Unresolvable => "unresolvable",
            Self::Unreachable => "unreachable",
        }
    }
}

/// A refused or failed outbound request. `message` is for the tenant (it never names the
/// internal address a host resolved to); `detail` is for the server log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("EGRESS_DENIED ({}): {message}", reason.as_str())]
pub struct EgressRefusal {
    pub reason: RefusalReason,
    /// The deny rule that matched, when one did.
    pub rule: Option<String>,
    pub message: String,
    pub detail: String,
}

impl EgressRefusal {
    pub fn new(reason: RefusalReason, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            reason,
            rule: None,
            detail: message.clone(),
            message,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }
}

/// A domain rule: `domain:HOST`, `domain:*.HOST`, either with an optional `:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainRule {
    text: String,
    /// Canonical host (lowercase, no trailing dot; IPv6 in brackets).
    host: String,
    /// `*.host`: any subdomain of `host`, not `host` itself.
    subdomains: bool,
    port: Option<u16>,
}

impl DomainRule {
    /// Parses `domain:HOST[:PORT]` / `domain:*.HOST[:PORT]`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |problem: &str| format!("egress rule `{text}`: {problem}");
        let spec = text
            .strip_prefix("domain:")
            .ok_or_else(|| bad("expected `domain:HOST`, `domain:*.HOST` or `domain:HOST:PORT`"))?;
        let (host, port) = split_port(spec).map_err(|problem| bad(&problem))?;
        let (subdomains, base) = match host.strip_prefix("*.") {
            Some(base) => (true, base),
            None => (false, host),
        };
        let base = base.strip_suffix('.').unwrap_or(base);
        if base.is_empty() {
            return Err(bad("missing host"));
        }
        if base.contains('*') {
            return Err(bad("`*` is only allowed as a leading `*.`"));
        }
        let parsed = url::Host::parse(base).map_err(|e| bad(&format!("`{base}`: {e}")))?;
        if subdomains && !matches!(parsed, url::Host::Domain(_)) {
            return Err(bad("`*.` needs a domain name, not an IP address"));
        }
        Ok(Self {
            text: text.to_owned(),
            host: parsed.to_string(),
            subdomains,
            port,
        })
    }

    /// Whether the rule matches a canonical host and port.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|wanted| wanted != port) {
            return false;
        }
        if self.subdomains {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
        } else {
            host == self.host
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Splits an optional trailing `:PORT` off a host (`[v6]:port` for IPv6).
fn split_port(spec: &str) -> Result<(&str, Option<u16>), String> {
    let port_of = |text: &str| {
        text.parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| format!("`{text}` is not a port (1-65535)"))
    };
    if let Some(rest) = spec.strip_prefix('[') {
        let close = rest.find(']').ok_or("unclosed `[`")?;
        let host = &spec[..close + 2];
        return match &rest[close + 1..] {
            "" => Ok((host, None)),
            tail => match tail.strip_prefix(':') {
                Some(port) => Ok((host, Some(port_of(port)?))),
                None => Err("unexpected text after `]`".into()),
            },
        };
    }
    match spec.rsplit_once(':') {
        Some((host, port)) => Ok((host, Some(port_of(port)?))),
        None => Ok((spec, None)),
    }
}

/// An allow list and a deny list of domain rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainLists {
    pub allow: Vec<DomainRule>,
    pub deny: Vec<DomainRule>,
}

impl DomainLists {
    /// Parses both lists; the first malformed rule is the error.
    pub fn parse(allow: &[String], deny: &[String]) -> Result<Self, String> {
        let parse = |rules: &[String]| {
            rules
                .iter()
                .map(|rule| DomainRule::parse(rule))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            allow: parse(allow)?,
            deny: parse(deny)?,
        })
    }
}

/// What the lists say of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListVerdict {
    /// A deny rule matched (deny wins).
    Denied(String),
    /// An allow rule matched and no deny rule did.
    Listed(String),
    /// No rule matched: the permission ladder decides.
    Unlisted,
}

/// Whose traffic a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// A tool or command of a tenant's session: decided by the lists and the ladder.
    Tool,
    /// An operator-configured provider or search backend, or a session's hook or webhook:
    /// address checks only.
    Infrastructure,
}

/// Who asks, for [`EgressPolicy::decide`].
#[derive(Clone, Copy, Debug)]
pub struct EgressContext<'a> {
    pub tenant: &'a str,
    /// The session's own lists (empty for infrastructure traffic).
    pub session: &'a DomainLists,
    pub traffic: Traffic,
}

/// A destination that passed: the addresses to connect to (and only them), and whether an
/// allow rule listed it (`None`: unlisted, the caller's permission ladder decides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinned {
    pub host: String,
    pub addrs: Vec<SocketAddr>,
    pub listed_by: Option<String>,
}

/// Resolves host names (the system resolver in production; a fixed table in tests).
#[async_trait::async_trait]
pub trait HostResolver: Send + Sync + std::fmt::Debug {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The system resolver (`getaddrinfo` through tokio).
#[derive(Debug, Default)]
pub struct SystemResolver;

#[async_trait::async_trait]
impl HostResolver for SystemResolver {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0))
            .await?
            .map(|address| address.ip())
            .collect())
    }
}

/// The server's egress policy: address rules, the server's and tenants' domain lists.
#[derive(Clone, Debug)]
pub struct EgressPolicy {
    addresses: AddressPolicy,
    server: DomainLists,
    tenants: BTreeMap<String, DomainLists>,
    resolver: Arc<dyn HostResolver>,
}

impl EgressPolicy {
    pub fn new(
        addresses: AddressPolicy,
        server: DomainLists,
        tenants: BTreeMap<String, DomainLists>,
    ) -> Self {
        Self {
            addresses,
            server,
            tenants,
            resolver: Arc::new(SystemResolver),
        }
    }

    /// The same policy resolving names with `resolver` (tests).
    pub fn with_resolver(mut self, resolver: Arc<dyn HostResolver>) -> Self {
        self.resolver = resolver;
        self
    }

    pub fn addresses(&self) -> &AddressPolicy {
        &self.addresses
    }

    /// What the server's, the tenant's and the session's lists say of `host:port`. Deny wins
    /// across all three.
    pub fn verdict(&self, ctx: &EgressContext<'_>, host: &str, port: u16) -> ListVerdict {
        let lists = [
            Some(&self.server),
            self.tenants.get(ctx.tenant),
            Some(ctx.session),
        ];
        let lists = lists.iter().flatten();
        let first = |pick: fn(&DomainLists) -> &Vec<DomainRule>| {
            lists
                .clone()
                .flat_map(|l| pick(l).iter())
                .find(|rule| rule.matches(host, port))
                .map(|rule| rule.as_str().to_owned())
        };
        if let Some(rule) = first(|l| &l.deny) {
            return ListVerdict::Denied(rule);
        }
        match first(|l| &l.allow) {
            Some(rule) => ListVerdict::Listed(rule),
            None => ListVerdict::Unlisted,
        }
    }

    /// Decides whether `scheme://host:port` may be reached and returns the checked addresses
    /// to connect to (see the module docs for the order of the checks).
    pub async fn decide(
        &self,
        ctx: &EgressContext<'_>,
        scheme: &str,
        host: &str,
        port: u16,
    ) -> Result<Pinned, EgressRefusal> {
        if !matches!(scheme, "http" | "https") {
            return Err(EgressRefusal::new(
                RefusalReason::InvalidUrl,
                format!("scheme {scheme:?} is not http or https"),
            ));
        }
        let host = canonical_host(host).ok_or_else(|| {
            EgressRefusal::new(RefusalReason::InvalidUrl, "the URL has no usable host")
        })?;
        let listed_by = match ctx.traffic {
            Traffic::Infrastructure => None,
            Traffic::Tool => match self.verdict(ctx, &host, port) {
                ListVerdict::Denied(rule) => {
                    let mut refusal = EgressRefusal::new(
                        RefusalReason::NotAllowed,
                        format!("{host} is denied by the egress rule `{rule}`"),
                    );
                    refusal.rule = Some(rule);
                    return Err(refusal);
                }
                ListVerdict::Listed(rule) => Some(rule),
                ListVerdict::Unlisted => None,
            },
        };
        let ips = match literal_ip(&host) {
            Some(ip) => vec![ip],
            None => {
                let ips = self.resolver.lookup(&host).await.map_err(|error| {
                    EgressRefusal::new(
                        RefusalReason::Unresolvable,
                        format!("{host} does not resolve"),
                    )
                    .with_detail(format!("cannot resolve {host}: {error}"))
                })?;
                if ips.is_empty() {
                    return Err(EgressRefusal::new(
                        RefusalReason::Unresolvable,
                        format!("{host} has no address"),
                    ));
                }
                ips
            }
        };
        for ip in &ips {
            if let Err(range) = self.addresses.check(*ip) {
                return Err(EgressRefusal::new(
                    RefusalReason::PrivateAddress,
                    format!("{host} resolves to a non-public address"),
                )
                .with_detail(format!("{host} is refused: {ip} is {range}")));
            }
        }
        let mut addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| (ip, port).into()).collect();
        addrs.dedup();
        Ok(Pinned {
            host,
            addrs,
            listed_by,
        })
    }
}

/// Lowercase, no trailing dot; `None` when empty.
pub fn canonical_host(host: &str) -> Option<String> {
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

/// The address of an IP-literal host (`127.0.0.1`, `[::1]`).
fn literal_ip(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
