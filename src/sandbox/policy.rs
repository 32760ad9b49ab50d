//! Bash's own deny patterns (the tool's hard deny, N6): commands no session may run whatever
//! the mode, e.g. `rm -rf /`, `mkfs`, writing raw disks, fork bombs, power management.
//!
//! This is deliberately one small entry point, [`deny_reason`], shared by Bash and the PTY
//! shell tools, so the argument-aware parser of the permission layer can replace the splitter
//! below without touching the tools. The splitter sees through `;`, `&&`, `||`, pipes, command
//! substitution, subshells, `sh -c`/`bash -c`, `eval`, and the wrappers `sudo`, `env`,
//! `nohup`, `nice`, `timeout`, `xargs`, `command`, `exec`, `time`; absolute program paths
//! are reduced to their base name. Text it cannot split (an unterminated quote) is denied.

/// Why the command is denied, or `None` when no deny pattern matches.
///
/// Two analyses must both pass: the word splitter below (which keeps glob text like `/*`
/// literal) and the permission layer's real shell parser ([`crate::permission::shell`]),
/// which also sees heredocs, process substitution, `find -exec` and more wrappers.
pub fn deny_reason(command: &str) -> Option<String> {
    // The splitter below recurses on nested substitutions: bound the text first (the same
    // limits as the permission layer's parser).
    if let Err(why) = crate::permission::shell::check_bounds(command) {
        return Some(format!(
            "command cannot be parsed ({why}); refusing to run it"
        ));
    }
    check(&strip_quoted_heredocs(command), 0).or_else(|| check_parsed(command))
}

/// Drops the bodies of here-documents with a quoted delimiter (`<<'EOF'`): their text is
/// literal, so the splitter must not read it as commands. (The parser-based check still sees
/// the whole text.)
fn strip_quoted_heredocs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut until: Option<(String, bool)> = None;
    for line in text.split_inclusive('\n') {
        if let Some((delimiter, tabs)) = &until {
            let body = line.trim_end_matches('\n');
            let body = if *tabs {
                body.trim_start_matches('\t')
            } else {
                body
            };
            if body == delimiter {
                until = None;
            }
            out.push('\n');
            continue;
        }
        out.push_str(line);
        until = quoted_heredoc_delimiter(line);
    }
    out
}

/// The delimiter of a `<<'WORD'`, `<<"WORD"` or `<<\WORD` on this line, and whether it is `<<-`.
fn quoted_heredoc_delimiter(line: &str) -> Option<(String, bool)> {
    let mut rest = line;
    while let Some(at) = rest.find("<<") {
        let after = &rest[at + 2..];
        if after.starts_with('<') {
            rest = after.trim_start_matches('<');
            continue;
        }
        let (tabs, after) = match after.strip_prefix('-') {
            Some(a) => (true, a),
            None => (false, after),
        };
        let after = after.trim_start_matches([' ', '\t']);
        let mut chars = after.chars();
        match chars.next() {
            Some(q @ ('\'' | '"')) => {
                let body: String = chars.take_while(|&c| c != q).collect();
                return Some((body, tabs));
            }
            Some('\\') => {
                let body: String = chars
                    .take_while(|c| !c.is_whitespace() && !matches!(c, ';' | '|' | '&'))
                    .collect();
                return Some((body, tabs));
            }
            _ => rest = after,
        }
    }
    None
}

fn check_parsed(command: &str) -> Option<String> {
    use crate::permission::shell::{ParsedCommand, parse_command};
    match parse_command(command) {
        ParsedCommand::Unparsable(why) => Some(format!(
            "command cannot be parsed ({why}); refusing to run it"
        )),
        ParsedCommand::Commands(commands) => commands
            .iter()
            .filter(|command| !command.wrapper)
            .find_map(|command| {
                // Only fully literal commands are compared; dynamic words never match a
                // protected literal.
                let words: Option<Vec<String>> = command
                    .words
                    .iter()
                    .map(|word| word.literal().map(str::to_owned))
                    .collect();
                words.and_then(|words| check_simple(&words, 0))
            }),
    }
}

const MAX_DEPTH: usize = 8;

fn check(command: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return Some("command nests shells too deeply to be checked".into());
    }
    let squashed: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    if squashed.contains(":(){") || squashed.contains(":|:&") {
        return Some("fork bomb".into());
    }
    for dev in [
        ">/dev/sd",
        ">/dev/nvme",
        ">/dev/hd",
        ">/dev/vd",
        ">/dev/mmcblk",
    ] {
        if squashed.contains(dev) {
            return Some("redirection onto a raw disk device".into());
        }
    }
    let commands = match split(command) {
        Ok(commands) => commands,
        Err(e) => {
            return Some(format!(
                "command cannot be parsed ({e}); refusing to run it"
            ));
        }
    };
    commands.iter().find_map(|words| check_simple(words, depth))
}

/// Marks a `$(` met inside double quotes (NUL never occurs in a command text that runs).
const SUBSTITUTION: &str = "\u{0}$(";

/// Splits shell text into simple commands (lists of unquoted words).
fn split(text: &str) -> Result<Vec<Vec<String>>, &'static str> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    let flush_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated single quote"),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => {
                            if let Some(ch) = chars.next() {
                                word.push(ch);
                            }
                        }
                        // Substitutions inside double quotes still run: split them out too
                        // (marked, so that `$(` inside single quotes stays literal).
                        Some('$') if chars.peek() == Some(&'(') => {
                            word.push_str(SUBSTITUTION);
                            chars.next();
                        }
                        Some(ch) => word.push(ch),
                        None => return Err("unterminated double quote"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(ch) = chars.next()
                    && ch != '\n'
                {
                    word.push(ch);
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                chars.next();
                flush_word(&mut words, &mut word, &mut in_word);
                commands.push(std::mem::take(&mut words));
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' | '{' | '}' => {
                flush_word(&mut words, &mut word, &mut in_word);
                commands.push(std::mem::take(&mut words));
            }
            '#' if !in_word => {
                // A comment runs to the end of the line.
                for ch in chars.by_ref() {
                    if ch == '\n' {
                        break;
                    }
                }
                flush_word(&mut words, &mut word, &mut in_word);
                commands.push(std::mem::take(&mut words));
            }
            c if c.is_whitespace() => flush_word(&mut words, &mut word, &mut in_word),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    flush_word(&mut words, &mut word, &mut in_word);
    commands.push(words);
    // Command-substitution text inside double-quoted words is checked as its own command.
    let mut nested = Vec::new();
    for words in &commands {
        for w in words {
            if let Some(idx) = w.find(SUBSTITUTION) {
                nested.extend(split(&w[idx + SUBSTITUTION.len()..])?);
            }
        }
    }
    commands.extend(nested);
    commands.retain(|c| !c.is_empty());
    Ok(commands)
}

fn base_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// Drops variable assignments and wrapper programs in front of the real program.
fn strip_wrappers(words: &[String]) -> &[String] {
    let mut rest = words;
    loop {
        let Some(first) = rest.first() else {
            return rest;
        };
        if first.contains('=') && !first.starts_with('=') && !first.starts_with('-') {
            rest = &rest[1..];
            continue;
        }
        match base_name(first) {
            "sudo" | "doas" | "env" | "nohup" | "nice" | "ionice" | "xargs" | "command"
            | "exec" | "time" | "stdbuf" | "setsid" | "chroot" => {
                rest = &rest[1..];
                while rest.first().is_some_and(|w| w.starts_with('-')) {
                    rest = &rest[1..];
                }
            }
            "timeout" => {
                rest = &rest[1..];
                while rest.first().is_some_and(|w| w.starts_with('-')) {
                    rest = &rest[1..];
                }
                // The duration.
                if !rest.is_empty() {
                    rest = &rest[1..];
                }
            }
            _ => return rest,
        }
    }
}

const PROTECTED_ROOTS: [&str; 14] = [
    "/", "/*", "/.", "/..", "~", "~/", "~/*", "$HOME", "${HOME}", "/bin", "/usr", "/etc", "/home",
    "/boot",
];

fn check_simple(words: &[String], depth: usize) -> Option<String> {
    let words = strip_wrappers(words);
    let program = base_name(words.first()?);
    let args = &words[1..];
    match program {
        "sh" | "bash" | "dash" | "zsh" | "ksh" => {
            let idx = args.iter().position(|a| {
                a == "-c" || (a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
            })?;
            args.get(idx + 1)
                .and_then(|script| check(script, depth + 1))
        }
        "eval" => check(&args.join(" "), depth + 1),
        "rm" => {
            let recursive = args.iter().any(|a| {
                a == "--recursive"
                    || (a.starts_with('-')
                        && !a.starts_with("--")
                        && (a.contains('r') || a.contains('R')))
            });
            let target = args.iter().filter(|a| !a.starts_with('-')).find(|a| {
                PROTECTED_ROOTS.contains(&a.trim_end_matches('/'))
                    || PROTECTED_ROOTS.contains(&a.as_str())
            });
            match (recursive, target) {
                (true, Some(t)) => Some(format!("recursive rm of {t}")),
                _ => None,
            }
        }
        "chmod" | "chown" | "chgrp" => {
            let recursive = args.iter().any(|a| a == "-R" || a == "--recursive");
            let root = args.iter().any(|a| a == "/" || a == "/*");
            (recursive && root).then(|| format!("recursive {program} of /"))
        }
        "dd" => args
            .iter()
            .any(|a| {
                a.starts_with("of=/dev/") && !matches!(a.as_str(), "of=/dev/null" | "of=/dev/zero")
            })
            .then(|| "dd onto a device".to_string()),
        p if p == "mkfs"
            || p.starts_with("mkfs.")
            || p == "mke2fs"
            || p == "wipefs"
            || p == "fdisk"
            || p == "sfdisk"
            || p == "parted" =>
        {
            Some(format!("{p} formats or repartitions disks"))
        }
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(format!("{program} is not allowed")),
        "init" | "telinit" if args.first().is_some_and(|a| a == "0" || a == "6") => {
            Some("changing the runlevel is not allowed".to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
