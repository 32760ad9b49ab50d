use super::*;

#[test]
fn denies_destructive_commands_through_wrappers() {
    let denied = [
        "rm -rf /",
        "rm -rf /*",
        "rm -fr ~",
        "rm --recursive --force /",
        "/bin/rm -rf /",
        "sudo rm -rf /",
        "echo hi; rm -rf / ",
        "true && rm -Rf $HOME",
        "ls | xargs rm -rf /",
        "bash -c 'rm -rf /'",
        "sh -c \"echo x; rm -rf /\"",
        "eval rm -rf /",
        "env FOO=1 nohup timeout 5 rm -rf /",
        "echo $(rm -rf /)",
        "echo \"$(rm -rf /)\"",
        "echo `rm -rf /`",
        "(rm -rf /)",
        "mkfs.ext4 /dev/sda1",
        "dd if=/dev/zero of=/dev/sda",
        "cat x > /dev/sda",
        ":(){ :|:& };:",
        "shutdown -h now",
        "chmod -R 777 /",
        "echo 'unterminated",
    ];
    for cmd in denied {
        assert!(deny_reason(cmd).is_some(), "should deny {cmd:?}");
    }
}

#[test]
fn allows_ordinary_commands() {
    let allowed = [
        "ls -la",
        "rm -rf build/",
        "rm -rf ./target",
        "rm file.txt",
        "echo 'rm -rf /'",
        "git status && cargo test",
        "dd if=/dev/zero of=/dev/null count=1",
        "grep -r foo . # rm -rf / in a comment is still text",
    ];
    for cmd in allowed {
        assert_eq!(deny_reason(cmd), None, "should allow {cmd:?}");
    }
}

#[test]
fn the_shell_parser_layer_sees_what_the_splitter_cannot() {
    for command in [
        "find . -exec rm -rf / \\;",
        "cat <(rm -rf /)",
        "echo 'unterminated",
    ] {
        assert!(deny_reason(command).is_some(), "should deny {command:?}");
    }
    for command in [
        "bash -c 'echo hi'",
        "find . -name '*.rs' -exec wc -l {} \\;",
    ] {
        assert_eq!(deny_reason(command), None, "should allow {command:?}");
    }
}

#[test]
fn literal_text_is_not_a_command() {
    for command in [
        "echo '$(rm -rf ~)'",
        "echo '$(rm -rf /)'",
        "cat <<'EOF'\n$(rm -rf /)\nEOF",
        "cat <<\"EOF\"\nrm -rf /\nEOF\necho done",
        "cat <<-'EOF'\n\t$(rm -rf /)\n\tEOF",
    ] {
        assert_eq!(deny_reason(command), None, "should allow {command:?}");
    }
    for command in [
        "echo \"$(rm -rf /)\"",
        "cat <<EOF\n$(rm -rf /)\nEOF",
        "cat <<'EOF'\nx\nEOF\nrm -rf /",
    ] {
        assert!(deny_reason(command).is_some(), "should deny {command:?}");
    }
}

#[test]
fn text_over_the_parser_limits_is_refused_without_recursing() {
    let deep = format!("echo {}x{}", "\"$(".repeat(50_000), ")\"".repeat(50_000));
    assert!(deny_reason(&deep).is_some());
    let nested = format!("{}true{}", "( ".repeat(100_000), " )".repeat(100_000));
    assert!(deny_reason(&nested).is_some());
}
