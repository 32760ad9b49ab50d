//! Commands embedded in another program's arguments: `find -exec`, `fd --exec`,
//! `git submodule foreach` / `git bisect run`, `trap` actions and `alias` values.

use super::Word;
use super::options::{OptionsEnd, skip_options};
use super::wrappers::{Inner, Stdin, eval_inner, rest, words};

/// The commands of `find … -exec CMD… ;` (also `-execdir`, `-ok`, `-okdir`, and `+`).
pub(super) fn find_exec_inners(args: &[Word]) -> Vec<Inner> {
    let mut commands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let is_exec = matches!(
            args[i].literal(),
            Some("-exec" | "-execdir" | "-ok" | "-okdir")
        );
        i += 1;
        if !is_exec {
            continue;
        }
        let mut words = Vec::new();
        while let Some(word) = args.get(i) {
            i += 1;
            match word.literal() {
                Some(";" | "+") => break,
                Some(w) if w.contains("{}") => words.push(Word::Dynamic),
                _ => words.push(word.clone()),
            }
        }
        if words.is_empty() {
            words.push(Word::Dynamic);
        }
        commands.push(Inner::Words {
            words,
            sets_env: false,
            stdin: Stdin::Inherited,
        });
    }
    commands
}

/// `fd … --exec CMD… [;]` and `--exec-batch` / `-x` / `-X`.
pub(super) fn fd_exec_inners(args: &[Word]) -> Vec<Inner> {
    let Some(at) = args
        .iter()
        .position(|w| matches!(w.literal(), Some("-x" | "-X" | "--exec" | "--exec-batch")))
    else {
        return Vec::new();
    };
    let mut words: Vec<Word> = args[at + 1..]
        .iter()
        .take_while(|w| w.literal() != Some(";"))
        .map(|w| match w.literal() {
            Some(t) if t.contains('{') => Word::Dynamic,
            _ => w.clone(),
        })
        .collect();
    if words.is_empty() {
        words.push(Word::Dynamic);
    }
    words.push(Word::Dynamic);
    vec![Inner::Words {
        words,
        sets_env: false,
        stdin: Stdin::Inherited,
    }]
}

/// `git submodule foreach CMD…` (shell text) and `git bisect run CMD…` (a command).
pub(super) fn git_inners(args: &[Word]) -> Vec<Inner> {
    let literal: Vec<Option<&str>> = args.iter().map(Word::literal).collect();
    for (i, pair) in literal.windows(2).enumerate() {
        match (pair[0], pair[1]) {
            (Some("submodule"), Some("foreach")) => {
                let start = i + 2;
                let skip = args[start..]
                    .iter()
                    .take_while(|w| matches!(w.literal(), Some("--recursive" | "-q" | "--quiet")))
                    .count();
                return vec![eval_inner(&rest(args, start + skip))];
            }
            (Some("bisect"), Some("run")) => {
                return vec![words(rest(args, i + 2), &Stdin::Inherited)];
            }
            _ => {}
        }
    }
    Vec::new()
}

/// `trap [-lp] [[ACTION] SIGNAL…]`: the action is shell text run later.
pub(super) fn trap_inners(args: &[Word]) -> Vec<Inner> {
    let OptionsEnd::At(i) = skip_options(args, "", &[]) else {
        return vec![Inner::Unknown];
    };
    match args.get(i) {
        // A single operand is a signal to reset; `-` resets too.
        _ if args.len() <= i + 1 => Vec::new(),
        Some(Word::Literal(action)) if action == "-" => Vec::new(),
        Some(Word::Literal(action)) => vec![Inner::Script(action.clone())],
        Some(Word::Dynamic) => vec![Inner::Unknown],
        None => Vec::new(),
    }
}

/// `alias NAME=VALUE…`: each value is shell text that later runs in place of NAME.
pub(super) fn alias_inners(args: &[Word]) -> Vec<Inner> {
    args.iter()
        .filter_map(|word| match word {
            Word::Literal(text) => text
                .split_once('=')
                .map(|(_, value)| Inner::Script(value.to_owned())),
            Word::Dynamic => Some(Inner::Unknown),
        })
        .collect()
}
