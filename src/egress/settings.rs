//! The operator's egress settings (`[egress]`, `NORMA_EGRESS__*`).

use super::address::AddressPolicy;
use super::fetch::FetchLimits;
use super::policy::{DomainLists, EgressPolicy};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Domain rules of one tenant (`[egress.tenants.<id>]`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TenantEgress {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
}

/// `[egress]`: which destinations outbound requests may reach and how much they may cost.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct EgressSettings {
    /// Non-public blocks outbound requests may reach anyway (CIDR, e.g. `10.20.0.0/16` for a
    /// SearXNG on the operator's network; `127.0.0.0/8` in tests). Applies to all traffic:
    /// WebFetch, hooks and webhooks. `allow_private_webhooks = true` is an alias for "every
    /// block".
    pub allow_private_cidrs: Vec<IpNet>,
    /// Server-wide domain rules for tool traffic (`domain:docs.rs`, `domain:*.example.com`,
    /// `domain:host:port`); deny wins over every allow.
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// Domain rules per tenant id, added to the server's.
    pub tenants: BTreeMap<String, TenantEgress>,
    /// One deadline for a whole WebFetch (every redirect hop and every byte).
    pub fetch_timeout_seconds: u64,
    /// The largest body WebFetch reads.
    pub fetch_max_bytes: usize,
    /// Redirects WebFetch follows.
    pub max_redirects: usize,
    /// A model provider's answer may be silent this long between two reads.
    pub provider_idle_timeout_seconds: u64,
    /// A model provider's whole exchange (its streamed answer included) may last this long.
    pub provider_total_timeout_seconds: u64,
}

impl Default for EgressSettings {
    fn default() -> Self {
        Self {
            allow_private_cidrs: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            tenants: BTreeMap::new(),
            fetch_timeout_seconds: 30,
            fetch_max_bytes: 5 * 1024 * 1024,
            max_redirects: 5,
            provider_idle_timeout_seconds: 120,
            provider_total_timeout_seconds: 900,
        }
    }
}

impl EgressSettings {
    /// The address policy of these settings and the `allow_private_webhooks` alias.
    pub fn address_policy(&self, allow_private_webhooks: bool) -> AddressPolicy {
        AddressPolicy::from_settings(allow_private_webhooks, &self.allow_private_cidrs)
    }

    /// The policy; a malformed domain rule is the error (a start-up error).
    pub fn policy(&self, allow_private_webhooks: bool) -> Result<EgressPolicy, String> {
        let server = DomainLists::parse(&self.allow, &self.deny)?;
        let tenants = self
            .tenants
            .iter()
            .map(|(tenant, lists)| {
                DomainLists::parse(&lists.allow, &lists.deny)
                    .map(|parsed| (tenant.clone(), parsed))
                    .map_err(|error| format!("egress.tenants.{tenant}: {error}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(EgressPolicy::new(
            self.address_policy(allow_private_webhooks),
            server,
            tenants,
        ))
    }

    pub fn stream_limits(&self) -> crate::egress::StreamLimits {
        crate::egress::StreamLimits {
            idle: Duration::from_secs(self.provider_idle_timeout_seconds.max(1)),
            total: Duration::from_secs(self.provider_total_timeout_seconds.max(1)),
        }
    }

    pub fn fetch_limits(&self) -> FetchLimits {
        FetchLimits {
            deadline: Duration::from_secs(self.fetch_timeout_seconds.max(1)),
            max_bytes: self.fetch_max_bytes.max(1),
            max_redirects: self.max_redirects,
        }
    }
}
