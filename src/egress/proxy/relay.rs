//! Relaying bytes between the command and its destination, both ways, with an idle timeout,
//! a total deadline and byte counts.

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Relay buffer per direction.
const BUFFER: usize = 16 * 1024;

/// What a relay carried, and why it ended.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Relayed {
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub ended: &'static str,
}

/// Relays until both sides closed, nothing moved for `idle`, `max` passed, or `stop`.
pub(crate) async fn relay(
    client: impl AsyncRead + AsyncWrite + Unpin,
    upstream: impl AsyncRead + AsyncWrite + Unpin,
    idle: Duration,
    max: Duration,
    stop: &CancellationToken,
) -> Relayed {
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut up_read, mut up_write) = tokio::io::split(upstream);
    let mut from_client = vec![0u8; BUFFER];
    let mut from_up = vec![0u8; BUFFER];
    let (mut client_open, mut up_open) = (true, true);
    let mut relayed = Relayed::default();
    let deadline = tokio::time::Instant::now() + max;
    relayed.ended = loop {
        if !client_open && !up_open {
            break "closed";
        }
        tokio::select! {
            read = client_read.read(&mut from_client), if client_open => match read {
                Ok(n) if n > 0 => {
                    match tokio::time::timeout(idle, up_write.write_all(&from_client[..n])).await {
                        Ok(Ok(())) => relayed.bytes_out += n as u64,
                        Ok(Err(_)) => break "closed",
                        Err(_) => break "idle",
                    }
                }
                _ => {
                    client_open = false;
                    let _ = up_write.shutdown().await;
                }
            },
            read = up_read.read(&mut from_up), if up_open => match read {
                Ok(n) if n > 0 => {
                    match tokio::time::timeout(idle, client_write.write_all(&from_up[..n])).await {
                        Ok(Ok(())) => relayed.bytes_in += n as u64,
                        Ok(Err(_)) => break "closed",
                        Err(_) => break "idle",
                    }
                }
                _ => {
                    up_open = false;
                    let _ = client_write.shutdown().await;
                }
            },
            _ = tokio::time::sleep(idle) => break "idle",
            _ = tokio::time::sleep_until(deadline) => break "max_duration",
            _ = stop.cancelled() => break "stopped",
        }
    };
    relayed
}
