//! Bash, background tasks and PTY shells with real child processes and the real launcher
//! (`norma __sandbox-exec`): secrets stay out, writes stay in, the network is closed, timeouts
//! kill grandchildren, tasks outlive their call until shutdown, and PTY shells are denied
//! exactly what Bash is denied.

use norma::ids::{SessionId, TenantId};
use norma::permission::SelfDecision;
use norma::sandbox::{PartStatus, Sandbox, SandboxConfig};
use norma::tools::builtin::tasks::{TaskRegistry, TaskStatus};
use norma::tools::builtin::{SessionShells, pty::ShellRegistry, shell_tools};
use norma::tools::{DynTool, ToolContext, ToolError, ToolOutput};
use norma::workspace::Workspace;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Once};
use std::time::Duration;

const SECRET: &str = "s3cr3t-value-from-the-server";

fn set_parent_secrets() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: runs once, first thing in every test, before any test spawns a process or
        // reads the environment, so no other thread reads it concurrently.
        unsafe {
            std::env::set_var("NORMA_TEST_SIGNING_KEY", SECRET);
            std::env::set_var("DATABASE_URL", format!("postgres://u:{SECRET}@db/x"));
            std::env::set_var("OPENAI_API_KEY", SECRET);
        }
    });
}

struct Fx {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    env: SessionShells,
    tools: Vec<DynTool>,
    ctx: ToolContext,
}

impl Fx {
    fn new() -> Self {
        set_parent_secrets();
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("outside");
        let session = SessionId::generate();
        let ws = Workspace::create(&tmp.path().join("ws"), &TenantId::new("acme"), &session)
            .expect("workspace");
        let root = ws.root().to_path_buf();
        let sandbox = Arc::new(Sandbox::probe(SandboxConfig::new(env!(
            "CARGO_BIN_EXE_norma"
        ))));
        let tasks = TaskRegistry::new(&tmp.path().join("data"), &session).expect("tasks");
        let env = SessionShells {
            sandbox,
            network: Default::default(),
            tasks,
            shells: ShellRegistry::new(),
        };
        let tools = shell_tools(&env);
        let mut ctx = ToolContext::for_tests();
        ctx.session_id = session;
        ctx.workspace = Some(root.clone());
        Self {
            _tmp: tmp,
            ws: root,
            outside,
            env,
            tools,
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

    async fn bash(&self, command: &str) -> String {
        self.call("Bash", json!({"command": command}))
            .await
            .unwrap_or_else(|e| panic!("bash {command:?}: {e:?}"))
            .text
    }
}

/// Processes of a process group that are not zombies (orphaned zombies wait for PID 1 to
/// reap them; they run nothing).
fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state, ppid, pgrp, …
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z") {
            live.push(pid);
        }
    }
    live
}

fn process_alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

#[tokio::test]
async fn every_sandbox_part_is_enforced_on_this_machine() {
    let fx = Fx::new();
    let report = fx.env.sandbox.report().clone();
    for (name, part) in [
        ("env", &report.env),
        ("filesystem", &report.filesystem),
        ("network", &report.network),
        ("pid", &report.pid),
        ("mount", &report.mount),
        ("rlimits", &report.rlimits),
    ] {
        assert_eq!(part.status, PartStatus::Enforced, "{name}: {part:?}");
    }
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["filesystem"]["status"], "enforced");
}

#[tokio::test]
async fn secrets_of_the_parent_never_reach_the_command() {
    let fx = Fx::new();
    assert_eq!(std::env::var("OPENAI_API_KEY").as_deref(), Ok(SECRET));
    let out = fx
        .bash("env; echo \"[$NORMA_TEST_SIGNING_KEY][$DATABASE_URL][$OPENAI_API_KEY]\"; cat /proc/$PPID/environ 2>&1 | tr '\\0' '\\n'; echo home=$HOME")
        .await;
    assert!(!out.contains(SECRET), "secret leaked:\n{out}");
    assert!(out.contains("[][][]"), "{out}");
    assert!(out.contains(&format!("home={}", fx.ws.display())), "{out}");
    let names: Vec<&str> = out
        .lines()
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for name in names {
        assert!(
            [
                "PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD"
            ]
            .contains(&name),
            "unexpected variable {name} in\n{out}"
        );
    }
}

#[tokio::test]
async fn writes_are_confined_to_the_workspace() {
    let fx = Fx::new();
    assert_eq!(
        fx.env.sandbox.report().filesystem.status,
        PartStatus::Enforced,
        "Landlock must be enforced on this machine"
    );
    let target = fx.outside.join("pwned.txt");
    let tmp_target = format!("/tmp/norma-sandbox-{}", uuid::Uuid::new_v4().simple());
    let out = fx
        .bash(&format!(
            "echo pwned > {t}; echo pwned > {tmp}; mkdir {o}/d; echo inside > ok.txt; mkdir -p a/b && echo deep > a/b/c.txt; cat /etc/hostname >/dev/null && echo read-ok",
            t = target.display(),
            tmp = tmp_target,
            o = fx.outside.display()
        ))
        .await;
    assert!(!target.exists(), "wrote outside:\n{out}");
    assert!(!PathBuf::from(&tmp_target).exists(), "wrote /tmp:\n{out}");
    assert!(!fx.outside.join("d").exists());
    // With the minimal root the host paths do not exist in the sandbox; without it Landlock
    // refuses the writes. Either way the command is told.
    assert!(
        out.contains("No such file or directory") || out.contains("Permission denied"),
        "{out}"
    );
    assert!(
        out.contains("read-ok"),
        "system files must stay readable:\n{out}"
    );
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("ok.txt")).expect("ok"),
        "inside\n"
    );
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("a/b/c.txt")).expect("c"),
        "deep\n"
    );
}

#[tokio::test]
async fn network_is_denied() {
    let fx = Fx::new();
    assert_eq!(fx.env.sandbox.report().network.status, PartStatus::Enforced);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    // Control: the same command outside the sandbox does connect.
    let control = std::process::Command::new("/bin/bash")
        .args([
            "-c",
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
        ])
        .output()
        .expect("control");
    assert!(String::from_utf8_lossy(&control.stdout).contains("connected"));
    let (control_conn, _) = listener.accept().expect("control connection arrived");
    drop(control_conn);
    let out = fx
        .bash(&format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected || echo refused"
        ))
        .await;
    assert!(
        out.contains("refused") && !out.contains("connected"),
        "{out}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        listener.accept().is_err(),
        "the sandboxed command reached the listener"
    );
}

#[tokio::test]
async fn rlimits_are_applied() {
    let fx = Fx::new();
    let limits = &fx.env.sandbox.config().rlimits;
    let out = fx.bash("ulimit -t; ulimit -u; ulimit -v; ulimit -f").await;
    let got: Vec<&str> = out.lines().collect();
    let expected = [
        limits.cpu_seconds.expect("cpu").to_string(),
        limits.max_processes.expect("nproc").to_string(),
        (limits.address_space_bytes.expect("as") / 1024).to_string(),
        // bash counts `ulimit -f` in 1024-byte blocks.
        (limits.file_size_bytes.expect("fsize") / 1024).to_string(),
    ];
    assert_eq!(got, expected, "{out}");
}

#[tokio::test]
async fn timeout_kills_grandchildren() {
    let fx = Fx::new();
    let started = std::time::Instant::now();
    let err = fx
        .call(
            "Bash",
            json!({"command": "(sleep 2; echo late > late.txt) & bash -c 'sleep 3; echo later > later.txt' & sleep 30", "timeout": 700}),
        )
        .await
        .expect_err("must time out");
    assert_eq!(err.code, "TOOL_TIMEOUT");
    assert!(started.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(
        !fx.ws.join("late.txt").exists(),
        "a grandchild survived the timeout"
    );
    assert!(
        !fx.ws.join("later.txt").exists(),
        "a grandchild survived the timeout"
    );
}

#[tokio::test]
async fn cancellation_kills_the_command() {
    let fx = Fx::new();
    let cancel = fx.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    });
    let err = fx
        .call(
            "Bash",
            json!({"command": "(sleep 2; echo late > late.txt) & sleep 30"}),
        )
        .await
        .expect_err("cancelled");
    assert_eq!(err.code, "CANCELLED");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!fx.ws.join("late.txt").exists());
}

#[tokio::test]
async fn background_task_outlives_its_call_and_dies_at_shutdown() {
    let fx = Fx::new();
    let mut notes = fx.env.tasks.notifications().expect("first take");
    assert!(fx.env.tasks.notifications().is_none());
    let out = fx
        .call(
            "Bash",
            json!({"command": "echo started; sleep 1; echo tick > tick.txt; (sleep 100; echo x) & sleep 100", "run_in_background": true}),
        )
        .await
        .expect("background");
    let task_id = out
        .text
        .split_whitespace()
        .find(|w| w.starts_with("task_"))
        .expect("task id")
        .to_string();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(
        fx.ws.join("tick.txt").exists(),
        "the task did not keep running"
    );
    let info = fx.env.tasks.info(&task_id).expect("info");
    assert_eq!(info.status, TaskStatus::Running);
    assert!(process_alive(info.pgid));
    let out = fx
        .call("TaskOutput", json!({"task_id": task_id}))
        .await
        .expect("output");
    assert!(
        out.text.contains("running") && out.text.contains("started"),
        "{}",
        out.text
    );
    let list = fx.call("TaskList", json!({})).await.expect("list");
    assert!(list.text.contains(&task_id));

    fx.env.tasks.shutdown();
    let ended = fx
        .env
        .tasks
        .wait(&task_id, Duration::from_secs(5))
        .await
        .expect("wait");
    assert!(ended);
    assert_eq!(
        fx.env.tasks.info(&task_id).expect("info").status,
        TaskStatus::Killed
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        live_group_members(info.pgid),
        Vec::<i32>::new(),
        "the task's process group is still alive"
    );
    let note = tokio::time::timeout(Duration::from_secs(2), notes.recv())
        .await
        .expect("notification")
        .expect("channel open");
    assert_eq!(note.task_id, task_id);
    assert_eq!(note.status, TaskStatus::Killed);
}

#[tokio::test]
async fn completed_task_notifies_and_monitor_streams_matches() {
    let fx = Fx::new();
    let mut notes = fx.env.tasks.notifications().expect("notes");
    let out = fx
        .call(
            "Bash",
            json!({"command": "for i in 1 2 3 4; do echo \"step $i\"; echo noise; sleep 0.2; done; exit 3", "run_in_background": true}),
        )
        .await
        .expect("background");
    let task_id = out
        .text
        .split_whitespace()
        .find(|w| w.starts_with("task_"))
        .expect("task id")
        .to_string();
    let out = fx
        .call(
            "Monitor",
            json!({"task_id": task_id, "pattern": "^step", "timeout": 10000}),
        )
        .await
        .expect("monitor");
    assert!(
        out.text.contains("step 1") && out.text.contains("step 4"),
        "{}",
        out.text
    );
    let matched: Vec<&str> = out.text.lines().skip(1).collect();
    assert_eq!(
        matched,
        ["step 1", "step 2", "step 3", "step 4"],
        "{}",
        out.text
    );
    let note = tokio::time::timeout(Duration::from_secs(5), notes.recv())
        .await
        .expect("notification")
        .expect("open");
    assert_eq!(note.status, TaskStatus::Completed);
    assert_eq!(note.exit_code, Some(3));
    let out = fx
        .call(
            "TaskOutput",
            json!({"task_id": task_id, "block": true, "full": true}),
        )
        .await
        .expect("output");
    assert!(
        out.text.contains("exit code 3") && out.text.contains("step 4"),
        "{}",
        out.text
    );
    let err = fx
        .call("TaskOutput", json!({"task_id": "task_0000"}))
        .await
        .expect_err("unknown");
    assert_eq!(err.code, "TASK_NOT_FOUND");
}

const POLICY_CORPUS: [(&str, bool); 14] = [
    ("rm -rf /", true),
    ("sudo rm -rf /*", true),
    ("bash -c 'rm -rf ~'", true),
    ("echo $(rm -rf /)", true),
    ("mkfs.ext4 /dev/sda", true),
    ("dd if=/dev/zero of=/dev/sda", true),
    (":(){ :|:& };:", true),
    ("env X=1 timeout 5 /sbin/reboot", true),
    ("echo 'oops", true),
    ("ls -la", false),
    ("rm -rf build", false),
    ("echo 'rm -rf /'", false),
    ("git status && cargo test", false),
    ("cat notes.txt | grep todo", false),
];

#[tokio::test]
async fn pty_tools_are_denied_exactly_what_bash_is_denied() {
    let fx = Fx::new();
    let bash = fx.tool("Bash");
    let start = fx.tool("ShellStart");
    let write = fx.tool("ShellWrite");
    for (command, denied) in POLICY_CORPUS {
        let expected = if denied {
            SelfDecision::Deny
        } else {
            SelfDecision::Ask
        };
        assert_eq!(
            bash.self_decision(&json!({"command": command})),
            expected,
            "Bash {command:?}"
        );
        assert_eq!(
            start.self_decision(&json!({"command": command})),
            expected,
            "ShellStart {command:?}"
        );
        assert_eq!(
            write.self_decision(&json!({"shell_id": "shell_x", "command": command})),
            expected,
            "ShellWrite {command:?}"
        );
        if denied {
            let err = fx
                .call("Bash", json!({"command": command}))
                .await
                .expect_err("bash denied");
            assert_eq!(err.code, "COMMAND_DENIED", "{command:?}");
            let err = fx
                .call("ShellStart", json!({"command": command}))
                .await
                .expect_err("start denied");
            assert_eq!(err.code, "COMMAND_DENIED", "{command:?}");
        }
    }

    // A real shell: works, is sandboxed, and checks split writes as one line.
    let out = fx.call("ShellStart", json!({})).await.expect("start");
    let id = out.text.split_whitespace().last().expect("id").to_string();
    fx.call(
        "ShellWrite",
        json!({"shell_id": id, "command": "echo pty-$((40+2))"}),
    )
    .await
    .expect("write");
    let target = fx.outside.join("pty.txt");
    fx.call(
        "ShellWrite",
        json!({"shell_id": id, "command": format!("echo x > {}; echo $OPENAI_API_KEY-end", target.display())}),
    )
    .await
    .expect("write");
    let mut screen = String::new();
    for _ in 0..20 {
        let out = fx
            .call("ShellRead", json!({"shell_id": id, "wait_ms": 250}))
            .await
            .expect("read");
        screen.push_str(&out.text);
        if screen.contains("pty-42") && screen.contains("-end") {
            break;
        }
    }
    assert!(screen.contains("pty-42"), "{screen}");
    assert!(
        !target.exists(),
        "the PTY shell wrote outside the workspace"
    );
    assert!(!screen.contains(SECRET), "{screen}");

    fx.call(
        "ShellWrite",
        json!({"shell_id": id, "command": "rm -rf ", "submit": false}),
    )
    .await
    .expect("partial text alone is harmless");
    let split = json!({"shell_id": id, "command": "/"});
    assert_eq!(write.self_decision(&split), SelfDecision::Deny);
    let err = fx
        .call("ShellWrite", split)
        .await
        .expect_err("split command denied");
    assert_eq!(err.code, "COMMAND_DENIED");

    fx.call(
        "ShellResize",
        json!({"shell_id": id, "rows": 40, "cols": 100}),
    )
    .await
    .expect("resize");
    fx.call("ShellClose", json!({"shell_id": id}))
        .await
        .expect("close");
    let err = fx
        .call("ShellRead", json!({"shell_id": id}))
        .await
        .expect_err("closed");
    assert_eq!(err.code, "SHELL_NOT_FOUND");
}

#[tokio::test]
async fn shell_registry_shutdown_kills_shells() {
    let fx = Fx::new();
    let out = fx
        .call(
            "ShellStart",
            json!({"command": "sleep 1; echo alive > alive.txt; sleep 100"}),
        )
        .await
        .expect("start");
    let id = out.text.split_whitespace().last().expect("id").to_string();
    assert_eq!(fx.env.shells.ids(), vec![id]);
    fx.env.shells.shutdown();
    assert!(fx.env.shells.ids().is_empty());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!fx.ws.join("alive.txt").exists());
}

#[tokio::test]
async fn shell_read_returns_a_bounded_slice_of_new_output() {
    let fx = Fx::new();
    let out = fx
        .call(
            "ShellStart",
            json!({"command": "head -c 300000 /dev/zero | tr '\\0' a; echo; echo END-$((1+1)); sleep 100"}),
        )
        .await
        .expect("start");
    let id = out.text.split_whitespace().last().expect("id").to_string();
    let (mut omitted, mut ended) = (false, false);
    for _ in 0..40 {
        let out = fx
            .call("ShellRead", json!({"shell_id": id, "wait_ms": 500}))
            .await
            .expect("read");
        let new = out
            .text
            .split("--- new output ---\n")
            .nth(1)
            .and_then(|rest| rest.split("\n--- screen ---").next())
            .expect("new output section");
        assert!(
            new.len() <= norma::tools::builtin::pty::MAX_READ_BYTES + 100,
            "{} bytes of new output in one read",
            new.len()
        );
        omitted |= new.contains("earlier bytes omitted]");
        if new.contains("END-2") {
            ended = true;
            break;
        }
    }
    assert!(ended, "the shell's output never ended");
    assert!(omitted, "300,000 bytes came back without an omission note");
    fx.env.shells.shutdown();
}
