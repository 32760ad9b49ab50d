//! The egress proxy of sandboxed commands (sessions with `network: "egress"`).
//!
//! A command of such a session has no network but a loopback forwarder
//! ([`crate::sandbox::egress_forwarder`]) to its session's [`ProxyEndpoint`]: a UNIX socket
//! the server listens on. The proxy speaks the two forms HTTP clients use with `HTTP_PROXY` /
//! `HTTPS_PROXY`:
//!
//! - `CONNECT host:port HTTP/1.1` — a tunnel (HTTPS, or any TCP protocol); answered
//!   `200 Connection Established`, then bytes are relayed both ways;
//! - an absolute-URI request, `GET http://host[:port]/path HTTP/1.1` — plain HTTP; the request
//!   line is rewritten to origin form, `Proxy-*`, `Connection` and `Keep-Alive` headers are
//!   dropped, `Connection: close` is added, and the rest is relayed (one request per
//!   proxied connection).
//!
//! **Every destination is decided by a [`ProxyGate`]**: the gate resolves the host once and
//! returns the addresses the proxy may connect to; the proxy connects to those (pinned) and to
//! nothing else, so a DNS answer cannot change between the decision and the connection. The
//! server's gate is [`PolicyGate`]: the one egress policy ([`crate::egress::EgressPolicy`]),
//! with the session's traffic as tool traffic (domain rules, then the address checks and the
//! operator's `egress.allow_private_cidrs`). A refused destination is answered `403` with the
//! code `EGRESS_DENIED` and the reason in a JSON body (`{"code": …, "message": …}`) — no
//! connection is attempted.
//!
//! **Bounded** ([`ProxyLimits`]): a request head is at most 16 KiB and must arrive within
//! 10 s (`431 EGRESS_HEADER_TOO_LARGE`, `408 EGRESS_TIMEOUT`); at most 32 connections per
//! session at once (more are answered `429 EGRESS_TUNNEL_LIMIT` right away); a destination
//! must accept the connection within 10 s (`502 EGRESS_CONNECT_FAILED`); a relayed
//! connection ends after 60 s without a byte either way, and after 10 minutes in any case.
//! Bytes are counted both ways.
//!
//! **Reported**: every connection ends in one [`ProxyRecord`] (destination, outcome, bytes)
//! given to the endpoint's [`ProxyObserver`] — the runtime logs it (`egress proxy` lines with
//! tenant and session) and records it as an `egress` event of the session.

mod endpoint;
pub mod gate;
mod head;
mod relay;

pub use endpoint::ProxyEndpoint;
pub use gate::{EGRESS_RESOLVE_FAILED, PolicyGate};

use async_trait::async_trait;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Code of a destination the gate refuses.
pub const EGRESS_DENIED: &str = "EGRESS_DENIED";

/// Why the gate refuses a destination (answered to the command as `403`, or `502` for a
/// name that does not resolve).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {reason}")]
pub struct ProxyRefusal {
    pub code: &'static str,
    pub reason: String,
    /// The egress rule that denied the destination, if one did.
    pub rule: Option<String>,
    /// The policy's reason, when the policy refused.
    pub why: Option<crate::egress::RefusalReason>,
}

impl ProxyRefusal {
    /// An `EGRESS_DENIED` refusal.
    pub fn denied(reason: impl Into<String>) -> Self {
        Self {
            code: EGRESS_DENIED,
            reason: reason.into(),
            rule: None,
            why: None,
        }
    }
}

/// A destination the gate allows: the addresses to connect to (only these), and the egress
/// rule that listed it, if one did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyDecision {
    pub addrs: Vec<SocketAddr>,
    pub rule: Option<String>,
}

/// Decides every destination of the proxy.
#[async_trait]
pub trait ProxyGate: Send + Sync {
    /// The addresses the proxy may connect to for `host:port` (resolved once; the proxy
    /// connects only to these), or why not. `scheme` is `https` for a CONNECT tunnel and
    /// `http` for a plain request.
    async fn decide(
        &self,
        scheme: &str,
        host: &str,
        port: u16,
    ) -> Result<ProxyDecision, ProxyRefusal>;
}

/// Bounds of one session's proxy.
#[derive(Clone, Debug)]
pub struct ProxyLimits {
    /// Largest request head (request line and headers).
    pub max_head_bytes: usize,
    /// Time to send the request head.
    pub head_timeout: Duration,
    /// Connections of the session at once (reading a head, deciding, relaying).
    pub max_connections: usize,
    /// Time to decide and connect to the destination.
    pub connect_timeout: Duration,
    /// A relayed connection ends after this long without a byte either way.
    pub idle_timeout: Duration,
    /// A relayed connection ends after this long in any case.
    pub max_duration: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            max_head_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(10),
            max_connections: 32,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_duration: Duration::from_secs(600),
        }
    }
}

/// How a proxied connection ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProxyOutcome {
    /// The destination was allowed and relayed (until either side closed, or a limit).
    Relayed {
        /// Why the relay ended: `closed`, `idle`, `max_duration` or `stopped`.
        ended: &'static str,
    },
    /// Refused before any connection to the destination (`code` as answered).
    Refused { code: &'static str, reason: String },
}

/// One proxied connection, as reported to the observer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProxyRecord {
    /// `CONNECT`, or the method of a plain HTTP request; empty when no head was read.
    pub method: String,
    /// The destination host (empty when no head was read).
    pub host: String,
    pub port: u16,
    #[serde(flatten)]
    pub outcome: ProxyOutcome,
    /// The egress rule that listed or denied the destination, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The policy's reason for a refusal, when the policy refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<crate::egress::RefusalReason>,
    /// Bytes from the command to the destination (the rewritten head included).
    pub bytes_out: u64,
    /// Bytes from the destination to the command.
    pub bytes_in: u64,
}

/// The `egress` event of a proxied connection (purpose `command`): `allowed` with the bytes
/// both ways, or `denied` with the policy's reason (`not_allowed`, `private_address`, …;
/// `unreachable` for a destination that did not accept, `unresolvable` for a name without
/// address, `invalid_url` for a malformed or oversized head, `timeout` for a slow head).
pub fn egress_event(record: &ProxyRecord) -> crate::egress::EgressEvent {
    use crate::egress::RefusalReason;
    let (decision, reason) = match &record.outcome {
        ProxyOutcome::Relayed { .. } => ("allowed", None),
        ProxyOutcome::Refused { code, .. } => (
            "denied",
            Some(match *code {
                EGRESS_DENIED => RefusalReason::NotAllowed,
                gate::EGRESS_RESOLVE_FAILED => RefusalReason::Unresolvable,
                "EGRESS_TIMEOUT" => RefusalReason::Timeout,
                "EGRESS_CONNECT_FAILED" | "EGRESS_TUNNEL_LIMIT" => RefusalReason::Unreachable,
                _ => RefusalReason::InvalidUrl,
            }),
        ),
    };
    let reason = record.why.or(reason);
    crate::egress::EgressEvent {
        purpose: "command",
        host: record.host.clone(),
        port: record.port,
        decision,
        reason,
        rule: record.rule.clone(),
        status: None,
        bytes: record.bytes_in,
        bytes_out: Some(record.bytes_out),
        hop: 0,
        tool_use_id: None,
    }
}

/// Receives one record per proxied connection (keep it cheap: it runs on the proxy's task).
pub type ProxyObserver = Arc<dyn Fn(ProxyRecord) + Send + Sync>;

/// What the proxy answers the command instead of relaying: one code per failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProxyError {
    #[error("{0}")]
    Refused(ProxyRefusal),
    #[error("malformed proxy request: {0}")]
    BadRequest(String),
    #[error("the request head exceeds {0} bytes")]
    HeadTooLarge(usize),
    #[error("the request head did not arrive in time")]
    HeadTimeout,
    #[error("too many proxied connections of this session at once (at most {0})")]
    TooManyConnections(usize),
    #[error("cannot connect to {0}")]
    ConnectFailed(String),
}

impl ProxyError {
    /// The HTTP status and code answered for this error.
    fn status_and_code(&self) -> (u16, &'static str, &'static str) {
        match self {
            Self::Refused(refusal) if refusal.code == EGRESS_DENIED => {
                (403, "Forbidden", EGRESS_DENIED)
            }
            Self::Refused(refusal) => (502, "Bad Gateway", refusal.code),
            Self::BadRequest(_) => (400, "Bad Request", "EGRESS_BAD_REQUEST"),
            Self::HeadTooLarge(_) => (
                431,
                "Request Header Fields Too Large",
                "EGRESS_HEADER_TOO_LARGE",
            ),
            Self::HeadTimeout => (408, "Request Timeout", "EGRESS_TIMEOUT"),
            Self::TooManyConnections(_) => (429, "Too Many Requests", "EGRESS_TUNNEL_LIMIT"),
            Self::ConnectFailed(_) => (502, "Bad Gateway", "EGRESS_CONNECT_FAILED"),
        }
    }

    /// The code answered for this error.
    pub(crate) fn code(&self) -> &'static str {
        self.status_and_code().2
    }

    /// The complete HTTP answer (JSON body, connection closed).
    pub(crate) fn response(&self) -> Vec<u8> {
        let (status, text, code) = self.status_and_code();
        let message = match self {
            Self::Refused(refusal) => refusal.reason.clone(),
            other => other.to_string(),
        };
        let body = serde_json::json!({"code": code, "message": message}).to_string();
        format!(
            "HTTP/1.1 {status} {text}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests;
