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
