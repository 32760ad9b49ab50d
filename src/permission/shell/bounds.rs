//! Bounds on every parse of tenant or model text (issue "hostile tenants", first bullet).
//!
//! `brush-parser` and the walk over its syntax tree are recursive: a text of 100,000 nested
//! parentheses overflows any thread's stack, and a stack overflow aborts the whole process. So
//! before the parser sees a text, [`check_text`] runs a cheap, non-recursive scan and refuses
//! it when it is longer than [`MAX_COMMAND_BYTES`], nests deeper than [`MAX_NESTING`] or holds
//! more than [`MAX_HEREDOCS`] here-documents. The scan over-counts on purpose (brackets inside
//! quotes count too), so a text that passes can never nest deeper than the limit when the
//! parser or a re-parse of an `sh -c` script reads it.
//!
//! Texts that pass then run on a dedicated thread ([`run_bounded`]) with a stack of
//! [`PARSER_STACK_BYTES`] (measured against the worst inputs under the limits, see the tests)
//! and a time budget of [`PARSE_BUDGET`]: past the budget the caller stops waiting and the text
//! counts as unparsable. At most [`MAX_LIVE_PARSERS`] such threads may be alive at once, so
//! even a parser bug that loops cannot pile up threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The longest command text analysed (64 KiB); longer text is unparsable.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// The longest command part of a permission rule (4 KiB).
pub const MAX_RULE_BYTES: usize = 4 * 1024;
/// The deepest nesting of brackets, braces, `$(`, compound-command keywords
/// (`if`/`while`/`until`/`for`/`case`/`select`) counted together.
pub const MAX_NESTING: usize = 100;
/// The most here-documents (`<<`) in one text.
pub const MAX_HEREDOCS: usize = 64;
/// The stack of a parser thread.
pub const PARSER_STACK_BYTES: usize = 64 * 1024 * 1024;
/// How long one analysis may take before the text counts as unparsable.
pub const PARSE_BUDGET: Duration = Duration::from_secs(2);
/// How many parser threads may run at once (a thread past its budget still counts until it ends).
pub const MAX_LIVE_PARSERS: usize = 32;

static LIVE_PARSERS: AtomicUsize = AtomicUsize::new(0);

/// Why a text is refused before parsing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    #[error("text is {len} bytes, more than the limit of {limit}")]
    TooLong { len: usize, limit: usize },
    #[error("text nests deeper than {MAX_NESTING} levels")]
    TooDeep,
    #[error("text has more than {MAX_HEREDOCS} here-documents")]
    TooManyHeredocs,
    #[error("analysis took longer than {} ms", PARSE_BUDGET.as_millis())]
    OverBudget,
    #[error("too many analyses are running at once")]
    Busy,
    #[error("the analysis failed")]
    Failed,
}

const OPENING_KEYWORDS: [&str; 6] = ["if", "while", "until", "for", "case", "select"];
const CLOSING_KEYWORDS: [&str; 3] = ["fi", "done", "esac"];
/// Words after which another command starts.
const COMMAND_KEYWORDS: [&str; 11] = [
    "if", "while", "until", "then", "do", "else", "elif", "time", "fi", "done", "esac",
];

/// The non-recursive scan: length, nesting and here-document count.
pub fn check_text(text: &str, max_bytes: usize) -> Result<(), BoundsError> {
    if text.len() > max_bytes {
        return Err(BoundsError::TooLong {
            len: text.len(),
            limit: max_bytes,
        });
    }
    let bytes = text.as_bytes();
    let mut depth: usize = 0;
    let mut bangs = 0;
    let mut heredocs = 0;
    // Whether the next word stands where a command starts (keywords count only there).
    let mut command_start = true;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'(' | b'{' | b'[' => {
                depth += 1;
                command_start = true;
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            b';' | b'&' | b'|' | b'\n' => command_start = true,
            b'!' if bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()) => {
                bangs += 1;
                if bangs > MAX_NESTING {
                    return Err(BoundsError::TooDeep);
                }
            }
            b'<' if bytes.get(i + 1) == Some(&b'<') && bytes.get(i + 2) != Some(&b'<') => {
                heredocs += 1;
                if heredocs > MAX_HEREDOCS {
                    return Err(BoundsError::TooManyHeredocs);
                }
                command_start = false;
                i += 2;
                continue;
            }
            b if b.is_ascii_alphabetic() => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let word = &text[start..i];
                let was_start = command_start;
                command_start = false;
                if was_start {
                    if OPENING_KEYWORDS.contains(&word) {
                        depth += 1;
                    } else if CLOSING_KEYWORDS.contains(&word) {
                        depth = depth.saturating_sub(1);
                    }
                    command_start = COMMAND_KEYWORDS.contains(&word);
                }
                if depth > MAX_NESTING {
                    return Err(BoundsError::TooDeep);
                }
                continue;
            }
            b' ' | b'\t' => {}
            _ => command_start = false,
        }
        if depth > MAX_NESTING {
            return Err(BoundsError::TooDeep);
        }
        i += 1;
    }
    Ok(())
}

/// Decrements the live-parser count when the parser thread ends, however it ends.
struct LiveGuard;

impl Drop for LiveGuard {
    fn drop(&mut self) {
        LIVE_PARSERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `work` on a dedicated thread with a [`PARSER_STACK_BYTES`] stack and waits at most
/// [`PARSE_BUDGET`] for its answer. A panic in `work` is an error, never the caller's panic.
pub fn run_bounded<T, F>(work: F) -> Result<T, BoundsError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if LIVE_PARSERS.fetch_add(1, Ordering::SeqCst) >= MAX_LIVE_PARSERS {
        LIVE_PARSERS.fetch_sub(1, Ordering::SeqCst);
        return Err(BoundsError::Busy);
    }
    let guard = LiveGuard;
    let (send, receive) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("norma-shell-parser".into())
        .stack_size(PARSER_STACK_BYTES)
        .spawn(move || {
            let _guard = guard;
            // The receiver may be gone (over budget); the answer is then dropped.
            let _ = send.send(work());
        });
    let Ok(thread) = spawned else {
        // The closure (and the guard in it) was dropped by the failed spawn.
        return Err(BoundsError::Busy);
    };
    let answer = receive
        .recv_timeout(PARSE_BUDGET)
        .map_err(|error| match error {
            mpsc::RecvTimeoutError::Timeout => BoundsError::OverBudget,
            mpsc::RecvTimeoutError::Disconnected => BoundsError::Failed,
        });
    if !matches!(answer, Err(BoundsError::OverBudget)) {
        // The thread has answered (or panicked) and is ending: wait for it rather than detach
        // it. A thread over budget is left detached to finish on its own, counted until then.
        let _ = thread.join();
    }
    answer
}
