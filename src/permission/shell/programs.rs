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

use super::wrappers::SHELLS;
use super::{Risk, SimpleCommand, View, Word};

/// Fills in `cmd.risks` (and `cmd.view` for git) from the program's argument model.
pub(super) fn annotate(program: &str, cmd: &mut SimpleCommand) {
    let words = &cmd.words;
    let mut risks = Vec::new();
    match program {
        "git" => {
            let (risks, view) = git(words);
            cmd.risks.extend(risks);
            cmd.view = view;
            return;
        }
        "find" => find(words, &mut risks),
        "sed" | "gsed" => sed(words, &mut risks),
        "awk" | "gawk" | "mawk" | "nawk" => awk(words, &mut risks),
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
fn options(words: &[Word], model: &Model, risks: &mut Vec<Risk>) {
    scan(words, 1, model, risks);
}

/// A word that writes (or may write) files.
fn risk(word: usize, what: &'static str) -> Risk {
    Risk {
        word,
        never: false,
        executes: false,
        what,
    }
}

/// A word that runs a program we cannot see.
fn exec_risk(word: usize, what: &'static str) -> Risk {
    Risk {
        word,
        never: false,
        executes: true,
        what,
    }
}

/// A word that runs a program and that no allow rule covers.
fn never(word: usize, what: &'static str) -> Risk {
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
const EXEC_LONG: [&str; 27] = [
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

fn script_risk(effect: ScriptEffect, word: usize, what: &'static str) -> Option<Risk> {
    match effect {
        ScriptEffect::Harmless => None,
        ScriptEffect::Writes => Some(risk(word, what)),
        ScriptEffect::Executes => Some(exec_risk(word, what)),
    }
}

/// The option syntax of one program, as far as its risks go.
struct Model {
    /// Long options (without `--`) that execute or write; abbreviations match too.
    risky_long: &'static [&'static str],
    /// Harmless long options that are prefixes of risky ones (`--checkpoint`).
    exact_safe: &'static [&'static str],
    /// Long options whose value is the next word (when written without `=`).
    long_value: &'static [&'static str],
    /// Short option letters that execute or write.
    risky_short: &'static str,
    /// Short option letters that take a value (the rest of the cluster or the next word).
    short_value: &'static str,
    /// The risky short letters that run a program (the others write).
    exec_short: &'static str,
    /// A dynamic word before `--` is a risk.
    dynamic_risk: bool,
    /// Options end at the first operand (the rest is a command: `time -o f cmd`).
    stop_at_operand: bool,
}

const BASE: Model = Model {
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
fn scan(words: &[Word], start: usize, model: &Model, risks: &mut Vec<Risk>) -> Vec<usize> {
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

const SED: Model = Model {
    risky_long: &["in-place", "file"],
    long_value: &["expression", "file", "line-length"],
    risky_short: "if",
    short_value: "efl",
    dynamic_risk: true,
    exec_short: "f",
    ..BASE
};

/// `sed`: `-i`/`--in-place` and `-f` (a script we cannot see), and scripts with `e`, `w`,
/// `W`, `s///e` or `s///w` (checked in every `-e` script or the first operand).
fn sed(words: &[Word], risks: &mut Vec<Risk>) {
    let mut scripts: Vec<(usize, String)> = Vec::new();
    let mut i = 1;
    let mut sandbox = false;
    while i < words.len() {
        let Some(text) = words[i].literal() else {
            i += 1;
            continue;
        };
        if text == "--" {
            break;
        }
        if text == "--sandbox" {
            sandbox = true;
        }
        if let Some(value) = text.strip_prefix("--expression=") {
            scripts.push((i, value.to_owned()));
        } else if text.starts_with("--") && "expression".starts_with(&text[2..]) && text.len() > 3 {
            if let Some(value) = words.get(i + 1).and_then(Word::literal) {
                scripts.push((i + 1, value.to_owned()));
            }
            i += 1;
        } else if text.starts_with('-') && !text.starts_with("--") {
            if let Some(at) = text.find('e') {
                let attached = &text[at + 1..];
                let before = &text[1..at];
                if !before.contains(['f', 'l', 'i']) {
                    if attached.is_empty() {
                        if let Some(value) = words.get(i + 1).and_then(Word::literal) {
                            scripts.push((i + 1, value.to_owned()));
                        }
                        i += 1;
                    } else {
                        scripts.push((i, attached.to_owned()));
                    }
                }
            }
        }
        i += 1;
    }
    let operands = scan(words, 1, &SED, risks);
    let has_script_option = words.iter().any(|w| {
        w.literal().is_some_and(|t| {
            (t.starts_with('-') && !t.starts_with("--") && t.contains(['e', 'f']))
                || t.starts_with("--expression")
                || t.starts_with("--file")
        })
    });
    if !has_script_option {
        if let Some(&first) = operands.first() {
            if let Some(script) = words[first].literal() {
                scripts.push((first, script.to_owned()));
            }
        }
    }
    if !sandbox {
        for (index, script) in scripts {
            risks.extend(script_risk(
                sed_script_effect(&script),
                index,
                "a sed script that runs a program or writes files",
            ));
        }
    }
}

/// Whether a sed script has a command that executes (`e`, `s///e`) or writes (`w`, `W`,
/// `s///w`). Anything the scan does not understand counts as executing.
pub(super) fn sed_script_effect(script: &str) -> ScriptEffect {
    let mut writes = false;
    let executes = sed_script_scan(script, &mut writes);
    match (executes, writes) {
        (true, _) => ScriptEffect::Executes,
        (false, true) => ScriptEffect::Writes,
        _ => ScriptEffect::Harmless,
    }
}

/// True when the script executes (or cannot be read); sets `writes` for `w`/`W`/`s///w`.
fn sed_script_scan(script: &str, writes: &mut bool) -> bool {
    let b: Vec<char> = script.chars().collect();
    let mut i = 0;
    // Skips a delimited part (regex or replacement); returns false when unterminated.
    let skip_delimited = |i: &mut usize, delim: char| -> bool {
        while *i < b.len() {
            let c = b[*i];
            if c == '\\' {
                *i += 2;
                continue;
            }
            *i += 1;
            if c == delim {
                return true;
            }
            if c == '\n' {
                return false;
            }
        }
        false
    };
    let skip_to_line_end = |i: &mut usize| {
        while *i < b.len() && b[*i] != '\n' {
            if b[*i] == '\\' {
                *i += 1;
            }
            *i += 1;
        }
    };
    let skip_address = |i: &mut usize| -> bool {
        for _ in 0..2 {
            while *i < b.len() && b[*i].is_whitespace() {
                *i += 1;
            }
            match b.get(*i) {
                Some(c) if c.is_ascii_digit() => {
                    while *i < b.len() && (b[*i].is_ascii_digit() || b[*i] == '~') {
                        *i += 1;
                    }
                }
                Some('$') => *i += 1,
                Some('/') => {
                    *i += 1;
                    if !skip_delimited(i, '/') {
                        return false;
                    }
                    while *i < b.len() && matches!(b[*i], 'I' | 'M') {
                        *i += 1;
                    }
                }
                Some('\\') => {
                    let Some(&delim) = b.get(*i + 1) else {
                        return false;
                    };
                    *i += 2;
                    if !skip_delimited(i, delim) {
                        return false;
                    }
                    while *i < b.len() && matches!(b[*i], 'I' | 'M') {
                        *i += 1;
                    }
                }
                Some('+' | '~') if *i > 0 => {
                    *i += 1;
                    while *i < b.len() && b[*i].is_ascii_digit() {
                        *i += 1;
                    }
                }
                _ => {}
            }
            if b.get(*i) == Some(&',') {
                *i += 1;
            } else {
                break;
            }
        }
        while *i < b.len() && (b[*i].is_whitespace() || b[*i] == '!') {
            *i += 1;
        }
        true
    };
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() || c == ';' || c == '{' || c == '}' {
            i += 1;
            continue;
        }
        if c == '#' {
            skip_to_line_end(&mut i);
            continue;
        }
        if !skip_address(&mut i) {
            return true;
        }
        let Some(&cmd) = b.get(i) else {
            return false;
        };
        i += 1;
        match cmd {
            '{' | '}' | ';' => {}
            'e' => return true,
            'w' | 'W' => {
                *writes = true;
                skip_to_line_end(&mut i);
            }
            'a' | 'i' | 'c' | 'r' | 'R' | ':' | '#' => skip_to_line_end(&mut i),
            'b' | 't' | 'T' | 'v' => {
                while i < b.len() && !matches!(b[i], ';' | '\n' | '}') {
                    i += 1;
                }
            }
            'q' | 'Q' | 'l' | 'L' => {
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == ' ') {
                    i += 1;
                }
            }
            '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z' | 'F' => {}
            's' | 'y' => {
                let Some(&delim) = b.get(i) else {
                    return true;
                };
                if delim == '\n' || delim == '\\' {
                    return true;
                }
                i += 1;
                if !skip_delimited(&mut i, delim) || !skip_delimited(&mut i, delim) {
                    return true;
                }
                if cmd == 's' {
                    while i < b.len() && !matches!(b[i], ';' | '\n' | '}') {
                        match b[i] {
                            'e' => return true,
                            'w' => {
                                *writes = true;
                                break;
                            }
                            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | ' ' | '\t' => {}
                            d if d.is_ascii_digit() => {}
                            _ => return true,
                        }
                        i += 1;
                    }
                }
            }
            _ => return true,
        }
    }
    false
}

const AWK: Model = Model {
    risky_long: &["file", "exec", "include", "load"],
    long_value: &[
        "file",
        "exec",
        "include",
        "load",
        "source",
        "assign",
        "field-separator",
    ],
    risky_short: "fEil",
    short_value: "fEilvFe",
    dynamic_risk: true,
    stop_at_operand: true,
    exec_short: "fEil",
    ..BASE
};

/// `awk`: program files and extensions (`-f`, `-E`, `-i`, `-l`), and programs that run
/// commands (`system()`, pipes) or write files (`print > "f"`).
fn awk(words: &[Word], risks: &mut Vec<Risk>) {
    let operands = scan(words, 1, &AWK, risks);
    let mut program_given = false;
    let mut i = 1;
    while i < words.len() {
        match words[i].literal() {
            Some("-e" | "--source") => {
                program_given = true;
                if let Some(text) = words.get(i + 1).and_then(Word::literal) {
                    risks.extend(script_risk(awk_program_effect(text), i + 1, AWK_RISK));
                }
                i += 1;
            }
            Some(t) if t.starts_with("--source=") => {
                program_given = true;
                let effect = awk_program_effect(&t["--source=".len()..]);
                risks.extend(script_risk(effect, i, AWK_RISK));
            }
            Some(t) if t.starts_with("-f") || t.starts_with("--file") => program_given = true,
            Some("--") => break,
            _ => {}
        }
        i += 1;
    }
    if !program_given {
        if let Some(&first) = operands.first() {
            if let Some(text) = words[first].literal() {
                risks.extend(script_risk(awk_program_effect(text), first, AWK_RISK));
            }
        }
    }
}

const AWK_RISK: &str = "an awk program that runs a program or writes files";

/// What an awk program does: runs commands (`system(`, a pipe `print | "cmd"` or
/// `"cmd" | getline`, `@load`/`@include`) or writes files (`print > "f"`).
pub(super) fn awk_program_effect(program: &str) -> ScriptEffect {
    let mut writes = false;
    if awk_program_scan(program, &mut writes) {
        ScriptEffect::Executes
    } else if writes {
        ScriptEffect::Writes
    } else {
        ScriptEffect::Harmless
    }
}

/// True when the program runs commands; sets `writes` for output redirections.
fn awk_program_scan(program: &str, writes: &mut bool) -> bool {
    let b: Vec<char> = program.chars().collect();
    let mut i = 0;
    let mut in_print = false;
    let mut parens = 0usize;
    // The last significant character, to tell a regex `/…/` from a division.
    let mut last = '\n';
    while i < b.len() {
        let c = b[i];
        match c {
            '"' => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                last = 'a';
            }
            '/' if "(,~!&|{;\n}=:?".contains(last) || last == ' ' => {
                i += 1;
                while i < b.len() && b[i] != '/' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                last = 'a';
            }
            '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '@' => return true,
            '|' if b.get(i + 1) == Some(&'|') => {
                i += 1;
                last = '|';
            }
            '|' => return true,
            '>' if in_print && parens == 0 => *writes = true,
            '(' => {
                parens += 1;
                last = '(';
            }
            ')' => {
                parens = parens.saturating_sub(1);
                last = ')';
            }
            ';' | '\n' | '{' | '}' => {
                in_print = false;
                parens = 0;
                last = c;
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                    i += 1;
                }
                let ident: String = b[start..i].iter().collect();
                match ident.as_str() {
                    "system" => return true,
                    "print" | "printf" => {
                        in_print = true;
                        parens = 0;
                    }
                    _ => {}
                }
                last = 'a';
                continue;
            }
            c if c.is_whitespace() => {}
            _ => last = c,
        }
        i += 1;
    }
    false
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
    if let Some(Word::Literal(first)) = words.get(1) {
        if !first.starts_with('-') && first.chars().all(|c| c.is_ascii_alphabetic()) {
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
    if let Some(Word::Literal(value)) = words.get(index) {
        if value.contains(':') && !has_force_local(words) {
            risks.push(risk(
                index,
                "an archive on another host runs a remote shell",
            ));
        }
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

/// git global options that change nothing a rule cares about.
const GIT_SAFE_GLOBALS: [&str; 11] = [
    "--no-pager",
    "-P",
    "--no-replace-objects",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-optional-locks",
    "--no-advice",
    "--no-lazy-fetch",
    "--bare",
];

/// git global options that take the next word as their value.
const GIT_VALUED_GLOBALS: [&str; 9] = [
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--config-env",
    "--attr-source",
    "--list-cmds",
];

/// Config keys whose value is a program git runs (or that redirect what git runs).
fn git_key_runs_programs(key: &str) -> bool {
    const PARTS: [&str; 28] = [
        "pager",
        "editor",
        "command",
        "cmd",
        "program",
        "hook",
        "external",
        "textconv",
        "fsmonitor",
        "askpass",
        "proxy",
        "driver",
        "filter.",
        "alias.",
        "helper",
        "include",
        "tool",
        "browser",
        "uploadpack",
        "receivepack",
        "protocol.",
        "insteadof",
        "exec",
        "sendmail",
        "smtpserver",
        "credential",
        "worktree",
        "gitproxy",
    ];
    let key = key.to_ascii_lowercase();
    PARTS.iter().any(|p| key.contains(p))
}

/// Config keys that only change presentation.
fn git_key_is_harmless(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "color.",
        "advice.",
        "i18n.",
        "column.",
        "log.date",
        "log.decorate",
    ]
    .iter()
    .any(|p| key.starts_with(p))
        || matches!(
            key.as_str(),
            "core.quotepath" | "core.abbrev" | "user.name" | "user.email" | "init.defaultbranch"
        )
}

/// Long options of git subcommands that execute or write (matched with abbreviations).
const GIT_RISKY_LONG: [&str; 15] = [
    "config",
    "output",
    "ext-diff",
    "textconv",
    "upload-pack",
    "receive-pack",
    "exec",
    "open-files-in-pager",
    "extcmd",
    "tool",
    "template",
    "output-directory",
    "sendmail-cmd",
    "smtp-server",
    "separate-git-dir",
];

/// Short options that execute or write, per subcommand.
fn git_risky_short(subcommand: &str) -> &'static str {
    match subcommand {
        "grep" => "O",
        "format-patch" | "archive" => "o",
        "rebase" => "x",
        "difftool" => "xt",
        "mergetool" => "t",
        "ls-remote" | "fetch" | "pull" => "u",
        "clone" => "uc",
        _ => "",
    }
}

/// git: global options before the subcommand, then the subcommand's risky options.
fn git(words: &[Word]) -> (Vec<Risk>, Option<View>) {
    let mut risks = Vec::new();
    let mut view_ok = true;
    let mut i = 1;
    while let Some(word) = words.get(i) {
        let Some(text) = word.literal() else {
            risks.push(never(i, "a dynamic global option"));
            view_ok = false;
            i += 1;
            continue;
        };
        if !text.starts_with('-') {
            break;
        }
        if text == "--" {
            i += 1;
            break;
        }
        let (name, attached) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ if text.starts_with("-c") && text.len() > 2 => ("-c", Some(text[2..].to_owned())),
            _ if text.starts_with("-C") && text.len() > 2 => ("-C", Some(text[2..].to_owned())),
            _ => (text, None),
        };
        let valued = GIT_VALUED_GLOBALS.contains(&name);
        let value = match (&attached, valued) {
            (Some(v), _) => Some(Word::Literal(v.clone())),
            (None, true) => {
                i += 1;
                words.get(i).cloned()
            }
            (None, false) => None,
        };
        match name {
            "-C" => {}
            "-c" => match value.as_ref().and_then(Word::literal) {
                Some(setting) => {
                    let key = setting.split_once('=').map_or(setting, |(k, _)| k);
                    if git_key_runs_programs(key) {
                        risks.push(never(i, "git config that runs a program"));
                        view_ok = false;
                    } else if !git_key_is_harmless(key) {
                        risks.push(risk(i, "git config"));
                        view_ok = false;
                    }
                }
                None => {
                    risks.push(never(i, "git config that cannot be known"));
                    view_ok = false;
                }
            },
            "--config-env" => {
                risks.push(never(i, "git config from the environment"));
                view_ok = false;
            }
            n if GIT_SAFE_GLOBALS.contains(&n) => {}
            _ => {
                // --exec-path, --git-dir, --work-tree, --namespace, -p, unknown options.
                risks.push(if matches!(name, "--exec-path" | "-p" | "--paginate") {
                    exec_risk(i, "a git global option that runs programs")
                } else {
                    risk(i, "a git global option that changes what git reads")
                });
                view_ok = false;
            }
        }
        i += 1;
    }
    let sub_start = i;
    let subcommand = words.get(sub_start).and_then(Word::literal).unwrap_or("");
    let model = Model {
        risky_long: &GIT_RISKY_LONG,
        exact_safe: &["text", "exec-path"],
        risky_short: git_risky_short(subcommand),
        exec_short: git_risky_short(subcommand).trim_matches('o'),
        // `git status $HOME`: a variable the rules already let through stays allowed.
        dynamic_risk: false,
        ..BASE
    };
    let mut sub_risks = Vec::new();
    if sub_start < words.len() {
        scan(words, sub_start + 1, &model, &mut sub_risks);
        for (j, word) in words.iter().enumerate().skip(sub_start + 1) {
            if word
                .literal()
                .is_some_and(|t| t.starts_with("ext::") || t.starts_with("fd::"))
            {
                sub_risks.push(exec_risk(j, "a git transport that runs a command"));
            }
        }
    }
    risks.extend(sub_risks.iter().cloned());
    if sub_start == 1 {
        return (risks, None);
    }
    let mut view_words = vec![words[0].clone()];
    view_words.extend_from_slice(&words[sub_start..]);
    let shift = sub_start - 1;
    let view_risks = sub_risks
        .into_iter()
        .map(|r| Risk {
            word: r.word - shift,
            ..r
        })
        .collect();
    (
        risks,
        Some(View {
            words: view_words,
            risks: view_risks,
            for_allow: view_ok,
        }),
    )
}
