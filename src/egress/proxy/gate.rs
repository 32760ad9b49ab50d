//! The default [`ProxyGate`]: the address checks of every outbound request
//! ([`crate::egress::address`]) applied to commands' destinations.
//!
//! A host name is resolved once (at most 5 s); when *any* of its addresses is non-public and
//! not inside the operator's private allow-list (`sandbox.egress_allow_private`, CIDR blocks)
//! the whole name is refused with `EGRESS_DENIED`, otherwise the proxy connects only to the
//! addresses returned. IP literals are judged the same way. A name that does not resolve is
//! `EGRESS_RESOLVE_FAILED`.

use super::{ProxyGate, ProxyRefusal};
use crate::egress::address::AddressPolicy;
use async_trait::async_trait;
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Time to resolve a host name.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Most addresses kept of one name.
const MAX_ADDRESSES: usize = 16;

/// Public addresses, plus the operator's private allow-list: the same [`AddressPolicy`]
/// (`Listed`) that judges every other outbound request.
#[derive(Clone, Debug, Default)]
pub struct AddressGate {
    policy: AddressPolicy,
}

impl AddressGate {
    /// A gate that also allows the non-public blocks in `allow_private`.
    pub fn new(allow_private: Vec<IpNet>) -> Self {
        Self {
            policy: AddressPolicy::Listed(allow_private.into()),
        }
    }

    fn check(&self, ip: IpAddr) -> Result<(), String> {
        self.policy
            .check(ip)
            .map_err(|range| format!("{ip} is not public: {range}"))
    }
}

#[async_trait]
impl ProxyGate for AddressGate {
    async fn decide(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ProxyRefusal> {
        let addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let resolved =
                    tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
                        .await;
                let failed = |why: String| ProxyRefusal {
                    code: "EGRESS_RESOLVE_FAILED",
                    reason: format!("cannot resolve {host}: {why}"),
                };
                match resolved {
                    Err(_) => return Err(failed("timed out".into())),
                    Ok(Err(e)) => return Err(failed(e.to_string())),
                    Ok(Ok(found)) => found.take(MAX_ADDRESSES).collect(),
                }
            }
        };
        if addresses.is_empty() {
            return Err(ProxyRefusal {
                code: "EGRESS_RESOLVE_FAILED",
                reason: format!("{host} has no address"),
            });
        }
        for address in &addresses {
            self.check(address.ip()).map_err(|why| {
                ProxyRefusal::denied(format!("destination {host}:{port} refused: {why}"))
            })?;
        }
        Ok(addresses)
    }
}
