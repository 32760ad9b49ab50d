//! The sandbox launcher: `norma __sandbox-exec [options] -- PROGRAM ARGS…`.
//!
//! A fresh single-threaded process (no tokio runtime) applies the restrictions to itself —
//! network namespace, Landlock, rlimits, environment allowlist — and then `exec`s the program,
//! the way codex-linux-sandbox does. Applying them in `pre_exec` of the multi-threaded server
//! would be fragile (`unshare(CLONE_NEWUSER)` even refuses multi-threaded callers).
//!
//! Every requested restriction is mandatory: if one cannot be applied the launcher prints
//! `norma-sandbox: …` on stderr and exits with [`EXIT_SANDBOX_FAILED`] without running
//! anything. With `--probe` it instead applies what it can and prints a JSON [`ProbeResult`].

use super::landlock::{self as ll, LandlockRequest};
use super::rlimits::Rlimits;
use super::{env, lifetime, netns};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
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
    /// Deny network access.
    pub deny_network: bool,
    /// Limits to set before `exec`.
    pub rlimits: Option<Rlimits>,
    /// Readable trees besides the system directories.
    pub extra_read: Vec<PathBuf>,
    /// Report what can be enforced instead of running a program.
    pub probe: bool,
    /// The program and its arguments.
    pub program: Vec<OsString>,
}

/// What a probe run could enforce; `Err` strings are the reasons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Landlock file rules: an optional partial-enforcement note, or why they failed.
    pub filesystem: Result<Option<String>, String>,
    /// How network denial holds, or why it failed.
    pub network: Result<String, String>,
    /// Whether the rlimits could be set.
    pub rlimits: Result<(), String>,
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
        for path in &self.extra_read {
            args.push("--read".into());
            args.push(path.clone().into_os_string());
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
                "--read" => opts.extra_read.push(PathBuf::from(value()?)),
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
    let err = std::process::Command::new(&opts.program[0])
        .args(&opts.program[1..])
        .env_clear()
        .envs(allowed_env())
        .exec();
    fail(&format!("exec {:?}: {err}", opts.program[0]))
}

fn fail(message: &str) -> ! {
    eprintln!("norma-sandbox: {message}");
    std::process::exit(EXIT_SANDBOX_FAILED)
}

/// The inherited environment, filtered to the allowlist (defence in depth: the server already
/// started the launcher with a scrubbed environment).
fn allowed_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| env::ALLOWED_VARS.contains(&k) && !env::is_secret_name(k))
        })
        .collect()
}

/// Applies every requested restriction; the first failure is returned.
fn restrict(opts: &LaunchOptions) -> Result<(), String> {
    let mut netns_ok = false;
    if opts.deny_network {
        // The namespace is the primary mechanism; Landlock's TCP rules are the fallback
        // and are applied in addition whenever they are available.
        netns_ok = netns::enter_isolated_netns().is_ok();
    }
    // Before Landlock (it needs /proc/self writes when it makes its own user namespace).
    // Where namespaces are unavailable the command still runs, without this containment.
    let _ = lifetime::contain(netns_ok);
    if opts.filesystem || opts.deny_network {
        let req = LandlockRequest {
            filesystem: opts.filesystem,
            deny_tcp: opts.deny_network,
            workspace: opts.workspace.clone(),
            extra_read: opts.extra_read.clone(),
        };
        match ll::apply(&req) {
            Ok(_) => {}
            // Network denial already holds through the namespace.
            Err(_) if !opts.filesystem && netns_ok => {}
            Err(e) => return Err(format!("landlock: {e}")),
        }
    }
    if let Some(limits) = &opts.rlimits {
        limits.apply().map_err(|e| format!("setrlimit: {e}"))?;
    }
    Ok(())
}

/// Tries each restriction independently and reports the outcome.
fn probe(opts: &LaunchOptions) -> ProbeResult {
    let netns = if opts.deny_network {
        netns::enter_isolated_netns().map(|()| "unshared user+network namespace".to_string())
    } else {
        Err("not requested".to_string())
    };
    let req = LandlockRequest {
        filesystem: opts.filesystem,
        deny_tcp: opts.deny_network,
        workspace: opts.workspace.clone(),
        extra_read: opts.extra_read.clone(),
    };
    let landlock = ll::apply(&req);
    let network = match (&netns, &landlock) {
        (Ok(how), _) => Ok(how.clone()),
        (Err(ns), Ok(_)) if opts.deny_network => Ok(format!(
            "landlock denies TCP bind/connect (UDP not covered); namespace failed: {ns}"
        )),
        (Err(ns), Err(ll)) => Err(format!("namespace: {ns}; landlock: {ll}")),
        (Err(ns), Ok(_)) => Err(ns.clone()),
    };
    let filesystem = if opts.filesystem {
        landlock
    } else {
        Err("not requested".to_string())
    };
    let rlimits = match &opts.rlimits {
        Some(limits) => limits.apply(),
        None => Err("not requested".to_string()),
    };
    ProbeResult {
        filesystem,
        network,
        rlimits,
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
            rlimits: Some(Rlimits::default()),
            extra_read: vec!["/data/ro".into()],
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
