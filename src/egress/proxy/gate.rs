//! The proxy's [`ProxyGate`]: the egress policy ([`EgressPolicy::decide`]) applied to
//! commands' destinations as *tool traffic* of the session.
//!
//! Each CONNECT or plain-HTTP destination is decided by the same function as WebFetch: the
//! server's, the tenant's and the session's domain rules (deny wins), then the address checks
//! (the host is resolved once; when *any* of its addresses is non-public and outside
//! `egress.allow_private_cidrs` the whole name is refused). The proxy connects only to the
//! addresses the decision returned. A refusal is `EGRESS_DENIED` with the reason; a name that
//! does not resolve is `EGRESS_RESOLVE_FAILED`.
//!
//! A destination no rule lists is allowed (after the address checks): a command runs inside
//! one tool call (Bash) that already went through the permission ladder, and there is no
//! tool call of its own to ask about each connection it opens. Sessions that want less list
//! deny rules (`egress.deny`, e.g. `domain:*.example.com`) or keep `network: "none"`.

use super::{ProxyDecision, ProxyGate, ProxyRefusal};
use crate::egress::policy::{DomainLists, EgressContext, EgressPolicy, RefusalReason, Traffic};
use async_trait::async_trait;
use std::sync::Arc;

/// Most addresses kept of one name.
const MAX_ADDRESSES: usize = 16;

/// Code of a destination whose name does not resolve.
pub const EGRESS_RESOLVE_FAILED: &str = "EGRESS_RESOLVE_FAILED";

/// The egress policy for one session's commands.
#[derive(Clone, Debug)]
pub struct PolicyGate {
    policy: Arc<EgressPolicy>,
    tenant: String,
    session: DomainLists,
}

impl PolicyGate {
    /// The gate of `tenant`'s session with the domain rules `session`.
    pub fn new(policy: Arc<EgressPolicy>, tenant: impl Into<String>, session: DomainLists) -> Self {
        Self {
            policy,
            tenant: tenant.into(),
            session,
        }
    }
}

#[async_trait]
impl ProxyGate for PolicyGate {
    async fn decide(
        &self,
        scheme: &str,
        host: &str,
        port: u16,
    ) -> Result<ProxyDecision, ProxyRefusal> {
        let ctx = EgressContext {
            tenant: &self.tenant,
            session: &self.session,
            traffic: Traffic::Tool,
        };
        // The proxy's heads carry IPv6 literals bare (`::1`); the policy wants URL form.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        match self.policy.decide(&ctx, scheme, &host, port).await {
            Ok(pinned) => Ok(ProxyDecision {
                addrs: pinned.addrs.into_iter().take(MAX_ADDRESSES).collect(),
                rule: pinned.listed_by,
            }),
            Err(refusal) => Err(ProxyRefusal {
                code: match refusal.reason {
                    RefusalReason::Unresolvable => EGRESS_RESOLVE_FAILED,
                    _ => super::EGRESS_DENIED,
                },
                reason: format!("destination {host}:{port} refused: {}", refusal.message),
                rule: refusal.rule,
                why: Some(refusal.reason),
            }),
        }
    }
}
