//! The per-program argument model: which words make a "read-only" program execute another
//! program or write files, so a prefix allow rule (`Bash(sed:*)`) does not cover them unless
//! it names them (`Bash(sed -i:*)`). Each option is recognised as `--opt=value` and
//! `--opt value`, inside bundled short options (`sed -ni`), and by any abbreviation of a long
//! option (`--out` for `--output`; GNU `getopt_long` and git accept unambiguous ones).
//! A dynamic word (`$X`, a glob) where such an option could stand is a risk too: it may expand
//! to one (a file named `--pre=sh`).
//!
//! git's global options are parsed before the subcommand: the command gets a [`View`] without
//! them (`git -C . push` → `git push`) that deny rules always see and allow rules see when
//! the dropped options are harmless. `git -c` config that runs programs (`core.pager`,
//! `core.sshCommand`, `alias.*`, `*.textconv`, `diff.external`, `core.fsmonitor`, …) is a
//! risk no allow rule covers, even one naming it.

use super::scripts;
use super::wrappers::SHELLS;
use super::{Risk, SimpleCommand, Word};

/// Fills in `cmd.risks` (and `cmd.view` for git) from the program's argument model.
pub(super) fn annotate(program: &str, cmd: &mut SimpleCommand) {
    let words = &cmd.words;
    let mut risks = Vec::new();
    match program {
        "git" => {
            let (risks, view) = super::git::git(words);
            cmd.risks.extend(risks);
            cmd.view = view;
            return;
        }
        "find" => find(words, &mut risks),
        "sed" | "gsed" => scripts::sed(words, &mut risks),
        "awk" | "gawk" | "mawk" | "nawk" => scripts::awk(words, &mut risks),
        "rg" => options(words, &RG, &mut risks),
        "tar" | "gtar" | "bsdtar" => tar(words, &mut risks),
        "zip" => {
            scan(words, 1, &ZIP, &mut risks);
            for (i, w) in words.iter().enumerate() {
                if w.literal().is_some_and(|t| t.starts_with("-TT")) {
                    risks.push(exec_risk(i, "runs a program to test the archive"));
                }
            }
        }
        "sort" => options(words, &SORT, &mut risks),
        "time" => options(words, &TIME, &mut risks),
        "curl" => options(words, &CURL, &mut risks),
        "wget" => options(words, &WGET, &mut risks),
        "rsync" => options(words, &RSYNC, &mut risks),
        "man" => options(words, &MAN, &mut risks),
        "less" => {
            scan(words, 1, &LESS, &mut risks);
            for (i, w) in words.iter().enumerate().skip(1) {
                if w.literal().is_some_and(|t| t.starts_with('+')) {
                    risks.push(exec_risk(i, "runs less commands"));
                }
            }
        }
        "tcpdump" => options(words, &TCPDUMP, &mut risks),
        "iconv" => options(words, &ICONV, &mut risks),
        "yq" => options(words, &YQ, &mut risks),
        "sudo" => options(words, &SUDO, &mut risks),
        "perl" => options(words, &PERL, &mut risks),
        "ssh" | "scp" | "sftp" => ssh(words, &mut risks),
        "dd" => {
            for (i, w) in words.iter().enumerate().skip(1) {
                match w.literal() {
                    Some(t) if t.starts_with("of=") && t != "of=/dev/null" => {
                        risks.push(risk(i, "writes a file"));
                    }
                    None => risks.push(risk(i, "a dynamic operand could name an output file")),
                    _ => {}
                }
            }
        }
        "openssl" => {
            for (i, w) in words.iter().enumerate().skip(1) {
                if matches!(
                    w.literal(),
                    Some("-out" | "-keyout" | "-signkey" | "-writerand")
                ) {
                    risks.push(risk(i, "writes a file"));
                }
            }
        }
        "uniq" | "xxd" => {
            // The second operand is an output file.
            let operands: Vec<usize> = (1..words.len())
                .filter(|&i| {
                    words[i]
                        .literal()
                        .is_none_or(|t| !t.starts_with('-') || t == "-")
                })
                .collect();
            if let Some(&i) = operands.get(1) {
                risks.push(risk(i, "writes its output to a file"));
            }
        }
        p if SHELLS.contains(&p) => options(words, &SHELL, &mut risks),
        "export" | "declare" | "typeset" | "readonly" | "local" | "env" => {
            for (i, w) in words.iter().enumerate().skip(1) {
                if w.literal().is_some_and(env_runs_program) {
                    risks.push(Risk {
                        word: i,
                        ..env_program_risk()
                    });
                }
            }
        }
        _ => {}
    }
    cmd.risks.extend(risks);
}

/// The risks of a program whose only model is its options.
pub(super) fn options(words: &[Word], model: &Model, risks: &mut Vec<Risk>) {
    scan(words, 1, model, risks);
}

/// A word that writes (or may write) files.
pub(super) fn risk(word: usize, what: &'static str) -> Risk {
    Risk {
        word,
        never: false,
        executes: false,
        what,
    }
}

/// A word that runs a program we cannot see.
pub(super) fn exec_risk(word: usize, what: &'static str) -> Risk {
    Risk {
        word,
        never: false,
        executes: true,
        what,
    }
}

/// A word that runs a program and that no allow rule covers.
pub(super) fn never(word: usize, what: &'static str) -> Risk {
    Risk {
        word,
        never: true,
        executes: true,
        what,
    }
}

/// Environment variables whose value is a program (or code) something runs later.
const PROGRAM_VARIABLES: [&str; 32] = [
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_PROXY_COMMAND",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_GLOBAL",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "BROWSER",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "LESSOPEN",
    "LESSCLOSE",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PERL5OPT",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "NODE_OPTIONS",
    "RUBYOPT",
    "PS4",
];

/// Whether `NAME=value` sets a variable whose value something runs (`GIT_SSH_COMMAND`,
/// `PAGER`, `LD_PRELOAD`, `GIT_CONFIG_*`, …).
pub(super) fn env_runs_program(assignment: &str) -> bool {
    let name = assignment.split_once('=').map_or(assignment, |(n, _)| n);
    PROGRAM_VARIABLES.contains(&name)
        || name.starts_with("GIT_CONFIG_")
        || name.starts_with("BASH_FUNC_")
}

/// The risk of such an assignment: a program no rule can see.
pub(super) fn env_program_risk() -> Risk {
    never(0, "an environment variable whose value is a program")
}

/// Long options (of any modelled program) whose value or effect runs a program.
pub(super) const EXEC_LONG: [&str; 27] = [
    "config",
    "pre",
    "hostname-bin",
    "checkpoint-action",
    "to-command",
    "use-compress-program",
    "info-script",
    "new-volume-script",
    "rsh-command",
    "rmt-command",
    "unzip-command",
    "compress-program",
    "use-askpass",
    "execute",
    "rsh",
    "rsync-path",
    "pager",
    "browser",
    "ext-diff",
    "textconv",
    "upload-pack",
    "receive-pack",
    "exec",
    "open-files-in-pager",
    "extcmd",
    "tool",
    "template",
];

/// What a sed script or awk program does.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ScriptEffect {
    Harmless,
    Writes,
    Executes,
}

pub(super) fn script_risk(effect: ScriptEffect, word: usize, what: &'static str) -> Option<Risk> {
    match effect {
        ScriptEffect::Harmless => None,
        ScriptEffect::Writes => Some(risk(word, what)),
        ScriptEffect::Executes => Some(exec_risk(word, what)),
    }
}

/// The option syntax of one program, as far as its risks go.
pub(super) struct Model {
    /// Long options (without `--`) that execute or write; abbreviations match too.
    pub(super) risky_long: &'static [&'static str],
    /// Harmless long options that are prefixes of risky ones (`--checkpoint`).
    pub(super) exact_safe: &'static [&'static str],
    /// Long options whose value is the next word (when written without `=`).
    pub(super) long_value: &'static [&'static str],
    /// Short option letters that execute or write.
    pub(super) risky_short: &'static str,
    /// Short option letters that take a value (the rest of the cluster or the next word).
    pub(super) short_value: &'static str,
    /// The risky short letters that run a program (the others write).
    pub(super) exec_short: &'static str,
    /// A dynamic word before `--` is a risk.
    pub(super) dynamic_risk: bool,
    /// Options end at the first operand (the rest is a command: `time -o f cmd`).
    pub(super) stop_at_operand: bool,
}

pub(super) const BASE: Model = Model {
    risky_long: &[],
    exact_safe: &[],
    long_value: &[],
    risky_short: "",
    short_value: "",
    exec_short: "",
    dynamic_risk: false,
    stop_at_operand: false,
};

const RG: Model = Model {
    risky_long: &["pre", "hostname-bin"],
    long_value: &[
        "regexp",
        "file",
        "glob",
        "iglob",
        "type",
        "type-not",
        "max-count",
        "after-context",
        "before-context",
        "context",
        "threads",
        "max-columns",
        "replace",
        "encoding",
        "pre",
        "pre-glob",
        "hostname-bin",
        "max-depth",
        "type-add",
        "sort",
        "sortr",
        "color",
        "colors",
        "path-separator",
        "max-filesize",
        "dfa-size-limit",
        "regex-size-limit",
        "engine",
    ],
    short_value: "efgtTmABCjMrEd",
    dynamic_risk: true,
    ..BASE
};

const ZIP: Model = Model {
    risky_long: &["unzip-command", "move"],
    risky_short: "m",
    short_value: "bnitxP",
    dynamic_risk: true,
    ..BASE
};

const SORT: Model = Model {
    risky_long: &["output", "compress-program"],
    long_value: &[
        "key",
        "output",
        "field-separator",
        "buffer-size",
        "temporary-directory",
        "compress-program",
        "files0-from",
        "parallel",
        "batch-size",
        "random-source",
        "sort",
    ],
    risky_short: "o",
    short_value: "kotST",
    dynamic_risk: true,
    ..BASE
};

const TIME: Model = Model {
    risky_long: &["output", "append"],
    long_value: &["output", "format"],
    risky_short: "oa",
    short_value: "fo",
    dynamic_risk: true,
    stop_at_operand: true,
    ..BASE
};

const CURL: Model = Model {
    risky_long: &[
        "output",
        "remote-name",
        "remote-name-all",
        "dump-header",
        "cookie-jar",
        "trace",
        "trace-ascii",
        "libcurl",
        "stderr",
        "config",
        "etag-save",
        "hsts",
        "alt-svc",
        "output-dir",
    ],
    long_value: &[
        "output",
        "dump-header",
        "cookie-jar",
        "trace",
        "trace-ascii",
        "libcurl",
        "stderr",
        "config",
        "etag-save",
        "hsts",
        "alt-svc",
        "output-dir",
        "data",
        "header",
        "user",
        "request",
        "url",
        "cookie",
        "form",
        "user-agent",
        "referer",
        "upload-file",
    ],
    risky_short: "oODcK",
    short_value: "oDcKdHuXAeEbTFrxyzwmYCUQtP",
    ..BASE
};

const WGET: Model = Model {
    risky_long: &[
        "output-document",
        "output-file",
        "append-output",
        "execute",
        "use-askpass",
    ],
    long_value: &["output-document", "output-file", "append-output", "execute"],
    risky_short: "oOae",
    short_value: "oOaePtTwUQ",
    exec_short: "e",
    ..BASE
};

const RSYNC: Model = Model {
    risky_long: &[
        "rsh",
        "rsync-path",
        "log-file",
        "write-batch",
        "only-write-batch",
    ],
    long_value: &["rsh", "rsync-path", "log-file"],
    risky_short: "e",
    short_value: "eBfTM",
    dynamic_risk: false,
    exec_short: "e",
    ..BASE
};

const MAN: Model = Model {
    risky_long: &["pager", "html", "browser"],
    long_value: &["pager"],
    risky_short: "PH",
    short_value: "PMLmSesCR",
    exec_short: "PH",
    ..BASE
};

const LESS: Model = Model {
    risky_long: &["log-file", "LOG-FILE"],
    long_value: &["log-file", "LOG-FILE"],
    risky_short: "oO",
    short_value: "oObhjkpPtTxyz#",
    ..BASE
};

const TCPDUMP: Model = Model {
    risky_short: "zwZ",
    short_value: "zwZBcCDEFGiMrsTVWyjm",
    exec_short: "z",
    ..BASE
};

const ICONV: Model = Model {
    risky_long: &["output"],
    long_value: &["output", "from-code", "to-code"],
    risky_short: "o",
    short_value: "oft",
    ..BASE
};

const YQ: Model = Model {
    risky_long: &["inplace"],
    risky_short: "i",
    ..BASE
};

const SUDO: Model = Model {
    risky_long: &["edit"],
    long_value: &[
        "user", "group", "chdir", "host", "prompt", "role", "type", "chroot",
    ],
    risky_short: "e",
    short_value: "ugCDhprtTUR",
    stop_at_operand: true,
    ..BASE
};

const PERL: Model = Model {
    risky_short: "i",
    short_value: "IMmxdDFC0l",
    stop_at_operand: true,
    ..BASE
};

const SHELL: Model = Model {
    risky_long: &["rcfile", "init-file"],
    long_value: &["rcfile", "init-file"],
    short_value: "oO",
    stop_at_operand: true,
    ..BASE
};

/// Whether `name` (a long option without `--`, before any `=`) means one of `risky`.
fn long_is_risky(name: &str, model: &Model) -> bool {
    !name.is_empty()
        && !model.exact_safe.contains(&name)
        && model.risky_long.iter().any(|r| r.starts_with(name))
}

/// Scans options from `start`, pushing a risk for every option of `model` that executes or
/// writes. Returns the indices of the operands.
pub(super) fn scan(
    words: &[Word],
    start: usize,
    model: &Model,
    risks: &mut Vec<Risk>,
) -> Vec<usize> {
    let mut operands = Vec::new();
    let mut i = start;
    while i < words.len() {
        let Some(text) = words[i].literal() else {
            if model.dynamic_risk {
                risks.push(risk(
                    i,
                    "a dynamic word could be an option that executes or writes",
                ));
            }
            operands.push(i);
            i += 1;
            if model.stop_at_operand {
                break;
            }
            continue;
        };
        if text == "--" {
            operands.extend(i + 1..words.len());
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, has_value) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            if long_is_risky(name, model) {
                let executes = EXEC_LONG.iter().any(|e| e.starts_with(name));
                risks.push(if executes {
                    exec_risk(i, "an option that runs a program")
                } else {
                    risk(i, "an option that writes a file")
                });
            }
            let takes_value = model.long_value.contains(&name);
            i += if !has_value && takes_value { 2 } else { 1 };
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            for (at, letter) in text[1..].char_indices() {
                if model.risky_short.contains(letter) {
                    risks.push(if model.exec_short.contains(letter) {
                        exec_risk(i, "an option that runs a program")
                    } else {
                        risk(i, "an option that writes a file")
                    });
                }
                if model.short_value.contains(letter) {
                    if at + letter.len_utf8() == text.len() - 1 {
                        i += 1;
                    }
                    break;
                }
            }
            i += 1;
            continue;
        }
        operands.push(i);
        i += 1;
        if model.stop_at_operand {
            break;
        }
    }
    operands
}

/// `find` primaries that delete or write files (`-exec` commands are judged on their own).
fn find(words: &[Word], risks: &mut Vec<Risk>) {
    for (i, word) in words.iter().enumerate().skip(1) {
        match word.literal() {
            Some("-delete" | "-fprint" | "-fprint0" | "-fprintf" | "-fls") => {
                risks.push(risk(i, "deletes or writes files"));
            }
            None => risks.push(risk(i, "a dynamic word could be a primary that writes")),
            _ => {}
        }
    }
}

const TAR: Model = Model {
    risky_long: &[
        "checkpoint-action",
        "to-command",
        "use-compress-program",
        "info-script",
        "new-volume-script",
        "rsh-command",
        "rmt-command",
        "remove-files",
        "index-file",
        "listed-incremental",
    ],
    exact_safe: &["checkpoint"],
    long_value: &[
        "file",
        "directory",
        "to-command",
        "use-compress-program",
        "info-script",
        "new-volume-script",
        "rsh-command",
        "rmt-command",
        "index-file",
        "listed-incremental",
        "exclude",
        "exclude-from",
        "files-from",
        "transform",
        "owner",
        "group",
        "mode",
    ],
    risky_short: "IFg",
    short_value: "bCfFgHIKLNTVX",
    dynamic_risk: true,
    exec_short: "IF",
    ..BASE
};

/// `tar`: options that run programs (`--checkpoint-action`, `--to-command`, `-I`, `-F`, …)
/// or write besides the archive (`--remove-files`, `-g`), also in the old bundled form
/// (`tar xIf prog a.tar`), and an archive on a remote host (`-f host:file` runs rsh).
fn tar(words: &[Word], risks: &mut Vec<Risk>) {
    let mut words_as_options: Vec<Word> = words.to_vec();
    if let Some(Word::Literal(first)) = words.get(1)
        && !first.starts_with('-')
        && first.chars().all(|c| c.is_ascii_alphabetic())
    {
        words_as_options[1] = Word::Literal(format!("-{first}"));
        // Old style: each letter that takes a value takes the next word, in order.
        let mut next = 2;
        for letter in first.chars() {
            if TAR.short_value.contains(letter) {
                if TAR.exec_short.contains(letter) {
                    risks.push(exec_risk(1, "an option that runs a program"));
                } else if TAR.risky_short.contains(letter) {
                    risks.push(risk(1, "an option that writes a file"));
                }
                if letter == 'f' {
                    check_remote_archive(words, next, risks);
                }
                next += 1;
            }
        }
    }
    scan(&words_as_options, 1, &TAR, risks);
    for (i, word) in words.iter().enumerate() {
        match word.literal() {
            Some(t) if t.starts_with('-') && !t.starts_with("--") && t.ends_with('f') => {
                check_remote_archive(words, i + 1, risks);
            }
            Some(t) if t.starts_with("--file=") || (t.starts_with("-f") && t.len() > 2) => {
                let value = t.split_once('=').map_or(&t[2..], |(_, v)| v);
                if value.contains(':') && !has_force_local(words) {
                    risks.push(exec_risk(
                        i,
                        "an archive on another host runs a remote shell",
                    ));
                }
            }
            Some("--file") => check_remote_archive(words, i + 1, risks),
            _ => {}
        }
    }
}

fn has_force_local(words: &[Word]) -> bool {
    words.iter().any(|w| w.literal() == Some("--force-local"))
}

fn check_remote_archive(words: &[Word], index: usize, risks: &mut Vec<Risk>) {
    if let Some(Word::Literal(value)) = words.get(index)
        && value.contains(':')
        && !has_force_local(words)
    {
        risks.push(risk(
            index,
            "an archive on another host runs a remote shell",
        ));
    }
}

/// `ssh`/`scp`/`sftp`: `-o` options that run local commands, `-F` config files, `scp -S`.
fn ssh(words: &[Word], risks: &mut Vec<Risk>) {
    const RUNS: [&str; 5] = [
        "proxycommand",
        "localcommand",
        "permitlocalcommand",
        "knownhostscommand",
        "match",
    ];
    for (i, word) in words.iter().enumerate().skip(1) {
        let Some(text) = word.literal() else {
            continue;
        };
        let option_value = match text {
            "-o" => words.get(i + 1).and_then(Word::literal),
            t if t.starts_with("-o") => Some(&t[2..]),
            _ => None,
        };
        if let Some(value) = option_value {
            let lower = value.to_ascii_lowercase();
            if RUNS.iter().any(|r| lower.starts_with(r)) {
                risks.push(exec_risk(i, "an ssh option that runs a local command"));
            }
        }
        if text.starts_with("-F") || text.starts_with("-S") || text.starts_with("-E") {
            risks.push(exec_risk(i, "a config file, helper program or log file"));
        }
    }
}
