//! One session's proxy endpoint: a UNIX socket in a private directory of the server, served
//! until the endpoint is dropped (then the socket is removed and open relays end).

use super::head::{self, HeadKind};
use super::relay::relay;
use super::{ProxyError, ProxyGate, ProxyLimits, ProxyObserver, ProxyOutcome, ProxyRecord};
use std::net::SocketAddr;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Longest socket path the kernel accepts (`sun_path`, with its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A running proxy endpoint; dropping it stops it.
pub struct ProxyEndpoint {
    dir: PathBuf,
    socket: PathBuf,
    stop: CancellationToken,
}

/// What every connection of one endpoint shares.
struct Shared {
    gate: Arc<dyn ProxyGate>,
    limits: ProxyLimits,
    observer: ProxyObserver,
    slots: Arc<Semaphore>,
    stop: CancellationToken,
}

impl ProxyEndpoint {
    /// Listens on a fresh socket in a new directory (mode 0700) beneath `base` and serves it
    /// on the current tokio runtime.
    pub fn start(
        base: &Path,
        gate: Arc<dyn ProxyGate>,
        limits: ProxyLimits,
        observer: ProxyObserver,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(base)?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = base.join(&id[..16]);
        let socket = dir.join("proxy.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(std::io::Error::other(format!(
                "egress proxy socket path {} is longer than {MAX_SOCKET_PATH} bytes",
                socket.display()
            )));
        }
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let listener = match UnixListener::bind(&socket) {
            Ok(listener) => listener,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let stop = CancellationToken::new();
        let shared = Arc::new(Shared {
            gate,
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            observer,
            stop: stop.clone(),
        });
        tokio::spawn(accept_loop(listener, shared));
        Ok(Self { dir, socket, stop })
    }

    /// The socket commands' forwarders connect to.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }
}

impl Drop for ProxyEndpoint {
    fn drop(&mut self) {
        self.stop.cancel();
        // Best effort: a leftover directory only holds a dead socket.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shared.stop.cancelled() => return,
        };
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(serve(stream, shared.clone()));
            }
            Err(error) => {
                tracing::warn!(%error, "egress proxy accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves one connection and reports it.
async fn serve(mut client: UnixStream, shared: Arc<Shared>) {
    let mut record = ProxyRecord {
        method: String::new(),
        host: String::new(),
        port: 0,
        outcome: ProxyOutcome::Relayed { ended: "closed" },
        rule: None,
        why: None,
        bytes_out: 0,
        bytes_in: 0,
    };
    if let Err(error) = serve_inner(&mut client, &shared, &mut record).await {
        let _ = tokio::time::timeout(
            shared.limits.head_timeout,
            client.write_all(&error.response()),
        )
        .await;
        record.outcome = ProxyOutcome::Refused {
            code: error.code(),
            reason: match &error {
                ProxyError::Refused(refusal) => refusal.reason.clone(),
                other => other.to_string(),
            },
        };
        if let ProxyError::Refused(refusal) = &error {
            record.rule = refusal.rule.clone();
            record.why = refusal.why;
        }
    }
    (shared.observer)(record);
}

async fn serve_inner(
    client: &mut UnixStream,
    shared: &Shared,
    record: &mut ProxyRecord,
) -> Result<(), ProxyError> {
    let limits = &shared.limits;
    let _slot = shared
        .slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| ProxyError::TooManyConnections(limits.max_connections))?;
    let head = tokio::select! {
        head = tokio::time::timeout(limits.head_timeout, head::read(client, limits.max_head_bytes)) => {
            head.map_err(|_| ProxyError::HeadTimeout)??
        }
        _ = shared.stop.cancelled() => return Ok(()),
    };
    record.method = head.method.clone();
    record.host = head.host.clone();
    record.port = head.port;
    let mut upstream = tokio::time::timeout(limits.connect_timeout, async {
        let scheme = match &head.kind {
            HeadKind::Connect => "https",
            HeadKind::Plain { .. } => "http",
        };
        let decision = shared
            .gate
            .decide(scheme, &head.host, head.port)
            .await
            .map_err(ProxyError::Refused)?;
        record.rule = decision.rule;
        connect(&decision.addrs).await
    })
    .await
    .map_err(|_| ProxyError::ConnectFailed(format!("{}:{} (timed out)", head.host, head.port)))??;
    match &head.kind {
        HeadKind::Connect => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .map_err(|e| ProxyError::BadRequest(e.to_string()))?;
        }
        HeadKind::Plain { head } => {
            upstream
                .write_all(head)
                .await
                .map_err(|e| ProxyError::ConnectFailed(e.to_string()))?;
            record.bytes_out += head.len() as u64;
        }
    }
    if !head.leftover.is_empty() {
        upstream
            .write_all(&head.leftover)
            .await
            .map_err(|e| ProxyError::ConnectFailed(e.to_string()))?;
        record.bytes_out += head.leftover.len() as u64;
    }
    let relayed = relay(
        client,
        upstream,
        limits.idle_timeout,
        limits.max_duration,
        &shared.stop,
    )
    .await;
    record.bytes_out += relayed.bytes_out;
    record.bytes_in += relayed.bytes_in;
    record.outcome = ProxyOutcome::Relayed {
        ended: relayed.ended,
    };
    Ok(())
}

/// Connects to the first of `addresses` that accepts.
async fn connect(addresses: &[SocketAddr]) -> Result<TcpStream, ProxyError> {
    let mut last = String::from("no address");
    for address in addresses {
        match TcpStream::connect(address).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = format!("{address}: {e}"),
        }
    }
    Err(ProxyError::ConnectFailed(last))
}
