//! Which destination addresses an outbound request may reach.
//!
//! An address is *public* when it is a globally routed unicast address. Everything else —
//! loopback, private and carrier-grade NAT networks, link-local (where cloud metadata services
//! live), multicast, documentation, benchmarking and reserved blocks, and IPv6 forms that carry
//! or reach an IPv4 address through a translator (IPv4-mapped, IPv4-compatible, NAT64, 6to4,
//! Teredo) — is *non-public*, and [`AddressPolicy::PublicOnly`] refuses it. IPv4-mapped
//! (`::ffff:a.b.c.d`) and IPv4-compatible (`::a.b.c.d`) addresses are judged by the IPv4
//! address they embed, since that is where the kernel connects. IPv6 is judged by an allow-list:
//! only the global unicast block `2000::/3` can be public, minus the blocks in [`V6_RANGES`].

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// An IPv4 block: first address, prefix length, and what it is (for logs).
#[derive(Clone, Copy, Debug)]
pub struct V4Range {
    pub base: Ipv4Addr,
    pub prefix: u8,
    pub name: &'static str,
}

impl V4Range {
    const fn new(base: Ipv4Addr, prefix: u8, name: &'static str) -> Self {
        Self { base, prefix, name }
    }

    /// True when `ip` is inside the block.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix))
            .unwrap_or(0);
        ip.to_bits() & mask == self.base.to_bits() & mask
    }
}

/// An IPv6 block: first address, prefix length, and what it is (for logs).
#[derive(Clone, Copy, Debug)]
pub struct V6Range {
    pub base: Ipv6Addr,
    pub prefix: u8,
    pub name: &'static str,
}

impl V6Range {
    const fn new(base: Ipv6Addr, prefix: u8, name: &'static str) -> Self {
        Self { base, prefix, name }
    }

    /// True when `ip` is inside the block.
    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.prefix))
            .unwrap_or(0);
        ip.to_bits() & mask == self.base.to_bits() & mask
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(a, b, c, d)
}

#[allow(clippy::too_many_arguments)]
const fn v6(a: u16, b: u16, c: u16, d: u16, e: u16, f: u16, g: u16, h: u16) -> Ipv6Addr {
    Ipv6Addr::new(a, b, c, d, e, f, g, h)
}

/// Every non-public IPv4 block (IANA special-purpose registry, plus multicast and reserved).
pub const V4_RANGES: &[V4Range] = &[
    V4Range::new(v4(0, 0, 0, 0), 8, "this network (0.0.0.0/8)"),
    V4Range::new(v4(10, 0, 0, 0), 8, "private (10.0.0.0/8)"),
    V4Range::new(v4(100, 64, 0, 0), 10, "carrier-grade NAT (100.64.0.0/10)"),
    V4Range::new(v4(127, 0, 0, 0), 8, "loopback (127.0.0.0/8)"),
    V4Range::new(v4(169, 254, 0, 0), 16, "link-local (169.254.0.0/16)"),
    V4Range::new(v4(172, 16, 0, 0), 12, "private (172.16.0.0/12)"),
    V4Range::new(
        v4(192, 0, 0, 0),
        24,
        "IETF protocol assignments (192.0.0.0/24)",
    ),
    V4Range::new(v4(192, 0, 2, 0), 24, "documentation (192.0.2.0/24)"),
    V4Range::new(
        v4(192, 88, 99, 0),
        24,
        "6to4 relay anycast (192.88.99.0/24)",
    ),
    V4Range::new(v4(192, 168, 0, 0), 16, "private (192.168.0.0/16)"),
    V4Range::new(v4(198, 18, 0, 0), 15, "benchmarking (198.18.0.0/15)"),
    V4Range::new(v4(198, 51, 100, 0), 24, "documentation (198.51.100.0/24)"),
    V4Range::new(v4(203, 0, 113, 0), 24, "documentation (203.0.113.0/24)"),
    V4Range::new(v4(224, 0, 0, 0), 4, "multicast (224.0.0.0/4)"),
    V4Range::new(v4(240, 0, 0, 0), 4, "reserved and broadcast (240.0.0.0/4)"),
];

/// Every non-public block inside IPv6 global unicast `2000::/3` (everything outside it is
/// non-public too; the blocks below that lie outside it are listed for the record and for
/// clearer log lines).
pub const V6_RANGES: &[V6Range] = &[
    V6Range::new(v6(0, 0, 0, 0, 0, 0, 0, 0), 128, "unspecified (::)"),
    V6Range::new(v6(0, 0, 0, 0, 0, 0, 0, 1), 128, "loopback (::1)"),
    V6Range::new(
        v6(0x64, 0xff9b, 0, 0, 0, 0, 0, 0),
        96,
        "NAT64 (64:ff9b::/96)",
    ),
    V6Range::new(
        v6(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        "local-use NAT64 (64:ff9b:1::/48)",
    ),
    V6Range::new(
        v6(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        "discard-only (100::/64)",
    ),
    V6Range::new(v6(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, "Teredo (2001::/32)"),
    V6Range::new(
        v6(0x2001, 0x2, 0, 0, 0, 0, 0, 0),
        48,
        "benchmarking (2001:2::/48)",
    ),
    V6Range::new(
        v6(0x2001, 0x10, 0, 0, 0, 0, 0, 0),
        28,
        "ORCHID (2001:10::/28)",
    ),
    V6Range::new(
        v6(0x2001, 0x20, 0, 0, 0, 0, 0, 0),
        28,
        "ORCHIDv2 (2001:20::/28)",
    ),
    V6Range::new(
        v6(0x2001, 0, 0, 0, 0, 0, 0, 0),
        23,
        "IETF protocol assignments (2001::/23)",
    ),
    V6Range::new(
        v6(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation (2001:db8::/32)",
    ),
    V6Range::new(v6(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, "6to4 (2002::/16)"),
    V6Range::new(
        v6(0x3fff, 0, 0, 0, 0, 0, 0, 0),
        20,
        "documentation (3fff::/20)",
    ),
    V6Range::new(v6(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, "SRv6 SIDs (5f00::/16)"),
    V6Range::new(
        v6(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique-local (fc00::/7)",
    ),
    V6Range::new(
        v6(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        "link-local (fe80::/10)",
    ),
    V6Range::new(
        v6(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        "site-local (fec0::/10)",
    ),
    V6Range::new(v6(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, "multicast (ff00::/8)"),
];

/// IPv6 global unicast: the only block an IPv6 destination may be public in.
const V6_GLOBAL_UNICAST: V6Range = V6Range::new(
    v6(0x2000, 0, 0, 0, 0, 0, 0, 0),
    3,
    "global unicast (2000::/3)",
);

/// Why `ip` is not public (the block it is in), or `None` when it is public.
pub fn non_public_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(ip) => V4_RANGES
            .iter()
            .find(|range| range.contains(ip))
            .map(|range| range.name),
        IpAddr::V6(ip) => {
            if let Some(embedded) = ip.to_ipv4_mapped() {
                return non_public_range(IpAddr::V4(embedded));
            }
            if let Some(range) = V6_RANGES.iter().find(|range| range.contains(ip)) {
                return Some(range.name);
            }
            // IPv4-compatible `::a.b.c.d` (deprecated): the kernel reaches the embedded IPv4.
            if ip.segments()[..6] == [0; 6] {
                let embedded = Ipv4Addr::from_bits((ip.to_bits() & 0xffff_ffff) as u32);
                return non_public_range(IpAddr::V4(embedded));
            }
            (!V6_GLOBAL_UNICAST.contains(ip)).then_some("outside IPv6 global unicast (2000::/3)")
        }
    }
}

/// True for globally routed unicast addresses (see the module docs).
pub fn is_public(ip: IpAddr) -> bool {
    non_public_range(ip).is_none()
}

/// Which destinations outbound requests may reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AddressPolicy {
    /// Public addresses only (the default).
    #[default]
    PublicOnly,
    /// Public addresses and the non-public addresses inside these blocks, which the operator
    /// lists (`egress.allow_private_cidrs`), e.g. a SearXNG on `10.0.0.0/8` or, in tests,
    /// `127.0.0.0/8`.
    Listed(Arc<[IpNet]>),
    /// Any address, loopback and private networks included (tests, labs, or hooks and policy
    /// services on the operator's own network). Setting `allow_private_webhooks`, an alias of
    /// listing `0.0.0.0/0` and `::/0`.
    AllowPrivate,
}

impl AddressPolicy {
    /// The policy of the `allow_private_webhooks` setting.
    pub fn from_allow_private(allow_private: bool) -> Self {
        if allow_private {
            Self::AllowPrivate
        } else {
            Self::PublicOnly
        }
    }

    /// The policy of the operator settings: `allow_private_webhooks` (everything) or the
    /// listed private blocks (none: public only).
    pub fn from_settings(allow_private: bool, listed: &[IpNet]) -> Self {
        if allow_private {
            Self::AllowPrivate
        } else if listed.is_empty() {
            Self::PublicOnly
        } else {
            Self::Listed(listed.into())
        }
    }

    /// `Err` with the non-public block `ip` is in, when this policy refuses it.
    pub fn check(&self, ip: IpAddr) -> Result<(), &'static str> {
        let Some(range) = non_public_range(ip) else {
            return Ok(());
        };
        match self {
            Self::AllowPrivate => Ok(()),
            Self::PublicOnly => Err(range),
            Self::Listed(blocks) => {
                // An IPv4-mapped address is listed when its IPv4 address is.
                let plain = match ip {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                    IpAddr::V4(_) => ip,
                };
                if blocks.iter().any(|block| block.contains(&plain)) {
                    Ok(())
                } else {
                    Err(range)
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "address_tests.rs"]
mod tests;
