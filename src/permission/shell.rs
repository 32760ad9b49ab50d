//! Shell command analysis for permission rules (D2): turns shell text into the list of simple
//! commands it would run, using `brush-parser` (a real shell parser).
//!
//! Every simple command is extracted recursively: through `&&`, `||`, `;`, `|`, newlines,
//! subshells, `{ }`, control structures, function bodies, command and process substitution,
//! backticks, here-documents, the script of `sh -c` / `bash -c`, the arguments of `eval`, the
//! `-exec` of `find`, the actions of `trap` and values of `alias`, and the wrappers `env`,
//! `xargs`, `nohup`, `timeout`, `nice`, `time`, `command`, `exec`, `stdbuf`, `builtin`, `setsid`,
//! `sudo` and `doas`. Words whose value cannot be known
//! statically (expansions, globs, substitutions) become [`Word::Dynamic`].
//!
//! This module only describes commands; matching them against rules lives in `rules`/`decide`.

use brush_parser::ast;
use brush_parser::word::{WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

/// How deep `sh -c`, `eval` and substitutions may nest before the text counts as unparsable.
const MAX_DEPTH: usize = 16;

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

/// One simple command that the shell text would run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleCommand {
    /// The program and its arguments. Empty for an assignment-only command (`X=1`).
    pub words: Vec<Word>,
    /// The command redirects output (`>`, `>>`, `&>`, `<>`, `>|`) to a file other than
    /// `/dev/null`, directly or through an enclosing compound command or wrapper.
    pub writes_files: bool,
    /// The command changes the environment of what it runs: `VAR=value` prefixes, `env`
    /// assignments, or an assignment-only command.
    pub sets_env: bool,
    /// The command is a wrapper (`env`, `timeout`, `sh -c`, `eval`, …) whose wrapped command(s)
    /// follow it in the list. Deny rules see wrappers; allow rules judge the wrapped commands.
    pub wrapper: bool,
}

impl SimpleCommand {
    /// The program name compared by rules: the basename of the first word, if it is static.
    pub fn program(&self) -> Option<&str> {
        self.words.first().and_then(Word::literal).map(basename)
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
    /// The text cannot be analysed; the string says why.
    Unparsable(String),
}

/// Extracts every simple command of `text`, recursively (see the module documentation).
pub fn parse_command(text: &str) -> ParsedCommand {
    let mut walker = Walker::default();
    match walker.script(text) {
        Ok(()) => ParsedCommand::Commands(walker.out),
        Err(why) => ParsedCommand::Unparsable(why),
    }
}

/// Parses the command part of a permission rule (`git status` in `Bash(git status:*)`): exactly
/// one simple command of static words, without redirections, assignments or substitutions.
/// Wrappers are not looked through: the rule names exactly the words it means.
pub(crate) fn parse_rule_words(text: &str) -> Result<Vec<String>, String> {
    let program = parse_program(text)?;
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
    let mut walker = Walker::default();
    let mut words = Vec::with_capacity(raw.len());
    for word in raw {
        match walker.word_value(&word.value)? {
            Word::Literal(text) => words.push(text),
            Word::Dynamic => {
                return Err(format!(
                    "word `{}` is not static (expansion, glob or substitution)",
                    word.value
                ));
            }
        }
    }
    if !walker.out.is_empty() {
        return Err("must not contain command substitution".into());
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

fn options() -> ParserOptions {
    ParserOptions::default()
}

fn parse_program(text: &str) -> Result<ast::Program, String> {
    let mut parser = Parser::new(std::io::BufReader::new(text.as_bytes()), &options());
    parser
        .parse_program()
        .map_err(|e| format!("shell syntax error: {e}"))
}

/// Collects simple commands while walking the syntax tree.
#[derive(Default)]
struct Walker {
    out: Vec<SimpleCommand>,
    depth: usize,
}

/// What a wrapper runs.
enum Inner {
    /// The wrapper runs nothing else (e.g. `env` alone, `sh` without `-c`).
    Nothing,
    /// The wrapper runs these words as a command.
    Words { words: Vec<Word>, sets_env: bool },
    /// The wrapper runs this shell text.
    Script(String),
    /// The wrapper runs something we cannot determine.
    Unknown,
}

impl Walker {
    fn script(&mut self, text: &str) -> Result<(), String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!("commands nested deeper than {MAX_DEPTH} levels"));
        }
        self.depth += 1;
        let result = parse_program(text).and_then(|program| {
            program
                .complete_commands
                .iter()
                .try_for_each(|list| self.compound_list(list))
        });
        self.depth -= 1;
        result
    }

    fn compound_list(&mut self, list: &ast::CompoundList) -> Result<(), String> {
        for item in &list.0 {
            let and_or = &item.0;
            self.pipeline(&and_or.first)?;
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p)?,
                }
            }
        }
        Ok(())
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) -> Result<(), String> {
        pipeline.seq.iter().try_for_each(|c| self.command(c))
    }

    /// Marks every command emitted since `start` as writing files when `writes` is set.
    fn mark_writes(&mut self, start: usize, writes: bool) {
        if writes {
            for cmd in &mut self.out[start..] {
                cmd.writes_files = true;
            }
        }
    }

    fn redirect_list(&mut self, list: Option<&ast::RedirectList>) -> Result<bool, String> {
        let mut writes = false;
        for redirect in list.iter().flat_map(|l| l.0.iter()) {
            writes |= self.redirect(redirect)?;
        }
        Ok(writes)
    }

    fn command(&mut self, command: &ast::Command) -> Result<(), String> {
        let start = self.out.len();
        match command {
            ast::Command::Simple(simple) => self.simple(simple),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound)?;
                let writes = self.redirect_list(redirects.as_ref())?;
                self.mark_writes(start, writes);
                Ok(())
            }
            ast::Command::Function(def) => {
                self.compound(&def.body.0)?;
                let writes = self.redirect_list(def.body.1.as_ref())?;
                self.mark_writes(start, writes);
                Ok(())
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr)?;
                let writes = self.redirect_list(redirects.as_ref())?;
                self.mark_writes(start, writes);
                Ok(())
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand) -> Result<(), String> {
        use ast::CompoundCommand as C;
        match compound {
            C::Arithmetic(a) => self.arithmetic(&a.expr.value),
            C::ArithmeticForClause(f) => {
                for expr in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&expr.value)?;
                }
                self.compound_list(&f.body.list)
            }
            C::BraceGroup(b) => self.compound_list(&b.list),
            C::Subshell(s) => self.compound_list(&s.list),
            C::ForClause(f) => {
                for word in f.values.iter().flatten() {
                    self.word_value(&word.value)?;
                }
                self.compound_list(&f.body.list)
            }
            C::CaseClause(c) => {
                self.word_value(&c.value.value)?;
                for case in &c.cases {
                    for pattern in &case.patterns {
                        self.word_value(&pattern.value)?;
                    }
                    if let Some(list) = &case.cmd {
                        self.compound_list(list)?;
                    }
                }
                Ok(())
            }
            C::IfClause(i) => {
                self.compound_list(&i.condition)?;
                self.compound_list(&i.then)?;
                for clause in i.elses.iter().flatten() {
                    if let Some(condition) = &clause.condition {
                        self.compound_list(condition)?;
                    }
                    self.compound_list(&clause.body)?;
                }
                Ok(())
            }
            C::WhileClause(w) | C::UntilClause(w) => {
                self.compound_list(&w.0)?;
                self.compound_list(&w.1.list)
            }
            C::Coprocess(c) => self.command(&c.body),
        }
    }

    fn extended_test(&mut self, expr: &ast::ExtendedTestExpr) -> Result<(), String> {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a)?;
                self.extended_test(b)
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a),
            E::UnaryTest(_, w) => self.word_value(&w.value).map(drop),
            E::BinaryTest(_, a, b) => {
                self.word_value(&a.value)?;
                self.word_value(&b.value).map(drop)
            }
        }
    }

    /// Arithmetic text may hide command substitutions (`$(( $(rm x) ))`, `a[$(rm x)]`).
    fn arithmetic(&mut self, text: &str) -> Result<(), String> {
        match brush_parser::word::parse(text, &options()) {
            Ok(pieces) => self.pieces_value(&pieces, text, true).map(drop),
            Err(_) if text.contains("$(") || text.contains('`') => {
                Err("command substitution inside an arithmetic expression".into())
            }
            Err(_) => Ok(()),
        }
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect) -> Result<bool, String> {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        match redirect {
            ast::IoRedirect::File(_, kind, target) => {
                let writing = matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite);
                match target {
                    T::Filename(word) => {
                        let value = self.word_value(&word.value)?;
                        if matches!(kind, K::DuplicateOutput) {
                            Ok(!is_fd_word(&value))
                        } else {
                            Ok(writing && !is_dev_null(&value))
                        }
                    }
                    T::Duplicate(word) => {
                        let value = self.word_value(&word.value)?;
                        Ok(matches!(kind, K::DuplicateOutput) && !is_fd_word(&value))
                    }
                    T::Fd(_) => Ok(false),
                    T::ProcessSubstitution(_, sub) => self.compound_list(&sub.list).map(|()| false),
                }
            }
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    let pieces = brush_parser::word::parse_heredoc(&doc.doc.value, &options())
                        .map_err(|e| format!("here-document: {e}"))?;
                    self.pieces_value(&pieces, &doc.doc.value, true)?;
                }
                Ok(false)
            }
            ast::IoRedirect::HereString(_, word) => self.word_value(&word.value).map(|_| false),
            ast::IoRedirect::OutputAndError(word, _) => {
                let value = self.word_value(&word.value)?;
                Ok(!is_dev_null(&value))
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand) -> Result<(), String> {
        use ast::CommandPrefixOrSuffixItem as I;
        let mut words = Vec::new();
        let mut writes_files = false;
        let mut sets_env = false;
        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                I::IoRedirect(r) => writes_files |= self.redirect(r)?,
                I::Word(w) => words.push(self.word_value(&w.value)?),
                I::AssignmentWord(_, w) => {
                    sets_env = true;
                    self.word_value(&w.value)?;
                }
                I::ProcessSubstitution(_, sub) => {
                    self.compound_list(&sub.list)?;
                    words.push(Word::Dynamic);
                }
            }
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word_value(&name.value)?);
        }
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            match item {
                I::IoRedirect(r) => writes_files |= self.redirect(r)?,
                I::Word(w) | I::AssignmentWord(_, w) => words.push(self.word_value(&w.value)?),
                I::ProcessSubstitution(_, sub) => {
                    self.compound_list(&sub.list)?;
                    words.push(Word::Dynamic);
                }
            }
        }
        self.emit(SimpleCommand {
            words,
            writes_files,
            sets_env,
            wrapper: false,
        })
    }

    /// Adds a command, looking through wrappers to what they run.
    fn emit(&mut self, mut cmd: SimpleCommand) -> Result<(), String> {
        let Some(program) = cmd.program().map(str::to_owned) else {
            self.out.push(cmd);
            return Ok(());
        };
        let args = &cmd.words[1..];
        // `inner`: what a pure wrapper runs (the wrapper is then judged by it);
        // `extra`: what a command that also does its own work runs besides.
        let (inner, extra) = match program.as_str() {
            "env" => (env_inner(args), Vec::new()),
            "xargs" => (xargs_inner(args), Vec::new()),
            "nohup" | "builtin" | "setsid" | "command" => {
                (after_options(args, "", &[]), Vec::new())
            }
            "timeout" => (timeout_inner(args), Vec::new()),
            "nice" => (after_options(args, "n", &["--adjustment"]), Vec::new()),
            "time" => (
                after_options(args, "fo", &["--format", "--output"]),
                Vec::new(),
            ),
            "exec" => (after_options(args, "a", &[]), Vec::new()),
            "stdbuf" => (
                after_options(args, "ioe", &["--input", "--output", "--error"]),
                Vec::new(),
            ),
            "sudo" | "doas" => (sudo_inner(args), Vec::new()),
            "eval" => (eval_inner(args), Vec::new()),
            "sh" | "bash" | "dash" | "zsh" | "ksh" | "ash" | "mksh" => {
                (shell_inner(args), Vec::new())
            }
            "find" => (Inner::Nothing, find_exec_inners(args)),
            "trap" => (Inner::Nothing, trap_inners(args)),
            "alias" => (Inner::Nothing, alias_inners(args)),
            _ => (Inner::Nothing, Vec::new()),
        };
        let writes_files = cmd.writes_files;
        let sets_env = cmd.sets_env;
        cmd.wrapper = !matches!(inner, Inner::Nothing);
        self.out.push(cmd);
        for run in std::iter::once(inner).chain(extra) {
            self.run_inner(run, writes_files, sets_env)?;
        }
        Ok(())
    }

    /// Adds what a wrapper runs, inheriting its redirections and environment changes.
    fn run_inner(
        &mut self,
        inner: Inner,
        writes_files: bool,
        sets_env: bool,
    ) -> Result<(), String> {
        match inner {
            Inner::Nothing => Ok(()),
            // e.g. `env FOO=1` alone prints the environment and runs nothing else.
            Inner::Words { words, .. } if words.is_empty() => Ok(()),
            Inner::Words {
                words,
                sets_env: more_env,
            } => self.emit(SimpleCommand {
                words,
                writes_files,
                sets_env: sets_env || more_env,
                wrapper: false,
            }),
            Inner::Script(text) => {
                let start = self.out.len();
                self.script(&text)?;
                for inner in &mut self.out[start..] {
                    inner.writes_files |= writes_files;
                    inner.sets_env |= sets_env;
                }
                Ok(())
            }
            Inner::Unknown => {
                self.out.push(SimpleCommand {
                    words: vec![Word::Dynamic],
                    writes_files,
                    sets_env,
                    wrapper: false,
                });
                Ok(())
            }
        }
    }

    /// The value of one raw shell word; command substitutions inside it are walked.
    fn word_value(&mut self, raw: &str) -> Result<Word, String> {
        let pieces = brush_parser::word::parse(raw, &options())
            .map_err(|e| format!("cannot parse word `{raw}`: {e}"))?;
        Ok(match self.pieces_value(&pieces, raw, false)? {
            Some(text) => Word::Literal(text),
            None => Word::Dynamic,
        })
    }

    /// Concatenates word pieces; `None` when any piece is dynamic.
    fn pieces_value(
        &mut self,
        pieces: &[WordPieceWithSource],
        raw: &str,
        quoted: bool,
    ) -> Result<Option<String>, String> {
        let mut value = Some(String::new());
        for piece in pieces {
            let part: Option<String> = match &piece.piece {
                WordPiece::Text(text) => (quoted || !has_glob(text)).then(|| text.clone()),
                WordPiece::SingleQuotedText(text) => Some(text.clone()),
                WordPiece::AnsiCQuotedText(text) => (!text.contains('\\')).then(|| text.clone()),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces_value(inner, raw, true)?
                }
                WordPiece::EscapeSequence(escape) => {
                    let mut chars = escape.chars();
                    chars.next();
                    Some(chars.as_str().trim_start_matches('\n').to_owned())
                }
                WordPiece::TildeExpansion(_) => None,
                WordPiece::ParameterExpansion(_) => {
                    let source = raw.get(piece.start_index..piece.end_index).unwrap_or(raw);
                    if ["$(", "`", "<(", ">("].iter().any(|s| source.contains(s)) {
                        return Err(format!(
                            "command substitution inside a parameter expansion: {source}"
                        ));
                    }
                    None
                }
                WordPiece::CommandSubstitution(text) => {
                    self.script(text)?;
                    None
                }
                WordPiece::BackquotedCommandSubstitution(text) => {
                    self.script(&unescape_backquoted(text))?;
                    None
                }
                WordPiece::ArithmeticExpression(expr) => {
                    self.arithmetic(&expr.value)?;
                    None
                }
            };
            value = match (value, part) {
                (Some(mut acc), Some(part)) => {
                    acc.push_str(&part);
                    Some(acc)
                }
                _ => None,
            };
        }
        Ok(value)
    }
}

/// Unquoted text that pathname or brace expansion could change.
fn has_glob(text: &str) -> bool {
    text.contains(['*', '?', '[', '('])
        || (text.contains('{') && (text.contains(',') || text.contains("..")))
}

/// Inside backquotes, `\$`, `` \` `` and `\\` stand for the character itself.
fn unescape_backquoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(&next) = chars.peek() {
                if matches!(next, '$' | '`' | '\\') {
                    out.push(next);
                    chars.next();
                    continue;
                }
            }
        }
        out.push(c);
    }
    out
}

fn is_dev_null(word: &Word) -> bool {
    word.literal() == Some("/dev/null")
}

/// `>&2`, `>&-`: duplicating or closing a descriptor, not writing a file.
fn is_fd_word(word: &Word) -> bool {
    word.literal().is_some_and(|w| {
        let digits = w.strip_suffix('-').unwrap_or(w);
        w == "-" || (!digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()))
    })
}

/// Quotes a static word so that re-parsing it yields the same word.
fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Where option parsing of a wrapper ends.
enum OptionsEnd {
    /// Index of the first operand.
    At(usize),
    /// An option word is dynamic: we cannot know where the command starts.
    Unknown,
}

/// Skips GNU-style options: `short_with_arg` letters take a value (attached or next word),
/// `long_with_arg` names take a value (after `=` or the next word), `--` ends options.
fn skip_options(args: &[Word], short_with_arg: &str, long_with_arg: &[&str]) -> OptionsEnd {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return OptionsEnd::Unknown;
        };
        if text == "--" {
            return OptionsEnd::At(i + 1);
        }
        if let Some(long) = text.strip_prefix("--") {
            let name_only = !long.contains('=');
            i += if name_only && long_with_arg.contains(&text) {
                2
            } else {
                1
            };
            continue;
        }
        if text.len() > 1 && text.starts_with('-') {
            i += 1;
            let cluster = &text[1..];
            for (at, letter) in cluster.char_indices() {
                if short_with_arg.contains(letter) {
                    if at + letter.len_utf8() == cluster.len() {
                        i += 1;
                    }
                    break;
                }
            }
            continue;
        }
        return OptionsEnd::At(i);
    }
    OptionsEnd::At(i)
}

fn after_options(args: &[Word], short_with_arg: &str, long_with_arg: &[&str]) -> Inner {
    match skip_options(args, short_with_arg, long_with_arg) {
        OptionsEnd::At(i) => Inner::Words {
            words: args.get(i..).unwrap_or_default().to_vec(),
            sets_env: false,
        },
        OptionsEnd::Unknown => Inner::Unknown,
    }
}

fn timeout_inner(args: &[Word]) -> Inner {
    match skip_options(args, "ks", &["--kill-after", "--signal"]) {
        // The first operand is the duration.
        OptionsEnd::At(i) => Inner::Words {
            words: args.get(i + 1..).unwrap_or_default().to_vec(),
            sets_env: false,
        },
        OptionsEnd::Unknown => Inner::Unknown,
    }
}

fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `env [OPTION]… [NAME=VALUE]… [COMMAND [ARG]…]`, including `-S`/`--split-string`.
fn env_inner(args: &[Word]) -> Inner {
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
            if name == "split-string" {
                match value
                    .map(str::to_owned)
                    .or_else(|| take_literal(args, &mut i))
                {
                    Some(s) => split = Some(s),
                    None => return Inner::Unknown,
                }
                break;
            }
            if value.is_none() && matches!(name, "unset" | "chdir") {
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
                if "uCP".contains(letter) {
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
        words: args.get(i..).unwrap_or_default().to_vec(),
        sets_env,
    }
}

fn take_literal(args: &[Word], i: &mut usize) -> Option<String> {
    let value = args.get(*i)?.literal()?.to_owned();
    *i += 1;
    Some(value)
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
                "arg-file" | "delimiter" | "max-args" | "max-procs" | "max-chars"
                | "process-slot-var"
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
    let mut words: Vec<Word> = args.get(i..).unwrap_or_default().to_vec();
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
    Inner::Words {
        words,
        sets_env: false,
    }
}

/// `eval ARG…`: the arguments joined by spaces are shell text.
fn eval_inner(args: &[Word]) -> Inner {
    let mut parts = Vec::with_capacity(args.len());
    for word in args {
        match word.literal() {
            Some(w) => parts.push(w),
            None => return Inner::Unknown,
        }
    }
    if parts.is_empty() {
        Inner::Nothing
    } else {
        Inner::Script(parts.join(" "))
    }
}

/// `sh [-options] -c SCRIPT [NAME [ARG…]]`. Without `-c` the shell runs a file or stdin:
/// nothing we can see, so it stays a plain command.
fn shell_inner(args: &[Word]) -> Inner {
    let mut i = 0;
    let mut has_c = false;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return if has_c {
                Inner::Unknown
            } else {
                Inner::Nothing
            };
        };
        if text == "--" || text == "-" {
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
            if cluster.contains('c') && text.starts_with('-') {
                has_c = true;
            }
            if cluster.contains(['o', 'O']) {
                i += 1;
            }
            continue;
        }
        break;
    }
    if !has_c {
        return Inner::Nothing;
    }
    match args.get(i) {
        Some(Word::Literal(script)) => Inner::Script(script.clone()),
        Some(Word::Dynamic) => Inner::Unknown,
        None => Inner::Nothing,
    }
}

/// The commands of `find … -exec CMD… ;` (also `-execdir`, `-ok`, `-okdir`, and `+`).
fn find_exec_inners(args: &[Word]) -> Vec<Inner> {
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
        });
    }
    commands
}

/// `trap [-lp] [[ACTION] SIGNAL…]`: the action is shell text run later.
fn trap_inners(args: &[Word]) -> Vec<Inner> {
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
fn alias_inners(args: &[Word]) -> Vec<Inner> {
    args.iter()
        .filter_map(|word| match word {
            Word::Literal(text) => text
                .split_once('=')
                .map(|(_, value)| Inner::Script(value.to_owned())),
            Word::Dynamic => Some(Inner::Unknown),
        })
        .collect()
}

/// `sudo [OPTION]… [VAR=value]… COMMAND…` (also `doas`).
fn sudo_inner(args: &[Word]) -> Inner {
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
    ];
    let OptionsEnd::At(mut i) = skip_options(args, "ugCDhprtTU", &long) else {
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
    Inner::Words {
        words: args.get(i..).unwrap_or_default().to_vec(),
        sets_env,
    }
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
