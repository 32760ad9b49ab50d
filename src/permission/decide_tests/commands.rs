//! Argument rules on `Bash`: what an allow rule covers, what a deny rule sees through, and
//! what stays unknown.

use super::*;

#[test]
fn tricky_commands_are_not_covered_by_an_allow_rule() {
    let git = ["Bash(git status:*)"];
    for command in [
        "git status; rm -rf /",
        "git status && curl x",
        "git status || curl x",
        "git status $(rm -rf /)",
        "git status `rm -rf /`",
        "git status \"$(rm -rf /)\"",
        "git status\nrm -rf /",
        "git status | sh",
        "git status <(rm x)",
        "git status > out.txt",
        "git status >> out.txt",
        "git status &> out.txt",
        "FOO=1 git status",
        "LD_PRELOAD=x.so git status",
        "PATH=/tmp; git status",
        "git statusx",
        "git",
        "$GIT status",
        "g* status",
        "git status & rm x",
        "if true; then rm x; fi; git status",
        "git status; f() { rm x; }",
        "for i in $(rm x); do git status; done",
        "git status ${X:-$(rm x)}",
        "echo 'unterminated",
    ] {
        assert_eq!(bash(&git, &[], command), Verdict::Ask, "{command:?}");
    }
}

#[test]
fn allow_rule_covers_commands_that_only_run_what_it_names() {
    let git = ["Bash(git status:*)"];
    for command in [
        "git status",
        "git status --short",
        "\"git\" status",
        "'git' 'status'",
        "g\\it status",
        "git status 'a;b'",
        "git status \"a && rm x\"",
        "/usr/bin/git status",
        "git status 2>/dev/null",
        "git status > /dev/null 2>&1",
        "git status 2>&1",
        "git status $HOME",
        "git status && git status -s",
        "nohup git status &",
        "timeout 5 git status",
        "time git status",
        "bash -c 'git status; git status -v'",
        "eval 'git status'",
        "git status # ; rm -rf /",
    ] {
        let verdict = bash(&git, &[], command);
        assert!(is_allowed_by_rule(&verdict), "{command:?}: {verdict:?}");
    }
}

#[test]
fn every_part_must_be_covered_but_not_by_the_same_rule() {
    let rules = ["Bash(git status:*)", "Bash(echo:*)", "Bash(cat)"];
    let verdict = bash(&rules, &[], "git status | cat && echo done");
    match verdict {
        Verdict::Allow(reason) => {
            assert_eq!(reason.stage, Stage::Allowed);
            let rule = reason.rule.expect("rule named");
            assert!(rule.contains("Bash(git status:*)") && rule.contains("Bash(cat)"));
        }
        other => panic!("not allowed: {other:?}"),
    }
    // Exact rules match the whole command only.
    assert_eq!(bash(&rules, &[], "cat /etc/shadow"), Verdict::Ask);
}

#[test]
fn redirection_to_a_file_is_never_covered() {
    let echo = ["Bash(echo:*)"];
    assert_eq!(bash(&echo, &[], "echo ok > /etc/passwd"), Verdict::Ask);
    assert_eq!(bash(&echo, &[], "{ echo ok; } > /etc/passwd"), Verdict::Ask);
    assert_eq!(bash(&echo, &[], "echo ok >& out"), Verdict::Ask);
    assert!(is_allowed_by_rule(&bash(&echo, &[], "echo ok > /dev/null")));
    assert!(is_allowed_by_rule(&bash(&echo, &[], "echo ok >&2")));
}

#[test]
fn deny_rule_sees_through_wrapping() {
    let rm = ["Bash(rm:*)"];
    for command in [
        "git status; rm -rf /",
        "git status $(rm -rf /)",
        "echo `rm -rf /`",
        "echo \"$(rm -rf /)\"",
        "echo ok\nrm -rf /",
        "bash -c \"rm -rf x\"",
        "sh -ec 'rm -rf x'",
        "bash -o pipefail -c 'rm x'",
        "env -i FOO=1 rm x",
        "env -u HOME -- rm x",
        "env -S 'rm -rf x'",
        "timeout 5 rm x",
        "timeout -s KILL 5 rm x",
        "nohup rm x &",
        "xargs -0 rm",
        "find . -print0 | xargs -0 -n 1 rm -f",
        "xargs -I{} rm {}",
        "eval \"rm x\"",
        "eval rm x",
        "nice -n 5 rm x",
        "stdbuf -oL rm x",
        "command rm x",
        "exec rm x",
        "builtin eval rm x",
        "( rm x )",
        "{ rm x; }",
        "cat <<EOF\n$(rm x)\nEOF",
        "cat <<< \"$(rm x)\"",
        "diff <(rm x) y",
        "echo $(( $(rm x) + 1 ))",
        "if true; then rm x; fi",
        "while false; do rm x; done",
        "case a in a) rm x;; esac",
        "f() { rm x; }",
        "/bin/rm -rf x",
        "\"/bin/rm\" x",
        "r\\m x",
        "find . -name '*.o' -exec rm {} \\;",
        "$CMD -rf x",
        "$(echo rm) x",
        "trap 'rm x' EXIT",
        "alias ls='rm x'",
        "sudo -u root rm x",
        "sudo FOO=1 rm x",
        "coproc rm x",
        "! rm x",
        "[[ $(rm x) ]]",
        "a=$(rm x) ls",
        "exec 3>$(rm x)",
        "env $X",
        "sh -c \"$SCRIPT\"",
        "echo ${X:-$(rm x)}",
        "echo 'unterminated",
        "rm",
    ] {
        let verdict = bash(&[], &rm, command);
        assert!(is_denied_by_rule(&verdict), "{command:?}: {verdict:?}");
    }
}

#[test]
fn deny_rule_leaves_other_commands_alone() {
    let rm = ["Bash(rm:*)"];
    for command in [
        "echo rm",
        "echo 'rm -rf x'",
        "git rm x",
        "rmdir x",
        "cat <<'EOF'\n$(rm x)\nEOF",
        "cat <<EOF\nrm x\nEOF",
        "sh script.sh",
        "echo $HOME",
        "trap - EXIT",
        "alias",
    ] {
        let verdict = bash(&[], &rm, command);
        assert_eq!(stage(&verdict), Some(Stage::ModeBypass), "{command:?}");
    }
}

#[test]
fn deny_rule_with_dynamic_arguments_is_conservative() {
    let push = ["Bash(git push:*)"];
    assert!(is_denied_by_rule(&bash(&[], &push, "git $ACTION origin")));
    assert!(is_denied_by_rule(&bash(&[], &push, "git push --force")));
    assert_eq!(
        stage(&bash(&[], &push, "git pull")),
        Some(Stage::ModeBypass)
    );
    let exact = ["Bash(rm -rf /)"];
    assert!(is_denied_by_rule(&bash(&[], &exact, "rm -rf $X")));
    assert!(is_denied_by_rule(&bash(&[], &exact, "rm -rf / $EMPTY")));
    assert_eq!(
        stage(&bash(&[], &exact, "rm -rf /tmp/x")),
        Some(Stage::ModeBypass)
    );
}

#[test]
fn wrappers_are_judged_by_what_they_run() {
    let rm = ["Bash(rm:*)"];
    assert!(is_allowed_by_rule(&bash(&rm, &[], "timeout 5 rm x")));
    assert!(is_allowed_by_rule(&bash(&rm, &[], "bash -c 'rm x'")));
    // env assignments change what the program does: never covered.
    assert_eq!(bash(&rm, &[], "env -i FOO=1 rm x"), Verdict::Ask);
    // The wrapper itself can still be denied.
    assert!(is_denied_by_rule(&bash(
        &[],
        &["Bash(timeout:*)"],
        "timeout 5 ls"
    )));
    assert!(is_denied_by_rule(&bash(
        &[],
        &["Bash(bash:*)"],
        "bash -c ls"
    )));
}

#[test]
fn missing_subject_field_is_unknown() {
    let facts = bash_facts();
    let deny = run(
        PermissionMode::Bypass,
        &facts,
        &[],
        &["Bash(rm:*)"],
        json!({}),
    );
    assert!(is_denied_by_rule(&deny));
    let allow = run(
        PermissionMode::Default,
        &facts,
        &["Bash(ls:*)"],
        &[],
        json!({ "command": 5 }),
    );
    assert_eq!(allow, Verdict::Ask);
    // A bare-name rule does not look at the input.
    let named = run(PermissionMode::Default, &facts, &["Bash"], &[], json!({}));
    assert!(is_allowed_by_rule(&named));
}
