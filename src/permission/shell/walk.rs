//! The walk over `brush-parser`'s syntax tree: every simple command the text runs, with its
//! redirections (writes and where stdin comes from) and through wrappers (see `wrappers`).
//! Runs on a parser thread of `bounds`; recursion is bounded by the text limits there and
//! [`MAX_SCRIPT_DEPTH`] for re-parsed scripts.

use super::wrappers::{self, Inner, Stdin};
use super::{MAX_COMMAND_BYTES, MAX_SCRIPT_DEPTH, SimpleCommand, Word, bounds, programs};
use brush_parser::ast;
use brush_parser::word::{WordPiece, WordPieceWithSource};
use brush_parser::{Parser, ParserOptions};

/// Every simple command of `text` (call on a bounded parser thread).
pub(super) fn commands(text: &str) -> Result<Vec<SimpleCommand>, String> {
    let mut walker = Walker::default();
    walker.script(text)?;
    Ok(walker.out)
}

/// The value of a word of a rule: `None` when it is not static, an error when it holds a
/// command substitution.
pub(super) fn static_word(raw: &str) -> Result<Option<String>, String> {
    let mut walker = Walker::default();
    let value = walker.word_value(raw)?;
    if !walker.out.is_empty() {
        return Err("must not contain command substitution".into());
    }
    Ok(value.literal().map(str::to_owned))
}

fn options() -> ParserOptions {
    ParserOptions::default()
}

pub(super) fn parse_program(text: &str) -> Result<ast::Program, String> {
    let mut parser = Parser::new(std::io::BufReader::new(text.as_bytes()), &options());
    parser
        .parse_program()
        .map_err(|e| format!("shell syntax error: {e}"))
}

/// What a redirection (or a list of them) does.
#[derive(Default)]
struct Effect {
    writes: bool,
    /// Where stdin now comes from, if a redirection changes it.
    stdin: Option<Stdin>,
}

impl Effect {
    fn add(&mut self, other: Effect) {
        self.writes |= other.writes;
        if other.stdin.is_some() {
            self.stdin = other.stdin;
        }
    }
}

/// Collects simple commands while walking the syntax tree.
#[derive(Default)]
struct Walker {
    out: Vec<SimpleCommand>,
    depth: usize,
    /// Where the commands being walked read their stdin (a pipe, a here-string, …).
    stdin: Stdin,
    /// How many wrappers enclose the command being emitted (`nice nice … rm`).
    wrappers: usize,
}

/// How many wrappers may wrap one command before the text counts as unparsable.
const MAX_WRAPPER_DEPTH: usize = 32;

impl Walker {
    fn script(&mut self, text: &str) -> Result<(), String> {
        if self.depth >= MAX_SCRIPT_DEPTH {
            return Err(format!(
                "commands nested deeper than {MAX_SCRIPT_DEPTH} levels"
            ));
        }
        if self.depth > 0 {
            // A re-parsed script (`sh -c`, `eval`, …) meets the same limits as the outer text.
            bounds::check_text(text, MAX_COMMAND_BYTES).map_err(|e| e.to_string())?;
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
        let outer = self.stdin.clone();
        for (index, command) in pipeline.seq.iter().enumerate() {
            if index > 0 {
                self.stdin = Stdin::Piped;
            }
            let result = self.command(command);
            if result.is_err() {
                self.stdin = outer;
                return result;
            }
        }
        self.stdin = outer;
        Ok(())
    }

    /// Marks every command emitted since `start` as writing files when `writes` is set.
    fn mark_writes(&mut self, start: usize, writes: bool) {
        if writes {
            for cmd in &mut self.out[start..] {
                cmd.writes_files = true;
            }
        }
    }

    fn redirect_list(&mut self, list: Option<&ast::RedirectList>) -> Result<Effect, String> {
        let mut effect = Effect::default();
        for redirect in list.iter().flat_map(|l| l.0.iter()) {
            effect.add(self.redirect(redirect)?);
        }
        Ok(effect)
    }

    /// Walks a compound command's parts with the stdin its redirections give them.
    fn with_redirects(
        &mut self,
        redirects: Option<&ast::RedirectList>,
        walk: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        let start = self.out.len();
        let effect = self.redirect_list(redirects)?;
        let outer = self.stdin.clone();
        if let Some(stdin) = effect.stdin {
            self.stdin = stdin;
        }
        let result = walk(self);
        self.stdin = outer;
        result?;
        self.mark_writes(start, effect.writes);
        Ok(())
    }

    fn command(&mut self, command: &ast::Command) -> Result<(), String> {
        match command {
            ast::Command::Simple(simple) => self.simple(simple),
            ast::Command::Compound(compound, redirects) => {
                self.with_redirects(redirects.as_ref(), |w| w.compound(compound))
            }
            ast::Command::Function(def) => {
                self.with_redirects(def.body.1.as_ref(), |w| w.compound(&def.body.0))
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.with_redirects(redirects.as_ref(), |w| w.extended_test(&test.expr))
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

    fn redirect(&mut self, redirect: &ast::IoRedirect) -> Result<Effect, String> {
        use ast::IoFileRedirectKind as K;
        use ast::IoFileRedirectTarget as T;
        let reads_stdin = |fd: &Option<ast::IoFd>| fd.is_none_or(|fd| fd == 0);
        match redirect {
            ast::IoRedirect::File(fd, kind, target) => {
                let writing = matches!(kind, K::Write | K::Append | K::Clobber | K::ReadAndWrite);
                let stdin = (matches!(kind, K::Read | K::ReadAndWrite | K::DuplicateInput)
                    && reads_stdin(fd))
                .then_some(Stdin::Unknown);
                let writes = match target {
                    T::Filename(word) => {
                        let value = self.word_value(&word.value)?;
                        match kind {
                            K::DuplicateOutput => !is_std_fd_word(&value),
                            K::DuplicateInput => false,
                            _ => writing && !is_harmless_target(&value),
                        }
                    }
                    T::Duplicate(word) => {
                        let value = self.word_value(&word.value)?;
                        matches!(kind, K::DuplicateOutput) && !is_std_fd_word(&value)
                    }
                    T::Fd(fd) => matches!(kind, K::DuplicateOutput) && !matches!(fd, 1 | 2),
                    T::ProcessSubstitution(_, sub) => {
                        self.process_substitution(&sub.list)?;
                        false
                    }
                };
                Ok(Effect { writes, stdin })
            }
            ast::IoRedirect::HereDocument(fd, doc) => {
                let literal = if doc.requires_expansion {
                    let pieces = brush_parser::word::parse_heredoc(&doc.doc.value, &options())
                        .map_err(|e| format!("here-document: {e}"))?;
                    self.pieces_value(&pieces, &doc.doc.value, true)?
                } else {
                    Some(doc.doc.value.clone())
                };
                Ok(Effect {
                    writes: false,
                    stdin: reads_stdin(fd).then(|| literal.map_or(Stdin::Unknown, Stdin::Literal)),
                })
            }
            ast::IoRedirect::HereString(fd, word) => {
                let value = self.word_value(&word.value)?;
                Ok(Effect {
                    writes: false,
                    stdin: reads_stdin(fd).then(|| match value {
                        Word::Literal(text) => Stdin::Literal(format!("{text}\n")),
                        Word::Dynamic => Stdin::Unknown,
                    }),
                })
            }
            ast::IoRedirect::OutputAndError(word, _) => {
                let value = self.word_value(&word.value)?;
                Ok(Effect {
                    writes: !is_harmless_target(&value),
                    stdin: None,
                })
            }
        }
    }

    /// The commands of `<(…)` / `>(…)`: they read the pipe or the outer stdin, unknown to us.
    fn process_substitution(&mut self, list: &ast::CompoundList) -> Result<(), String> {
        let outer = std::mem::replace(&mut self.stdin, Stdin::Unknown);
        let result = self.compound_list(list);
        self.stdin = outer;
        result
    }

    fn simple(&mut self, simple: &ast::SimpleCommand) -> Result<(), String> {
        use ast::CommandPrefixOrSuffixItem as I;
        let mut words = Vec::new();
        let mut effect = Effect::default();
        let mut sets_env = false;
        let mut runs_env = false;
        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                I::IoRedirect(r) => effect.add(self.redirect(r)?),
                I::Word(w) => words.push(self.word_value(&w.value)?),
                I::AssignmentWord(_, w) => {
                    sets_env = true;
                    runs_env |= programs::env_runs_program(&w.value);
                    self.word_value(&w.value)?;
                }
                I::ProcessSubstitution(_, sub) => {
                    self.process_substitution(&sub.list)?;
                    words.push(Word::Dynamic);
                }
            }
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word_value(&name.value)?);
        }
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            match item {
                I::IoRedirect(r) => effect.add(self.redirect(r)?),
                I::Word(w) | I::AssignmentWord(_, w) => words.push(self.word_value(&w.value)?),
                I::ProcessSubstitution(_, sub) => {
                    self.process_substitution(&sub.list)?;
                    words.push(Word::Dynamic);
                }
            }
        }
        let stdin = effect.stdin.unwrap_or_else(|| self.stdin.clone());
        let mut cmd = SimpleCommand::new(words);
        cmd.writes_files = effect.writes;
        cmd.sets_env = sets_env;
        if runs_env {
            cmd.risks.push(programs::env_program_risk());
        }
        self.emit(cmd, &stdin)
    }

    /// Adds a command, looking through wrappers to what they run.
    fn emit(&mut self, mut cmd: SimpleCommand, stdin: &Stdin) -> Result<(), String> {
        let Some(program) = cmd.program().map(str::to_owned) else {
            self.out.push(cmd);
            return Ok(());
        };
        programs::annotate(&program, &mut cmd);
        let wrapped = wrappers::wrapped(&program, &cmd.words[1..], stdin);
        if wrapped.writes_files {
            cmd.writes_files = true;
        }
        let writes_files = cmd.writes_files;
        let sets_env = cmd.sets_env;
        // A wrapper that runs nothing (`exec >f`, `env`, `command`) is judged as itself.
        cmd.wrapper = wrapped.transparent && wrapped.runs_something();
        self.out.push(cmd);
        let runs = wrapped.inner.into_iter().chain(wrapped.extra);
        for run in runs {
            self.run_inner(run, writes_files, sets_env, stdin)?;
        }
        for guess in wrapped.deny_guesses {
            let mut cmd = SimpleCommand::new(guess);
            cmd.deny_only = true;
            if let Some(program) = cmd.program().map(str::to_owned) {
                programs::annotate(&program, &mut cmd);
            }
            self.out.push(cmd);
        }
        Ok(())
    }

    /// Adds what a wrapper runs, inheriting its redirections and environment changes.
    fn run_inner(
        &mut self,
        inner: Inner,
        writes_files: bool,
        sets_env: bool,
        stdin: &Stdin,
    ) -> Result<(), String> {
        match inner {
            // e.g. `env FOO=1` alone prints the environment and runs nothing else.
            Inner::Words { words, .. } if words.is_empty() => Ok(()),
            Inner::Words {
                words,
                sets_env: more_env,
                stdin,
            } => {
                if self.wrappers >= MAX_WRAPPER_DEPTH {
                    return Err(format!(
                        "commands wrapped more than {MAX_WRAPPER_DEPTH} times"
                    ));
                }
                let mut cmd = SimpleCommand::new(words);
                cmd.writes_files = writes_files;
                cmd.sets_env = sets_env || more_env;
                self.wrappers += 1;
                let result = self.emit(cmd, &stdin);
                self.wrappers -= 1;
                result
            }
            Inner::Script(text) => {
                let start = self.out.len();
                // The script reads the wrapper's stdin (`bash -c 'source /dev/stdin' <<< …`).
                let outer = std::mem::replace(&mut self.stdin, stdin.clone());
                let result = self.script(&text);
                self.stdin = outer;
                result?;
                for inner in &mut self.out[start..] {
                    inner.writes_files |= writes_files;
                    inner.sets_env |= sets_env;
                }
                Ok(())
            }
            Inner::Unknown => {
                let mut cmd = SimpleCommand::new(vec![Word::Dynamic]);
                cmd.writes_files = writes_files;
                cmd.sets_env = sets_env;
                self.out.push(cmd);
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
        if c == '\\'
            && let Some(&next) = chars.peek()
            && matches!(next, '$' | '`' | '\\')
        {
            out.push(next);
            chars.next();
            continue;
        }
        out.push(c);
    }
    out
}

/// Output to these files writes nothing anyone keeps.
fn is_harmless_target(word: &Word) -> bool {
    matches!(
        word.literal(),
        Some("/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/fd/1" | "/dev/fd/2")
    )
}

/// `>&1`, `>&2`, `>&-`, `2>&1-`: duplicating stdout/stderr or closing a descriptor. Any other
/// descriptor (`>&3`) may have been opened for writing a file (`exec 3>f`), so it writes.
fn is_std_fd_word(word: &Word) -> bool {
    word.literal().is_some_and(|w| {
        let fd = w.strip_suffix('-').unwrap_or(w);
        w == "-" || fd == "1" || fd == "2"
    })
}
