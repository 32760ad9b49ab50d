//! A TCP fault proxy on loopback, in front of a store (or anything else): it forwards bytes both
//! ways and lets a test inject the faults a network does.
//!
//! ```ignore
//! let proxy = FaultProxy::start("127.0.0.1:5432").await;
//! // point the server at 127.0.0.1:{proxy.port()} ...
//! proxy.go_down();           // cut every connection and refuse new ones (an outage)
//! proxy.come_back();         // accept again
//! proxy.cut_all();           // cut every open connection, keep accepting (a network blip)
//! proxy.refuse_new(true);    // keep open connections, refuse new ones
//! proxy.set_latency(Duration::from_millis(500)); // every forwarded chunk waits this long
//! proxy.cut_upstream_port(p); // cut the one connection whose upstream side uses local port p
//! proxy.block_listen(true);  // Postgres: cut every connection that sends `LISTEN`, now and
//!                            // later (the pool's other connections keep working)
//! ```
//!
//! Nothing else is shared with the upstream, so other tests using the same store are not
//! disturbed. The proxy lives as long as the test's runtime.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct State {
    refuse: AtomicBool,
    block_listen: AtomicBool,
    latency_ms: AtomicU64,
    next_id: AtomicU64,
    /// Open connections: id → (local port of the upstream side, its cut switch, whether the
    /// client sent `LISTEN` on it).
    open: Mutex<HashMap<u64, Conn>>,
}

struct Conn {
    upstream_port: u16,
    cut: CancellationToken,
    listening: Arc<AtomicBool>,
}

/// A running fault proxy.
#[derive(Clone)]
pub struct FaultProxy {
    port: u16,
    state: Arc<State>,
}

impl FaultProxy {
    /// Listens on an ephemeral loopback port and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: impl Into<String>) -> Self {
        let upstream = upstream.into();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if shared.refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let state = shared.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let local = server.local_addr().map(|a| a.port()).unwrap_or(0);
                    let id = state.next_id.fetch_add(1, Ordering::SeqCst);
                    let cut = CancellationToken::new();
                    let listening = Arc::new(AtomicBool::new(false));
                    state.open.lock().unwrap().insert(
                        id,
                        Conn {
                            upstream_port: local,
                            cut: cut.clone(),
                            listening: listening.clone(),
                        },
                    );
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::select! {
                        () = pump(client_read, server_write, state.clone(), Some(listening)) => {}
                        () = pump(server_read, client_write, state.clone(), None) => {}
                        () = cut.cancelled() => {}
                    }
                    state.open.lock().unwrap().remove(&id);
                });
            }
        });
        Self { port, state }
    }

    /// The proxy's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn proxied_url(&self, url: &str) -> String {
        let mut parsed = url::Url::parse(url).expect("url");
        parsed.set_host(Some("127.0.0.1")).expect("host");
        parsed.set_port(Some(self.port)).expect("port");
        parsed.to_string()
    }

    /// Cuts every open connection and refuses new ones.
    pub fn go_down(&self) {
        self.refuse_new(true);
        self.cut_all();
    }

    /// Accepts new connections again.
    pub fn come_back(&self) {
        self.refuse_new(false);
    }

    /// Refuses (or accepts again) new connections; open ones are left alone.
    pub fn refuse_new(&self, refuse: bool) {
        self.state.refuse.store(refuse, Ordering::SeqCst);
    }

    /// Cuts every open connection (new ones are accepted unless refused).
    pub fn cut_all(&self) {
        for (_, conn) in self.state.open.lock().unwrap().drain() {
            conn.cut.cancel();
        }
    }

    /// Cuts the open connection whose upstream side uses local port `port`; true if found.
    pub fn cut_upstream_port(&self, port: u16) -> bool {
        let mut open = self.state.open.lock().unwrap();
        let found: Vec<u64> = open
            .iter()
            .filter(|(_, conn)| conn.upstream_port == port)
            .map(|(id, _)| *id)
            .collect();
        for id in &found {
            if let Some(conn) = open.remove(id) {
                conn.cut.cancel();
            }
        }
        !found.is_empty()
    }

    /// Postgres: while `block` holds, cuts every open connection that sent `LISTEN` and every
    /// connection the moment it sends `LISTEN` (before it reaches the server), so a listener
    /// cannot come back; other connections are left alone. Returns how many were cut now.
    pub fn block_listen(&self, block: bool) -> usize {
        self.state.block_listen.store(block, Ordering::SeqCst);
        if !block {
            return 0;
        }
        let mut open = self.state.open.lock().unwrap();
        let listening: Vec<u64> = open
            .iter()
            .filter(|(_, conn)| conn.listening.load(Ordering::SeqCst))
            .map(|(id, _)| *id)
            .collect();
        for id in &listening {
            if let Some(conn) = open.remove(id) {
                conn.cut.cancel();
            }
        }
        listening.len()
    }

    /// The local ports of the upstream side of every open connection (what the upstream sees
    /// as the client port, e.g. `pg_stat_activity.client_port`).
    pub fn upstream_ports(&self) -> Vec<u16> {
        self.state
            .open
            .lock()
            .unwrap()
            .values()
            .map(|conn| conn.upstream_port)
            .collect()
    }

    /// Delays every forwarded chunk, both ways, by `latency` (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        self.state
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }
}

/// Copies one direction until EOF or an error, delaying each chunk by the current latency. On
/// the client-to-server side (`listening` given), notes a `LISTEN` and, while those are
/// blocked, ends the connection instead of forwarding it.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    state: Arc<State>,
    listening: Option<Arc<AtomicBool>>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if let Some(listening) = &listening
            && buffer[..read]
                .windows(6)
                .any(|w| w.eq_ignore_ascii_case(b"LISTEN"))
        {
            listening.store(true, Ordering::SeqCst);
            if state.block_listen.load(Ordering::SeqCst) {
                return;
            }
        }
        let latency = state.latency_ms.load(Ordering::SeqCst);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}
