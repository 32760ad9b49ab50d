//! Rule syntax tests: valid forms, every malformed form is an error naming the rule, and
//! subject checks.

use super::*;

#[test]
fn valid_rules() {
    for text in [
        "*",
        "Bash",
        "mcp__github__get_issue",
        "Bash(git status:*)",
        "Bash(git commit -m 'x y':*)",
        "Bash(ls)",
        "Bash(echo 'a(b)':*)",
        "Read(src/**)",
        "Edit(docs/*.md)",
        "WebFetch(domain:docs.rs)",
        "WebFetch(domain:*.example.com)",
        "WebFetch(domain:127.0.0.1)",
        "Custom(anything)",
        "  Bash  ",
    ] {
        let rule = Rule::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(rule.as_str(), text.trim());
        assert_eq!(text.trim().parse::<Rule>().expect("FromStr"), rule);
    }
    let rule = Rule::parse("Bash(git status:*)").expect("rule");
    assert_eq!(rule.tool(), "Bash");
    assert!(rule.has_spec() && rule.names_tool("Bash") && !rule.names_tool("Read"));
    assert!(Rule::parse("*").expect("rule").names_tool("anything"));
    assert_eq!(rule.to_string(), "Bash(git status:*)");
}

#[test]
fn mcp_namespace_globs_name_every_tool_of_the_server() {
    let rule = Rule::parse("mcp__github__*").expect("rule");
    assert!(rule.names_tool("mcp__github__get_issue"));
    assert!(rule.names_tool("mcp__github__create_issue"));
    assert!(!rule.names_tool("mcp__gitlab__get_issue"));
    assert!(!rule.names_tool("mcp__github__"));
    assert!(!rule.names_tool("Bash"));
    for bad in [
        "mcp__github__*(x)",
        "mcp____*",
        "mcp__a__b__*",
        "mcp__git*__*",
        "Bash*",
        "mcp__*",
    ] {
        assert!(Rule::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn malformed_rules_are_errors_naming_the_rule() {
    for text in [
        "Bash(",
        "Bash(git status:*",
        "(x)",
        "Read(",
        "WebFetch(domain:)",
        "WebFetch(domain:*.)",
        "WebFetch(domain:a*b.com)",
        "WebFetch(domain:*.127.0.0.1)",
        "WebFetch(docs.rs)",
        "Bash(git status:*)trailing",
        "Bash()",
        "Bash( )",
        "Read({a,b)",
        "Read(/etc/**)",
        "Read(src:*)",
        "Bash(domain:x.y)",
        "Bash(:*)",
        "Bash(git $X:*)",
        "Bash(a; b)",
        "*(x)",
        "Ba sh",
        "Bash)",
        "Custom({a; b)",
    ] {
        let err = Rule::parse(text).expect_err(text);
        assert!(err.to_string().contains(text), "{text}: {err}");
    }
    assert_eq!(Rule::parse("   ").expect_err("empty"), RuleError::Empty);
    assert!(matches!(
        Rule::parse("Read([)").expect_err("glob"),
        RuleError::BadGlob { .. }
    ));
}

#[test]
fn rule_set_reports_the_first_bad_rule() {
    let ok = vec!["Bash".to_owned()];
    let bad = vec!["Read".to_owned(), "Read(".to_owned()];
    assert!(RuleSet::parse(&ok, &ok).is_ok());
    let err = RuleSet::parse(&ok, &bad).expect_err("bad deny");
    assert!(err.to_string().contains("`Read(`"));
    assert!(RuleSet::parse(&bad, &ok).is_err());
}

#[test]
fn check_tool_rejects_rules_that_cannot_apply() {
    let set = RuleSet::parse(
        &["Deploy(prod)".to_owned(), "Shell(rm:*)".to_owned()],
        &["Fetch(domain:x.y)".to_owned()],
    )
    .expect("parse");
    assert!(set.check_tool("Deploy", &Subject::Name).is_err());
    assert!(
        set.check_tool("Deploy", &Subject::Path { field: "p" })
            .is_ok()
    );
    assert!(
        set.check_tool("Shell", &Subject::Command { field: "c" })
            .is_ok()
    );
    assert!(
        set.check_tool("Shell", &Subject::Path { field: "p" })
            .is_err()
    );
    assert!(
        set.check_tool("Fetch", &Subject::Url { field: "u" })
            .is_ok()
    );
    assert!(
        set.check_tool("Fetch", &Subject::Command { field: "c" })
            .is_err()
    );
    assert!(set.check_tool("Other", &Subject::Name).is_ok());
    let glob_only = RuleSet::parse(&["Pty(a;b)".to_owned()], &[]).expect("parse");
    assert!(matches!(
        glob_only.check_tool("Pty", &Subject::Command { field: "c" }),
        Err(RuleError::BadCommand { .. })
    ));
}

#[test]
fn path_normalisation() {
    let ws = Path::new("/w/s");
    assert_eq!(normalize_path(".//a/./b", None).as_deref(), Some("a/b"));
    assert_eq!(normalize_path("a/../b", None).as_deref(), Some("b"));
    assert_eq!(normalize_path("a/..", None).as_deref(), Some("."));
    assert_eq!(normalize_path("../b", None), None);
    assert_eq!(
        normalize_path("/w/s/a//b", Some(ws)).as_deref(),
        Some("a/b")
    );
    assert_eq!(normalize_path("/w/s/../t/a", Some(ws)), None);
    assert_eq!(normalize_path("/w/st/a", Some(ws)), None);
    assert_eq!(normalize_path("/w/s/a", None), None);
    assert_eq!(
        normalize_path("/../../w/s/a", Some(ws)).as_deref(),
        Some("a")
    );
}

#[test]
fn url_hosts() {
    assert_eq!(url_host("https://Docs.RS./x").as_deref(), Some("docs.rs"));
    assert_eq!(
        url_host("https://docs.rs@evil.example/").as_deref(),
        Some("evil.example")
    );
    assert_eq!(url_host("http://[::1]:80/").as_deref(), Some("[::1]"));
    assert_eq!(url_host("nope"), None);
    assert_eq!(url_host("file:///etc/passwd"), None);
}
