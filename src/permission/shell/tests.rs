//! Shell analysis tests: which simple commands a text runs, and how their words look.

use super::*;

fn commands(text: &str) -> Vec<SimpleCommand> {
    match parse_command(text) {
        ParsedCommand::Commands(c) => c,
        ParsedCommand::Unparsable(why) => panic!("{text:?} unparsable: {why}"),
    }
}

/// The words of every non-wrapper command, `?` for a dynamic word.
fn programs(text: &str) -> Vec<String> {
    commands(text)
        .iter()
        .filter(|c| !c.wrapper)
        .map(|c| {
            c.words
                .iter()
                .map(|w| w.literal().unwrap_or("?").to_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn separators_split_commands() {
    assert_eq!(programs("git status; rm -rf /"), ["git status", "rm -rf /"]);
    assert_eq!(programs("git status && curl x"), ["git status", "curl x"]);
    assert_eq!(programs("a || b | c & d"), ["a", "b", "c", "d"]);
    assert_eq!(programs("git status\nrm -rf /"), ["git status", "rm -rf /"]);
    assert_eq!(programs("( rm x )"), ["rm x"]);
    assert_eq!(programs("{ rm x; }"), ["rm x"]);
    assert_eq!(
        programs("if a; then b; elif c; then d; else e; fi"),
        ["a", "b", "c", "d", "e"]
    );
}

#[test]
fn quotes_and_escapes_are_removed_by_the_parser() {
    assert_eq!(programs("\"git\" status"), ["git status"]);
    assert_eq!(programs("git status 'a;b'"), ["git status a;b"]);
    assert_eq!(programs("echo \"a && b\" c\\ d"), ["echo a && b c d"]);
    assert_eq!(programs("echo $'x'"), ["echo x"]);
    assert_eq!(programs("ec\\\nho x"), ["echo x"]);
}

#[test]
fn substitutions_are_walked_and_make_words_dynamic() {
    assert_eq!(
        programs("git status $(rm -rf /)"),
        ["rm -rf /", "git status ?"]
    );
    assert_eq!(
        programs("git status `rm -rf /`"),
        ["rm -rf /", "git status ?"]
    );
    assert_eq!(
        programs("echo `echo \\`rm x\\``"),
        ["rm x", "echo ?", "echo ?"]
    );
    assert_eq!(
        programs("diff <(ls a) >(rm b)"),
        ["ls a", "rm b", "diff ? ?"]
    );
    assert_eq!(programs("X=$(rm x)"), ["rm x", ""]);
    assert_eq!(programs("echo $HOME ~ *.rs"), ["echo ? ? ?"]);
    assert_eq!(programs("$CMD -rf x"), ["? -rf x"]);
}

#[test]
fn heredocs() {
    assert_eq!(programs("cat <<EOF\n$(rm x)\nEOF"), ["rm x", "cat"]);
    assert_eq!(programs("cat <<'EOF'\n$(rm x)\nEOF"), ["cat"]);
    assert_eq!(
        programs("cat <<EOF\nrm x; ls\nEOF\necho done"),
        ["cat", "echo done"]
    );
}

#[test]
fn wrappers_are_looked_through() {
    assert_eq!(programs("bash -c \"rm -rf x\""), ["rm -rf x"]);
    assert_eq!(programs("sh -c 'a; b' name arg"), ["a", "b"]);
    assert_eq!(programs("env -i FOO=1 rm x"), ["rm x"]);
    assert_eq!(programs("env -S 'rm -rf' x"), ["rm -rf x"]);
    assert_eq!(programs("timeout 5 rm x"), ["rm x"]);
    assert_eq!(programs("timeout --signal=KILL -k 2 5s rm x"), ["rm x"]);
    assert_eq!(programs("nohup rm x &"), ["rm x"]);
    assert_eq!(programs("xargs -0 rm"), ["rm ?"]);
    assert_eq!(programs("xargs"), ["echo ?"]);
    assert_eq!(programs("xargs -I % mv % %.bak"), ["mv ? ?"]);
    assert_eq!(programs("eval \"rm x\""), ["rm x"]);
    assert_eq!(
        programs("nice -n 5 time -p stdbuf -oL command exec rm x"),
        ["rm x"]
    );
    assert_eq!(
        programs("find . -exec rm {} \\; -print"),
        ["find . -exec rm {} ; -print", "rm ?"]
    );
    assert_eq!(programs("sh run.sh"), ["sh run.sh"]);
    let all = commands("timeout 5 rm x");
    assert!(all[0].wrapper && all[0].program() == Some("timeout"));
    assert!(!all[1].wrapper && all[1].program() == Some("rm"));
}

#[test]
fn env_changes_are_flagged() {
    let c = commands("FOO=1 git status");
    assert!(c[0].sets_env && c[0].program() == Some("git"));
    let c = commands("env A=1 git status");
    assert!(!c[1].wrapper && c[1].sets_env);
    assert!(!commands("git status")[0].sets_env);
}

#[test]
fn redirections() {
    let writes = |t: &str| commands(t).iter().any(|c| c.writes_files);
    assert!(writes("echo ok > /etc/passwd"));
    assert!(writes("echo ok >> log"));
    assert!(writes("echo ok &> log"));
    assert!(writes("echo ok >| log"));
    assert!(writes("echo ok > $FILE"));
    assert!(writes("{ echo a; echo b; } > log"));
    assert!(writes("timeout 5 echo > log"));
    assert!(!writes("echo ok > /dev/null 2>&1"));
    assert!(!writes("echo ok >&2"));
    assert!(!writes("cat < in"));
    let c = commands("{ echo a; echo b; } > log");
    assert!(c.iter().all(|c| c.writes_files));
}

#[test]
fn program_is_compared_by_basename() {
    assert_eq!(commands("/bin/rm x")[0].program(), Some("rm"));
    assert_eq!(basename("/usr/bin/git"), "git");
    assert_eq!(basename("git"), "git");
    assert_eq!(basename("/"), "/");
    assert!(
        commands("$(which rm) x")
            .iter()
            .any(|c| c.has_dynamic_program())
    );
}

#[test]
fn unparsable_text() {
    for text in [
        "echo 'unterminated",
        "echo $(",
        "if true; then",
        "echo ${X:-$(rm x)}",
    ] {
        assert!(
            matches!(parse_command(text), ParsedCommand::Unparsable(_)),
            "{text:?}"
        );
    }
    // An unparsable script inside `sh -c` makes the whole text unparsable.
    assert!(matches!(
        parse_command("sh -c 'echo \"x'"),
        ParsedCommand::Unparsable(_)
    ));
}

#[test]
fn nesting_is_bounded() {
    let nest = |levels: usize| {
        let mut text = "rm x".to_owned();
        for _ in 0..levels {
            text = format!("echo $({text})");
        }
        text
    };
    assert!(matches!(
        parse_command(&nest(MAX_SCRIPT_DEPTH + 2)),
        ParsedCommand::Unparsable(_)
    ));
    assert!(programs(&nest(3)).contains(&"rm x".to_owned()));
    let mut quoted = "rm x".to_owned();
    for _ in 0..3 {
        quoted = format!("eval '{}'", quoted.replace('\'', r"'\''"));
    }
    assert!(programs(&quoted).contains(&"rm x".to_owned()));
}

#[test]
fn rule_words() {
    assert_eq!(parse_rule_words("git status").unwrap(), ["git", "status"]);
    assert_eq!(
        parse_rule_words("git commit -m 'a b'").unwrap(),
        ["git", "commit", "-m", "a b"]
    );
    for bad in [
        "", "a; b", "a | b", "X=1 a", "a > f", "a $X", "a $(b)", "( a )",
    ] {
        assert!(parse_rule_words(bad).is_err(), "{bad:?}");
    }
}
