//! Size budgets and file kinds of the file tools against a real workspace: results checked
//! before they are built (`FILE_TOO_LARGE`), only regular files opened (`NOT_A_REGULAR_FILE`
//! for FIFOs, sockets, symlinks and directories), Grep's per-line / total / pattern limits,
//! Glob's and LS's pattern limits.

use futures::FutureExt;
use nix::sys::stat::Mode;
use nix::unistd::mkfifo;
use norma::ids::{SessionId, TenantId};
use norma::tools::builtin::{INLINE_FILE_BYTES, MAX_FILE_BYTES, file_tools, grep};
use norma::tools::{DynTool, FileIo, ToolContext, ToolError, ToolOutput};
use norma::workspace::Workspace;
use serde_json::{Value, json};
use std::path::PathBuf;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    tools: Vec<DynTool>,
    ctx: ToolContext,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ws = Workspace::create(tmp.path(), &TenantId::new("acme"), &SessionId::generate())
            .expect("workspace");
        let root = ws.root().to_path_buf();
        let mut ctx = ToolContext::for_tests();
        ctx.workspace = Some(root.clone());
        Self {
            _tmp: tmp,
            root,
            tools: file_tools(),
            ctx,
        }
    }

    /// A workspace on a local filesystem: small file work runs on the calling thread.
    fn local() -> Self {
        let mut fx = Self::new();
        fx.ctx.file_io = FileIo::Local;
        fx
    }

    async fn call(&self, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let tool = self
            .tools
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("tool {name}"));
        tool.call(input, &self.ctx).await
    }

    async fn code(&self, name: &str, input: Value) -> String {
        match self.call(name, input.clone()).await {
            Ok(out) => panic!("{name} {input} succeeded: {}", out.text),
            Err(err) => err.code.to_string(),
        }
    }
}

#[tokio::test]
async fn multi_edit_doubling_stops_at_the_file_limit_before_allocating() {
    let fx = Fixture::new();
    std::fs::write(fx.root.join("a.txt"), "a").expect("write");
    let doubling = json!({"old_string": "a", "new_string": "aa", "replace_all": true});
    // 2^24 bytes = 16 MiB after 24 edits; 40 edits would need 1 TiB.
    for edits in [24, 40] {
        let input = json!({"file_path": "a.txt", "edits": vec![doubling.clone(); edits]});
        assert_eq!(fx.code("MultiEdit", input).await, "FILE_TOO_LARGE");
        assert_eq!(std::fs::read(fx.root.join("a.txt")).expect("read"), b"a");
    }
    // 23 doublings (8 MiB) fit.
    let input = json!({"file_path": "a.txt", "edits": vec![doubling.clone(); 23]});
    fx.call("MultiEdit", input).await.expect("8 MiB fits");
    let len = std::fs::metadata(fx.root.join("a.txt"))
        .expect("meta")
        .len();
    assert_eq!(len, 1 << 23);
    // One Edit over the limit.
    let input =
        json!({"file_path": "a.txt", "old_string": "a", "new_string": "aa", "replace_all": true});
    assert_eq!(fx.code("Edit", input).await, "FILE_TOO_LARGE");
}

#[tokio::test]
async fn write_and_notebook_results_are_bounded() {
    let fx = Fixture::new();
    let big = "x".repeat(MAX_FILE_BYTES as usize + 1);
    let input = json!({"file_path": "big.txt", "content": big});
    assert_eq!(fx.code("Write", input).await, "FILE_TOO_LARGE");
    assert!(!fx.root.join("big.txt").exists());
    // A compact notebook whose pretty-printed form passes the limit: deeply nested metadata.
    let nested = format!("{}{}", "[".repeat(120), "]".repeat(120));
    let items = vec![nested; 4_000].join(",");
    let nb = format!(
        r#"{{"cells":[{{"id":"c1","cell_type":"code","metadata":{{"x":[{items}]}},"source":[],"outputs":[],"execution_count":null}}],"metadata":{{}},"nbformat":4,"nbformat_minor":5}}"#
    );
    assert!((nb.len() as u64) < MAX_FILE_BYTES);
    std::fs::write(fx.root.join("n.ipynb"), &nb).expect("nb");
    let input = json!({"notebook_path": "n.ipynb", "cell_id": "c1", "new_source": "y"});
    assert_eq!(fx.code("NotebookEdit", input).await, "FILE_TOO_LARGE");
    assert_eq!(
        std::fs::read_to_string(fx.root.join("n.ipynb")).expect("nb"),
        nb
    );
    // Too many values to parse: refused by a scan before parsing.
    let many = vec!["[]"; 600_000].join(",");
    let nb =
        format!(r#"{{"cells":[],"metadata":{{"x":[{many}]}},"nbformat":4,"nbformat_minor":5}}"#);
    std::fs::write(fx.root.join("m.ipynb"), &nb).expect("nb");
    let input = json!({"notebook_path": "m.ipynb", "cell_index": 0, "edit_mode": "insert"});
    assert_eq!(fx.code("NotebookEdit", input).await, "NOTEBOOK_INVALID");
}

#[tokio::test]
async fn only_regular_files_are_opened() {
    for fx in [Fixture::new(), Fixture::local()] {
        only_regular_files_are_opened_in(fx).await;
    }
}

async fn only_regular_files_are_opened_in(fx: Fixture) {
    mkfifo(&fx.root.join("p"), Mode::S_IRWXU).expect("mkfifo");
    let listener = std::os::unix::net::UnixListener::bind(fx.root.join("s")).expect("socket");
    std::fs::write(fx.root.join("real.txt"), "needle\n").expect("write");
    std::os::unix::fs::symlink("real.txt", fx.root.join("alias.txt")).expect("link");
    std::fs::create_dir(fx.root.join("dir")).expect("dir");
    for path in ["p", "s", "alias.txt", "dir"] {
        assert_eq!(
            fx.code("Read", json!({"file_path": path})).await,
            "NOT_A_REGULAR_FILE",
            "Read {path}"
        );
        if path != "dir" {
            // A directory is searched; any other named path must be a regular file.
            assert_eq!(
                fx.code("Grep", json!({"pattern": "x", "path": path})).await,
                "NOT_A_REGULAR_FILE",
                "Grep {path}"
            );
        }
    }
    for path in ["p", "s"] {
        let edit = json!({"file_path": path, "old_string": "a", "new_string": "b"});
        assert_eq!(
            fx.code("Edit", edit).await,
            "NOT_A_REGULAR_FILE",
            "Edit {path}"
        );
        let write = json!({"file_path": path, "content": "x"});
        assert_eq!(
            fx.code("Write", write).await,
            "NOT_A_REGULAR_FILE",
            "Write {path}"
        );
        let nb = json!({"notebook_path": path, "cell_index": 0, "new_source": "x"});
        assert_eq!(fx.code("NotebookEdit", nb).await, "NOT_A_REGULAR_FILE");
    }
    // Walks skip them: only the regular file is found.
    let out = fx
        .call("Grep", json!({"pattern": "needle"}))
        .await
        .expect("grep");
    assert_eq!(out.text, "real.txt");
    let out = fx
        .call("Glob", json!({"pattern": "*"}))
        .await
        .expect("glob");
    assert_eq!(out.text, "real.txt");
    drop(listener);
}

#[tokio::test]
async fn grep_output_is_bounded_per_line_and_in_total() {
    let fx = Fixture::new();
    let long_line = format!("needle {}\n", "é".repeat(5_000));
    std::fs::write(fx.root.join("long.txt"), &long_line).expect("write");
    let out = fx
        .call(
            "Grep",
            json!({"pattern": "needle", "path": "long.txt", "output_mode": "content"}),
        )
        .await
        .expect("grep");
    assert!(
        out.text.contains("[line truncated, 10007 bytes]"),
        "{}",
        &out.text[..100]
    );
    assert!(out.text.len() < grep::MAX_LINE_BYTES + 200);

    // 2,000 long matching lines: the byte budget ends the answer, not the line budget.
    let many: String = (0..2_000)
        .map(|i| format!("needle {i} {}\n", "z".repeat(1_000)))
        .collect();
    std::fs::write(fx.root.join("many.txt"), &many).expect("write");
    let out = fx
        .call(
            "Grep",
            json!({"pattern": "needle", "path": "many.txt", "output_mode": "content", "head_limit": 10000}),
        )
        .await
        .expect("grep");
    assert!(
        out.text.len() <= grep::MAX_OUTPUT_BYTES + 100,
        "{}",
        out.text.len()
    );
    assert!(
        out.text.ends_with(&format!(
            "(output limited to {} bytes)",
            grep::MAX_OUTPUT_BYTES
        )),
        "{}",
        &out.text[out.text.len() - 80..]
    );
    // The line budget.
    let out = fx
        .call(
            "Grep",
            json!({"pattern": "needle", "path": "many.txt", "output_mode": "content", "head_limit": 5}),
        )
        .await
        .expect("grep");
    assert_eq!(out.text.lines().count(), 6, "{}", out.text);
    assert!(out.text.ends_with("(output limited to 5 lines)"));
}

#[tokio::test]
async fn patterns_over_their_limits_are_refused() {
    let fx = Fixture::new();
    std::fs::write(fx.root.join("a.txt"), "aaaa\n").expect("write");
    for pattern in ["(\\w{100}){100}", "(a{1000}){1000}"] {
        assert_eq!(
            fx.code("Grep", json!({"pattern": pattern})).await,
            "PATTERN_TOO_COMPLEX",
            "{pattern}"
        );
    }
    let deep = format!("{}a{}", "(".repeat(200), ")".repeat(200));
    assert_eq!(
        fx.code("Grep", json!({"pattern": deep})).await,
        "PATTERN_TOO_COMPLEX"
    );
    let braces = format!("{}a{}", "{a,".repeat(10), "}".repeat(10));
    assert_eq!(
        fx.code("Glob", json!({"pattern": braces.clone()})).await,
        "PATTERN_TOO_COMPLEX"
    );
    assert_eq!(
        fx.code("Grep", json!({"pattern": "a", "glob": braces.clone()}))
            .await,
        "PATTERN_TOO_COMPLEX"
    );
    assert_eq!(
        fx.code("LS", json!({"ignore": [braces]})).await,
        "PATTERN_TOO_COMPLEX"
    );
    let long = "*".repeat(2_000);
    assert_eq!(
        fx.code("Glob", json!({"pattern": long})).await,
        "PATTERN_TOO_COMPLEX"
    );
    // A bad pattern is still PATTERN_INVALID.
    assert_eq!(
        fx.code("Grep", json!({"pattern": "(unclosed"})).await,
        "PATTERN_INVALID"
    );
}

#[tokio::test]
async fn read_of_many_short_lines_stops_at_its_output_budget() {
    let fx = Fixture::new();
    // 1 MiB of empty lines would number into ~8 MiB.
    std::fs::write(fx.root.join("empty-lines.txt"), "\n".repeat(1 << 20)).expect("write");
    let out = fx
        .call(
            "Read",
            json!({"file_path": "empty-lines.txt", "limit": 2_000_000}),
        )
        .await
        .expect("read");
    assert!(
        out.text.len() <= norma::tools::builtin::read::MAX_OUTPUT_BYTES + 200,
        "{}",
        out.text.len()
    );
    let note = out.text.lines().last().expect("note");
    assert!(
        note.starts_with("(lines 1-")
            && note.ends_with(" of 1048576; use offset/limit to read more)"),
        "{note}"
    );
}

/// On a local workspace a small file is read, and small content written, within the call's
/// first poll (on the calling thread, no hand-off to the blocking pool); a file past the bound
/// is read on the pool. Both give the answers the pooled path gives, at the bound and past it,
/// and the file limit holds on both.
#[tokio::test]
async fn a_local_workspace_reads_and_writes_small_files_on_the_calling_thread() {
    let mut fx = Fixture::local();
    std::fs::write(fx.root.join("small.txt"), "one\ntwo\n").expect("write");
    let read = json!({"file_path": "small.txt"});
    let small = fx
        .call("Read", read)
        .now_or_never()
        .expect("read within the first poll")
        .expect("read");
    assert_eq!(small.text, "     1\tone\n     2\ttwo\n");
    let write = json!({"file_path": "new/out.txt", "content": "x".repeat(1000)});
    fx.call("Write", write)
        .now_or_never()
        .expect("written within the first poll")
        .expect("write");
    assert_eq!(
        std::fs::read(fx.root.join("new/out.txt")).expect("written"),
        vec![b'x'; 1000]
    );

    let bound = INLINE_FILE_BYTES as usize;
    for len in [bound, bound + 1, 1 << 20] {
        let text: String = (0..)
            .map(|i| format!("line {i}\n"))
            .scan(0, |size, line| {
                *size += line.len();
                (*size <= len).then_some(line)
            })
            .collect();
        let text = format!("{text}{}", "z".repeat(len - text.len()));
        assert_eq!(text.len(), len);
        std::fs::write(fx.root.join("f.txt"), &text).expect("write");
        let input = json!({"file_path": "f.txt", "limit": 1_000_000});
        fx.ctx.file_io = FileIo::Local;
        let local = fx.call("Read", input.clone()).await.expect("local read");
        fx.ctx.file_io = FileIo::Pooled;
        let pooled = fx.call("Read", input).await.expect("pooled read");
        assert_eq!(local.text, pooled.text, "{len} bytes");
        assert!(local.text.starts_with("     1\tline 0\n"), "{len} bytes");
        let content = "y".repeat(len);
        fx.ctx.file_io = FileIo::Local;
        let write = json!({"file_path": "w.txt", "content": content});
        fx.call("Write", write).await.expect("local write");
        assert_eq!(std::fs::read(fx.root.join("w.txt")).expect("w").len(), len);
    }

    std::fs::write(
        fx.root.join("big.txt"),
        vec![b'a'; MAX_FILE_BYTES as usize + 1],
    )
    .expect("write");
    assert_eq!(
        fx.code("Read", json!({"file_path": "big.txt"})).await,
        "FILE_TOO_LARGE"
    );
}
