//! Permission rule syntax (N7, D2): parsing `*`, `Name` and `Name(spec)` rules, and matching a
//! rule's spec against a tool input according to the tool's [`Subject`].
//!
//! Spec forms: `prefix:*` (word-wise command prefix), an exact command, a path glob
//! (`globset`, `**` crosses directories), and `domain:host` / `domain:*.host`. Malformed text is
//! a [`RuleError`], never a rule that silently matches nothing.

use super::Subject;
use super::shell::{self, Risk, SimpleCommand, Word};
use globset::{GlobBuilder, GlobMatcher};
use std::fmt;
use std::path::{Component, Path};
use std::str::FromStr;

/// A configuration error in a permission rule. Every message names the rule text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("permission rule is empty")]
    Empty,
    #[error("permission rule `{rule}`: `(` is never closed by a final `)`")]
    Unclosed { rule: String },
    #[error("permission rule `{rule}`: unexpected text after the closing `)`")]
    TrailingText { rule: String },
    #[error("permission rule `{rule}`: invalid tool name: {problem}")]
    BadName { rule: String, problem: String },
    #[error("permission rule `{rule}`: the argument inside `()` is empty")]
    EmptySpec { rule: String },
    #[error("permission rule `{rule}`: invalid domain: {problem}")]
    BadDomain { rule: String, problem: String },
    #[error("permission rule `{rule}`: invalid command: {problem}")]
    BadCommand { rule: String, problem: String },
    #[error("permission rule `{rule}`: invalid glob: {problem}")]
    BadGlob { rule: String, problem: String },
    #[error("permission rule `{rule}`: {problem}")]
    WrongKind { rule: String, problem: String },
    #[error(
        "permission rule `{rule}`: no tool is named `{tool}` (tool names are case-sensitive; \
         MCP tools are named `mcp__<server>__<tool>`)"
    )]
    UnknownTool { rule: String, tool: String },
    #[error("permission rule `{rule}…` is {len} bytes, more than the limit of {limit}")]
    TooLong {
        /// The first characters of the rule.
        rule: String,
        len: usize,
        limit: usize,
    },
}

/// The longest rule text accepted (the command part has its own, smaller limit).
pub const MAX_RULE_TEXT_BYTES: usize = shell::MAX_RULE_BYTES + 256;
/// The longest path glob of a file rule (`Read(src/**)`).
pub const MAX_GLOB_BYTES: usize = 1024;
/// The deepest `{…}` nesting in a path glob.
pub const MAX_GLOB_BRACE_DEPTH: usize = 4;

/// The kind of argument a spec can be matched against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Command,
    Path,
    Url,
}

/// Subject kinds of the built-in tools, so their rules are checked strictly at parse time.
/// Other tools (custom, MCP) are checked with [`RuleSet::check_tool`] once their subject is known.
fn known_kind(tool: &str) -> Option<Kind> {
    match tool {
        "Bash" => Some(Kind::Command),
        "Read" | "Write" | "Edit" | "MultiEdit" | "NotebookEdit" | "Glob" | "Grep" | "LS" => {
            Some(Kind::Path)
        }
        "WebFetch" => Some(Kind::Url),
        _ => None,
    }
}

/// A `domain:` spec.
#[derive(Clone, Debug, PartialEq, Eq)]
struct DomainPattern {
    /// Canonical host (lowercase, no trailing dot).
    host: String,
    /// `domain:*.host`: any subdomain of `host` (not `host` itself).
    subdomains: bool,
}

impl DomainPattern {
    fn matches(&self, host: &str) -> bool {
        if self.subdomains {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
        } else {
            host == self.host
        }
    }
}

/// The parsed `(...)` part of a rule.
#[derive(Clone, Debug)]
enum Spec {
    Domain(DomainPattern),
    CommandPrefix(Vec<String>),
    /// An exact command and/or a path glob; which one applies depends on the tool's subject.
    /// At least one is present; the error says why the other form is not valid.
    ExactOrGlob {
        command: Result<Vec<String>, String>,
        glob: Result<GlobMatcher, String>,
    },
}

/// One permission rule: `*`, an exact tool name, or `Name(spec)`.
#[derive(Clone, Debug)]
pub struct Rule {
    text: String,
    tool: String,
    spec: Option<Spec>,
}

impl PartialEq for Rule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Rule {}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Rule::parse(text)
    }
}

/// For an MCP namespace glob `mcp__<server>__*` (a trailing `*` after the server's `__`),
/// the prefix before the `*`.
fn mcp_namespace_glob(name: &str) -> Option<&str> {
    let prefix = name.strip_suffix('*')?;
    let server = prefix.strip_prefix("mcp__")?.strip_suffix("__")?;
    (!server.is_empty() && !server.contains("__") && !server.contains('*')).then_some(prefix)
}

fn check_name(rule: &str, name: &str, allow_star: bool) -> Result<(), RuleError> {
    let bad = |problem: &str| RuleError::BadName {
        rule: rule.to_owned(),
        problem: problem.to_owned(),
    };
    if name.is_empty() {
        return Err(bad("missing tool name"));
    }
    if name == "*" {
        return if allow_star {
            Ok(())
        } else {
            Err(bad("`*` cannot take an argument"))
        };
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(bad(
            "only letters, digits, `_`, `-` and `.` are allowed (or `*` alone)",
        ));
    }
    Ok(())
}

fn compile_glob(spec: &str) -> Result<GlobMatcher, String> {
    if spec.len() > MAX_GLOB_BYTES {
        return Err(format!("a path glob is at most {MAX_GLOB_BYTES} bytes"));
    }
    let mut depth = 0usize;
    for c in spec.bytes() {
        match c {
            b'{' => {
                depth += 1;
                if depth > MAX_GLOB_BRACE_DEPTH {
                    return Err(format!(
                        "`{{…}}` nests deeper than {MAX_GLOB_BRACE_DEPTH} levels"
                    ));
                }
            }
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if spec.starts_with('/') {
        return Err("path globs are relative to the workspace (no leading `/`)".into());
    }
    GlobBuilder::new(spec)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| e.kind().to_string())
}

fn parse_domain(rule: &str, host: &str) -> Result<DomainPattern, RuleError> {
    let bad = |problem: String| RuleError::BadDomain {
        rule: rule.to_owned(),
        problem,
    };
    let (subdomains, base) = match host.strip_prefix("*.") {
        Some(base) => (true, base),
        None => (false, host),
    };
    let base = base.strip_suffix('.').unwrap_or(base);
    if base.is_empty() {
        return Err(bad("missing host".into()));
    }
    if base.contains('*') {
        return Err(bad("`*` is only allowed as a leading `*.`".into()));
    }
    let parsed = url::Host::parse(base).map_err(|e| bad(format!("`{base}`: {e}")))?;
    if subdomains && !matches!(parsed, url::Host::Domain(_)) {
        return Err(bad("`*.` needs a domain name, not an IP address".into()));
    }
    Ok(DomainPattern {
        host: parsed.to_string(),
        subdomains,
    })
}

fn parse_spec(rule: &str, tool: &str, spec: &str) -> Result<Spec, RuleError> {
    let kind = known_kind(tool);
    let wrong = |problem: &str| RuleError::WrongKind {
        rule: rule.to_owned(),
        problem: problem.to_owned(),
    };
    if let Some(host) = spec.strip_prefix("domain:") {
        if matches!(kind, Some(Kind::Command | Kind::Path)) {
            return Err(wrong(&format!("{tool} rules cannot use `domain:`")));
        }
        return Ok(Spec::Domain(parse_domain(rule, host)?));
    }
    if kind == Some(Kind::Url) {
        return Err(wrong(&format!(
            "{tool} rules take `domain:HOST` or `domain:*.HOST`"
        )));
    }
    if let Some(prefix) = spec.strip_suffix(":*") {
        if kind == Some(Kind::Path) {
            return Err(wrong(&format!(
                "{tool} rules take a path glob, not a command prefix `:*`"
            )));
        }
        let words = shell::parse_rule_words(prefix).map_err(|problem| RuleError::BadCommand {
            rule: rule.to_owned(),
            problem,
        })?;
        return Ok(Spec::CommandPrefix(words));
    }
    let command = shell::parse_rule_words(spec);
    let glob = compile_glob(spec);
    match (kind, command, glob) {
        (Some(Kind::Command), Err(problem), _) => Err(RuleError::BadCommand {
            rule: rule.to_owned(),
            problem,
        }),
        (Some(Kind::Path), _, Err(problem)) => Err(RuleError::BadGlob {
            rule: rule.to_owned(),
            problem,
        }),
        (_, Err(command), Err(glob)) => Err(wrong(&format!(
            "neither a command ({command}) nor a path glob ({glob})"
        ))),
        (_, command, glob) => Ok(Spec::ExactOrGlob { command, glob }),
    }
}

impl Rule {
    /// Parses one rule. Surrounding whitespace is ignored.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(RuleError::Empty);
        }
        if text.len() > MAX_RULE_TEXT_BYTES {
            return Err(RuleError::TooLong {
                rule: text.chars().take(40).collect(),
                len: text.len(),
                limit: MAX_RULE_TEXT_BYTES,
            });
        }
        let rule = text.to_owned();
        let Some(open) = text.find('(') else {
            if text.contains(')') {
                return Err(RuleError::BadName {
                    rule,
                    problem: "`)` without `(`".into(),
                });
            }
            if let Some(prefix) = mcp_namespace_glob(text) {
                check_name(text, prefix, false)?;
                return Ok(Rule {
                    tool: rule.clone(),
                    text: rule,
                    spec: None,
                });
            }
            check_name(text, text, true)?;
            return Ok(Rule {
                tool: rule.clone(),
                text: rule,
                spec: None,
            });
        };
        let tool = &text[..open];
        if mcp_namespace_glob(tool).is_some() {
            return Err(RuleError::BadName {
                rule,
                problem: "an MCP namespace glob `mcp__<server>__*` takes no argument".into(),
            });
        }
        check_name(text, tool, false)?;
        let Some(close) = text.rfind(')').filter(|&c| c > open) else {
            return Err(RuleError::Unclosed { rule });
        };
        if close + 1 != text.len() {
            return Err(RuleError::TrailingText { rule });
        }
        let spec = &text[open + 1..close];
        if spec.trim().is_empty() {
            return Err(RuleError::EmptySpec { rule });
        }
        let spec = parse_spec(text, tool, spec)?;
        Ok(Rule {
            tool: tool.to_owned(),
            text: rule,
            spec: Some(spec),
        })
    }

    /// The rule text as configured (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The tool name this rule applies to, or `*`.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// True when the rule has an argument part (`Name(...)`).
    pub fn has_spec(&self) -> bool {
        self.spec.is_some()
    }

    /// True when the rule names this tool (or is `*`, or the tool is in its MCP namespace
    /// `mcp__<server>__*`), ignoring any argument part.
    pub fn names_tool(&self, tool: &str) -> bool {
        self.tool == "*"
            || self.tool == tool
            || mcp_namespace_glob(&self.tool)
                .is_some_and(|prefix| tool.len() > prefix.len() && tool.starts_with(prefix))
    }

    /// Checks that this rule's argument part means something for a tool with this subject.
    pub fn check_subject(&self, subject: &Subject) -> Result<(), RuleError> {
        let Some(spec) = &self.spec else {
            return Ok(());
        };
        let wrong = |problem: String| {
            Err(RuleError::WrongKind {
                rule: self.text.clone(),
                problem,
            })
        };
        match (subject, spec) {
            (Subject::Name, _) => wrong(format!(
                "tool {} takes no rule arguments; use the bare name",
                self.tool
            )),
            (Subject::Command { .. }, Spec::CommandPrefix(_))
            | (Subject::Command { .. }, Spec::ExactOrGlob { command: Ok(_), .. })
            | (Subject::Path { .. }, Spec::ExactOrGlob { glob: Ok(_), .. })
            | (Subject::Url { .. }, Spec::Domain(_)) => Ok(()),
            (
                Subject::Command { .. },
                Spec::ExactOrGlob {
                    command: Err(e), ..
                },
            ) => Err(RuleError::BadCommand {
                rule: self.text.clone(),
                problem: e.clone(),
            }),
            (Subject::Path { .. }, Spec::ExactOrGlob { glob: Err(e), .. }) => {
                Err(RuleError::BadGlob {
                    rule: self.text.clone(),
                    problem: e.clone(),
                })
            }
            (Subject::Command { .. }, _) => {
                wrong(format!("{} rules take a command or `prefix:*`", self.tool))
            }
            (Subject::Path { .. }, _) => wrong(format!("{} rules take a path glob", self.tool)),
            (Subject::Url { .. }, _) => wrong(format!(
                "{} rules take `domain:HOST` or `domain:*.HOST`",
                self.tool
            )),
        }
    }

    /// Whether this (command) rule matches one simple command.
    ///
    /// A deny rule (`deny`) matches the written words or the program's view of them (git
    /// without its global options), compares the program by basename, and counts a dynamic
    /// word where it expects a word as matching (it could be anything). An allow rule matches
    /// a program named by its bare name or standard path only, and covers the command only
    /// when every risky word (argument model) is one the rule names.
    pub(crate) fn matches_simple_command(&self, cmd: &SimpleCommand, deny: bool) -> bool {
        let (pattern, prefix) = match &self.spec {
            Some(Spec::CommandPrefix(words)) => (words, true),
            Some(Spec::ExactOrGlob {
                command: Ok(words), ..
            }) => (words, false),
            _ => return false,
        };
        if deny {
            return words_match(pattern, &cmd.words, prefix, true)
                || cmd
                    .view
                    .as_ref()
                    .is_some_and(|v| words_match(pattern, &v.words, prefix, true));
        }
        let covers = |words: &[Word], risks: &[Risk]| {
            words_match(pattern, words, prefix, false)
                && risks.iter().all(|r| !r.never && r.word < pattern.len())
        };
        covers(&cmd.words, &cmd.risks)
            || cmd
                .view
                .as_ref()
                .is_some_and(|v| v.for_allow && covers(&v.words, &v.risks))
    }

    /// Whether this (path) rule's glob matches a normalised workspace-relative path.
    pub(crate) fn matches_path(&self, path: &str) -> bool {
        matches!(&self.spec, Some(Spec::ExactOrGlob { glob: Ok(glob), .. }) if glob.is_match(path))
    }

    /// Whether this (domain) rule matches a canonical host.
    pub(crate) fn matches_host(&self, host: &str) -> bool {
        matches!(&self.spec, Some(Spec::Domain(pattern)) if pattern.matches(host))
    }

    /// Whether the rule's spec can apply to a subject of this kind at all.
    pub(crate) fn spec_fits(&self, subject: &Subject) -> bool {
        match (&self.spec, subject) {
            (None, _) => true,
            (Some(_), Subject::Name) => false,
            (Some(Spec::CommandPrefix(_)), Subject::Command { .. }) => true,
            (Some(Spec::ExactOrGlob { command, .. }), Subject::Command { .. }) => command.is_ok(),
            (Some(Spec::ExactOrGlob { glob, .. }), Subject::Path { .. }) => glob.is_ok(),
            (Some(Spec::Domain(_)), Subject::Url { .. }) => true,
            _ => false,
        }
    }
}

/// Word-wise comparison; the program word is compared by basename for deny rules and by
/// [`shell::names_program_for_allow`] for allow rules.
fn words_match(pattern: &[String], words: &[Word], prefix: bool, deny: bool) -> bool {
    for (index, expected) in pattern.iter().enumerate() {
        match words.get(index) {
            None => return false,
            Some(Word::Dynamic) => return deny,
            Some(Word::Literal(actual)) => {
                let same = if index == 0 && deny {
                    shell::basename(actual) == shell::basename(expected)
                } else if index == 0 {
                    shell::names_program_for_allow(actual, expected)
                } else {
                    actual == expected
                };
                if !same {
                    return false;
                }
            }
        }
    }
    if prefix {
        return true;
    }
    let rest = &words[pattern.len()..];
    // A trailing dynamic word may expand to nothing, so a deny rule still matches.
    rest.is_empty() || (deny && rest.iter().all(|w| *w == Word::Dynamic))
}

/// The configured allow and deny rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
}

impl RuleSet {
    /// Parses both lists; the first malformed rule is the error.
    pub fn parse(allow: &[String], deny: &[String]) -> Result<RuleSet, RuleError> {
        let parse_all = |list: &[String]| -> Result<Vec<Rule>, RuleError> {
            list.iter().map(|t| Rule::parse(t)).collect()
        };
        Ok(RuleSet {
            allow: parse_all(allow)?,
            deny: parse_all(deny)?,
        })
    }

    /// Like [`RuleSet::parse`], and says which rule failed: `("allow" | "deny", index)`.
    pub fn parse_located(
        allow: &[String],
        deny: &[String],
    ) -> Result<RuleSet, (&'static str, usize, RuleError)> {
        let parse_all = |name: &'static str, list: &[String]| {
            list.iter()
                .enumerate()
                .map(|(i, t)| Rule::parse(t).map_err(|e| (name, i, e)))
                .collect::<Result<Vec<Rule>, _>>()
        };
        Ok(RuleSet {
            allow: parse_all("allow", allow)?,
            deny: parse_all("deny", deny)?,
        })
    }

    /// Checks that every rule names a known tool and that its argument part fits that tool's
    /// subject; says which rule failed like [`RuleSet::parse_located`]. `target` answers for a
    /// tool name: `None` unknown, `Some(None)` known with any argument (MCP tools),
    /// `Some(Some(subject))` known with that subject. `*` is always valid.
    pub fn check_targets(
        &self,
        target: impl Fn(&str) -> Option<Option<Subject>>,
    ) -> Result<(), (&'static str, usize, RuleError)> {
        let check = |rule: &Rule| -> Result<(), RuleError> {
            if rule.tool() == "*" {
                return Ok(());
            }
            match target(rule.tool()) {
                None => Err(RuleError::UnknownTool {
                    rule: rule.as_str().to_owned(),
                    tool: rule.tool().to_owned(),
                }),
                Some(None) => Ok(()),
                Some(Some(subject)) => rule.check_subject(&subject),
            }
        };
        for (name, list) in [("allow", &self.allow), ("deny", &self.deny)] {
            for (index, rule) in list.iter().enumerate() {
                check(rule).map_err(|e| (name, index, e))?;
            }
        }
        Ok(())
    }

    /// Checks every rule naming `tool` (exactly, not via `*`) against the tool's subject; call
    /// it when tools are registered so a rule that could never match is a configuration error.
    pub fn check_tool(&self, tool: &str, subject: &Subject) -> Result<(), RuleError> {
        self.allow
            .iter()
            .chain(&self.deny)
            .filter(|r| r.tool() == tool)
            .try_for_each(|r| r.check_subject(subject))
    }
}

/// Lexically normalises a tool's path input to a workspace-relative `/`-separated path.
/// `None` when the path escapes the workspace (or is absolute and no workspace contains it).
pub(crate) fn normalize_path(input: &str, workspace: Option<&Path>) -> Option<String> {
    let path = Path::new(input);
    if path.is_absolute() {
        let root = normalize_absolute(workspace?);
        let full = normalize_absolute(path);
        let relative = full.strip_prefix(&root).ok()?;
        normalize_relative(relative)
    } else {
        normalize_relative(path)
    }
}

fn normalize_absolute(path: &Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            // `/..` is `/` on POSIX.
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    out
}

fn normalize_relative(path: &Path) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part.to_str()?),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    if parts.is_empty() {
        Some(".".into())
    } else {
        Some(parts.join("/"))
    }
}

/// The canonical host of a URL input (lowercase, no trailing dot, userinfo ignored).
pub(crate) fn url_host(input: &str) -> Option<String> {
    let url = url::Url::parse(input).ok()?;
    let host = url.host_str()?;
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    (!host.is_empty()).then_some(host)
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
