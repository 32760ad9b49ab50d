//! Bounds: the worst texts under the limits parse on the parser thread's stack; texts over a
//! limit are refused before any parser runs.

use super::bounds::{BoundsError, MAX_HEREDOCS, check_text};
use super::*;

fn nested(open: &str, inner: &str, close: &str, levels: usize) -> String {
    let mut text = String::new();
    for _ in 0..levels {
        text.push_str(open);
    }
    text.push_str(inner);
    for _ in 0..levels {
        text.push_str(close);
    }
    text
}

#[test]
fn the_crashing_rule_of_the_issue_is_refused_by_the_scan() {
    let text = nested("( ", "true", " )", 100_000);
    assert!(matches!(
        check_text(&text, usize::MAX),
        Err(BoundsError::TooDeep)
    ));
    assert!(matches!(
        parse_command(&text),
        ParsedCommand::Unparsable(why) if why.contains("bytes") || why.contains("nests")
    ));
    assert!(parse_rule_words(&text).is_err());
}

#[test]
fn limits_are_exact() {
    let at = nested("(", "true", ")", MAX_NESTING);
    assert!(check_text(&at, MAX_COMMAND_BYTES).is_ok());
    let over = nested("(", "true", ")", MAX_NESTING + 1);
    assert_eq!(
        check_text(&over, MAX_COMMAND_BYTES),
        Err(BoundsError::TooDeep)
    );
    let long = "a".repeat(MAX_COMMAND_BYTES + 1);
    assert!(matches!(
        check_text(&long, MAX_COMMAND_BYTES),
        Err(BoundsError::TooLong { .. })
    ));
    let docs = "cat <<E\nx\nE\n".repeat(MAX_HEREDOCS + 1);
    assert_eq!(
        check_text(&docs, MAX_COMMAND_BYTES),
        Err(BoundsError::TooManyHeredocs)
    );
    let keywords = nested("if true; then ", "true", "; fi", MAX_NESTING + 1);
    assert_eq!(
        check_text(&keywords, MAX_COMMAND_BYTES),
        Err(BoundsError::TooDeep)
    );
    let bangs = format!("{}true", "! ".repeat(MAX_NESTING + 1));
    assert_eq!(
        check_text(&bangs, MAX_COMMAND_BYTES),
        Err(BoundsError::TooDeep)
    );
}

#[test]
fn prose_keywords_do_not_count_as_nesting() {
    let text = format!("echo {}", "for while if case ".repeat(200));
    assert!(check_text(&text, MAX_COMMAND_BYTES).is_ok());
    let text = format!("git commit -m '{}'", "wait for it; ".repeat(50));
    assert!(check_text(&text, MAX_COMMAND_BYTES).is_ok());
}

/// The deepest texts the scan lets through, each nested as deep as allowed and padded toward
/// the size limit: every one parses (or fails cleanly) on the parser thread.
fn worst_inputs() -> Vec<String> {
    let deep = MAX_NESTING - 1;
    let mut inputs = vec![
        nested("(", "rm x", ")", deep),
        nested("{ ", "rm x", "; }", deep / 2),
        nested("echo $(", "rm x", ")", deep),
        nested("\"$(", "rm x", ")\"", deep),
        nested("$((1+", "1", "))", deep / 2),
        nested("${a:-", "x", "}", deep),
        nested("if true; then ", "rm x", "; fi", deep),
        nested("while true; do ", "rm x", "; done", deep),
        nested("case x in x) ", "rm x", ";; esac", deep),
        nested("[[ ( ", "a", " ) ]]", 1) + &nested("(", "x", ")", deep - 2),
        format!("[[ {}a ]]", "! ".repeat(MAX_NESTING - 1)),
        format!("{}true", "! ".repeat(MAX_NESTING - 1)),
        nested("sh -c '", "rm x", "'", 1),
        nested("bash -c \"eval ", "rm x", "\"", 1),
    ];
    // Flat but long: lists, pipelines, and-or chains, [[ ]] chains, words, wrappers.
    let fill = |unit: &str| unit.repeat((MAX_COMMAND_BYTES - 64) / unit.len());
    inputs.push(fill("a;"));
    inputs.push(format!("a{}", fill("|a")));
    inputs.push(format!("a{}", fill("&&a")));
    inputs.push(format!("[[ a{} ]]", fill(" && a")));
    inputs.push(format!("echo {}", fill("x ")));
    inputs.push(format!("echo {}", fill("'x'\"y\"")));
    inputs.push(fill("nice "));
    inputs.push(fill("sudo "));
    inputs.push(format!("cat {}", "<<E\nx\nE\n".repeat(MAX_HEREDOCS)));
    inputs.push(fill("`a` "));
    inputs.push(fill("$(a) "));
    inputs.push(fill("x=$(a) "));
    inputs
}

#[test]
fn worst_inputs_under_the_limits_parse_on_the_parser_thread() {
    for text in worst_inputs() {
        assert!(
            check_text(&text, MAX_COMMAND_BYTES).is_ok(),
            "{:?} should be under the limits",
            &text[..text.len().min(60)]
        );
        // Either result is fine; the point is that the parser thread survives and answers
        // within its budget (a stack overflow would abort the test process).
        let result = parse_command(&text);
        assert!(
            !matches!(&result, ParsedCommand::Unparsable(why) if why.contains("took longer")),
            "{:?}: {result:?}",
            &text[..text.len().min(60)]
        );
    }
}

#[test]
fn a_deep_script_inside_sh_c_meets_the_same_limits() {
    let inner = nested("(", "rm x", ")", MAX_NESTING + 1);
    // Quoted, the outer scan counts the brackets too.
    let text = format!("sh -c '{inner}'");
    assert!(matches!(parse_command(&text), ParsedCommand::Unparsable(_)));
}

#[test]
fn rule_words_are_bounded() {
    let long = format!("git {}", "x ".repeat(MAX_RULE_BYTES));
    assert!(parse_rule_words(&long).is_err());
    assert!(parse_rule_words("git status").is_ok());
}
