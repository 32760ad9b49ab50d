//! Outbound requests the server makes on a tenant's behalf: remote hooks and approval
//! webhooks ([`EgressClient`]) and tool traffic, WebFetch today, through the egress broker
//! ([`EgressBroker`], [`fetch`]) whose decisions come from one policy ([`EgressPolicy`],
//! [`policy`]: domain rules per server, tenant and session, deny wins, unlisted hosts go up the
//! permission ladder, and the address checks below), and sandboxed commands' HTTP through the
//! egress proxy ([`proxy`]). Model providers send through [`EgressClient::provider_http`]
//! (the same checked resolver, with idle and total limits for their streams), and WebSearch
//! backends through the broker as infrastructure traffic ([`crate::search`]).
//!
//! One [`EgressClient`] is built at start-up from the server's [`AddressPolicy`] and shared by
//! every caller. It resolves a host name once and refuses the whole name when any of its
//! addresses is not public (loopback, private networks, link-local and cloud metadata, CGNAT,
//! multicast, documentation, benchmarking, reserved, and IPv6 forms that reach IPv4 through a
//! translator — see [`address`]), connects only to the addresses it checked, checks IP-literal
//! URLs the same way, ignores proxy settings of the environment, never follows redirects, caps
//! answer bodies while streaming them and bounds each request's total time. The operator
//! lists private blocks that may be reached anyway (`egress.allow_private_cidrs`);
//! `allow_private_webhooks` is an alias that lists every block.
//!
//! Every request here is *infrastructure traffic*: a destination a session configured (a hook,
//! a policy service), subject to the address checks and bounds but never to the permission
//! ladder. Callers pass a [`Purpose`] so log lines say what a request was for.
//!
//! The errors ([`EgressError`]) name hosts and addresses: they are for the server log. What a
//! tenant sees of a failed hook or webhook is a generic code (`HOOK_FAILED`, `WEBHOOK_FAILED`),
//! so the server cannot be used to learn which internal addresses or ports answer.

pub mod address;
pub mod client;
pub mod fetch;
pub mod policy;
pub mod proxy;
pub mod settings;

pub use address::{AddressPolicy, is_public, non_public_range};
pub use client::{Answer, EgressClient, EgressError, Purpose, RequestLimits, StreamLimits};
pub use fetch::{EgressBroker, EgressEvent, EgressRecorder, FetchLimits, Fetched};
pub use policy::{
    DomainLists, EgressContext, EgressPolicy, EgressRefusal, Pinned, RefusalReason, Traffic,
};
pub use settings::EgressSettings;

/// The code of every refused or failed outbound request in tool results (with a `reason`).
pub const EGRESS_DENIED: &str = "EGRESS_DENIED";
