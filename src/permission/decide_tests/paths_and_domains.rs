//! Path rules (normalised, confined to the workspace) and domain rules, and argument rules
//! that never match another tool's subject.

use super::*;

fn path_decision(
    mode: PermissionMode,
    allow: &[&str],
    deny: &[&str],
    path: &str,
    workspace: Option<&std::path::Path>,
) -> Verdict {
    let rules = RuleSet::parse(&strings(allow), &strings(deny)).expect("rules parse");
    let facts = path_facts("Edit", false);
    let input = json!({ "file_path": path });
    decide(&DecisionInput {
        mode,
        rules: &rules,
        grants: &[],
        tool: &facts,
        input: &input,
        workspace,
    })
}

#[test]
fn path_rules_normalise_and_confine() {
    let ws = std::path::Path::new("/srv/ws/s1");
    let allow = ["Edit(docs/**)"];
    let d = PermissionMode::Default;
    for path in [
        "docs/a.md",
        "./docs/a.md",
        "docs//x/y.md",
        "/srv/ws/s1/docs/a.md",
        "src/../docs/a",
    ] {
        assert!(
            is_allowed_by_rule(&path_decision(d, &allow, &[], path, Some(ws))),
            "{path}"
        );
    }
    for path in [
        "src/a.rs",
        "docs",
        "docs/../src/a.rs",
        "../s1/docs/a.md",
        "/srv/ws/s2/docs/a.md",
        "/srv/ws/s1/../s1x/docs/a.md",
        "/etc/passwd",
    ] {
        assert_eq!(
            path_decision(d, &allow, &[], path, Some(ws)),
            Verdict::Ask,
            "{path}"
        );
    }
    // Without a workspace, absolute paths are never allowed by a rule.
    assert_eq!(
        path_decision(d, &allow, &[], "/srv/ws/s1/docs/a.md", None),
        Verdict::Ask
    );
    // `*` does not cross directories; `**` does.
    assert_eq!(
        path_decision(d, &["Edit(docs/*)"], &[], "docs/x/y.md", Some(ws)),
        Verdict::Ask
    );
    assert!(is_allowed_by_rule(&path_decision(
        d,
        &["Edit(docs/*)"],
        &[],
        "docs/y.md",
        Some(ws)
    )));
}

#[test]
fn escaping_path_matches_every_path_deny_rule() {
    let ws = std::path::Path::new("/srv/ws/s1");
    let deny = ["Edit(secrets/**)"];
    let b = PermissionMode::Bypass;
    for path in ["../x", "a/../../x", "/etc/passwd", "/srv/ws/s1/../other"] {
        assert!(
            is_denied_by_rule(&path_decision(b, &[], &deny, path, Some(ws))),
            "{path}"
        );
    }
    assert!(is_denied_by_rule(&path_decision(
        b,
        &[],
        &deny,
        "/srv/ws/s1/secrets/k",
        Some(ws)
    )));
    assert_eq!(
        stage(&path_decision(
            b,
            &[],
            &deny,
            "/srv/ws/s1/public/k",
            Some(ws)
        )),
        Some(Stage::ModeBypass)
    );
}

fn fetch(allow: &[&str], deny: &[&str], url: &str) -> Verdict {
    let facts = ToolFacts {
        rules_as: None,
        subject_text: None,
        name: "WebFetch",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        subject: Subject::Url { field: "url" },
    };
    let mode = if deny.is_empty() {
        PermissionMode::Default
    } else {
        PermissionMode::Bypass
    };
    run(mode, &facts, allow, deny, json!({ "url": url }))
}

#[test]
fn domain_rules() {
    let exact = ["WebFetch(domain:docs.rs)"];
    assert!(is_allowed_by_rule(&fetch(
        &exact,
        &[],
        "https://DOCS.rs./serde"
    )));
    assert!(is_allowed_by_rule(&fetch(
        &exact,
        &[],
        "https://user:pw@docs.rs/"
    )));
    assert!(is_allowed_by_rule(&fetch(
        &exact,
        &[],
        "http://docs.rs:8080/x"
    )));
    for url in [
        "https://api.docs.rs/",
        "https://docs.rs.evil.example/",
        "https://docs.rs@evil.example/",
        "https://evil.example/?u=https://docs.rs/",
        "not a url",
        "file:///etc/passwd",
    ] {
        assert_eq!(fetch(&exact, &[], url), Verdict::Ask, "{url}");
    }
    let sub = ["WebFetch(domain:*.docs.rs)"];
    assert!(is_allowed_by_rule(&fetch(
        &sub,
        &[],
        "https://api.docs.rs/"
    )));
    assert_eq!(fetch(&sub, &[], "https://docs.rs/"), Verdict::Ask);
    assert_eq!(fetch(&sub, &[], "https://xdocs.rs/"), Verdict::Ask);
    let deny = ["WebFetch(domain:evil.example)"];
    assert!(is_denied_by_rule(&fetch(&[], &deny, "not a url")));
    assert!(is_denied_by_rule(&fetch(
        &[],
        &deny,
        "https://a@EVIL.example/"
    )));
    assert_eq!(
        stage(&fetch(&[], &deny, "https://ok.example/")),
        Some(Stage::ModeBypass)
    );
}

#[test]
fn argument_rules_never_match_other_subjects() {
    let todo = ToolFacts {
        rules_as: None,
        subject_text: None,
        name: "Todo",
        read_only: false,
        self_decision: SelfDecision::None,
        file_edit: false,
        subject: Subject::Name,
    };
    let v = run(PermissionMode::Bypass, &todo, &[], &["Todo(x)"], json!({}));
    assert_eq!(stage(&v), Some(Stage::ModeBypass));
    let v = run(PermissionMode::Default, &todo, &["Todo(x)"], &[], json!({}));
    assert_eq!(v, Verdict::Ask);
    // A command rule does not match a path tool of the same name.
    let custom = path_facts("Custom", false);
    let v = run(
        PermissionMode::Bypass,
        &custom,
        &[],
        &["Custom(rm:*)"],
        json!({ "file_path": "rm" }),
    );
    assert_eq!(stage(&v), Some(Stage::ModeBypass));
}
