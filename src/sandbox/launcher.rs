//! The sandbox launcher: `norma __sandbox-exec [options] -- PROGRAM ARGS…`.
//!
//! A fresh single-threaded process (no tokio runtime) applies the restrictions to itself —
//! user, network, PID and mount namespaces, the minimal root, Landlock, rlimits, environment
//! allowlist — and then `exec`s the program, the way codex-linux-sandbox and bubblewrap do. Applying them in `pre_exec` of the multi-threaded server
//! would be fragile (`unshare(CLONE_NEWUSER)` even refuses multi-threaded callers).
//!
//! Every requested restriction is mandatory: if one cannot be applied the launcher prints
//! `norma-sandbox: …` on stderr and exits with [`EXIT_SANDBOX_FAILED`] without running
//! anything. With `--probe` it instead applies what it can and prints a JSON [`ProbeResult`].

use super::egress_forwarder::{self, Forwarder};
use super::landlock::{self as ll, LandlockRequest};
use super::namespaces::{self, Namespaces};
use super::rlimits::Rlimits;
use super::rootfs::{self, RootSpec};
use super::{env, lifetime};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The hidden subcommand name the `norma` binary dispatches to [`main_from_args`].
pub const SUBCOMMAND: &str = "__sandbox-exec";
/// Exit status when a restriction could not be applied (nothing was run).
pub const EXIT_SANDBOX_FAILED: i32 = 125;

/// Parsed launcher options.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchOptions {
    /// The only writable tree, and the command's working directory.
    pub workspace: PathBuf,
    /// Apply Landlock filesystem rules.
    pub filesystem: bool,
    /// Deny TCP bind/connect with Landlock.
    pub deny_network: bool,
    /// Run in a network namespace of its own (no interface up).
    pub netns: bool,
    /// Run as PID 1 of a PID namespace of its own, killed with the server.
    pub pidns: bool,
    /// Run in a mount namespace of its own, in the minimal root (needs `pidns`).
    pub mountns: bool,
    /// Limits to set before `exec`.
    pub rlimits: Option<Rlimits>,
    /// Readable trees besides the system directories.
    pub extra_read: Vec<PathBuf>,
    /// The session's egress proxy socket: the command gets a loopback forwarder to it (see
    /// [`egress_forwarder`]); needs `netns` and `pidns`.
    pub egress_proxy: Option<PathBuf>,
    /// Inherited variables passed to the program besides the allowlist: the environment a
    /// tenant configured explicitly for its MCP server (names here, values in the
    /// launcher's own environment, so they never appear in a command line).
    pub pass_env: Vec<String>,
    /// Report what can be enforced instead of running a program.
    pub probe: bool,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

/// What a probe run could enforce; `Err` strings are the reasons. Each namespace part is
/// tried in a child process of its own, the rest in the probe process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Landlock (file rules, TCP rules, scopes as requested): an optional
    /// partial-enforcement note, or why it failed.
    pub landlock: Result<Option<String>, String>,
    /// Whether a user + network namespace could be entered.
    pub netns: Result<(), String>,
    /// Whether a user + PID namespace could be entered as its PID 1.
    pub pidns: Result<(), String>,
    /// Whether the minimal root could be built and entered.
    pub mountns: Result<(), String>,
    /// Whether the rlimits could be set.
    pub rlimits: Result<(), String>,
    /// Whether a network namespace's loopback can be brought up and listened on (the
    /// plumbing of `network: "egress"` sessions).
    pub egress: Result<(), String>,
}

impl LaunchOptions {
    /// The launcher arguments (after the subcommand) that reproduce these options.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![SUBCOMMAND.into()];
        args.push("--workspace".into());
        args.push(self.workspace.clone().into_os_string());
        if self.filesystem {
            args.push("--fs".into());
        }
        if self.deny_network {
            args.push("--deny-net".into());
        }
        for (on, flag) in [
            (self.netns, "--netns"),
            (self.pidns, "--pidns"),
            (self.mountns, "--mountns"),
        ] {
            if on {
                args.push(flag.into());
            }
        }
        for path in &self.extra_read {
            args.push("--read".into());
            args.push(path.clone().into_os_string());
        }
        if let Some(socket) = &self.egress_proxy {
            args.push("--egress-proxy".into());
            args.push(socket.clone().into_os_string());
        }
        for name in &self.pass_env {
            args.push("--pass".into());
            args.push(name.into());
        }
        if let Some(r) = &self.rlimits {
            let limits = [
                ("--cpu", r.cpu_seconds),
                ("--as", r.address_space_bytes),
                ("--nproc", r.max_processes),
                ("--fsize", r.file_size_bytes),
            ];
            for (flag, value) in limits {
                if let Some(v) = value {
                    args.push(flag.into());
                    args.push(v.to_string().into());
                }
            }
        }
        if self.probe {
            args.push("--probe".into());
        }
        args.push("--".into());
        args.extend(self.program.iter().cloned());
        args
    }

    /// Parses the arguments that follow the subcommand name.
    pub fn parse(args: &[OsString]) -> Result<Self, String> {
        let mut opts = LaunchOptions::default();
        let mut it = args.iter();
        let mut limits = Rlimits::none();
        while let Some(arg) = it.next() {
            let flag = arg.to_str().ok_or("non-UTF-8 option")?;
            let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
            let number = |v: OsString| -> Result<u64, String> {
                v.to_str()
                    .and_then(|s| s.parse().ok())
                    .ok_or(format!("{flag} needs a number"))
            };
            match flag {
                "--workspace" => opts.workspace = PathBuf::from(value()?),
                "--fs" => opts.filesystem = true,
                "--deny-net" => opts.deny_network = true,
                "--netns" => opts.netns = true,
                "--pidns" => opts.pidns = true,
                "--mountns" => opts.mountns = true,
                "--read" => opts.extra_read.push(PathBuf::from(value()?)),
                "--egress-proxy" => opts.egress_proxy = Some(PathBuf::from(value()?)),
                "--pass" => opts.pass_env.push(
                    value()?
                        .into_string()
                        .map_err(|_| "--pass needs a UTF-8 name".to_string())?,
                ),
                "--cpu" => limits.cpu_seconds = Some(number(value()?)?),
                "--as" => limits.address_space_bytes = Some(number(value()?)?),
                "--nproc" => limits.max_processes = Some(number(value()?)?),
                "--fsize" => limits.file_size_bytes = Some(number(value()?)?),
                "--probe" => opts.probe = true,
                "--" => {
                    opts.program = it.cloned().collect();
                    break;
                }
                other => return Err(format!("unknown option {other}")),
            }
        }
        if limits.any() {
            opts.rlimits = Some(limits);
        }
        if opts.workspace.as_os_str().is_empty() {
            return Err("--workspace is required".into());
        }
        if !opts.probe && opts.program.is_empty() {
            return Err("no program after --".into());
        }
        Ok(opts)
    }
}

/// Entry point of the hidden subcommand. `args` is the full argv (`norma __sandbox-exec …`).
/// Must be called before any thread (or async runtime) is started.
pub fn main_from_args(args: Vec<OsString>) -> ! {
    let rest: Vec<OsString> = args
        .into_iter()
        .skip_while(|a| a != SUBCOMMAND)
        .skip(1)
        .collect();
    let opts = match LaunchOptions::parse(&rest) {
        Ok(opts) => opts,
        Err(e) => fail(&e),
    };
    if opts.probe {
        let result = probe(&opts);
        match serde_json::to_string(&result) {
            Ok(json) => println!("{json}"),
            Err(e) => fail(&e.to_string()),
        }
        std::process::exit(0);
    }
    if let Err(e) = restrict(&opts) {
        fail(&e);
    }
    if opts.program[0] == super::pdf_text::PROGRAM {
        // A built-in job: runs here, confined like a command, instead of an `exec`.
        super::pdf_text::job_main();
    }
    let mut env = allowed_env(&opts.pass_env);
    if opts.egress_proxy.is_some() {
        env.extend(egress_forwarder::proxy_env());
    }
    let err = std::process::Command::new(&opts.program[0])
        .args(&opts.program[1..])
        .env_clear()
        .envs(env)
        .exec();
    fail(&format!("exec {:?}: {err}", opts.program[0]))
}

fn fail(message: &str) -> ! {
    eprintln!("norma-sandbox: {message}");
    std::process::exit(EXIT_SANDBOX_FAILED)
}

/// The inherited environment, filtered to the allowlist (defence in depth: the server already
/// started the launcher with a scrubbed environment) plus the names passed with `--pass`
/// (variables the tenant set for its own MCP server, which may well be its own tokens).
fn allowed_env(pass: &[String]) -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str().is_some_and(|k| {
                (env::ALLOWED_VARS.contains(&k) && !env::is_secret_name(k))
                    || pass.iter().any(|name| name == k)
            })
        })
        .collect()
}

/// Applies every requested restriction; the first failure is returned. With `pidns` the
/// calling process stays behind as the waiting parent and only the child returns.
fn restrict(opts: &LaunchOptions) -> Result<(), String> {
    lifetime::die_with_parent()?;
    if opts.mountns && !opts.pidns {
        return Err("the minimal root needs the PID namespace (a /proc of its own)".into());
    }
    if opts.egress_proxy.is_some() && !(opts.netns && opts.pidns) {
        return Err(
            "network egress needs the network and PID namespaces (a forwarder outside the command's PID namespace)"
                .into(),
        );
    }
    if opts.netns || opts.pidns || opts.mountns {
        namespaces::enter(Namespaces {
            network: opts.netns,
            pid: opts.pidns,
            mount: opts.mountns,
        })?;
    }
    let forwarder = match &opts.egress_proxy {
        Some(socket) => Some(Forwarder::prepare(socket).map_err(|e| format!("egress: {e}"))?),
        None => None,
    };
    if opts.pidns {
        lifetime::fork_as_pid1_with(move |child| match forwarder {
            Some(forwarder) => forwarder
                .serve_until_exit(child)
                .map_err(|e| format!("egress: {e}")),
            None => Ok(()),
        })?;
    }
    if opts.mountns {
        rootfs::enter_minimal_root(&root_spec(opts))?;
    }
    if opts.filesystem || opts.deny_network {
        ll::apply(&landlock_request(opts)).map_err(|e| format!("landlock: {e}"))?;
    }
    if let Some(limits) = &opts.rlimits {
        limits.apply().map_err(|e| format!("setrlimit: {e}"))?;
    }
    Ok(())
}

fn root_spec(opts: &LaunchOptions) -> RootSpec {
    RootSpec {
        workspace: opts.workspace.clone(),
        extra_read: opts.extra_read.clone(),
    }
}

fn landlock_request(opts: &LaunchOptions) -> LandlockRequest {
    LandlockRequest {
        filesystem: opts.filesystem,
        deny_tcp: opts.deny_network,
        connect_port: opts
            .egress_proxy
            .is_some()
            .then_some(egress_forwarder::PROXY_PORT),
        workspace: opts.workspace.clone(),
        extra_read: opts.extra_read.clone(),
        private_tmp: opts.mountns,
    }
}

/// Tries each restriction independently and reports the outcome: the namespace parts each in
/// a child process (so one failing does not hide another), then Landlock and rlimits here.
fn probe(opts: &LaunchOptions) -> ProbeResult {
    let not_requested = || Err("not requested".to_string());
    let netns = if opts.netns {
        in_child(|| {
            namespaces::enter(Namespaces {
                network: true,
                ..Namespaces::default()
            })
        })
    } else {
        not_requested()
    };
    let pidns = if opts.pidns {
        in_child(|| {
            namespaces::enter(Namespaces {
                pid: true,
                ..Namespaces::default()
            })?;
            lifetime::fork_as_pid1()?;
            if std::process::id() == 1 {
                Ok(())
            } else {
                Err("the forked child is not PID 1 of its namespace".into())
            }
        })
    } else {
        not_requested()
    };
    let mountns = if !opts.mountns {
        not_requested()
    } else if !opts.pidns {
        Err("needs the pid part: the minimal root mounts a /proc of the command's own PID namespace".into())
    } else {
        in_child(|| {
            namespaces::enter(Namespaces {
                network: false,
                pid: true,
                mount: true,
            })?;
            lifetime::fork_as_pid1()?;
            rootfs::enter_minimal_root(&root_spec(opts))?;
            let own_proc_only = std::fs::read_dir("/proc")
                .map_err(|e| format!("/proc: {e}"))?
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count()
                == 1;
            if !own_proc_only {
                return Err("the new /proc shows processes of other namespaces".into());
            }
            if std::path::Path::new("/oldroot").exists() || std::path::Path::new("/run").exists() {
                return Err("the host root is still reachable".into());
            }
            Ok(())
        })
    };
    let egress = if opts.netns {
        in_child(|| {
            namespaces::enter(Namespaces {
                network: true,
                ..Namespaces::default()
            })?;
            egress_forwarder::bring_loopback_up()?;
            std::net::TcpListener::bind(("127.0.0.1", egress_forwarder::PROXY_PORT))
                .map(drop)
                .map_err(|e| format!("listening on the namespace's loopback: {e}"))
        })
    } else {
        not_requested()
    };
    let landlock = if opts.filesystem || opts.deny_network {
        ll::apply(&LandlockRequest {
            private_tmp: false,
            ..landlock_request(opts)
        })
    } else {
        Err("not requested".to_string())
    };
    let rlimits = match &opts.rlimits {
        Some(limits) => limits.apply(),
        None => not_requested(),
    };
    ProbeResult {
        landlock,
        netns,
        pidns,
        mountns,
        rlimits,
        egress,
    }
}

/// Runs `check` in a forked child and returns its outcome (the error text travels back
/// through a pipe). Only for the single-threaded launcher.
fn in_child(check: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let (read_end, write_end) = nix::unistd::pipe().map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the launcher is single-threaded, so the child may run arbitrary code.
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Child => {
            drop(read_end);
            let code = match check() {
                Ok(()) => 0,
                Err(message) => {
                    let _ = std::fs::File::from(write_end).write_all(message.as_bytes());
                    1
                }
            };
            std::process::exit(code)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(write_end);
            let mut message = String::new();
            let _ = std::fs::File::from(read_end)
                .take(64 * 1024)
                .read_to_string(&mut message);
            let status = loop {
                match nix::sys::wait::waitpid(child, None) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    other => break other,
                }
            };
            match status {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
                _ if !message.is_empty() => Err(message),
                other => Err(format!("probe child ended with {other:?}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_through_args() {
        let opts = LaunchOptions {
            workspace: "/ws".into(),
            filesystem: true,
            deny_network: true,
            netns: true,
            pidns: true,
            mountns: true,
            rlimits: Some(Rlimits::default()),
            extra_read: vec!["/data/ro".into()],
            egress_proxy: Some("/run/proxy.sock".into()),
            pass_env: vec!["GITHUB_TOKEN".into()],
            probe: false,
            program: vec!["/bin/bash".into(), "-c".into(), "echo hi".into()],
        };
        let args = opts.to_args();
        assert_eq!(args[0], SUBCOMMAND);
        assert_eq!(LaunchOptions::parse(&args[1..]).expect("parse"), opts);
    }

    #[test]
    fn parse_rejects_missing_program_and_unknown_flags() {
        let args: Vec<OsString> = vec!["--workspace".into(), "/ws".into(), "--".into()];
        assert!(LaunchOptions::parse(&args).is_err());
        let args: Vec<OsString> = vec!["--workspace".into(), "/ws".into(), "--bogus".into()];
        assert!(LaunchOptions::parse(&args).is_err());
    }
}
