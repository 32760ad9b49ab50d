//! Fuzzing the command and rule parsers with proptest (fixed seed, few cases, so it runs in
//! seconds in CI): random bytes, shell-ish token soup, deep nesting, long words and quotes.
//! Whatever the input: no panic, an answer within the parse budget, and a result that is
//! either commands or unparsable.

use super::bounds::PARSE_BUDGET;
use super::*;
use proptest::prelude::*;
use std::time::Instant;

const TOKENS: [&str; 40] = [
    "(", ")", "{", "}", "$(", "`", "'", "\"", "\\", ";", "&&", "||", "|", "&", "\n", "<<EOF\n",
    "EOF\n", "<<<", ">", ">&3", "<(", ">(", "if ", "then ", "fi ", "while ", "do ", "done ",
    "case ", "esac ", "for ", "in ", "sh -c ", "eval ", "sudo ", "env ", "xargs ", "rm ", "$X",
    "*",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(0usize..TOKENS.len(), 0..200)
        .prop_map(|picks| picks.into_iter().map(|i| TOKENS[i]).collect::<String>())
}

fn deep_nesting() -> impl Strategy<Value = String> {
    (0usize..4, 1usize..3000).prop_map(|(kind, depth)| {
        let (open, close) = [("(", ")"), ("$(", ")"), ("{ ", "; }"), ("\"$(", ")\"")][kind];
        format!("{}true{}", open.repeat(depth), close.repeat(depth))
    })
}

fn long_words() -> impl Strategy<Value = String> {
    (
        1usize..70_000,
        prop::sample::select(vec!['a', '\'', '"', '\\', '$', '(']),
    )
        .prop_map(|(len, c)| format!("echo {}", c.to_string().repeat(len)))
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        token_soup(),
        deep_nesting(),
        long_words(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(10),
        ..ProptestConfig::default()
    })]

    #[test]
    fn command_parser_never_panics_and_answers_in_time(text in any_text()) {
        let started = Instant::now();
        let result = parse_command(&text);
        // The budget is enforced by the parser thread; this only checks nothing else blocks.
        prop_assert!(started.elapsed() < PARSE_BUDGET * 3);
        prop_assert!(matches!(result, ParsedCommand::Commands(_) | ParsedCommand::Unparsable(_)));
    }

    #[test]
    fn rule_parser_never_panics(text in any_text()) {
        let _ = parse_rule_words(&text);
        let _ = crate::permission::Rule::parse(&format!("Bash({text}:*)"));
        let _ = crate::permission::Rule::parse(&format!("Read({text})"));
    }
}
