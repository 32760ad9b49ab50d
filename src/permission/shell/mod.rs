//! Shell command analysis for permission rules (D2): turns shell text into the list of simple
//! commands it would run, using `brush-parser` (a real shell parser), and describes each one
//! with what rules need to judge it.
//!
//! - [`bounds`]: every parse is bounded (size, nesting, here-documents checked by a cheap
//!   non-recursive scan first; then a dedicated thread with a known stack and a time budget).
//!   Text over a limit is [`ParsedCommand::Unparsable`], which every deny rule matches.
//! - [`walk`]: the walk over the syntax tree: `&&`, `||`, `;`, `|`, newlines, subshells, `{ }`,
//!   control structures, function bodies, command and process substitution, backticks,
//!   here-documents and here-strings, redirections (every redirection that writes, on any
//!   command, including `exec >f` and `>&3`).
//! - [`wrappers`]: programs that run another command (`env`, `sudo`, `timeout`, `xargs`,
//!   `busybox`, `flock`, `strace`, `sh -c`, `eval`, …) and shells or interpreters fed a
//!   program on stdin, a here-string, a here-document or a pipe.
//!   `interpreters` decides where a shell's or interpreter's program comes from; `privileged`
//!   models `sudo`, `doas`, `su`, `runuser`, `sg`.
//! - [`programs`]: the per-program argument model: options that execute programs or write
//!   files (`find -delete`, `sed -i`, `rg --pre`, `tar --to-command`, …) and variables whose
//!   value is a program; `scripts` reads sed scripts and awk programs; `git` parses git's
//!   global options before the subcommand and its `-c` config.
//!
//! This module only describes commands; matching them against rules lives in `rules`/`decide`.

pub mod bounds;
mod embedded;
mod git;
mod interpreters;
mod options;
mod privileged;
mod programs;
mod scripts;
mod walk;
mod wrappers;

use brush_parser::ast;

pub use bounds::{BoundsError, MAX_COMMAND_BYTES, MAX_NESTING, MAX_RULE_BYTES};

/// How deep `sh -c`, `eval` and substitutions may nest before the text counts as unparsable.
pub const MAX_SCRIPT_DEPTH: usize = 16;

/// One word of a simple command after quote removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// A word whose value is known statically (quotes and escapes removed).
    Literal(String),
    /// A word containing an expansion we cannot resolve statically (`$X`, `$(…)`, a glob, `~`).
    Dynamic,
}

impl Word {
    /// The literal text, if the word is static.
    pub fn literal(&self) -> Option<&str> {
        match self {
            Word::Literal(text) => Some(text),
            Word::Dynamic => None,
        }
    }
}

/// A word of a command that makes it execute something or write files (argument model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Risk {
    /// Index of the word in the command's words (0 is the program).
    pub word: usize,
    /// No allow rule covers it, even one that names it (`git -c core.pager=…`).
    pub never: bool,
    /// It runs a program we cannot see (`rg --pre`, `sed 's/x/y/e'`, `awk 'system(…)'`):
    /// every deny rule matches the command, as for a dynamic program.
    pub executes: bool,
    /// What the word does, for messages and tests.
    pub what: &'static str,
}

/// The command as its program sees it, when that differs from the written words
/// (`git -C . push` is `git push`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    pub words: Vec<Word>,
    pub risks: Vec<Risk>,
    /// Whether allow rules may judge the command by this view (the dropped words are harmless).
    pub for_allow: bool,
}

/// One simple command that the shell text would run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The program and its arguments. Empty for an assignment-only command (`X=1`).
    pub words: Vec<Word>,
    /// The command redirects output (`>`, `>>`, `&>`, `<>`, `>|`, `>&3`) to a file other than
    /// `/dev/null`, directly or through an enclosing compound command or wrapper, or its own
    /// arguments make it write (e.g. `script` writing a typescript).
    pub writes_files: bool,
    /// The command changes the environment of what it runs: `VAR=value` prefixes, `env`
    /// assignments, or an assignment-only command.
    pub sets_env: bool,
    /// The command is a transparent wrapper (`env`, `timeout`, `sh -c`, `eval`, …) whose
    /// wrapped command(s) follow it in the list. Deny rules see wrappers; allow rules judge the
    /// wrapped commands. Privileged wrappers (`sudo`, `doas`, `su`, …) are never transparent.
    pub wrapper: bool,
    /// A guess at what an unknown wrapper runs: only deny rules look at it.
    pub deny_only: bool,
    /// Words that execute or write, by the program's argument model.
    pub risks: Vec<Risk>,
    /// The command as its program parses it, when different (git global options).
    pub view: Option<View>,
}

impl SimpleCommand {
    /// A plain command of these words.
    pub fn new(words: Vec<Word>) -> Self {
        SimpleCommand {
            words,
            writes_files: false,
            sets_env: false,
            wrapper: false,
            deny_only: false,
            risks: Vec::new(),
            view: None,
        }
    }

    /// The program name compared by rules: the basename of the first word, if it is static.
    pub fn program(&self) -> Option<&str> {
        self.words.first().and_then(Word::literal).map(basename)
    }

    /// True when an option or script of the command runs a program we cannot see.
    pub fn runs_unknown_program(&self) -> bool {
        self.risks.iter().any(|r| r.executes)
    }

    /// True when the program word exists but cannot be determined statically.
    pub fn has_dynamic_program(&self) -> bool {
        matches!(self.words.first(), Some(Word::Dynamic))
    }
}

/// The result of analysing shell text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParsedCommand {
    /// Every simple command the text would run, in source order (wrappers before what they wrap).
    Commands(Vec<SimpleCommand>),
    /// The text cannot be analysed (syntax, a limit, the time budget); the string says why.
    Unparsable(String),
}

/// Extracts every simple command of `text`, recursively (see the module documentation).
/// Bounded: over a limit of [`bounds`] the text is unparsable.
pub fn parse_command(text: &str) -> ParsedCommand {
    if let Err(why) = bounds::check_text(text, MAX_COMMAND_BYTES) {
        return ParsedCommand::Unparsable(why.to_string());
    }
    let owned = text.to_owned();
    match bounds::run_bounded(move || walk::commands(&owned)) {
        Ok(Ok(commands)) => ParsedCommand::Commands(commands),
        Ok(Err(why)) => ParsedCommand::Unparsable(why),
        Err(why) => ParsedCommand::Unparsable(why.to_string()),
    }
}

/// Checks a command text against the limits of [`bounds`] without parsing it.
pub fn check_bounds(text: &str) -> Result<(), BoundsError> {
    bounds::check_text(text, MAX_COMMAND_BYTES)
}

/// Parses the command part of a permission rule (`git status` in `Bash(git status:*)`): exactly
/// one simple command of static words, without redirections, assignments or substitutions.
/// Wrappers are not looked through: the rule names exactly the words it means. Bounded like
/// [`parse_command`], with the smaller [`MAX_RULE_BYTES`].
pub(crate) fn parse_rule_words(text: &str) -> Result<Vec<String>, String> {
    bounds::check_text(text, MAX_RULE_BYTES).map_err(|e| e.to_string())?;
    let owned = text.to_owned();
    bounds::run_bounded(move || rule_words(&owned)).map_err(|e| e.to_string())?
}

fn rule_words(text: &str) -> Result<Vec<String>, String> {
    let program = walk::parse_program(text)?;
    let mut found: Option<&ast::SimpleCommand> = None;
    for list in &program.complete_commands {
        for item in &list.0 {
            if !item.0.additional.is_empty() || item.0.first.seq.len() != 1 || found.is_some() {
                return Err("must be a single simple command".into());
            }
            match &item.0.first.seq[0] {
                ast::Command::Simple(simple) => found = Some(simple),
                _ => return Err("must be a single simple command".into()),
            }
        }
    }
    let simple = found.ok_or_else(|| "no command words".to_string())?;
    if simple.prefix.is_some() {
        return Err("must not start with assignments or redirections".into());
    }
    let mut raw = Vec::new();
    raw.extend(simple.word_or_name.iter());
    for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
        match item {
            ast::CommandPrefixOrSuffixItem::Word(word) => raw.push(word),
            _ => return Err("must contain only plain words".into()),
        }
    }
    let mut words = Vec::with_capacity(raw.len());
    for word in raw {
        match walk::static_word(&word.value)? {
            Some(text) => words.push(text),
            None => {
                return Err(format!(
                    "word `{}` is not static (expansion, glob or substitution)",
                    word.value
                ));
            }
        }
    }
    Ok(words)
}

/// The last path component of a program name (`/bin/rm` → `rm`).
pub(crate) fn basename(program: &str) -> &str {
    let trimmed = program.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((_, base)) if !base.is_empty() => base,
        _ if trimmed.is_empty() => program,
        _ => trimmed,
    }
}

/// The directories whose programs an allow rule naming a bare program also covers.
pub const STANDARD_BIN_DIRS: [&str; 5] =
    ["/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin"];

/// Whether `written` names the program `name` (a bare name) the way an allow rule means it:
/// the bare name (found by `PATH` lookup) or its standard absolute path, never `./x`, a
/// relative path, `~/…` or another directory.
pub(crate) fn names_program_for_allow(written: &str, name: &str) -> bool {
    if written == name {
        return true;
    }
    if name.contains('/') {
        return false;
    }
    written
        .rsplit_once('/')
        .is_some_and(|(dir, base)| base == name && STANDARD_BIN_DIRS.contains(&dir))
}

#[cfg(test)]
mod bounds_tests;
#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
