//! Privileged wrappers (`sudo`, `doas`, `su`, `runuser`, `sg`): what they run. They are never
//! transparent for allow rules (see `wrappers`).

use super::Word;
use super::interpreters::from_stdin;
use super::options::{OptionsEnd, after_options, is_assignment, skip_options};
use super::wrappers::{Inner, Stdin, eval_inner, rest, words};

/// `sudo [OPTION]… [VAR=value]… COMMAND…`; `-s`/`-i` run the command through a shell (or an
/// interactive shell without one); `-e` edits files.
pub(super) fn sudo_inner(args: &[Word], stdin: &Stdin) -> Inner {
    let long = [
        "--user",
        "--group",
        "--chdir",
        "--host",
        "--prompt",
        "--role",
        "--type",
        "--command-timeout",
        "--other-user",
        "--close-from",
        "--chroot",
    ];
    let mut shell = false;
    for word in args {
        match word.literal() {
            Some("--") => break,
            Some("--shell" | "--login") => shell = true,
            Some(t) if t.starts_with('-') && !t.starts_with("--") => {
                let cluster = &t[1..];
                let upto = cluster
                    .find(|c| "ugCDhprtTUR".contains(c))
                    .unwrap_or(cluster.len());
                shell |= cluster[..upto].contains(['s', 'i']);
            }
            Some(t) if !t.starts_with('-') => break,
            _ => {}
        }
    }
    let OptionsEnd::At(mut i) = skip_options(args, "ugCDhprtTUR", &long) else {
        return Inner::Unknown;
    };
    let mut sets_env = false;
    while let Some(Word::Literal(text)) = args.get(i) {
        if !is_assignment(text) {
            break;
        }
        sets_env = true;
        i += 1;
    }
    let command = rest(args, i);
    if shell {
        return if command.is_empty() {
            from_stdin(stdin, true).unwrap_or(Inner::Unknown)
        } else {
            eval_inner(&command)
        };
    }
    Inner::Words {
        words: command,
        sets_env,
        stdin: stdin.clone(),
    }
}

/// `doas [-nSs] [-C config] [-u user] COMMAND…`; `-s` runs a shell.
pub(super) fn doas_inner(args: &[Word], stdin: &Stdin) -> Inner {
    if args
        .iter()
        .take_while(|w| w.literal().is_some_and(|t| t.starts_with('-')))
        .any(|w| {
            w.literal()
                .is_some_and(|t| t.contains('s') && !t.starts_with("--"))
        })
    {
        return Inner::Unknown;
    }
    after_options(args, "uC", &[], stdin)
}

/// `su [OPTION]… [-] [USER [ARG…]]` (also `runuser`, `sg GROUP`): `-c CMD` runs shell text;
/// `runuser -u USER -- CMD…` runs a command; otherwise an interactive shell.
pub(super) fn su_inner(program: &str, args: &[Word], stdin: &Stdin) -> Inner {
    let mut i = 0;
    let mut user_mode = false;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return Inner::Unknown;
        };
        i += 1;
        match text {
            "-c" | "--command" | "--session-command" => {
                return match args.get(i) {
                    Some(Word::Literal(script)) => Inner::Script(script.clone()),
                    _ => Inner::Unknown,
                };
            }
            t if t.starts_with("--command=") || t.starts_with("--session-command=") => {
                return Inner::Script(t.split_once('=').map(|(_, v)| v).unwrap_or("").to_owned());
            }
            "-u" | "--user" if program == "runuser" => {
                user_mode = true;
                i += 1;
            }
            "-s"
            | "--shell"
            | "-g"
            | "--group"
            | "-G"
            | "--supp-group"
            | "-w"
            | "--whitelist-environment" => i += 1,
            "--" if user_mode => return words(rest(args, i), stdin),
            _ => {}
        }
    }
    if program == "sg" {
        // `sg GROUP COMMAND…` without `-c`: the words are shell text.
        return eval_inner(&rest(args, 1));
    }
    from_stdin(stdin, true).unwrap_or(Inner::Unknown)
}
