use super::*;

/// (address, the block it must be reported in; `None` = public).
const CASES: &[(&str, Option<&str>)] = &[
    // IPv4 special-purpose blocks, at their edges.
    ("0.0.0.0", Some("this network")),
    ("0.255.255.255", Some("this network")),
    ("10.0.0.0", Some("private (10")),
    ("10.255.255.255", Some("private (10")),
    ("100.64.0.0", Some("carrier-grade NAT")),
    ("100.127.255.255", Some("carrier-grade NAT")),
    ("127.0.0.1", Some("loopback")),
    ("127.255.255.254", Some("loopback")),
    ("169.254.169.254", Some("link-local")),
    ("172.16.0.1", Some("private (172.16")),
    ("172.31.255.255", Some("private (172.16")),
    ("192.0.0.8", Some("IETF protocol assignments")),
    ("192.0.2.1", Some("documentation (192.0.2")),
    ("192.88.99.1", Some("6to4 relay")),
    ("192.168.1.1", Some("private (192.168")),
    ("198.18.0.1", Some("benchmarking")),
    ("198.19.255.255", Some("benchmarking")),
    ("198.51.100.7", Some("documentation (198.51.100")),
    ("203.0.113.9", Some("documentation (203.0.113")),
    ("224.0.0.1", Some("multicast")),
    ("239.255.255.250", Some("multicast")),
    ("240.0.0.1", Some("reserved")),
    ("255.255.255.255", Some("broadcast")),
    // Public IPv4, including the neighbours of the blocks above.
    ("8.8.8.8", None),
    ("1.1.1.1", None),
    ("93.184.216.34", None),
    ("11.0.0.1", None),
    ("100.63.255.255", None),
    ("100.128.0.0", None),
    ("126.255.255.255", None),
    ("128.0.0.1", None),
    ("169.253.255.255", None),
    ("172.15.255.255", None),
    ("172.32.0.0", None),
    ("192.0.1.1", None),
    ("192.167.255.255", None),
    ("198.17.255.255", None),
    ("198.20.0.0", None),
    ("223.255.255.255", None),
    // IPv6 blocks.
    ("::", Some("unspecified")),
    ("::1", Some("loopback")),
    ("64:ff9b::7f00:1", Some("NAT64 (64:ff9b::/96)")),
    ("64:ff9b::808:808", Some("NAT64 (64:ff9b::/96)")),
    ("64:ff9b:1::1", Some("local-use NAT64")),
    ("100::1", Some("discard-only")),
    ("2001::1", Some("Teredo")),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some("Teredo")),
    ("2001:2::1", Some("benchmarking (2001:2")),
    ("2001:10::1", Some("ORCHID (")),
    ("2001:20::1", Some("ORCHIDv2")),
    ("2001:100::1", Some("IETF protocol assignments (2001::/23)")),
    ("2001:db8::1", Some("documentation (2001:db8")),
    ("2002:7f00:1::1", Some("6to4")),
    ("2002:808:808::1", Some("6to4")),
    ("3fff::1", Some("documentation (3fff")),
    ("5f00::1", Some("SRv6")),
    ("fc00::1", Some("unique-local")),
    ("fd12:3456::1", Some("unique-local")),
    ("fe80::1", Some("link-local (fe80")),
    ("febf::1", Some("link-local (fe80")),
    ("fec0::1", Some("site-local")),
    ("ff02::1", Some("multicast (ff00")),
    ("4000::1", Some("outside IPv6 global unicast")),
    ("::ffff:0:7f00:1", Some("outside IPv6 global unicast")),
    // IPv4-mapped and IPv4-compatible: judged by the embedded IPv4.
    ("::ffff:127.0.0.1", Some("loopback")),
    ("::ffff:169.254.169.254", Some("link-local")),
    ("::ffff:10.0.0.1", Some("private (10")),
    ("::ffff:198.18.0.1", Some("benchmarking")),
    ("::127.0.0.1", Some("loopback")),
    ("::10.1.2.3", Some("private (10")),
    ("::ffff:8.8.8.8", None),
    ("::8.8.8.8", None),
    // Public IPv6.
    ("2606:4700::1111", None),
    ("2a00:1450:4001:80b::200e", None),
    ("2001:200::1", None),
    ("2001:db7:ffff::1", None),
    ("2003::1", None),
    ("3ffe::1", None),
];

#[test]
fn every_special_block_is_non_public_and_its_neighbours_are_public() {
    let mut wrong = Vec::new();
    for (text, expected) in CASES {
        let ip: IpAddr = text.parse().unwrap();
        let got = non_public_range(ip);
        let ok = match (expected, got) {
            (None, None) => true,
            (Some(wanted), Some(name)) => name.contains(wanted),
            _ => false,
        };
        if !ok {
            wrong.push(format!("{text}: expected {expected:?}, got {got:?}"));
        }
        assert_eq!(is_public(ip), expected.is_none(), "{text}");
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn every_listed_block_contains_its_own_base_address() {
    for range in V4_RANGES {
        assert!(range.contains(range.base), "{}", range.name);
        assert!(!is_public(IpAddr::V4(range.base)), "{}", range.name);
    }
    for range in V6_RANGES {
        assert!(range.contains(range.base), "{}", range.name);
        assert!(!is_public(IpAddr::V6(range.base)), "{}", range.name);
    }
}

#[test]
fn the_policy_refuses_non_public_addresses_unless_private_ones_are_allowed() {
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    let metadata: IpAddr = "169.254.169.254".parse().unwrap();
    let public: IpAddr = "8.8.8.8".parse().unwrap();
    let strict = AddressPolicy::from_allow_private(false);
    assert_eq!(strict, AddressPolicy::PublicOnly);
    assert!(strict.check(loopback).unwrap_err().contains("loopback"));
    assert!(strict.check(metadata).unwrap_err().contains("link-local"));
    assert_eq!(strict.check(public), Ok(()));
    let open = AddressPolicy::from_allow_private(true);
    assert_eq!(open.check(loopback), Ok(()));
    assert_eq!(open.check(metadata), Ok(()));
    assert_eq!(AddressPolicy::default(), AddressPolicy::PublicOnly);
}

#[test]
fn listed_private_blocks_open_only_those_blocks() {
    let listed = AddressPolicy::from_settings(false, &["127.0.0.0/8".parse().unwrap()]);
    assert_eq!(listed.check("127.0.0.1".parse().unwrap()), Ok(()));
    assert_eq!(listed.check("::ffff:127.0.0.1".parse().unwrap()), Ok(()));
    assert_eq!(listed.check("8.8.8.8".parse().unwrap()), Ok(()));
    for refused in [
        "10.0.0.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "64:ff9b::7f00:1",
    ] {
        assert!(
            listed.check(refused.parse().unwrap()).is_err(),
            "{refused} is outside the listed block"
        );
    }
    // `allow_private_webhooks` is an alias that lists everything.
    let all = AddressPolicy::from_settings(true, &[]);
    assert_eq!(all, AddressPolicy::AllowPrivate);
    assert_eq!(all.check("10.0.0.1".parse().unwrap()), Ok(()));
    assert_eq!(
        AddressPolicy::from_settings(false, &[]),
        AddressPolicy::PublicOnly
    );
}
