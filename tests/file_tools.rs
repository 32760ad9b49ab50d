//! File tools against a real workspace: an escape corpus (every case must fail with a code and
//! never read or modify a sentinel outside the workspace), a symlink swapped in during calls,
//! Edit/MultiEdit atomicity and uniqueness, and Grep/Glob against a reference on a generated tree.

use norma::ids::{SessionId, TenantId};
use norma::tools::builtin::file_tools;
use norma::tools::{DynTool, ToolContext, ToolError, ToolOutput};
use norma::workspace::Workspace;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

struct Fixture {
    _tmp: tempfile::TempDir,
    ws_root: PathBuf,
    outside: PathBuf,
    sentinel: PathBuf,
    sentinel_text: String,
    tools: Vec<DynTool>,
    ctx: ToolContext,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("outside dir");
        let sentinel_text = format!("SENTINEL-{}", uuid::Uuid::new_v4().simple());
        let sentinel = outside.join("secret.txt");
        std::fs::write(&sentinel, &sentinel_text).expect("sentinel");
        std::fs::write(outside.join("notebook.ipynb"), notebook(&sentinel_text)).expect("nb");
        let ws = Workspace::create(
            &tmp.path().join("workspaces"),
            &TenantId::new("acme"),
            &SessionId::generate(),
        )
        .expect("workspace");
        let root = ws.root().to_path_buf();
        std::fs::write(root.join("inside.txt"), "hello inside\n").expect("inside");
        std::fs::write(root.join("nb.ipynb"), notebook("inside cell")).expect("nb");
        symlink("/etc/passwd", root.join("passwd_link")).expect("link");
        symlink(&sentinel, root.join("sentinel_link")).expect("link");
        symlink("../../../outside/secret.txt", root.join("relative_link")).expect("link");
        symlink(&outside, root.join("outside_dir")).expect("link");
        symlink("/etc", root.join("etc_dir")).expect("link");
        symlink(outside.join("notebook.ipynb"), root.join("nb_link.ipynb")).expect("link");
        std::fs::hard_link(&sentinel, root.join("hard_link.txt")).expect("hard link");
        std::fs::create_dir(root.join("sub")).expect("sub");
        symlink("../../../outside", root.join("sub/up")).expect("link");
        let mut ctx = ToolContext::for_tests();
        ctx.workspace = Some(root.clone());
        Self {
            _tmp: tmp,
            ws_root: root,
            outside,
            sentinel,
            sentinel_text,
            tools: file_tools(),
            ctx,
        }
    }

    fn tool(&self, name: &str) -> &DynTool {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("tool {name}"))
    }

    async fn call(&self, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
        self.tool(name).call(input, &self.ctx).await
    }

    fn assert_sentinel_intact(&self) {
        assert_eq!(
            std::fs::read_to_string(&self.sentinel).expect("sentinel"),
            self.sentinel_text
        );
        let nb = std::fs::read_to_string(self.outside.join("notebook.ipynb")).expect("nb");
        assert_eq!(nb, notebook(&self.sentinel_text));
        let names: BTreeSet<String> = std::fs::read_dir(&self.outside)
            .expect("outside")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            BTreeSet::from(["notebook.ipynb".to_string(), "secret.txt".to_string()])
        );
    }
}

fn notebook(source: &str) -> String {
    serde_json::to_string_pretty(&json!({
        "cells": [{"id": "c1", "cell_type": "code", "metadata": {}, "source": [source], "outputs": [], "execution_count": null}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5
    }))
    .expect("json")
}

fn escape_corpus(long: &str, long_component: &str) -> Vec<(&'static str, Value)> {
    let mut cases: Vec<(&'static str, Value)> = Vec::new();
    let paths = [
        "../outside/secret.txt",
        "../../outside/secret.txt",
        "../../../outside/secret.txt",
        "../../etc/passwd",
        "/etc/passwd",
        "/proc/self/root/etc/passwd",
        "/proc/self/cwd/../outside/secret.txt",
        "passwd_link",
        "sentinel_link",
        "relative_link",
        "hard_link.txt",
        "outside_dir/secret.txt",
        "etc_dir/passwd",
        "sub/up/secret.txt",
        "sub/../../outside/secret.txt",
        "inside.txt\0/../../outside/secret.txt",
        "..\\..\\outside\\secret.txt",
        "..\\..\\..\\etc\\passwd",
    ];
    for p in paths {
        cases.push(("Read", json!({"file_path": p})));
    }
    cases.push(("Read", json!({"file_path": long})));
    cases.push(("Read", json!({"file_path": long_component})));
    for p in [
        "../outside/new.txt",
        "/tmp/norma-escape.txt",
        "outside_dir/new.txt",
        "sentinel_link",
        "relative_link",
        "hard_link.txt",
        "sub/up/new.txt",
        "/proc/self/root/tmp/norma-escape.txt",
        "a\0b",
        "..\\outside\\new.txt",
    ] {
        cases.push(("Write", json!({"file_path": p, "content": "pwned"})));
    }
    cases.push(("Write", json!({"file_path": long, "content": "x"})));
    for p in [
        "sentinel_link",
        "hard_link.txt",
        "outside_dir/secret.txt",
        "../outside/secret.txt",
        "/etc/passwd",
    ] {
        cases.push((
            "Edit",
            json!({"file_path": p, "old_string": "SENTINEL", "new_string": "PWNED"}),
        ));
    }
    for p in ["sentinel_link", "hard_link.txt", "sub/up/secret.txt"] {
        cases.push((
            "MultiEdit",
            json!({"file_path": p, "edits": [{"old_string": "SENTINEL", "new_string": "PWNED"}]}),
        ));
    }
    for p in [
        "nb_link.ipynb",
        "../outside/notebook.ipynb",
        "outside_dir/notebook.ipynb",
    ] {
        cases.push((
            "NotebookEdit",
            json!({"notebook_path": p, "cell_index": 0, "new_source": "pwned"}),
        ));
    }
    for p in [
        "..",
        "/etc",
        "outside_dir",
        "etc_dir",
        "sub/up",
        "/proc/self/root",
        "inside.txt",
    ] {
        cases.push(("LS", json!({"path": p})));
    }
    for p in ["..", "/etc", "outside_dir", "etc_dir", "sub/up"] {
        cases.push(("Glob", json!({"pattern": "**/*", "path": p})));
    }
    for p in [
        "..",
        "/etc",
        "outside_dir",
        "etc_dir",
        "sub/up",
        "sentinel_link",
        "hard_link.txt",
        "/proc/self/root/etc",
    ] {
        cases.push((
            "Grep",
            json!({"pattern": "SENTINEL|root", "path": p, "output_mode": "content"}),
        ));
    }
    cases
}

#[tokio::test]
async fn escape_corpus_fails_with_codes_and_never_touches_outside() {
    let fx = Fixture::new();
    let long = "a/".repeat(2100);
    let long_component = "b".repeat(300);
    let cases = escape_corpus(&long, &long_component);
    assert!(cases.len() >= 40, "corpus has {} cases", cases.len());
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let passwd_line = passwd.lines().next().unwrap_or("root:x:0:0").to_string();
    for (tool, input) in &cases {
        let result = fx.call(tool, input.clone()).await;
        let err = match result {
            Ok(out) => panic!("{tool} {input} succeeded: {}", out.text),
            Err(err) => err,
        };
        assert!(
            [
                "PATH_OUTSIDE_WORKSPACE",
                "PATH_INVALID",
                "PATH_TOO_LONG",
                "HARD_LINKED_FILE",
                "NOT_A_DIRECTORY",
                "NOT_A_REGULAR_FILE",
            ]
            .contains(&err.code),
            "{tool} {input}: unexpected code {err:?}"
        );
        assert!(
            !err.message.contains(&fx.sentinel_text),
            "{tool} leaked: {err:?}"
        );
        assert!(!err.message.contains(&passwd_line), "{tool} leaked passwd");
        fx.assert_sentinel_intact();
    }
    assert!(!Path::new("/tmp/norma-escape.txt").exists());
}

#[tokio::test]
async fn workspace_wide_searches_skip_links_leading_outside() {
    let fx = Fixture::new();
    for (tool, input) in [
        (
            "Grep",
            json!({"pattern": "SENTINEL", "output_mode": "content"}),
        ),
        (
            "Grep",
            json!({"pattern": "SENTINEL", "output_mode": "files_with_matches"}),
        ),
        ("Grep", json!({"pattern": "root:", "output_mode": "count"})),
        ("Glob", json!({"pattern": "**/*"})),
        ("LS", json!({"path": ""})),
        ("LS", json!({"path": "sub"})),
    ] {
        let out = fx.call(tool, input.clone()).await.expect("search");
        assert!(
            !out.text.contains(&fx.sentinel_text),
            "{tool} {input} leaked"
        );
        assert!(
            !out.text.contains("root:x:0"),
            "{tool} {input} leaked passwd"
        );
        assert!(
            !out.text.contains("secret.txt"),
            "{tool} {input} listed an outside file"
        );
    }
    fx.assert_sentinel_intact();
}

#[tokio::test]
async fn symlink_swapped_in_during_calls_never_leaks() {
    let fx = Fixture::new();
    let target = fx.ws_root.join("race.txt");
    std::fs::write(&target, "inside race\n").expect("race");
    let stop = Arc::new(AtomicBool::new(false));
    let flip_count = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let flipper = {
        let stop = stop.clone();
        let flip_count = flip_count.clone();
        let sentinel = fx.sentinel.clone();
        let target = target.clone();
        std::thread::spawn(move || {
            let tmp_link = target.with_extension("link");
            let tmp_file = target.with_extension("file");
            let mut flips = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(&tmp_link);
                let _ = symlink(&sentinel, &tmp_link);
                let _ = std::fs::rename(&tmp_link, &target);
                std::thread::sleep(std::time::Duration::from_micros(100));
                let _ = std::fs::write(&tmp_file, "inside race\n");
                let _ = std::fs::rename(&tmp_file, &target);
                std::thread::sleep(std::time::Duration::from_micros(100));
                flips += 1;
                flip_count.store(flips, Ordering::Relaxed);
            }
            flips
        })
    };
    let mut ok = 0;
    let mut calls = 0;
    // At least 400 calls, and keep going (bounded) until the racing thread flipped often.
    for i in 0..20_000 {
        if i >= 400 && flip_count.load(Ordering::Relaxed) >= 100 {
            break;
        }
        calls += 1;
        let (tool, input) = match i % 4 {
            0 => ("Read", json!({"file_path": "race.txt"})),
            1 => (
                "Grep",
                json!({"pattern": "SENTINEL|race", "path": "race.txt", "output_mode": "content"}),
            ),
            2 => (
                "Edit",
                json!({"file_path": "race.txt", "old_string": "race", "new_string": "race "}),
            ),
            _ => (
                "Write",
                json!({"file_path": "race.txt", "content": "inside race\n"}),
            ),
        };
        match fx.call(tool, input).await {
            Ok(out) => {
                ok += 1;
                assert!(!out.text.contains(&fx.sentinel_text), "{tool} leaked");
            }
            Err(err) => assert!(!err.message.contains(&fx.sentinel_text), "{tool} leaked"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().expect("flipper");
    assert!(flips >= 100, "the racing thread barely ran ({flips} flips)");
    assert!(
        ok > 0,
        "no call ever succeeded; the race test proves nothing"
    );
    assert!(
        ok < calls,
        "no call ever met the symlink; the race test proves nothing"
    );
    fx.assert_sentinel_intact();
}

#[tokio::test]
async fn read_returns_numbered_ranges_and_detects_binary() {
    let fx = Fixture::new();
    let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(fx.ws_root.join("ten.txt"), &text).expect("write");
    let out = fx
        .call(
            "Read",
            json!({"file_path": "ten.txt", "offset": 3, "limit": 2}),
        )
        .await
        .expect("read");
    assert_eq!(
        out.text,
        "     3\tline 3\n     4\tline 4\n(lines 3-4 of 10; use offset/limit to read more)\n"
    );
    std::fs::write(fx.ws_root.join("bin.dat"), b"ab\0cd").expect("write");
    let err = fx
        .call("Read", json!({"file_path": "bin.dat"}))
        .await
        .expect_err("binary");
    assert_eq!(err.code, "BINARY_FILE");
    let err = fx
        .call("Read", json!({"file_path": "missing.txt"}))
        .await
        .expect_err("missing");
    assert_eq!(err.code, "FILE_NOT_FOUND");
    let abs = fx.ws_root.join("ten.txt");
    let out = fx
        .call(
            "Read",
            json!({"file_path": abs.to_string_lossy(), "limit": 1}),
        )
        .await
        .expect("absolute inside");
    assert!(out.text.starts_with("     1\tline 1\n"), "{}", out.text);
}

#[tokio::test]
async fn write_replaces_an_inside_symlink_without_following_it() {
    let fx = Fixture::new();
    std::fs::write(fx.ws_root.join("real.txt"), "real").expect("write");
    symlink("real.txt", fx.ws_root.join("alias.txt")).expect("link");
    fx.call("Write", json!({"file_path": "alias.txt", "content": "new"}))
        .await
        .expect("write");
    assert_eq!(
        std::fs::read_to_string(fx.ws_root.join("real.txt")).expect("real"),
        "real"
    );
    let meta = std::fs::symlink_metadata(fx.ws_root.join("alias.txt")).expect("meta");
    assert!(meta.is_file());
    fx.call(
        "Write",
        json!({"file_path": "deep/er/new.txt", "content": "x"}),
    )
    .await
    .expect("write nested");
    assert_eq!(
        std::fs::read_to_string(fx.ws_root.join("deep/er/new.txt")).expect("n"),
        "x"
    );
}

#[tokio::test]
async fn edit_requires_a_unique_match_unless_replace_all() {
    let fx = Fixture::new();
    let path = fx.ws_root.join("e.txt");
    std::fs::write(&path, "foo bar foo\n").expect("write");
    let err = fx
        .call(
            "Edit",
            json!({"file_path": "e.txt", "old_string": "foo", "new_string": "baz"}),
        )
        .await
        .expect_err("not unique");
    assert_eq!(err.code, "EDIT_NOT_UNIQUE");
    let err = fx
        .call(
            "Edit",
            json!({"file_path": "e.txt", "old_string": "qux", "new_string": "baz"}),
        )
        .await
        .expect_err("not found");
    assert_eq!(err.code, "EDIT_NOT_FOUND");
    assert_eq!(std::fs::read_to_string(&path).expect("r"), "foo bar foo\n");
    fx.call(
        "Edit",
        json!({"file_path": "e.txt", "old_string": "bar", "new_string": "BAR"}),
    )
    .await
    .expect("unique edit");
    assert_eq!(std::fs::read_to_string(&path).expect("r"), "foo BAR foo\n");
    fx.call(
        "Edit",
        json!({"file_path": "e.txt", "old_string": "foo", "new_string": "x", "replace_all": true}),
    )
    .await
    .expect("replace all");
    assert_eq!(std::fs::read_to_string(&path).expect("r"), "x BAR x\n");
}

#[tokio::test]
async fn multi_edit_is_all_or_nothing() {
    let fx = Fixture::new();
    let path = fx.ws_root.join("m.txt");
    std::fs::write(&path, "alpha beta gamma\n").expect("write");
    let inode_before = std::fs::metadata(&path).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.ino()
    });
    let err = fx
        .call(
            "MultiEdit",
            json!({"file_path": "m.txt", "edits": [
                {"old_string": "alpha", "new_string": "ALPHA"},
                {"old_string": "missing", "new_string": "x"}
            ]}),
        )
        .await
        .expect_err("second edit fails");
    assert_eq!(err.code, "EDIT_NOT_FOUND");
    assert!(err.message.contains("edit 2"), "{}", err.message);
    assert_eq!(
        std::fs::read_to_string(&path).expect("r"),
        "alpha beta gamma\n"
    );
    assert_eq!(
        std::fs::metadata(&path)
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.ino()
            })
            .ok(),
        inode_before.ok(),
        "a failed MultiEdit must not rewrite the file"
    );
    let err = fx
        .call(
            "MultiEdit",
            json!({"file_path": "m.txt", "edits": [
                {"old_string": "a", "new_string": "A"}
            ]}),
        )
        .await
        .expect_err("ambiguous");
    assert_eq!(err.code, "EDIT_NOT_UNIQUE");
    fx.call(
        "MultiEdit",
        json!({"file_path": "m.txt", "edits": [
            {"old_string": "alpha", "new_string": "one"},
            {"old_string": "one beta", "new_string": "two"},
            {"old_string": "a", "new_string": "4", "replace_all": true}
        ]}),
    )
    .await
    .expect("all edits apply in order");
    assert_eq!(std::fs::read_to_string(&path).expect("r"), "two g4mm4\n");
    let leftovers: Vec<String> = std::fs::read_dir(&fx.ws_root)
        .expect("dir")
        .map(|e| e.expect("e").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("norma-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn notebook_edit_replaces_inserts_and_deletes_cells() {
    let fx = Fixture::new();
    let cells = |fx: &Fixture| -> Vec<Value> {
        let text = std::fs::read_to_string(fx.ws_root.join("nb.ipynb")).expect("nb");
        let v: Value = serde_json::from_str(&text).expect("json");
        v["cells"].as_array().expect("cells").clone()
    };
    fx.call(
        "NotebookEdit",
        json!({"notebook_path": "nb.ipynb", "cell_id": "c1", "new_source": "print(1)\nprint(2)"}),
    )
    .await
    .expect("replace");
    assert_eq!(cells(&fx)[0]["source"], json!(["print(1)\n", "print(2)"]));
    fx.call("NotebookEdit", json!({"notebook_path": "nb.ipynb", "cell_id": "c1", "edit_mode": "insert", "cell_type": "markdown", "new_source": "# title"}))
        .await
        .expect("insert");
    let now = cells(&fx);
    assert_eq!(now.len(), 2);
    assert_eq!(now[1]["cell_type"], "markdown");
    fx.call(
        "NotebookEdit",
        json!({"notebook_path": "nb.ipynb", "cell_index": 0, "edit_mode": "delete"}),
    )
    .await
    .expect("delete");
    assert_eq!(cells(&fx)[0]["source"], json!(["# title"]));
    let err = fx
        .call(
            "NotebookEdit",
            json!({"notebook_path": "nb.ipynb", "cell_id": "nope", "new_source": "x"}),
        )
        .await
        .expect_err("missing cell");
    assert_eq!(err.code, "CELL_NOT_FOUND");
}

/// A deterministic tree: dirs d0..d4, each with files of several extensions; an ignored
/// `target/` directory and a hidden `.cache/` directory that searches must skip.
fn generate_tree(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for d in 0..5 {
        for f in 0..12 {
            let ext = ["rs", "txt", "md"][f % 3];
            let rel = format!("d{d}/sub{}/f{f}.{ext}", f % 2);
            let body: String = (0..(f + d))
                .map(|i| {
                    if (i + f) % 4 == 0 {
                        format!("needle {d}-{f}-{i}\n")
                    } else {
                        format!("hay {i}\n")
                    }
                })
                .collect();
            files.push((rel, body));
        }
    }
    for (rel, body) in &files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, body).expect("write");
    }
    std::fs::write(root.join(".gitignore"), "target/\n").expect("gitignore");
    for hidden in ["target/x.rs", ".cache/y.rs"] {
        let path = root.join(hidden);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, "needle hidden\n").expect("write");
    }
    files
}

#[tokio::test]
async fn grep_and_glob_match_a_reference_on_a_generated_tree() {
    let fx = Fixture::new();
    let tree_root = fx.ws_root.join("tree");
    std::fs::create_dir(&tree_root).expect("tree");
    let files = generate_tree(&tree_root);

    // Glob: *.rs under tree, sorted by name.
    let out = fx
        .call(
            "Glob",
            json!({"pattern": "**/*.rs", "path": "tree", "sort": "name"}),
        )
        .await
        .expect("glob");
    let mut expected: Vec<String> = files
        .iter()
        .filter(|(rel, _)| rel.ends_with(".rs"))
        .map(|(rel, _)| format!("tree/{rel}"))
        .collect();
    expected.sort();
    assert_eq!(out.text.lines().collect::<Vec<_>>(), expected);

    // Grep files_with_matches with a glob filter.
    let out = fx
        .call(
            "Grep",
            json!({"pattern": "needle", "path": "tree", "glob": "*.md"}),
        )
        .await
        .expect("grep");
    let mut expected: Vec<String> = files
        .iter()
        .filter(|(rel, body)| rel.ends_with(".md") && body.contains("needle"))
        .map(|(rel, _)| format!("tree/{rel}"))
        .collect();
    expected.sort();
    assert_eq!(out.text.lines().collect::<Vec<_>>(), expected);

    // Grep count, case-insensitive.
    let out = fx
        .call(
            "Grep",
            json!({"pattern": "NEEDLE", "-i": true, "path": "tree", "output_mode": "count"}),
        )
        .await
        .expect("grep count");
    let mut expected: Vec<String> = files
        .iter()
        .filter(|(_, body)| body.contains("needle"))
        .map(|(rel, body)| format!("tree/{rel}:{}", body.matches("needle").count()))
        .collect();
    expected.sort();
    assert_eq!(out.text.lines().collect::<Vec<_>>(), expected);

    // Grep content with one line of context, one file.
    let (rel, body) = files
        .iter()
        .find(|(rel, _)| rel == "d4/sub1/f9.rs")
        .expect("file");
    let out = fx
        .call("Grep", json!({"pattern": "^needle", "path": format!("tree/{rel}"), "output_mode": "content", "-C": 1}))
        .await
        .expect("grep content");
    let lines: Vec<&str> = body.lines().collect();
    let wanted: BTreeSet<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("needle"))
        .flat_map(|(i, _)| i.saturating_sub(1)..=(i + 1).min(lines.len() - 1))
        .collect();
    let mut expected = Vec::new();
    let mut prev: Option<usize> = None;
    for i in wanted {
        if prev.is_some_and(|p| p + 1 != i) {
            expected.push("--".to_string());
        }
        let sep = if lines[i].starts_with("needle") {
            ':'
        } else {
            '-'
        };
        expected.push(format!("tree/{rel}{sep}{}{sep}{}", i + 1, lines[i]));
        prev = Some(i);
    }
    assert_eq!(out.text.lines().collect::<Vec<_>>(), expected);

    // head_limit caps the output.
    let out = fx
        .call(
            "Grep",
            json!({"pattern": "needle", "path": "tree", "head_limit": 3}),
        )
        .await
        .expect("grep head");
    assert_eq!(
        out.text.lines().filter(|l| l.starts_with("tree/")).count(),
        3
    );

    let err = fx
        .call("Grep", json!({"pattern": "(unclosed"}))
        .await
        .expect_err("bad regex");
    assert_eq!(err.code, "PATTERN_INVALID");
}

#[test]
fn metadata_matches_the_tool_families() {
    let tools = file_tools();
    let empty = json!({});
    for tool in &tools {
        let read_only = matches!(tool.name(), "Read" | "LS" | "Glob" | "Grep");
        assert_eq!(tool.is_read_only(&empty), read_only, "{}", tool.name());
        assert_eq!(
            tool.is_concurrency_safe(&empty),
            read_only,
            "{}",
            tool.name()
        );
        assert_eq!(tool.is_file_edit(), !read_only, "{}", tool.name());
        assert!(
            matches!(
                tool.permission_subject(),
                norma::permission::Subject::Path { .. }
            ),
            "{}",
            tool.name()
        );
    }
    assert_eq!(tools.len(), 8);
}
