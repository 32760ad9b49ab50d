//! An S3-compatible object store on loopback for `snapshot` workspace storage tests: the
//! `moto` server from PyPI (`python3 -m pip install 'moto[server]'`; `.ci/run` installs it),
//! started per test on a free port with one bucket. When it cannot be started the test skips
//! loudly, except in CI (`CI=true`), where it fails.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The bucket every test store has.
pub const BUCKET: &str = "norma-test";

/// A running moto server; killed on drop.
pub struct Moto {
    child: Child,
    pub port: u16,
    log: tempfile::NamedTempFile,
}

impl Moto {
    /// Starts moto on a free loopback port and creates [`BUCKET`]; `None` (with a loud
    /// message) when moto is not installed outside CI.
    pub async fn start() -> Option<Self> {
        let port = super::server::free_port();
        let log = tempfile::NamedTempFile::new().expect("moto log");
        let spawn = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log.reopen().expect("moto log"))
                .stderr(log.reopen().expect("moto log"))
                .spawn()
        };
        let child =
            match spawn("moto_server", &[]).or_else(|_| spawn("python3", &["-m", "moto.server"])) {
                Ok(child) => child,
                Err(error) => return skip_or_fail(&format!("cannot run moto_server: {error}")),
            };
        let mut moto = Self { child, port, log };
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = moto.child.try_wait() {
                let log = std::fs::read_to_string(moto.log.path()).unwrap_or_default();
                return skip_or_fail(&format!("moto exited with {status}: {log}"));
            }
            // moto does not check signatures: a plain PUT creates the bucket.
            if let Ok(response) = client.put(moto.bucket_url()).send().await
                && response.status().is_success()
            {
                return Some(moto);
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = moto.child.kill();
                let log = std::fs::read_to_string(moto.log.path()).unwrap_or_default();
                return skip_or_fail(&format!("moto did not answer within 30 s: {log}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn bucket_url(&self) -> String {
        format!("{}/{BUCKET}", self.endpoint())
    }

    /// The environment of a replica with `snapshot` storage on this store.
    pub fn replica_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("NORMA_WORKSPACE__STORAGE", "snapshot".into()),
            ("NORMA_WORKSPACE__SNAPSHOT__ENDPOINT", self.endpoint()),
            ("NORMA_WORKSPACE__SNAPSHOT__BUCKET", BUCKET.into()),
            ("NORMA_WORKSPACE__SNAPSHOT__ALLOW_HTTP", "true".into()),
            (
                "NORMA_WORKSPACE__SNAPSHOT__ACCESS_KEY_ID",
                "testing-key".into(),
            ),
            (
                "NORMA_WORKSPACE__SNAPSHOT__SECRET_ACCESS_KEY",
                "testing-secret-never-logged".into(),
            ),
        ]
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn skip_or_fail(why: &str) -> Option<Moto> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("moto (an S3-compatible server) is required in CI: {why}");
    }
    eprintln!("\n!!!!!!!! SKIPPING SNAPSHOT STORAGE TEST: {why} !!!!!!!!\n");
    None
}
