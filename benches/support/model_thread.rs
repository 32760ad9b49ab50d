//! A fake model server on its own OS thread with its own current-thread runtime, so that its
//! CPU time can be measured apart from the code under test (`getrusage(RUSAGE_THREAD)` on
//! that thread). Shared by the benches (`#[path]`-included).
#![allow(dead_code)]

use axum::Router;
use axum::serve::ListenerExt;
use nix::sys::resource::{UsageWho, getrusage};
use std::net::SocketAddr;
use tokio::sync::{mpsc, oneshot};

/// User + system CPU seconds of the process or the calling thread.
pub fn rusage_seconds(who: UsageWho) -> f64 {
    let usage = getrusage(who).expect("getrusage");
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(usage.user_time()) + secs(usage.system_time())
}

/// The running fake; `cpu_seconds` asks its thread for its CPU time.
pub struct ModelThread {
    pub addr: SocketAddr,
    cpu: mpsc::UnboundedSender<oneshot::Sender<f64>>,
}

impl ModelThread {
    /// Serves `app()` on 127.0.0.1:0 from a new thread; with `nodelay`, accepted connections
    /// send without Nagle delay, like a real model API.
    pub fn start(app: impl FnOnce() -> Router + Send + 'static, nodelay: bool) -> Self {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("fake-llm".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("bind");
                    let (cpu_tx, mut cpu_rx) = mpsc::unbounded_channel::<oneshot::Sender<f64>>();
                    ready_tx
                        .send((listener.local_addr().expect("addr"), cpu_tx))
                        .expect("ready");
                    // Runs on this thread: the current-thread runtime has no other workers.
                    tokio::spawn(async move {
                        while let Some(reply) = cpu_rx.recv().await {
                            let _ = reply.send(rusage_seconds(UsageWho::RUSAGE_THREAD));
                        }
                    });
                    let listener = listener.tap_io(move |tcp| {
                        if nodelay {
                            let _ = tcp.set_nodelay(true);
                        }
                    });
                    axum::serve(listener, app()).await.expect("fake server");
                });
            })
            .expect("fake thread");
        let (addr, cpu) = ready_rx.recv().expect("fake started");
        Self { addr, cpu }
    }

    pub async fn cpu_seconds(&self) -> f64 {
        let (tx, rx) = oneshot::channel();
        self.cpu.send(tx).expect("fake alive");
        rx.await.expect("fake answers")
    }
}
