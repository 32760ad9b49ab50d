//! Bounded compilation of the model's glob and regex patterns (Glob, Grep, LS).
//!
//! Every pattern is checked by a cheap, non-recursive scan before a compiler sees it: its
//! length and its nesting depth (`{…}` alternation for globs, groups and classes for regexes).
//! Regexes are then compiled with explicit limits on the compiled program, the lazy DFA's
//! cache and the parser's nesting, so a pattern such as `(a{1000}){1000}` fails fast with
//! `PATTERN_TOO_COMPLEX` instead of taking memory and time. The regex engine itself runs in
//! time linear in the input (no backtracking), so a compiled pattern cannot run away.

use super::codes;
use crate::tools::ToolError;
use globset::{Glob, GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};

/// Longest glob pattern, in bytes.
pub const MAX_GLOB_BYTES: usize = 1024;
/// Deepest `{…}` nesting of a glob.
pub const MAX_GLOB_NESTING: usize = 4;
/// Most `{…}` alternation groups in one glob.
pub const MAX_GLOB_ALTERNATIONS: usize = 32;
/// Longest regex pattern, in bytes.
pub const MAX_REGEX_BYTES: usize = 4096;
/// Deepest nesting of groups and classes in a regex.
pub const MAX_REGEX_NESTING: u32 = 64;
/// Largest compiled regex program, in bytes.
pub const REGEX_SIZE_LIMIT: usize = 2 * 1024 * 1024;
/// Largest lazy-DFA cache of a regex, in bytes.
pub const REGEX_DFA_SIZE_LIMIT: usize = 4 * 1024 * 1024;

fn too_complex(message: impl Into<String>) -> ToolError {
    ToolError::new(codes::PATTERN_TOO_COMPLEX, message)
}

/// Checks a glob's length, `{}` nesting and number of alternation groups without parsing it.
pub fn check_glob(pattern: &str) -> Result<(), ToolError> {
    if pattern.len() > MAX_GLOB_BYTES {
        return Err(too_complex(format!(
            "the glob is {} bytes, more than {MAX_GLOB_BYTES}",
            pattern.len()
        )));
    }
    let (mut depth, mut groups, mut escaped) = (0usize, 0usize, false);
    for byte in pattern.bytes() {
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' => escaped = true,
            b'{' => {
                depth += 1;
                groups += 1;
                if depth > MAX_GLOB_NESTING {
                    return Err(too_complex(format!(
                        "the glob nests {{…}} deeper than {MAX_GLOB_NESTING} levels"
                    )));
                }
                if groups > MAX_GLOB_ALTERNATIONS {
                    return Err(too_complex(format!(
                        "the glob has more than {MAX_GLOB_ALTERNATIONS} {{…}} groups"
                    )));
                }
            }
            b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// A checked glob (`PATTERN_TOO_COMPLEX` over a limit, `PATTERN_INVALID` when malformed).
pub fn glob(pattern: &str, literal_separator: bool) -> Result<Glob, ToolError> {
    check_glob(pattern)?;
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .build()
        .map_err(|e| ToolError::new(codes::PATTERN_INVALID, e.to_string()))
}

/// A checked, compiled glob matcher.
pub fn glob_matcher(pattern: &str, literal_separator: bool) -> Result<GlobMatcher, ToolError> {
    Ok(glob(pattern, literal_separator)?.compile_matcher())
}

/// The deepest nesting of `(…)` and `[…]` in a regex, by a linear scan (escapes skipped).
fn regex_nesting(pattern: &str) -> usize {
    let (mut depth, mut deepest, mut escaped) = (0usize, 0usize, false);
    for byte in pattern.bytes() {
        if escaped {
            escaped = false;
            continue;
        }
        match byte {
            b'\\' => escaped = true,
            b'(' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A regex matcher compiled under the limits above.
pub fn regex_matcher(pattern: &str, case_insensitive: bool) -> Result<RegexMatcher, ToolError> {
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(too_complex(format!(
            "the pattern is {} bytes, more than {MAX_REGEX_BYTES}",
            pattern.len()
        )));
    }
    if regex_nesting(pattern) > MAX_REGEX_NESTING as usize {
        return Err(too_complex(format!(
            "the pattern nests groups or classes deeper than {MAX_REGEX_NESTING} levels"
        )));
    }
    RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .nest_limit(MAX_REGEX_NESTING)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
        .build(pattern)
        .map_err(|e| {
            let text = e.to_string();
            let lower = text.to_ascii_lowercase();
            if lower.contains("size limit") || lower.contains("nest limit") {
                too_complex(format!(
                    "the pattern compiles past the {REGEX_SIZE_LIMIT}-byte program limit or the \
                     nesting limit: {text}"
                ))
            } else {
                ToolError::new(codes::PATTERN_INVALID, text)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_over_a_limit_are_too_complex() {
        assert!(check_glob("**/*.{rs,toml}").is_ok());
        let long = "a".repeat(MAX_GLOB_BYTES + 1);
        assert_eq!(
            glob(&long, true).unwrap_err().code,
            codes::PATTERN_TOO_COMPLEX
        );
        let nested = format!("{}x{}", "{a,".repeat(5), "}".repeat(5));
        assert_eq!(
            glob(&nested, true).unwrap_err().code,
            codes::PATTERN_TOO_COMPLEX
        );
        let many = "{a,b}".repeat(MAX_GLOB_ALTERNATIONS + 1);
        assert_eq!(
            glob(&many, true).unwrap_err().code,
            codes::PATTERN_TOO_COMPLEX
        );
        // Escaped braces do not count.
        assert!(check_glob(&"\\{".repeat(100)).is_ok());
        assert_eq!(glob("[", true).unwrap_err().code, codes::PATTERN_INVALID);
    }

    #[test]
    fn regexes_over_a_limit_are_too_complex() {
        assert!(regex_matcher("fn \\w+\\(", false).is_ok());
        let huge = regex_matcher("(\\w{100}){100}", false).unwrap_err();
        assert_eq!(huge.code, codes::PATTERN_TOO_COMPLEX, "{huge:?}");
        let deep = format!("{}a{}", "(".repeat(100), ")".repeat(100));
        assert_eq!(
            regex_matcher(&deep, false).unwrap_err().code,
            codes::PATTERN_TOO_COMPLEX
        );
        let long = "a".repeat(MAX_REGEX_BYTES + 1);
        assert_eq!(
            regex_matcher(&long, false).unwrap_err().code,
            codes::PATTERN_TOO_COMPLEX
        );
        assert_eq!(
            regex_matcher("(unclosed", false).unwrap_err().code,
            codes::PATTERN_INVALID
        );
    }
}
