//! Programs that run another command, and what they run.
//!
//! - **Transparent wrappers** (judged by what they run): `env`, `xargs`, `nohup`, `nice`,
//!   `timeout`, `time`, `command`, `builtin`, `exec`, `stdbuf`, `setsid`, `ionice`, `chrt`,
//!   `taskset`, `flock`, `script -c`, `strace`, `ltrace`, `unshare`, `chroot`, `nsenter`,
//!   `watch`, `prlimit`, `setpriv`, `numactl`, `busybox`/`toybox` applets, `eval`, `sh -c` and
//!   the other shells, `find -exec`, `fd --exec`, `git submodule foreach`, `git bisect run`,
//!   `trap` actions, `alias` values, and a list of small launchers (`fakeroot`, `nocache`,
//!   `unbuffer`, `torsocks`, …). For wrappers whose options we only know in part, every later
//!   operand is also offered to deny rules as a possible program ("deny guesses").
//! - **Privileged wrappers** (`sudo`, `doas`, `su`, `runuser`, `pkexec`, `sg`): deny rules
//!   see what they run, but they are never transparent for allow rules: the wrapper command
//!   itself must be covered too (a rule never grants root by accident).
//! - **Dynamic**: programs that run commands we cannot see (`parallel`, `systemd-run`, `tmux`,
//!   `screen`, `at`, an interpreter's `-c`/`-e` code, a shell or interpreter reading its
//!   program from a pipe, a file, a process substitution or a non-literal here-document) run
//!   an unknown program: every deny rule matches and no allow rule covers them. A shell fed a
//!   literal here-string or here-document is checked like `sh -c` with that text.

use super::Word;
use super::embedded::{alias_inners, fd_exec_inners, find_exec_inners, git_inners, trap_inners};
use super::interpreters::{
    interpreter_inner, interpreter_kind, shell_inner, source_inner, vim_inner,
};
use super::options::{
    OptionsEnd, after_options, is_assignment, skip_options, skip_then_operands, take_literal,
};
use super::privileged::{doas_inner, su_inner, sudo_inner};

/// Where a command reads its stdin from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Stdin {
    /// The stdin of the whole text (the tool's; a PTY's later writes are checked on their own).
    #[default]
    Inherited,
    /// The output of the previous command of a pipeline.
    Piped,
    /// This literal text (a here-string or a here-document we can read).
    Literal(String),
    /// A file, a process substitution or an expanded here-document: unknown content.
    Unknown,
}

/// What a wrapper runs.
pub enum Inner {
    /// These words as a command, with that stdin.
    Words {
        words: Vec<Word>,
        sets_env: bool,
        stdin: Stdin,
    },
    /// This shell text.
    Script(String),
    /// Something we cannot determine.
    Unknown,
}

/// What a program runs besides (or instead of) its own work.
#[derive(Default)]
pub struct Wrapped {
    /// What a wrapper runs.
    pub inner: Option<Inner>,
    /// What a command that also does its own work runs besides (`find -exec`).
    pub extra: Vec<Inner>,
    /// Allow rules judge the inner command instead of the wrapper.
    pub transparent: bool,
    /// The wrapper itself writes a file (`script` keeps a typescript).
    pub writes_files: bool,
    /// Possible commands for deny rules only (unknown option syntax).
    pub deny_guesses: Vec<Vec<Word>>,
}

impl Wrapped {
    /// Whether the wrapper runs any command at all.
    pub fn runs_something(&self) -> bool {
        let runs = |inner: &Inner| !matches!(inner, Inner::Words { words, .. } if words.is_empty());
        self.inner.as_ref().is_some_and(runs) || self.extra.iter().any(runs)
    }
}

fn transparent(inner: Inner) -> Wrapped {
    Wrapped {
        inner: Some(inner),
        transparent: true,
        ..Wrapped::default()
    }
}

fn privileged(inner: Inner) -> Wrapped {
    Wrapped {
        inner: Some(inner),
        transparent: false,
        ..Wrapped::default()
    }
}

pub(super) fn words(words: Vec<Word>, stdin: &Stdin) -> Inner {
    Inner::Words {
        words,
        sets_env: false,
        stdin: stdin.clone(),
    }
}

pub(super) fn rest(args: &[Word], from: usize) -> Vec<Word> {
    args.get(from..).unwrap_or_default().to_vec()
}

/// POSIX-style shells whose `-c` text and literal stdin our parser reads.
pub const SHELLS: [&str; 16] = [
    "sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "posh", "lksh", "ksh93", "pdksh",
    "fish", "csh", "tcsh", "rbash",
];

/// Programs that run commands in ways we do not model: always dynamic.
const OPAQUE_RUNNERS: [&str; 16] = [
    "parallel",
    "sem",
    "systemd-run",
    "machinectl",
    "tmux",
    "screen",
    "at",
    "batch",
    "newgrp",
    "dtach",
    "abduco",
    "expect",
    "nohup-daemon",
    "daemonize",
    "start-stop-daemon",
    "run-parts",
];

/// Small launchers that run their operands as a command after flag-only options.
const LAUNCHERS: [&str; 20] = [
    "nohup",
    "builtin",
    "command",
    "setsid",
    "nocache",
    "eatmydata",
    "fakeroot",
    "fakechroot",
    "catchsegv",
    "unbuffer",
    "rlwrap",
    "torsocks",
    "proxychains",
    "proxychains4",
    "tsocks",
    "caffeinate",
    "xvfb-run",
    "chronic",
    "ifne",
    "with-contenv",
];

/// What `program args…` runs (reading `stdin`), for every program we know runs commands.
pub fn wrapped(program: &str, args: &[Word], stdin: &Stdin) -> Wrapped {
    match program {
        "env" => transparent(env_inner(args, stdin)),
        "xargs" => transparent(xargs_inner(args)),
        p if LAUNCHERS.contains(&p) => transparent(after_options(args, "", &[], stdin)),
        "timeout" => transparent(skip_then_operands(
            args,
            "ks",
            &["--kill-after", "--signal"],
            1,
            stdin,
        )),
        "nice" => transparent(after_options(args, "n", &["--adjustment"], stdin)),
        "time" => transparent(after_options(args, "fo", &["--format", "--output"], stdin)),
        "exec" => transparent(after_options(args, "a", &[], stdin)),
        "stdbuf" => transparent(after_options(
            args,
            "ioe",
            &["--input", "--output", "--error"],
            stdin,
        )),
        "ionice" => guessed(
            skip_then_operands(args, "cnpPuU", &["--class", "--classdata"], 0, stdin),
            args,
        ),
        "chrt" => guessed(
            skip_then_operands(
                args,
                "TPD",
                &["--sched-runtime", "--sched-period", "--sched-deadline"],
                1,
                stdin,
            ),
            args,
        ),
        "taskset" => guessed(
            if args.iter().any(|w| w.literal() == Some("-p")) {
                words(Vec::new(), stdin)
            } else {
                skip_then_operands(args, "", &[], 1, stdin)
            },
            args,
        ),
        "flock" => guessed(flock_inner(args, stdin), args),
        "script" => script_wrapped(args),
        "strace" => guessed(
            after_options(
                args,
                "eoOpsuEIabSPX",
                &["--output", "--attach", "--user", "--env", "--string-limit"],
                stdin,
            ),
            args,
        ),
        "ltrace" => guessed(
            after_options(args, "eoplnsuwxaADFL", &["--output", "--library"], stdin),
            args,
        ),
        "unshare" | "nsenter" => guessed(
            or_shell(after_options(
                args,
                "tSGRN",
                &[
                    "--target",
                    "--setuid",
                    "--setgid",
                    "--root",
                    "--wd",
                    "--map-user",
                    "--map-group",
                    "--map-users",
                    "--map-groups",
                    "--propagation",
                    "--net-socket",
                ],
                stdin,
            )),
            args,
        ),
        "chroot" => guessed(
            or_shell(skip_then_operands(
                args,
                "",
                &["--userspec", "--groups"],
                1,
                stdin,
            )),
            args,
        ),
        "prlimit" | "setpriv" | "numactl" | "firejail" | "bwrap" | "proot" | "valgrind"
        | "cpulimit" | "trickle" | "faketime" | "authbind" | "chpst" | "sshpass" | "envdir"
        | "softlimit" | "setlock" | "dbus-launch" | "dbus-run-session" | "catchsegv-run" => {
            guessed(after_options(args, "", &[], stdin), args)
        }
        "watch" => guessed(watch_inner(args, stdin), args),
        "sudo" => privileged(sudo_inner(args, stdin)),
        "doas" => privileged(doas_inner(args, stdin)),
        "pkexec" => privileged(after_options(args, "", &["--user"], stdin)),
        "su" | "runuser" | "sg" => privileged(su_inner(program, args, stdin)),
        "busybox" | "toybox" => transparent(applet_inner(args, stdin)),
        "source" | "." => transparent_opt(source_inner(args, stdin)),
        "eval" => transparent(eval_inner(args)),
        p if SHELLS.contains(&p) => transparent_opt(shell_inner(args, stdin)),
        p if OPAQUE_RUNNERS.contains(&p) => transparent(Inner::Unknown),
        p if interpreter_kind(p).is_some() => transparent_opt(interpreter_inner(
            interpreter_kind(p).unwrap_or("other"),
            args,
            stdin,
        )),
        "vi" | "vim" | "nvim" | "view" | "vimdiff" | "gvim" => transparent_opt(vim_inner(args)),
        "find" => Wrapped {
            extra: find_exec_inners(args),
            ..Wrapped::default()
        },
        "fd" | "fdfind" => Wrapped {
            extra: fd_exec_inners(args),
            ..Wrapped::default()
        },
        "git" => Wrapped {
            extra: git_inners(args),
            ..Wrapped::default()
        },
        "trap" => Wrapped {
            extra: trap_inners(args),
            ..Wrapped::default()
        },
        "alias" => Wrapped {
            extra: alias_inners(args),
            ..Wrapped::default()
        },
        _ => Wrapped::default(),
    }
}

fn transparent_opt(inner: Option<Inner>) -> Wrapped {
    match inner {
        Some(inner) => transparent(inner),
        None => Wrapped::default(),
    }
}

/// How many later operands a partly known wrapper offers deny rules as possible programs.
const MAX_DENY_GUESSES: usize = 4;

/// A transparent wrapper whose options we know only in part: later operands are deny guesses.
fn guessed(inner: Inner, args: &[Word]) -> Wrapped {
    let mut wrapped = transparent(inner);
    wrapped.deny_guesses = args
        .iter()
        .enumerate()
        .filter(|(_, w)| w.literal().is_some_and(|t| !t.starts_with('-')))
        .take(MAX_DENY_GUESSES)
        .map(|(i, _)| rest(args, i))
        .collect();
    wrapped
}

/// A wrapper that runs the user's shell when given no command.
fn or_shell(inner: Inner) -> Inner {
    match inner {
        Inner::Words { words, .. } if words.is_empty() => Inner::Unknown,
        other => other,
    }
}

/// Quotes a static word so that re-parsing it yields the same word.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `env [OPTION]… [NAME=VALUE]… [COMMAND [ARG]…]`, including `-S`/`--split-string`.
fn env_inner(args: &[Word], stdin: &Stdin) -> Inner {
    let mut i = 0;
    let mut split: Option<String> = None;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return Inner::Unknown;
        };
        if text == "--" {
            i += 1;
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            i += 1;
            if "split-string".starts_with(name) && name.len() >= 2 {
                match value
                    .map(str::to_owned)
                    .or_else(|| take_literal(args, &mut i))
                {
                    Some(s) => split = Some(s),
                    None => return Inner::Unknown,
                }
                break;
            }
            if value.is_none()
                && ["unset", "chdir", "argv0"]
                    .iter()
                    .any(|o| o.starts_with(name) && !name.is_empty())
            {
                i += 1;
            }
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            i += 1;
            let cluster = &text[1..];
            let mut stop = false;
            for (at, letter) in cluster.char_indices() {
                let rest = &cluster[at + letter.len_utf8()..];
                if letter == 'S' {
                    let value = if rest.is_empty() {
                        take_literal(args, &mut i)
                    } else {
                        Some(rest.to_owned())
                    };
                    match value {
                        Some(s) => split = Some(s),
                        None => return Inner::Unknown,
                    }
                    stop = true;
                    break;
                }
                if "uCPa".contains(letter) {
                    if rest.is_empty() {
                        i += 1;
                    }
                    break;
                }
            }
            if stop {
                break;
            }
            continue;
        }
        break;
    }
    if let Some(script) = split {
        // `env -S 'cmd args' more…`: the string is split into words, then the rest follows.
        let mut text = script;
        for word in args.get(i..).unwrap_or_default() {
            match word.literal() {
                Some(w) => {
                    text.push(' ');
                    text.push_str(&shell_quote(w));
                }
                None => return Inner::Unknown,
            }
        }
        return Inner::Script(text);
    }
    let mut sets_env = false;
    while let Some(word) = args.get(i) {
        match word.literal() {
            Some(text) if is_assignment(text) => {
                sets_env = true;
                i += 1;
            }
            Some(_) => break,
            None => return Inner::Unknown,
        }
    }
    Inner::Words {
        words: rest(args, i),
        sets_env,
        stdin: stdin.clone(),
    }
}

/// `xargs [OPTION]… [COMMAND [ARG]…]`: the command gets more arguments from stdin.
fn xargs_inner(args: &[Word]) -> Inner {
    let mut i = 0;
    let mut replace: Option<String> = None;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return Inner::Unknown;
        };
        if text == "--" {
            i += 1;
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            i += 1;
            match name {
                "replace" => replace = Some(value.unwrap_or("{}").to_owned()),
                "arg-file" | "delimiter" | "max-args" | "max-procs" | "max-chars" | "max-lines"
                | "process-slot-var" | "eof"
                    if value.is_none() =>
                {
                    i += 1;
                }
                _ => {}
            }
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            i += 1;
            let cluster = &text[1..];
            for (at, letter) in cluster.char_indices() {
                let rest = &cluster[at + letter.len_utf8()..];
                match letter {
                    'I' => {
                        let value = if rest.is_empty() {
                            take_literal(args, &mut i)
                        } else {
                            Some(rest.to_owned())
                        };
                        match value {
                            Some(v) => replace = Some(v),
                            None => return Inner::Unknown,
                        }
                        break;
                    }
                    'i' => {
                        replace = Some(if rest.is_empty() { "{}" } else { rest }.to_owned());
                        break;
                    }
                    'a' | 'E' | 'd' | 'L' | 'n' | 'P' | 's' => {
                        if rest.is_empty() {
                            i += 1;
                        }
                        break;
                    }
                    'e' | 'l' => break,
                    _ => {}
                }
            }
            continue;
        }
        break;
    }
    let mut words: Vec<Word> = rest(args, i);
    if words.is_empty() {
        words.push(Word::Literal("echo".into()));
    }
    match replace {
        Some(marker) if !marker.is_empty() => {
            for word in &mut words {
                if word.literal().is_some_and(|w| w.contains(marker.as_str())) {
                    *word = Word::Dynamic;
                }
            }
        }
        _ => words.push(Word::Dynamic),
    }
    // The command's stdin is /dev/null (or the terminal with `-o`): nothing a program reads.
    Inner::Words {
        words,
        sets_env: false,
        stdin: Stdin::Inherited,
    }
}

/// `eval ARG…`: the arguments joined by spaces are shell text.
pub(super) fn eval_inner(args: &[Word]) -> Inner {
    let mut parts = Vec::with_capacity(args.len());
    for word in args {
        match word.literal() {
            Some(w) => parts.push(w),
            None => return Inner::Unknown,
        }
    }
    Inner::Script(parts.join(" "))
}

/// `watch [OPTION]… COMMAND…`: the words are joined and run by `sh -c` (with `-x`, directly).
fn watch_inner(args: &[Word], stdin: &Stdin) -> Inner {
    let exec = args
        .iter()
        .any(|w| matches!(w.literal(), Some("-x" | "--exec")));
    match skip_options(args, "ndgq", &["--interval", "--differences", "--equexit"]) {
        OptionsEnd::At(i) if exec => words(rest(args, i), stdin),
        OptionsEnd::At(i) => eval_inner(&rest(args, i)),
        OptionsEnd::Unknown => Inner::Unknown,
    }
}

/// `flock [OPTION]… FILE COMMAND…`, `flock [OPTION]… FILE -c COMMAND`, `flock FD`.
fn flock_inner(args: &[Word], stdin: &Stdin) -> Inner {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        match word.literal() {
            None => return Inner::Unknown,
            Some("-c" | "--command") => {
                return match args.get(i + 1) {
                    Some(Word::Literal(script)) => Inner::Script(script.clone()),
                    _ => Inner::Unknown,
                };
            }
            Some(t) if t.starts_with("--command=") => {
                return Inner::Script(t["--command=".len()..].to_owned());
            }
            _ => i += 1,
        }
    }
    skip_then_operands(
        args,
        "wE",
        &["--timeout", "--wait", "--conflict-exit-code"],
        1,
        stdin,
    )
}

/// `script [OPTION]… [-c COMMAND] [FILE]`: runs the command (or an interactive shell) and
/// writes a typescript to FILE (default `typescript`) unless FILE is `/dev/null`.
fn script_wrapped(args: &[Word]) -> Wrapped {
    let mut command: Option<Inner> = None;
    let mut file: Option<&Word> = None;
    let mut logs = false;
    let mut i = 0;
    while let Some(word) = args.get(i) {
        i += 1;
        let Some(text) = word.literal() else {
            file = Some(word);
            continue;
        };
        match text {
            "-c" | "--command" => {
                command = Some(match args.get(i) {
                    Some(Word::Literal(s)) => Inner::Script(s.clone()),
                    _ => Inner::Unknown,
                });
                i += 1;
            }
            t if t.starts_with("--command=") => {
                command = Some(Inner::Script(t["--command=".len()..].to_owned()));
            }
            "-E" | "--echo" | "-t" => i += 1,
            "-I" | "-O" | "-B" | "-T" | "--log-in" | "--log-out" | "--log-io" | "--log-timing" => {
                logs = true;
                i += 1;
            }
            t if t.starts_with("--log") => logs = true,
            t if t.starts_with("--") => {}
            t if t.starts_with('-') && t.len() > 1 => {
                let cluster = &t[1..];
                if let Some(at) = cluster.find('c') {
                    let attached = &cluster[at + 1..];
                    command = Some(if attached.is_empty() {
                        let script = args.get(i).and_then(Word::literal).map(str::to_owned);
                        i += 1;
                        script.map_or(Inner::Unknown, Inner::Script)
                    } else {
                        Inner::Script(attached.to_owned())
                    });
                }
            }
            _ => file = Some(word),
        }
    }
    let writes_files = logs || file.is_none_or(|f| f.literal() != Some("/dev/null"));
    Wrapped {
        inner: Some(command.unwrap_or(Inner::Unknown)),
        transparent: true,
        writes_files,
        ..Wrapped::default()
    }
}

/// `busybox APPLET ARG…`: the applet is the program (`busybox --list` runs nothing).
fn applet_inner(args: &[Word], stdin: &Stdin) -> Inner {
    match args.first().and_then(Word::literal) {
        Some(t) if t.starts_with('-') => words(Vec::new(), stdin),
        _ => words(args.to_vec(), stdin),
    }
}
