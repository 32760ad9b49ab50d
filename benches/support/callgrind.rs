//! The server's instructions per phase, counted by Valgrind's callgrind (`NORMA_BENCH_CALLGRIND=1`).
//!
//! CPU time on a shared or drifting virtual machine varies by a fifth between two runs of the
//! same binary; the instructions the server executes for the same runs do not (the same count
//! to within a fraction of a percent run after run), so a change's effect on the work the server
//! does can be compared exactly. Callgrind counts user-space instructions only: not the kernel's
//! work (system calls, wake-ups), nor cache misses — the CPU figures stay the measure of time.
//! The server runs about 50 times slower under callgrind, so the latency and throughput figures
//! of such a run mean nothing.
//!
//! The server is started under `valgrind --tool=callgrind` (the pid stays the server's);
//! `callgrind_control --zero` before a phase and `--dump` after it leave the phase's count in a
//! dump file of its own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Callgrind's output files of one bench invocation.
pub struct Callgrind {
    dir: PathBuf,
}

impl Callgrind {
    /// A fresh output directory under the system's temp dir.
    pub fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("norma-bench-callgrind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("callgrind output dir");
        Self { dir }
    }

    /// The wrapper to start the server under.
    pub fn wrapper(&self) -> Vec<String> {
        vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            "-q".into(),
            format!("--callgrind-out-file={}/callgrind.%p", self.dir.display()),
        ]
    }

    /// Starts counting afresh (before a phase).
    pub fn zero(&self, pid: u32) {
        control(pid, "--zero");
    }

    /// The instructions counted since [`Callgrind::zero`] (after a phase).
    pub fn dump(&self, pid: u32) -> u64 {
        control(pid, "--dump");
        let latest = latest_dump(&self.dir, pid).expect("a callgrind dump file");
        totals(&latest).expect("a totals line in the callgrind dump")
    }
}

fn control(pid: u32, command: &str) {
    let status = Command::new("callgrind_control")
        .arg(command)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .expect("callgrind_control (Valgrind) is installed");
    assert!(
        status.success(),
        "callgrind_control {command} {pid}: {status}"
    );
}

/// The newest dump of `pid` (`callgrind.<pid>.<n>`, the highest `n`).
fn latest_dump(dir: &Path, pid: u32) -> Option<PathBuf> {
    let prefix = format!("callgrind.{pid}.");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let n: u64 = path
                .file_name()?
                .to_str()?
                .strip_prefix(&prefix)?
                .parse()
                .ok()?;
            Some((n, path))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, path)| path)
}

/// The `totals:` (or `summary:`) count of a dump file.
fn totals(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
        })?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
