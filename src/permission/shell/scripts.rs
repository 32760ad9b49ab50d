//! Script models: `sed` scripts and `awk` programs, read far enough to tell whether they run
//! programs (`e`, `s///e`, `system()`, pipes) or write files (`w`, `print > "f"`).

use super::programs::{BASE, Model, ScriptEffect, scan, script_risk};
use super::{Risk, Word};

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
pub(super) fn sed(words: &[Word], risks: &mut Vec<Risk>) {
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
        } else if text.starts_with('-')
            && !text.starts_with("--")
            && let Some(at) = text.find('e')
        {
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
    if !has_script_option
        && let Some(&first) = operands.first()
        && let Some(script) = words[first].literal()
    {
        scripts.push((first, script.to_owned()));
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
pub(super) fn awk(words: &[Word], risks: &mut Vec<Risk>) {
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
    if !program_given
        && let Some(&first) = operands.first()
        && let Some(text) = words[first].literal()
    {
        risks.extend(script_risk(awk_program_effect(text), first, AWK_RISK));
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
