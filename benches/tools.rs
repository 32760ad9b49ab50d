//! Benchmarks of the built-in tools against the standard command-line tools (plain `fn main`).
//!
//! Run with `cargo build --release && cargo bench --bench tools`. It generates a 50,000-file
//! tree (nested directories, a `.gitignore` hiding `target/` directories and `*.log` files,
//! text files with a known `NEEDLE_<n>` pattern) in a temp dir, checks that every tool and
//! reference command finds exactly the expected files, then times:
//! - Grep (`files_with_matches` and `content`) through the real tool vs `rg` (and `rg -j1`);
//!   `grep -r` stands in when `rg` is missing;
//! - Glob `**/*.rs` through the real tool vs `find` and `rg --files`;
//! - Bash spawn overhead: `true` through the sandboxed Bash tool (launched via the release
//!   `norma` binary's `__sandbox-exec`) vs plain `bash -c true`.
//!
//! Each figure is the median of several runs after one warm-up (warm page cache).
//! `NORMA_BENCH_FILES` and `NORMA_BENCH_RUNS` override the tree size and run count.

use norma::ids::{SessionId, TenantId};
use norma::sandbox::{Sandbox, SandboxConfig};
use norma::tools::builtin::bash::BashTool;
use norma::tools::builtin::glob::GlobTool;
use norma::tools::builtin::grep::GrepTool;
use norma::tools::builtin::tasks::TaskRegistry;
use norma::tools::{Tool, ToolContext};
use norma::workspace::Workspace;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Files in the tree (including the gitignored ones).
const DEFAULT_FILES: usize = 50_000;
const TOP_DIRS: usize = 50;
const SUB_DIRS: usize = 20;
/// Share of each top directory that lives in its ignored `target/` directory (1 in 10).
const IGNORED_EVERY: usize = 10;
/// Every `NEEDLE_EVERY`-th file contains the needle.
const NEEDLE_EVERY: usize = 7;
const PATTERN: &str = "NEEDLE_[0-9]+";

/// What the generator wrote, for checking every tool's answer.
struct Expected {
    files: usize,
    visible_needles: usize,
    visible_rs: usize,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn generate(root: &Path, files: usize) -> std::io::Result<Expected> {
    std::fs::create_dir_all(root.join(".git"))?;
    std::fs::write(root.join(".gitignore"), "target/\n*.log\n")?;
    let mut expected = Expected {
        files,
        visible_needles: 0,
        visible_rs: 0,
    };
    let per_top = files.div_ceil(TOP_DIRS);
    for i in 0..files {
        let top = i / per_top;
        let k = i % per_top;
        let ext = ["rs", "txt", "md", "rs", "log", "rs"][i % 6];
        let ignored_dir = k.is_multiple_of(IGNORED_EVERY);
        let dir = if ignored_dir {
            root.join(format!("pkg{top:02}/target/debug"))
        } else {
            root.join(format!("pkg{top:02}/mod{:02}", k % SUB_DIRS))
        };
        std::fs::create_dir_all(&dir)?;
        let needle = i % NEEDLE_EVERY == 0;
        let mut text = String::with_capacity(700);
        for line in 0..12 {
            if needle && line == 6 {
                text.push_str(&format!("    let value = NEEDLE_{i};\n"));
            } else {
                text.push_str(&format!(
                    "line {line} of file {i}: lorem ipsum dolor sit amet, consectetur\n"
                ));
            }
        }
        std::fs::write(dir.join(format!("f{i:05}.{ext}")), text)?;
        let visible = !ignored_dir && ext != "log";
        if visible && needle {
            expected.visible_needles += 1;
        }
        if visible && ext == "rs" {
            expected.visible_rs += 1;
        }
    }
    Ok(expected)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Median wall time of `runs` runs after one warm-up; `check` sees each run's output.
fn time_runs(runs: usize, mut run: impl FnMut() -> String, check: impl Fn(&str)) -> Duration {
    check(&run());
    let samples = (0..runs)
        .map(|_| {
            let start = Instant::now();
            let out = run();
            let elapsed = start.elapsed();
            check(&out);
            elapsed
        })
        .collect();
    median(samples)
}

fn command_output(cwd: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tool_output(
    rt: &tokio::runtime::Runtime,
    tool: &dyn Tool,
    ctx: &ToolContext,
    input: &Value,
) -> String {
    rt.block_on(tool.call(input.clone(), ctx))
        .unwrap_or_else(|e| panic!("{} failed: {e}", tool.name()))
        .text
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

struct Row {
    what: &'static str,
    tool: Duration,
    reference: Vec<(String, Duration)>,
}

fn print_rows(rows: &[Row], unit: fn(Duration) -> String) {
    for row in rows {
        let refs: Vec<String> = row
            .reference
            .iter()
            .map(|(name, d)| {
                format!(
                    "{name} {} (ratio {:.2}x)",
                    unit(*d),
                    row.tool.as_secs_f64() / d.as_secs_f64()
                )
            })
            .collect();
        println!(
            "{:<34} tool {:>10} | {}",
            row.what,
            unit(row.tool),
            refs.join(" | ")
        );
    }
}

/// The release `norma` binary next to this bench binary (`target/<profile>/deps/tools-…`).
fn launcher_path() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("bench binary lives in target/<profile>/deps");
    let launcher = profile_dir.join("norma");
    assert!(
        launcher.is_file(),
        "{} is missing: run `cargo build --release` first",
        launcher.display()
    );
    launcher
}

fn main() {
    let files = env_usize("NORMA_BENCH_FILES", DEFAULT_FILES);
    let runs = env_usize("NORMA_BENCH_RUNS", 5).max(1);
    let spawn_runs = env_usize("NORMA_BENCH_SPAWN_RUNS", 50).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let tmp = tempfile::tempdir().expect("tempdir");
    let session = SessionId::generate();
    let ws = Workspace::create(&tmp.path().join("ws"), &TenantId::new("bench"), &session)
        .expect("workspace");
    let root = ws.root().to_path_buf();
    let start = Instant::now();
    let expected = generate(&root, files).expect("generate tree");
    println!(
        "tree: {} files ({} visible .rs, {} visible files with the needle) generated in {}",
        expected.files,
        expected.visible_rs,
        expected.visible_needles,
        ms(start.elapsed())
    );
    let mut ctx = ToolContext::for_tests();
    ctx.session_id = session.clone();
    ctx.workspace = Some(root.clone());

    let rg = has("rg");
    if !rg {
        println!(
            "rg not found: comparing against grep -r (not gitignore-aware; told to skip target/ and *.log)"
        );
    }
    let nonempty_lines = |s: &str| s.lines().filter(|l| !l.is_empty()).count();

    // ---- Grep
    let grep = GrepTool::new();
    let mut rows = Vec::new();
    let needles = expected.visible_needles;
    let check_files = move |s: &str| assert_eq!(nonempty_lines(s), needles, "file list differs");
    for (what, mode) in [
        ("Grep files_with_matches", "files_with_matches"),
        ("Grep content", "content"),
    ] {
        let input = json!({"pattern": PATTERN, "output_mode": mode, "head_limit": 10_000_000});
        let tool = time_runs(runs, || tool_output(&rt, &grep, &ctx, &input), check_files);
        let flag = if mode == "content" { "-n" } else { "-l" };
        let mut reference = Vec::new();
        if rg {
            reference.push((
                "rg".to_owned(),
                time_runs(
                    runs,
                    || command_output(&root, "rg", &[flag, PATTERN]),
                    check_files,
                ),
            ));
            reference.push((
                "rg -j1".to_owned(),
                time_runs(
                    runs,
                    || command_output(&root, "rg", &["-j1", flag, PATTERN]),
                    check_files,
                ),
            ));
        } else {
            let args = [
                "-rE",
                flag,
                "--exclude-dir=target",
                "--exclude-dir=.git",
                "--exclude=*.log",
                PATTERN,
                ".",
            ];
            reference.push((
                "grep -r".to_owned(),
                time_runs(runs, || command_output(&root, "grep", &args), check_files),
            ));
        }
        rows.push(Row {
            what,
            tool,
            reference,
        });
    }

    // ---- Glob
    let glob = GlobTool::new();
    let rs = expected.visible_rs;
    let check_rs = move |s: &str| assert_eq!(nonempty_lines(s), rs, "file list differs");
    let check_glob = move |s: &str| {
        // The tool lists at most 1000 paths and then states the total.
        let total = s
            .lines()
            .last()
            .and_then(|l| l.strip_prefix('('))
            .and_then(|l| l.split_once(' '))
            .and_then(|(n, _)| n.parse::<usize>().ok())
            .unwrap_or_else(|| nonempty_lines(s));
        assert_eq!(total, rs, "glob total differs");
    };
    for (what, sort) in [
        ("Glob **/*.rs (sort mtime)", "mtime"),
        ("Glob **/*.rs (sort name)", "name"),
    ] {
        let input = json!({"pattern": "**/*.rs", "sort": sort});
        let tool = time_runs(runs, || tool_output(&rt, &glob, &ctx, &input), check_glob);
        let mut reference = vec![(
            "find".to_owned(),
            time_runs(
                runs,
                || {
                    command_output(
                        &root,
                        "find",
                        &[
                            ".", "-path", "*/target", "-prune", "-o", "-name", "*.rs", "-print",
                        ],
                    )
                },
                check_rs,
            ),
        )];
        if rg {
            reference.push((
                "rg --files".to_owned(),
                time_runs(
                    runs,
                    || command_output(&root, "rg", &["--files", "-g", "*.rs"]),
                    check_rs,
                ),
            ));
        }
        rows.push(Row {
            what,
            tool,
            reference,
        });
    }
    println!("\nmedian of {runs} runs (ratio = tool time / reference time):");
    print_rows(&rows, ms);

    // ---- Bash spawn overhead
    let sandbox = Arc::new(Sandbox::probe(SandboxConfig::new(launcher_path())));
    let report = sandbox.report();
    println!("\nsandbox on this machine:");
    for (part, state) in [
        ("env", &report.env),
        ("filesystem", &report.filesystem),
        ("network", &report.network),
        ("rlimits", &report.rlimits),
    ] {
        println!(
            "  {part:<10} {:?}: {}",
            state.status,
            state.reason.as_deref().unwrap_or("")
        );
    }
    let tasks = TaskRegistry::new(&tmp.path().join("data"), &session).expect("task registry");
    let bash = BashTool::new(sandbox.clone(), tasks);
    let input = json!({"command": "true"});
    let check_empty = |s: &str| assert!(s.trim().is_empty(), "unexpected output {s:?}");
    let tool = time_runs(
        spawn_runs,
        || tool_output(&rt, &bash, &ctx, &input),
        check_empty,
    );
    let plain = time_runs(
        spawn_runs,
        || {
            let status = Command::new("bash")
                .args(["-c", "true"])
                .status()
                .expect("bash");
            assert!(status.success());
            String::new()
        },
        check_empty,
    );
    println!("\nmedian of {spawn_runs} runs:");
    print_rows(
        &[Row {
            what: "Bash `true` (sandboxed tool)",
            tool,
            reference: vec![("bash -c true".to_owned(), plain)],
        }],
        us,
    );
}
