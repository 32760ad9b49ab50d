//! Shells and interpreters: where their program comes from (`-c`/`-e` code, a script file,
//! stdin fed by a pipe, a file, a here-string or a here-document) and what that means for
//! rules (see `wrappers`).

use super::Word;
use super::wrappers::{Inner, Stdin};

/// Interpreters: inline code and a program read from stdin are dynamic.
pub(super) fn interpreter_kind(program: &str) -> Option<&'static str> {
    let family = |prefix: &str| {
        program
            .strip_prefix(prefix)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    Some(match program {
        _ if family("python") || family("pypy") => "python",
        _ if family("perl") => "perl",
        "node" | "nodejs" | "bun" | "deno" => "node",
        _ if family("ruby") => "ruby",
        _ if family("php") => "php",
        _ if family("lua") || program == "luajit" => "lua",
        _ if family("tclsh") || family("wish") => "tcl",
        "R" | "Rscript" | "osascript" | "jshell" | "irb" | "pry" | "guile" | "racket" | "sbcl"
        | "clisp" | "ghci" | "scala" | "kotlin" | "julia" | "octave" | "gnuplot" | "bc" | "dc"
        | "ed" | "ex" | "red" | "gdb" | "lldb" | "sqlite3" | "mysql" | "psql" => "other",
        _ => return None,
    })
}

/// Operands that make a shell or interpreter read its program from stdin.
pub(super) fn names_stdin(word: &str) -> bool {
    matches!(
        word,
        "-" | "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0" | "/dev/tty"
    )
}

/// A program read from stdin: a shell reads a literal text as a script; anything else is
/// unknown. An inherited stdin is the tool's (empty) or a PTY's, whose later writes are
/// checked as commands of their own, so it runs nothing we judge here.
pub(super) fn from_stdin(stdin: &Stdin, shell: bool) -> Option<Inner> {
    match stdin {
        Stdin::Inherited => None,
        Stdin::Literal(text) if shell => Some(Inner::Script(text.clone())),
        _ => Some(Inner::Unknown),
    }
}

/// `sh [-options] -c SCRIPT [NAME [ARG…]]`, `sh -s`, `sh FILE`, `sh < …`.
pub(super) fn shell_inner(args: &[Word], stdin: &Stdin) -> Option<Inner> {
    let mut i = 0;
    let mut has_c = false;
    let mut reads_stdin = false;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return Some(Inner::Unknown);
        };
        if text == "--" {
            i += 1;
            break;
        }
        if text.starts_with("--") {
            i += if matches!(text, "--rcfile" | "--init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if text.len() > 1 && (text.starts_with('-') || text.starts_with('+')) {
            i += 1;
            let cluster = &text[1..];
            if text.starts_with('-') {
                has_c |= cluster.contains('c');
                reads_stdin |= cluster.contains(['s', 'i']);
            }
            if cluster.contains(['o', 'O']) {
                i += 1;
            }
            continue;
        }
        break;
    }
    if has_c {
        return match args.get(i) {
            Some(Word::Literal(script)) => Some(Inner::Script(script.clone())),
            Some(Word::Dynamic) => Some(Inner::Unknown),
            None => None,
        };
    }
    match args.get(i) {
        Some(Word::Dynamic) => Some(Inner::Unknown),
        Some(Word::Literal(file)) if !reads_stdin && !names_stdin(file) => None,
        _ => from_stdin(stdin, true),
    }
}

/// Interpreters: inline code (`python -c`, `perl -e`, `node -e` …) and a program read from
/// stdin are unknown; a script file is the interpreter's own business.
pub(super) fn interpreter_inner(kind: &str, args: &[Word], stdin: &Stdin) -> Option<Inner> {
    // Letters that carry inline code, and letters whose value follows (attached or next).
    let (code, valued, long_code): (&str, &str, &[&str]) = match kind {
        "python" => ("c", "WXQm", &[]),
        "perl" => ("eE", "IMmxdDFiC0l", &[]),
        "node" => ("ep", "r", &["--eval", "--print"]),
        "ruby" => ("e", "rICxEFKTWU0l", &[]),
        "php" => ("rBREF", "fdcz", &[]),
        "lua" => ("e", "l", &[]),
        "tcl" => ("", "", &[]),
        _ => ("ec", "", &["--eval", "--command", "--execute"]),
    };
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return Some(Inner::Unknown);
        };
        if text == "--" {
            i += 1;
            break;
        }
        if text.starts_with("--") {
            let name = text.split_once('=').map_or(text, |(n, _)| n);
            if long_code.contains(&name) {
                return Some(Inner::Unknown);
            }
            i += 1;
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            i += 1;
            for (at, letter) in text[1..].char_indices() {
                if code.contains(letter) {
                    return Some(Inner::Unknown);
                }
                if valued.contains(letter) {
                    if at + letter.len_utf8() == text.len() - 1 {
                        i += 1;
                    }
                    if letter == 'm' && kind == "python" {
                        // `python -m module`: runs a module, like a script file.
                        return None;
                    }
                    break;
                }
            }
            continue;
        }
        break;
    }
    if kind == "other" {
        // REPL-like programs (gdb, ed, sqlite3 …) run what they read.
        return (!matches!(stdin, Stdin::Inherited)).then_some(Inner::Unknown);
    }
    match args.get(i) {
        Some(Word::Dynamic) => Some(Inner::Unknown),
        Some(Word::Literal(file)) if !names_stdin(file) => None,
        _ => from_stdin(stdin, false),
    }
}

/// `source FILE` / `. FILE`: a literal file is the shell's own business; a process
/// substitution, a variable or stdin is a script we cannot read (a literal stdin we can).
pub(super) fn source_inner(args: &[Word], stdin: &Stdin) -> Option<Inner> {
    match args.first() {
        Some(Word::Dynamic) => Some(Inner::Unknown),
        Some(Word::Literal(file)) if names_stdin(file) => from_stdin(stdin, true),
        _ => None,
    }
}

/// `vim -c CMD`, `vim +CMD`, `vim --cmd CMD`, `vim -S file`, `vim -s script`: editor commands
/// run shell commands (`:!sh`), so they are unknown.
pub(super) fn vim_inner(args: &[Word]) -> Option<Inner> {
    args.iter()
        .any(|w| match w.literal() {
            Some(t) => {
                t.starts_with('+')
                    || matches!(
                        t,
                        "-c" | "--cmd" | "-S" | "-s" | "-e" | "-E" | "-es" | "-Es"
                    )
            }
            None => true,
        })
        .then_some(Inner::Unknown)
}
