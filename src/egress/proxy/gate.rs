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
//! A destination no rule lists is judged by the session's permission ladder *without asking*,
//! exactly like a WebFetch redirect hop ([`HopGate`]): it is reached when the session's
//! rules or grants allow a WebFetch of it (`WebFetch(domain:HOST)` allow rules, a session or
//! tenant grant given when an earlier WebFetch of that host was approved, or the `bypass`
//! mode), and refused with reason `not_allowed` otherwise. A command's connection has no tool
//! call of its own to hold an approval for, so nothing is asked in the middle of a command;
//! list the hosts a session's commands need (`egress.allow`, e.g. `domain:pypi.org`) or
//! allow them by rule.

use super::{ProxyDecision, ProxyGate, ProxyRefusal};
use crate::egress::fetch::HopGate;
use crate::egress::policy::{DomainLists, EgressContext, EgressPolicy, RefusalReason, Traffic};
use async_trait::async_trait;
use std::sync::Arc;

/// Most addresses kept of one name.
const MAX_ADDRESSES: usize = 16;

/// Code of a destination whose name does not resolve.
pub const EGRESS_RESOLVE_FAILED: &str = "EGRESS_RESOLVE_FAILED";

/// The egress policy for one session's commands.
#[derive(Clone)]
pub struct PolicyGate {
    policy: Arc<EgressPolicy>,
    tenant: String,
    session: DomainLists,
    /// Judges destinations no rule lists (the session's permission ladder, without asking).
    unlisted: Arc<dyn HopGate>,
}

impl std::fmt::Debug for PolicyGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyGate")
            .field("tenant", &self.tenant)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

impl PolicyGate {
    /// The gate of `tenant`'s session with the domain rules `session`; destinations no rule
    /// lists are reached only when `unlisted` allows them.
    pub fn new(
        policy: Arc<EgressPolicy>,
        tenant: impl Into<String>,
        session: DomainLists,
        unlisted: Arc<dyn HopGate>,
    ) -> Self {
        Self {
            policy,
            tenant: tenant.into(),
            session,
            unlisted,
        }
    }

    /// What allows a destination no rule lists, or the refusal (`not_allowed`).
    fn judge_unlisted(&self, scheme: &str, host: &str, port: u16) -> Result<String, ProxyRefusal> {
        let refuse = |why: String| ProxyRefusal {
            code: super::EGRESS_DENIED,
            reason: format!(
                "destination {host}:{port} refused: no egress rule lists it and {why}; list it \
                 in the session's egress.allow or allow WebFetch(domain:{host})"
            ),
            rule: None,
            why: Some(RefusalReason::NotAllowed),
        };
        let url = url::Url::parse(&format!("{scheme}://{host}:{port}/"))
            .map_err(|error| refuse(format!("it is not a valid destination ({error})")))?;
        self.unlisted.allows(&url).map_err(refuse)
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
            Ok(pinned) => {
                let rule = match pinned.listed_by {
                    Some(rule) => rule,
                    None => self.judge_unlisted(scheme, &host, port)?,
                };
                Ok(ProxyDecision {
                    addrs: pinned.addrs.into_iter().take(MAX_ADDRESSES).collect(),
                    rule: Some(rule),
                })
            }
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
