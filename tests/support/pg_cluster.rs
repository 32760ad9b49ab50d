//! A private Postgres cluster for one test: `initdb` into a temp directory, `postgres` on its own
//! free loopback port (no Unix socket), so restarting or stopping it never disturbs other tests
//! running in parallel on the shared Postgres.
//!
//! Postgres refuses to run as root, so when the test runs as root the binaries run as the
//! `postgres` user (`runuser -u postgres --`) and the data directory is owned by it. The
//! binaries are looked up in `NORMA_TEST_PG_BIN` (default `/usr/lib/postgresql/15/bin`). When
//! they are missing the test skips loudly, except in CI (`CI=true`), where it fails.
//!
//! ```ignore
//! let Some(cluster) = PgCluster::start().await else { return };
//! let url = cluster.create_database().await;
//! cluster.restart();      // fast shutdown, then start again on the same port and data
//! cluster.stop();         // immediate shutdown; `cluster.start_again()` brings it back
//! ```
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// A running private cluster; stopped (immediate mode) when dropped.
pub struct PgCluster {
    root: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgCluster {
    /// Creates and starts a cluster, or `None` (loudly) when the binaries are missing outside
    /// CI. Panics in CI, and on any other failure.
    pub async fn start() -> Option<Self> {
        let bin = PathBuf::from(
            std::env::var("NORMA_TEST_PG_BIN")
                .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_owned()),
        );
        if !bin.join("initdb").exists() {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("Postgres binaries are required in CI but missing in {bin:?}");
            }
            eprintln!("\n!!!!!!!! SKIPPING PRIVATE-CLUSTER TEST: no initdb in {bin:?} !!!!!!!!\n");
            return None;
        }
        let root = tempfile::tempdir().expect("tempdir");
        let as_postgres = nix::unistd::geteuid().is_root();
        let data = root.path().join("pg");
        std::fs::create_dir(&data).expect("data dir");
        if as_postgres {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))
                .expect("chmod root");
            let user = nix::unistd::User::from_name("postgres")
                .expect("user lookup")
                .expect("a `postgres` user to run Postgres as");
            nix::unistd::chown(&data, Some(user.uid), Some(user.gid)).expect("chown data dir");
            std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700))
                .expect("chmod data dir");
        }
        let port = free_port();
        let cluster = Self {
            root,
            bin,
            port,
            as_postgres,
        };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data().display().to_string(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
        );
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(cluster.data().join("postgresql.conf"))
            .expect("postgresql.conf")
            .write_all(conf.as_bytes())
            .expect("write postgresql.conf");
        cluster.start_again();
        Some(cluster)
    }

    fn data(&self) -> PathBuf {
        self.root.path().join("pg")
    }

    fn log(&self) -> PathBuf {
        self.data().join("server.log")
    }

    /// Runs one of the cluster's binaries (as `postgres` when needed); panics on failure.
    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let output = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .current_dir(self.root.path())
                .output()
        } else {
            Command::new(&path)
                .args(args)
                .current_dir(self.root.path())
                .output()
        }
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed: {}\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data().display().to_string();
        let log = self.log().display().to_string();
        let mut all = vec!["-D", data.as_str(), "-l", log.as_str(), "-w", "-t", "60"];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    /// Starts the (stopped) cluster and waits until it accepts connections.
    pub fn start_again(&self) {
        self.pg_ctl(&["start"]);
    }

    /// Stops the cluster at once (`immediate`: connections are cut, no checkpoint).
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "immediate"]);
    }

    /// Restarts the cluster (`fast`: sessions are terminated), on the same port and data.
    pub fn restart(&self) {
        self.pg_ctl(&["restart", "-m", "fast"]);
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// A fresh database on this cluster; its URL.
    pub async fn create_database(&self) -> String {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.url("postgres"))
            .await
            .expect("connect to the private cluster");
        let name = format!("norma_fault_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .expect("create database");
        self.url(&name)
    }

    /// The tail of the cluster's log, for failure messages.
    pub fn logs(&self) -> String {
        let text = std::fs::read_to_string(self.log()).unwrap_or_default();
        let start = text.len().saturating_sub(4096);
        text.get(start..).unwrap_or(&text).to_owned()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let path = self.bin.join("pg_ctl");
        let args = ["-D", data.as_str(), "stop", "-m", "immediate", "-w"];
        let _ = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .output()
        } else {
            Command::new(&path).args(args).output()
        };
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("free port")
        .port()
}
