//! Reading and understanding one proxy request head: `CONNECT host:port` or an absolute-URI
//! plain HTTP request, read up to a size bound and parsed with `httparse`.

use super::ProxyError;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Most headers a request head may carry.
const MAX_HEADERS: usize = 100;
/// Headers of the client–proxy hop, never forwarded.
const HOP_HEADERS: [&str; 4] = [
    "proxy-connection",
    "proxy-authorization",
    "connection",
    "keep-alive",
];

/// What the command asked for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// `CONNECT` or the plain request's method.
    pub method: String,
    /// Host name or IP literal (IPv6 without brackets), lower-case.
    pub host: String,
    pub port: u16,
    pub kind: HeadKind,
    /// Bytes the command sent after the head (the start of a body or of the tunnel).
    pub leftover: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadKind {
    /// A tunnel: answer `200`, then relay.
    Connect,
    /// Plain HTTP: send `head` (rewritten to origin form) to the destination, then relay.
    Plain { head: Vec<u8> },
}

/// Reads a request head (through the blank line) of at most `max` bytes.
pub(crate) async fn read(
    stream: &mut (impl AsyncRead + Unpin),
    max: usize,
) -> Result<Head, ProxyError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| ProxyError::BadRequest(format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(ProxyError::BadRequest(
                "the connection closed before the request head ended".into(),
            ));
        }
        let searched_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf[searched_from..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| searched_from + at + 4)
        {
            if end > max {
                return Err(ProxyError::HeadTooLarge(max));
            }
            return parse(&buf[..end], buf[end..].to_vec());
        }
        if buf.len() > max {
            return Err(ProxyError::HeadTooLarge(max));
        }
    }
}

/// Parses a complete head.
pub(crate) fn parse(raw: &[u8], leftover: Vec<u8>) -> Result<Head, ProxyError> {
    let bad = |message: &str| ProxyError::BadRequest(message.to_owned());
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(raw) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(bad("incomplete request head")),
        Err(e) => return Err(ProxyError::BadRequest(e.to_string())),
    }
    let method = request.method.unwrap_or_default().to_owned();
    let target = request.path.unwrap_or_default();
    if method == "CONNECT" {
        let (host, port) = authority(target)?;
        return Ok(Head {
            method,
            host,
            port,
            kind: HeadKind::Connect,
            leftover,
        });
    }
    let url = url::Url::parse(target)
        .map_err(|_| bad("a proxy request needs an absolute http:// URL (or CONNECT)"))?;
    if url.scheme() != "http" {
        return Err(bad(
            "only http:// URLs are proxied as requests; HTTPS goes through CONNECT",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("credentials in the URL are not proxied"));
    }
    let host = host_name(url.host().ok_or_else(|| bad("the URL has no host"))?);
    let port = url.port_or_known_default().unwrap_or(80);
    let mut head = format!(
        "{method} {} HTTP/1.1\r\n",
        &url[url::Position::BeforePath..url::Position::AfterQuery]
    )
    .into_bytes();
    let mut has_host = false;
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if HOP_HEADERS.contains(&name.as_str()) {
            continue;
        }
        has_host |= name == "host";
        head.extend_from_slice(header.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(header.value);
        head.extend_from_slice(b"\r\n");
    }
    if !has_host {
        head.extend_from_slice(
            format!(
                "Host: {}\r\n",
                &url[url::Position::BeforeHost..url::Position::AfterPort]
            )
            .as_bytes(),
        );
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Head {
        method,
        host,
        port,
        kind: HeadKind::Plain { head },
        leftover,
    })
}

/// `host:port` of a CONNECT request (IPv6 in brackets), the port required.
fn authority(target: &str) -> Result<(String, u16), ProxyError> {
    let bad = || ProxyError::BadRequest(format!("CONNECT needs host:port, got {target:?}"));
    let (host, port) = target.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if port == 0 || host.is_empty() || host.contains(['/', '@', '?', '#']) {
        return Err(bad());
    }
    let host = url::Host::parse(host).map_err(|_| bad())?;
    Ok((host_name(host), port))
}

fn host_name<S: AsRef<str>>(host: url::Host<S>) -> String {
    match host {
        url::Host::Domain(name) => name.as_ref().to_ascii_lowercase(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => ip.to_string(),
    }
}
