use super::head::{HeadKind, parse};
use super::*;
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

/// The policy gate of a session of tenant `t` with `session` rules, on a server whose
/// private allow-list is `private`, in a session whose ladder allows every unlisted host.
fn policy_gate(private: &[&str], session: crate::egress::DomainLists) -> PolicyGate {
    policy_gate_judged(
        private,
        session,
        Arc::new(|_: &url::Url| Ok("bypass".to_owned())),
    )
}

/// [`policy_gate`] with `ladder` judging unlisted hosts.
fn policy_gate_judged(
    private: &[&str],
    session: crate::egress::DomainLists,
    ladder: Arc<dyn crate::egress::fetch::HopGate>,
) -> PolicyGate {
    use crate::egress::{AddressPolicy, EgressPolicy};
    let blocks: Vec<ipnet::IpNet> = private.iter().map(|c| c.parse().expect("cidr")).collect();
    let policy = EgressPolicy::new(
        AddressPolicy::from_settings(false, &blocks),
        Default::default(),
        Default::default(),
    );
    PolicyGate::new(Arc::new(policy), "t", session, ladder)
}

fn loopback_gate() -> Arc<dyn ProxyGate> {
    Arc::new(policy_gate(&["127.0.0.0/8"], Default::default()))
}

fn recorder() -> (ProxyObserver, Arc<Mutex<Vec<ProxyRecord>>>) {
    let records = Arc::new(Mutex::new(Vec::new()));
    let sink = records.clone();
    let observer: ProxyObserver = Arc::new(move |r| sink.lock().expect("records").push(r));
    (observer, records)
}

async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

async fn read_all(stream: &mut UnixStream) -> String {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn connect_heads_name_host_and_port() {
    let head = parse(
        b"CONNECT Example.COM:443 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"hi".to_vec(),
    )
    .expect("parse");
    assert_eq!(
        (head.method.as_str(), head.host.as_str(), head.port),
        ("CONNECT", "example.com", 443)
    );
    assert_eq!(head.kind, HeadKind::Connect);
    assert_eq!(head.leftover, b"hi");
    let v6 = parse(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n", Vec::new()).expect("v6");
    assert_eq!((v6.host.as_str(), v6.port), ("::1", 8443));
    for bad in [
        &b"CONNECT example.com HTTP/1.1\r\n\r\n"[..],
        b"CONNECT example.com:0 HTTP/1.1\r\n\r\n",
        b"CONNECT user@example.com:443 HTTP/1.1\r\n\r\n",
        b"CONNECT :443 HTTP/1.1\r\n\r\n",
    ] {
        assert!(
            matches!(parse(bad, Vec::new()), Err(ProxyError::BadRequest(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn plain_requests_are_rewritten_to_origin_form_without_hop_headers() {
    let head = parse(
        b"GET http://example.com:8080/a/b?q=1 HTTP/1.1\r\nHost: example.com:8080\r\n\
          Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\
          Accept: */*\r\n\r\n",
        Vec::new(),
    )
    .expect("parse");
    assert_eq!((head.host.as_str(), head.port), ("example.com", 8080));
    let HeadKind::Plain { head: rewritten } = head.kind else {
        panic!("plain")
    };
    assert_eq!(
        String::from_utf8(rewritten).expect("utf8"),
        "GET /a/b?q=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    for bad in [
        &b"GET /relative HTTP/1.1\r\n\r\n"[..],
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",
        b"GET ftp://example.com/ HTTP/1.1\r\n\r\n",
        b"GET http://u:p@example.com/ HTTP/1.1\r\n\r\n",
        b"\x00\x01garbage\r\n\r\n",
    ] {
        assert!(
            matches!(parse(bad, Vec::new()), Err(ProxyError::BadRequest(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[tokio::test]
async fn the_policy_gate_refuses_non_public_destinations_unless_allow_listed() {
    let strict = policy_gate(&[], Default::default());
    for host in [
        "127.0.0.1",
        "169.254.169.254",
        "10.1.2.3",
        "::1",
        "::ffff:127.0.0.1",
    ] {
        let refusal = strict.decide("http", host, 80).await.expect_err(host);
        assert_eq!(refusal.code, EGRESS_DENIED, "{host}");
    }
    let allowed = policy_gate(&["127.0.0.0/8"], Default::default());
    assert_eq!(
        allowed
            .decide("https", "127.0.0.2", 81)
            .await
            .expect("allow-listed")
            .addrs,
        vec!["127.0.0.2:81".parse::<SocketAddr>().expect("addr")]
    );
    assert!(allowed.decide("http", "::ffff:127.0.0.3", 81).await.is_ok());
    assert_eq!(
        allowed
            .decide("http", "10.0.0.1", 80)
            .await
            .expect_err("not listed")
            .code,
        EGRESS_DENIED
    );
    assert!(
        allowed.decide("https", "8.8.8.8", 53).await.is_ok(),
        "public"
    );
}

#[tokio::test]
async fn the_policy_gate_applies_the_sessions_domain_rules_deny_winning() {
    let lists = crate::egress::DomainLists::parse(
        &["domain:localhost".into(), "domain:127.0.0.1".into()],
        &["domain:127.0.0.1:9".into()],
    )
    .expect("rules");
    // The session's ladder allows 127.0.0.2 and ::1 only.
    let ladder = |url: &url::Url| match url.host_str() {
        Some(host @ ("127.0.0.2" | "[::1]")) => Ok(format!("WebFetch(domain:{host})")),
        _ => Err("no rule or grant of the session allows it".to_owned()),
    };
    let gate = policy_gate_judged(&["127.0.0.0/8", "::1/128"], lists, Arc::new(ladder));
    let listed = gate.decide("https", "127.0.0.1", 8).await.expect("listed");
    assert_eq!(listed.rule.as_deref(), Some("domain:127.0.0.1"));
    let denied = gate
        .decide("https", "127.0.0.1", 9)
        .await
        .expect_err("denied");
    assert_eq!(denied.code, EGRESS_DENIED);
    assert_eq!(denied.rule.as_deref(), Some("domain:127.0.0.1:9"));
    assert_eq!(denied.why, Some(crate::egress::RefusalReason::NotAllowed));
    // A destination no rule lists: the session's ladder (here: allows 127.0.0.2 only).
    let unlisted = gate
        .decide("http", "127.0.0.2", 80)
        .await
        .expect("unlisted, allowed by the ladder");
    assert_eq!(unlisted.rule.as_deref(), Some("WebFetch(domain:127.0.0.2)"));
    let refused = gate
        .decide("http", "127.0.0.3", 80)
        .await
        .expect_err("unlisted, not allowed by the ladder");
    assert_eq!(refused.why, Some(crate::egress::RefusalReason::NotAllowed));
    assert!(
        refused.reason.contains("no egress rule lists it"),
        "{}",
        refused.reason
    );
    let v6 = gate.decide("https", "::1", 443).await.expect("bare IPv6");
    assert_eq!(
        v6.addrs,
        vec!["[::1]:443".parse::<SocketAddr>().expect("addr")]
    );
    let unknown = gate
        .decide("https", "no-such-host.invalid", 443)
        .await
        .expect_err("unresolvable");
    assert_eq!(unknown.code, EGRESS_RESOLVE_FAILED);
}

#[tokio::test]
async fn a_connect_tunnel_relays_and_counts_bytes() {
    let base = tempfile::tempdir().expect("tempdir");
    let (observer, records) = recorder();
    let endpoint = ProxyEndpoint::start(
        base.path(),
        loopback_gate(),
        ProxyLimits::default(),
        observer,
    )
    .expect("endpoint");
    let port = echo_server().await;
    let mut client = UnixStream::connect(endpoint.socket_path())
        .await
        .expect("connect");
    client
        .write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nping").as_bytes())
        .await
        .expect("write");
    client.shutdown().await.expect("shutdown");
    let answer = read_all(&mut client).await;
    assert_eq!(answer, "HTTP/1.1 200 Connection Established\r\n\r\nping");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let records = records.lock().expect("records").clone();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        records[0].outcome,
        ProxyOutcome::Relayed { ended: "closed" }
    );
    assert_eq!((records[0].bytes_out, records[0].bytes_in), (4, 4));
}

#[tokio::test]
async fn refusals_answer_a_code_and_reach_the_observer() {
    let base = tempfile::tempdir().expect("tempdir");
    let (observer, records) = recorder();
    let limits = ProxyLimits {
        max_head_bytes: 1024,
        ..ProxyLimits::default()
    };
    let endpoint = ProxyEndpoint::start(
        base.path(),
        Arc::new(policy_gate(&[], Default::default())),
        limits,
        observer,
    )
    .expect("endpoint");
    let ask = |request: Vec<u8>| {
        let socket = endpoint.socket_path().to_owned();
        async move {
            let mut client = UnixStream::connect(socket).await.expect("connect");
            let _ = client.write_all(&request).await;
            read_all(&mut client).await
        }
    };
    let denied = ask(b"GET http://127.0.0.1:9/ HTTP/1.1\r\n\r\n".to_vec()).await;
    assert!(denied.starts_with("HTTP/1.1 403 "), "{denied}");
    assert!(denied.contains("\"code\":\"EGRESS_DENIED\""), "{denied}");
    assert!(denied.contains("non-public address"), "{denied}");
    let mut huge = b"GET http://example.com/ HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 4096));
    let too_large = ask(huge).await;
    assert!(too_large.starts_with("HTTP/1.1 431 "), "{too_large}");
    let bad = ask(b"HELLO\r\n\r\n".to_vec()).await;
    assert!(bad.contains("EGRESS_BAD_REQUEST"), "{bad}");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let codes: Vec<_> = records
        .lock()
        .expect("records")
        .iter()
        .map(|r| match &r.outcome {
            ProxyOutcome::Refused { code, .. } => *code,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        codes,
        [
            "EGRESS_DENIED",
            "EGRESS_HEADER_TOO_LARGE",
            "EGRESS_BAD_REQUEST"
        ]
    );
    let socket = endpoint.socket_path().to_owned();
    drop(endpoint);
    assert!(!socket.exists(), "the socket goes with the endpoint");
}

#[tokio::test]
async fn connections_beyond_the_limit_are_answered_at_once() {
    let base = tempfile::tempdir().expect("tempdir");
    let (observer, _) = recorder();
    let limits = ProxyLimits {
        max_connections: 2,
        ..ProxyLimits::default()
    };
    let endpoint =
        ProxyEndpoint::start(base.path(), loopback_gate(), limits, observer).expect("endpoint");
    // Two silent connections hold both slots (their heads never come).
    let _held: Vec<UnixStream> =
        futures::future::join_all((0..2).map(|_| UnixStream::connect(endpoint.socket_path())))
            .await
            .into_iter()
            .map(|c| c.expect("connect"))
            .collect();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut third = UnixStream::connect(endpoint.socket_path())
        .await
        .expect("connect");
    let answer = read_all(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 429 "), "{answer}");
    assert!(answer.contains("EGRESS_TUNNEL_LIMIT"), "{answer}");
}
