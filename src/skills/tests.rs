use super::*;

fn md(front: &str, body: &str) -> String {
    format!("---\n{front}---\n{body}")
}

#[test]
fn a_skill_md_parses_with_its_tools() {
    let skill = parse_skill_md(
        &md(
            "name: pdf-forms\ndescription: Fill PDF forms.\ntools: [Glob, mcp__pdf__fill]\n",
            "Do this.\n",
        ),
        "content",
    )
    .unwrap();
    assert_eq!(skill.name, "pdf-forms");
    assert_eq!(skill.description, "Fill PDF forms.");
    assert_eq!(skill.tools, ["Glob", "mcp__pdf__fill"]);
    assert_eq!(skill.instructions, "Do this.\n");
    let claude_style = parse_skill_md(
        &md(
            "name: x\ndescription: d\nallowed-tools: Read, Grep Glob\nlicense: MIT\n",
            "",
        ),
        "content",
    )
    .unwrap();
    assert_eq!(claude_style.tools, ["Read", "Grep", "Glob"]);
}

#[test]
fn refusals_carry_stable_reasons() {
    let too_big = md("name: x\ndescription: d\n", &"x".repeat(MAX_SKILL_BYTES));
    let long_description = format!("name: x\ndescription: {}\n", "d".repeat(1025));
    let many_tools = format!(
        "name: x\ndescription: d\ntools: [{}]\n",
        (0..=MAX_TOOLS)
            .map(|i| format!("mcp__s__t{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let cases: Vec<(String, &str)> = vec![
        ("no front matter".into(), reasons::FRONT_MATTER),
        (md("description: d\n", ""), reasons::FRONT_MATTER),
        (md("name: x\n", ""), reasons::FRONT_MATTER),
        (
            md("name: x\ndescription: d\nmodel: y\n", ""),
            reasons::FRONT_MATTER,
        ),
        (
            md(
                "name: x\ndescription: d\ntools: [Glob]\nallowed-tools: Read\n",
                "",
            ),
            reasons::FRONT_MATTER,
        ),
        (
            md("name: x\ndescription: d\ntools: [Glob, Glob]\n", ""),
            reasons::FRONT_MATTER,
        ),
        (md("name: [x]\ndescription: d\n", ""), reasons::FRONT_MATTER),
        (md("name: Bad_Name\ndescription: d\n", ""), reasons::NAME),
        (md("name: -x\ndescription: d\n", ""), reasons::NAME),
        (md("name: a--b\ndescription: d\n", ""), reasons::NAME),
        (
            md(&format!("name: {}\ndescription: d\n", "a".repeat(65)), ""),
            reasons::NAME,
        ),
        (md("name: x\ndescription: \"\"\n", ""), reasons::DESCRIPTION),
        (
            md("name: x\ndescription: \"a\\nb\"\n", ""),
            reasons::DESCRIPTION,
        ),
        (md(&long_description, ""), reasons::DESCRIPTION),
        (
            md("name: x\ndescription: d\ntools: [Deploy]\n", ""),
            reasons::UNKNOWN_TOOL,
        ),
        (
            md("name: x\ndescription: d\ntools: [bash]\n", ""),
            reasons::UNKNOWN_TOOL,
        ),
        (
            md("name: x\ndescription: d\ntools: [Skill]\n", ""),
            reasons::UNKNOWN_TOOL,
        ),
        (
            md("name: x\ndescription: d\ntools: [ExecuteExtraTool]\n", ""),
            reasons::UNKNOWN_TOOL,
        ),
        (
            md("name: x\ndescription: d\ntools: ['*']\n", ""),
            reasons::UNKNOWN_TOOL,
        ),
        (md(&many_tools, ""), reasons::TOO_MANY),
        (too_big, reasons::TOO_LARGE),
    ];
    for (text, reason) in cases {
        let error = parse_skill_md(&text, "content").unwrap_err();
        assert_eq!(error.reason, reason, "{text:.120}: {error}");
        assert_eq!(error.field, "content");
    }
}

#[test]
fn bodies_bound_their_files() {
    let content = md("name: x\ndescription: d\n", "body");
    let file = |path: &str, size: usize| SkillFile {
        path: path.into(),
        content: "x".repeat(size),
    };
    let body = |files: Vec<SkillFile>| NewSkillBody {
        content: content.clone(),
        files,
    };
    assert!(check_body(&body(vec![file("ref/a.md", 10), file("b.txt", 10)])).is_ok());
    let cases = [
        (vec![file("../a", 1)], reasons::FILE_PATH, "files[0].path"),
        (
            vec![file("/etc/passwd", 1)],
            reasons::FILE_PATH,
            "files[0].path",
        ),
        (vec![file("a//b", 1)], reasons::FILE_PATH, "files[0].path"),
        (
            vec![file(".hidden", 1)],
            reasons::FILE_PATH,
            "files[0].path",
        ),
        (
            vec![file("SKILL.md", 1)],
            reasons::FILE_PATH,
            "files[0].path",
        ),
        (vec![file("a b", 1)], reasons::FILE_PATH, "files[0].path"),
        (
            vec![file("a", 1), file("a", 1)],
            reasons::FILE_PATH,
            "files[1].path",
        ),
        (
            vec![file("a", MAX_FILE_BYTES + 1)],
            reasons::TOO_LARGE,
            "files[0].content",
        ),
        (
            (0..=MAX_FILES).map(|i| file(&format!("f{i}"), 1)).collect(),
            reasons::TOO_MANY,
            "files",
        ),
        (
            (0..MAX_FILES)
                .map(|i| file(&format!("f{i}"), MAX_FILE_BYTES))
                .collect(),
            reasons::TOO_LARGE,
            "files",
        ),
    ];
    for (files, reason, field) in cases {
        let error = check_body(&body(files)).unwrap_err();
        assert_eq!(
            (error.reason, error.field.as_str()),
            (reason, field),
            "{error}"
        );
    }
}

#[test]
fn session_skill_lists() {
    assert!(validate_session_skills(&["a".into(), "b-c".into()]).is_ok());
    assert!(validate_session_skills(&["*".into()]).is_ok());
    for (list, field) in [
        (vec!["*", "a"], "skills[0]"),
        (vec!["a", "a"], "skills[1]"),
        (vec!["A"], "skills[0]"),
    ] {
        let list: Vec<String> = list.into_iter().map(str::to_owned).collect();
        assert_eq!(validate_session_skills(&list).unwrap_err().0, field);
    }
    let many: Vec<String> = (0..=MAX_SESSION_SKILLS).map(|i| format!("s{i}")).collect();
    assert_eq!(validate_session_skills(&many).unwrap_err().0, "skills");
}
