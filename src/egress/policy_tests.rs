use super::*;
use std::collections::HashMap;

/// A fixed table of names.
#[derive(Debug)]
struct Table(HashMap<&'static str, Vec<IpAddr>>);

#[async_trait::async_trait]
impl HostResolver for Table {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        self.0
            .get(host)
            .cloned()
            .ok_or_else(|| std::io::Error::other("NXDOMAIN"))
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn policy(addresses: AddressPolicy, server_deny: &[&str], tenant_allow: &[&str]) -> EgressPolicy {
    let owned = |rules: &[&str]| rules.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let server = DomainLists::parse(&[], &owned(server_deny)).unwrap();
    let tenant = DomainLists::parse(&owned(tenant_allow), &[]).unwrap();
    let table = Table(HashMap::from([
        ("docs.rs", vec![ip("93.184.216.34")]),
        ("internal.example", vec![ip("10.1.2.3")]),
        (
            "rebind.example",
            vec![ip("93.184.216.34"), ip("169.254.169.254")],
        ),
        ("v6private.example", vec![ip("fd00::5")]),
        ("lab.example", vec![ip("127.0.0.1")]),
    ]));
    EgressPolicy::new(addresses, server, BTreeMap::from([("acme".into(), tenant)]))
        .with_resolver(Arc::new(table))
}

fn tool<'a>(session: &'a DomainLists) -> EgressContext<'a> {
    EgressContext {
        tenant: "acme",
        session,
        traffic: Traffic::Tool,
    }
}

#[tokio::test]
async fn a_public_name_is_pinned_to_its_checked_addresses() {
    let p = policy(AddressPolicy::PublicOnly, &[], &["domain:docs.rs"]);
    let none = DomainLists::default();
    let pinned = p
        .decide(&tool(&none), "https", "Docs.RS.", 443)
        .await
        .unwrap();
    assert_eq!(pinned.host, "docs.rs");
    assert_eq!(pinned.addrs, vec!["93.184.216.34:443".parse().unwrap()]);
    assert_eq!(pinned.listed_by.as_deref(), Some("domain:docs.rs"));
}

#[tokio::test]
async fn names_and_literals_reaching_non_public_addresses_are_refused() {
    let p = policy(AddressPolicy::PublicOnly, &[], &[]);
    let none = DomainLists::default();
    for host in [
        "internal.example",
        "rebind.example",
        "v6private.example",
        "127.0.0.1",
        "[::1]",
        "[::ffff:169.254.169.254]",
        "[64:ff9b::a00:1]",
    ] {
        let refusal = p.decide(&tool(&none), "http", host, 80).await.unwrap_err();
        assert_eq!(refusal.reason, RefusalReason::PrivateAddress, "{host}");
        if host.ends_with(".example") {
            for leaked in ["10.1.2.3", "169.254", "fd00"] {
                assert!(
                    !refusal.message.contains(leaked),
                    "the tenant's message names no internal address: {}",
                    refusal.message
                );
            }
        }
    }
    let unknown = p.decide(&tool(&none), "http", "nx.example", 80).await;
    assert_eq!(unknown.unwrap_err().reason, RefusalReason::Unresolvable);
    let ftp = p.decide(&tool(&none), "ftp", "docs.rs", 21).await;
    assert_eq!(ftp.unwrap_err().reason, RefusalReason::InvalidUrl);
}

#[tokio::test]
async fn listed_private_blocks_are_reachable_and_only_those() {
    let listed = AddressPolicy::from_settings(false, &["127.0.0.0/8".parse().unwrap()]);
    let p = policy(listed, &[], &[]);
    let none = DomainLists::default();
    assert!(
        p.decide(&tool(&none), "http", "lab.example", 8080)
            .await
            .is_ok()
    );
    let refusal = p.decide(&tool(&none), "http", "internal.example", 80).await;
    assert_eq!(refusal.unwrap_err().reason, RefusalReason::PrivateAddress);
}

#[tokio::test]
async fn deny_wins_over_every_allow_and_ports_are_exact() {
    let p = policy(
        AddressPolicy::PublicOnly,
        &["domain:docs.rs:8443"],
        &["domain:docs.rs"],
    );
    let session = DomainLists::parse(&["domain:docs.rs:8443".into()], &[]).unwrap();
    let refusal = p
        .decide(&tool(&session), "https", "docs.rs", 8443)
        .await
        .unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::NotAllowed);
    assert_eq!(refusal.rule.as_deref(), Some("domain:docs.rs:8443"));
    assert!(
        p.decide(&tool(&session), "https", "docs.rs", 443)
            .await
            .is_ok()
    );

    let session_deny = DomainLists::parse(&[], &["domain:*.rs".into()]).unwrap();
    assert_eq!(
        p.verdict(&tool(&session_deny), "docs.rs", 443),
        ListVerdict::Denied("domain:*.rs".into())
    );
    let none = DomainLists::default();
    assert_eq!(
        p.verdict(&tool(&none), "crates.io", 443),
        ListVerdict::Unlisted
    );
}

#[tokio::test]
async fn infrastructure_traffic_skips_the_lists_but_not_the_address_check() {
    let p = policy(AddressPolicy::PublicOnly, &["domain:docs.rs"], &[]);
    let none = DomainLists::default();
    let infra = EgressContext {
        tenant: "acme",
        session: &none,
        traffic: Traffic::Infrastructure,
    };
    assert!(p.decide(&infra, "https", "docs.rs", 443).await.is_ok());
    let refusal = p.decide(&infra, "https", "internal.example", 443).await;
    assert_eq!(refusal.unwrap_err().reason, RefusalReason::PrivateAddress);
}

#[test]
fn domain_rules_parse_and_match() {
    let table = [
        ("domain:docs.rs", "docs.rs", 443, true),
        ("domain:docs.rs", "api.docs.rs", 443, false),
        ("domain:*.docs.rs", "api.docs.rs", 443, true),
        ("domain:*.docs.rs", "docs.rs", 443, false),
        ("domain:*.docs.rs", "evildocs.rs", 443, false),
        ("domain:docs.rs:443", "docs.rs", 443, true),
        ("domain:docs.rs:443", "docs.rs", 80, false),
        ("domain:[::1]:8080", "[::1]", 8080, true),
        ("domain:127.0.0.1", "127.0.0.1", 1, true),
        ("domain:DOCS.rs.", "docs.rs", 443, true),
    ];
    for (rule, host, port, expected) in table {
        let parsed = DomainRule::parse(rule).unwrap();
        assert_eq!(
            parsed.matches(host, port),
            expected,
            "{rule} vs {host}:{port}"
        );
    }
    for bad in [
        "docs.rs",
        "domain:",
        "domain:*",
        "domain:a*.rs",
        "domain:*.127.0.0.1",
        "domain:docs.rs:0",
        "domain:docs.rs:99999",
        "domain:[::1",
        "domain:[::1]x",
    ] {
        assert!(DomainRule::parse(bad).is_err(), "{bad}");
    }
}
