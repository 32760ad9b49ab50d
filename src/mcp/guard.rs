//! [`OutputGuard`]: the reader between a stdio MCP server's stdout and the protocol. It cuts
//! the server off (the read fails, the connection ends) when a line is longer than allowed,
//! when lines that are not JSON objects keep coming (garbage), or when lines come faster than
//! allowed (a flood); the reason is kept for the server's status.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, ReadBuf};

/// What the guard tolerates.
#[derive(Clone, Copy, Debug)]
pub struct GuardLimits {
    /// Bytes in one line (one JSON-RPC message).
    pub max_line_bytes: usize,
    /// Lines that do not start with `{` before the server is cut off.
    pub max_garbage_lines: u32,
    /// Lines in one second before the server is cut off.
    pub max_lines_per_second: u32,
}

impl Default for GuardLimits {
    fn default() -> Self {
        Self {
            max_line_bytes: 4 * 1024 * 1024,
            max_garbage_lines: 8,
            max_lines_per_second: 2000,
        }
    }
}

/// Why a server was cut off (shared with its status).
pub type CutOff = Arc<Mutex<Option<String>>>;

/// See the module docs.
pub struct OutputGuard<R> {
    inner: R,
    limits: GuardLimits,
    line_bytes: usize,
    /// The first non-blank byte of the current line, once seen.
    first: Option<u8>,
    garbage: u32,
    window_start: Instant,
    window_lines: u32,
    cut_off: CutOff,
}

impl<R> OutputGuard<R> {
    pub fn new(inner: R, limits: GuardLimits, cut_off: CutOff) -> Self {
        Self {
            inner,
            limits,
            line_bytes: 0,
            first: None,
            garbage: 0,
            window_start: Instant::now(),
            window_lines: 0,
            cut_off,
        }
    }

    /// Checks the bytes just read; `Err` with the reason when the server must be cut off.
    fn inspect(&mut self, bytes: &[u8]) -> Result<(), String> {
        for &byte in bytes {
            if byte == b'\n' {
                let blank = self.first.is_none();
                if !blank && self.first != Some(b'{') {
                    self.garbage += 1;
                    if self.garbage > self.limits.max_garbage_lines {
                        return Err(format!(
                            "the server wrote more than {} lines that are not JSON-RPC messages",
                            self.limits.max_garbage_lines
                        ));
                    }
                }
                self.line_bytes = 0;
                self.first = None;
                let now = Instant::now();
                if now.duration_since(self.window_start) >= Duration::from_secs(1) {
                    self.window_start = now;
                    self.window_lines = 0;
                }
                self.window_lines += 1;
                if self.window_lines > self.limits.max_lines_per_second {
                    return Err(format!(
                        "the server wrote more than {} messages in a second",
                        self.limits.max_lines_per_second
                    ));
                }
                continue;
            }
            self.line_bytes += 1;
            if self.line_bytes > self.limits.max_line_bytes {
                return Err(format!(
                    "the server wrote a message longer than {} bytes",
                    self.limits.max_line_bytes
                ));
            }
            if self.first.is_none() && !byte.is_ascii_whitespace() {
                self.first = Some(byte);
            }
        }
        Ok(())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for OutputGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(reason) = self
            .cut_off
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Poll::Ready(Err(io::Error::other(reason)));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let fresh = buf.filled()[before..].to_vec();
                if let Err(reason) = this.inspect(&fresh) {
                    buf.set_filled(before);
                    *this.cut_off.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.clone());
                    return Poll::Ready(Err(io::Error::other(reason)));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(input: &[u8], limits: GuardLimits) -> (io::Result<Vec<u8>>, Option<String>) {
        let cut_off = CutOff::default();
        let mut guard = OutputGuard::new(input, limits, cut_off.clone());
        let mut out = Vec::new();
        let result = guard.read_to_end(&mut out).await.map(|_| out);
        let reason = cut_off.lock().unwrap().clone();
        (result, reason)
    }

    #[tokio::test]
    async fn messages_pass_through() {
        let input = b"{\"jsonrpc\":\"2.0\"}\n\n  {\"a\":1}\n";
        let (out, reason) = read_all(input, GuardLimits::default()).await;
        assert_eq!(out.unwrap(), input);
        assert_eq!(reason, None);
    }

    #[tokio::test]
    async fn garbage_lines_cut_the_server_off() {
        let input = "not json\n".repeat(9);
        let (out, reason) = read_all(input.as_bytes(), GuardLimits::default()).await;
        assert!(out.is_err());
        assert!(reason.unwrap().contains("not JSON-RPC"));
        let few = "not json\n".repeat(8);
        assert!(
            read_all(few.as_bytes(), GuardLimits::default())
                .await
                .0
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_long_line_cuts_the_server_off() {
        let limits = GuardLimits {
            max_line_bytes: 16,
            ..GuardLimits::default()
        };
        let input = format!("{{\"a\":\"{}\"}}\n", "x".repeat(64));
        let (out, reason) = read_all(input.as_bytes(), limits).await;
        assert!(out.is_err());
        assert!(reason.unwrap().contains("longer than 16 bytes"));
    }

    #[tokio::test]
    async fn a_flood_cuts_the_server_off() {
        let limits = GuardLimits {
            max_lines_per_second: 10,
            ..GuardLimits::default()
        };
        let input = "{}\n".repeat(50);
        let (out, reason) = read_all(input.as_bytes(), limits).await;
        assert!(out.is_err());
        assert!(reason.unwrap().contains("in a second"));
    }
}
