//! Option parsing shared by the wrappers: where a wrapper's options end and its command starts.

use super::Word;
use super::wrappers::{Inner, Stdin, rest, words};

/// Where option parsing of a wrapper ends.
pub(super) enum OptionsEnd {
    /// Index of the first operand.
    At(usize),
    /// An option word is dynamic: we cannot know where the command starts.
    Unknown,
}

/// Skips GNU-style options: `short_with_arg` letters take a value (attached or next word),
/// `long_with_arg` names take a value (after `=` or the next word), `--` ends options.
pub(super) fn skip_options(
    args: &[Word],
    short_with_arg: &str,
    long_with_arg: &[&str],
) -> OptionsEnd {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let Some(text) = word.literal() else {
            return OptionsEnd::Unknown;
        };
        if text == "--" {
            return OptionsEnd::At(i + 1);
        }
        if text.starts_with("--") {
            let name_only = !text.contains('=');
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

pub(super) fn after_options(
    args: &[Word],
    short_with_arg: &str,
    long_with_arg: &[&str],
    stdin: &Stdin,
) -> Inner {
    skip_then_operands(args, short_with_arg, long_with_arg, 0, stdin)
}

/// Skips options, then `operands` operands (a duration, a priority, a lock file …).
pub(super) fn skip_then_operands(
    args: &[Word],
    short_with_arg: &str,
    long_with_arg: &[&str],
    operands: usize,
    stdin: &Stdin,
) -> Inner {
    match skip_options(args, short_with_arg, long_with_arg) {
        OptionsEnd::At(i) => words(rest(args, i + operands), stdin),
        OptionsEnd::Unknown => Inner::Unknown,
    }
}

pub(super) fn is_assignment(text: &str) -> bool {
    text.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

pub(super) fn take_literal(args: &[Word], i: &mut usize) -> Option<String> {
    let value = args.get(*i)?.literal()?.to_owned();
    *i += 1;
    Some(value)
}
