//! Network for commands of sessions with `network: "egress"`: the only way out of the
//! command's network namespace is the server's egress proxy ([`crate::egress::proxy`]).
//!
//! The command's network namespace has nothing but a loopback interface. The launcher brings
//! it up, listens on `127.0.0.1:`[`PROXY_PORT`] inside the namespace and, after forking the
//! command's PID 1, serves that port from its waiting parent (on its one thread, until PID 1
//! exits): every connection is forwarded,
//! byte for byte, to the session's proxy socket — a path-named UNIX socket of the server,
//! which a process reaches by its inode whatever network namespace it is in. The command gets
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (both cases) pointing there and an empty
//! `NO_PROXY`, so `curl`, `pip` and `git` go through the proxy; Landlock lets it connect to
//! that one TCP port and nothing else, and there is no route anywhere else.
//!
//! The parent reaches the socket through a directory handle opened before the fork (it
//! `fchdir`s there and connects by file name): the minimal root the command's PID 1 pivots
//! into replaces the parent's root as well, and the host tree stays reachable only through
//! such handles. Nothing of this is visible to the command: the parent is outside its PID
//! namespace, and the command's root holds no path to the socket. At most
//! [`MAX_FORWARDED`] connections are forwarded at once (more are closed at once); the
//! proxy applies its own per-session bounds behind that.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

/// The loopback port the forwarder listens on inside the command's network namespace.
pub const PROXY_PORT: u16 = 3128;
/// Most connections the forwarder carries at once for one command.
pub const MAX_FORWARDED: usize = 128;

/// The proxy URL commands are given.
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{PROXY_PORT}")
}

/// The environment that points HTTP clients at the forwarder.
pub fn proxy_env() -> Vec<(OsString, OsString)> {
    let url = proxy_url();
    let mut vars: Vec<(OsString, OsString)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k.into(), url.clone().into()))
    .collect();
    vars.push(("NO_PROXY".into(), "".into()));
    vars.push(("no_proxy".into(), "".into()));
    vars
}

/// Brings the loopback interface of the current network namespace up (needs `CAP_NET_ADMIN`
/// in the namespace's user namespace, which the launcher has right after unsharing it).
pub fn bring_loopback_up() -> Result<(), String> {
    // SAFETY: plain socket/ioctl calls on a zeroed `ifreq` naming "lo"; the socket is closed
    // by `OwnedFd`.
    unsafe {
        let raw = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if raw < 0 {
            return Err(format!(
                "socket for lo: {}",
                std::io::Error::last_os_error()
            ));
        }
        let socket = <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&socket.as_fd());
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut request) < 0 {
            return Err(format!("lo flags: {}", std::io::Error::last_os_error()));
        }
        request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &request) < 0 {
            return Err(format!(
                "bringing lo up: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// The forwarder of one command, prepared inside its network namespace before the fork.
pub struct Forwarder {
    listener: TcpListener,
    socket_dir: OwnedFd,
    socket_name: OsString,
}

impl Forwarder {
    /// Brings `lo` up, listens on the proxy port and opens the directory of the proxy
    /// `socket`. Call after the network namespace was entered, before the fork.
    pub fn prepare(socket: &Path) -> Result<Self, String> {
        bring_loopback_up()?;
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, PROXY_PORT)))
            .map_err(|e| format!("listening on 127.0.0.1:{PROXY_PORT}: {e}"))?;
        let (dir, name) = match (socket.parent(), socket.file_name()) {
            (Some(dir), Some(name)) if socket.is_absolute() => (dir, name),
            _ => return Err(format!("bad egress proxy socket {}", socket.display())),
        };
        let socket_dir = std::fs::File::open(dir)
            .map_err(|e| format!("egress proxy directory {}: {e}", dir.display()))?
            .into();
        Ok(Self {
            listener,
            socket_dir,
            socket_name: name.to_owned(),
        })
    }

    /// Serves on the calling thread (the launcher's waiting parent) until `child` — the
    /// command's PID 1 — has exited (it is left for the caller to reap).
    pub fn serve_until_exit(self, child: nix::unistd::Pid) -> Result<(), String> {
        nix::unistd::fchdir(self.socket_dir.as_fd())
            .map_err(|e| format!("entering the egress proxy directory: {e}"))?;
        self.listener
            .set_nonblocking(true)
            .map_err(|e| format!("forwarder listener: {e}"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("forwarder runtime: {e}"))?;
        let Self {
            listener,
            socket_name,
            ..
        } = self;
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| format!("forwarder listener: {e}"))?;
            tokio::select! {
                () = serve(listener, socket_name) => {}
                () = exited(child) => {}
            }
            Ok(())
        })
    }
}

/// Resolves once `child` has exited (without reaping it): through a pidfd, or by polling.
async fn exited(child: nix::unistd::Pid) {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open returns a new descriptor (owned below) or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, child.as_raw(), 0) } as i32;
    if raw >= 0 {
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: the AsyncFd owns the descriptor, which stays open until it is dropped.
        if let Ok(pidfd) = unsafe { tokio::io::unix::AsyncFd::register(pidfd) } {
            let _ = pidfd.readable().await;
            return;
        }
    }
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    while let Ok(WaitStatus::StillAlive) = waitid(Id::Pid(child), flags) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn serve(listener: tokio::net::TcpListener, socket_name: OsString) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_FORWARDED));
    let socket_name = Arc::new(socket_name);
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            // Out of descriptors, say: wait instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue; // dropped: closed at once
        };
        let socket_name = socket_name.clone();
        tokio::spawn(async move {
            let _slot = slot;
            // Relative to the working directory: the proxy socket's directory.
            if let Ok(mut outbound) = tokio::net::UnixStream::connect(socket_name.as_ref()).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}
