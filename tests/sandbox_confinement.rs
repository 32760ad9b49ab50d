//! The command sandbox fails closed and sees a minimal filesystem, with real child processes
//! and the real launcher (`norma __sandbox-exec`): commands cannot read the data dir, another
//! session's workspace, `/run`, the server's `/proc/<pid>/environ` or `cmdline`, or connect
//! to a host UNIX socket; `/proc` shows only their own processes; with a required part
//! missing, Bash, background tasks and PTY shells answer `SANDBOX_UNAVAILABLE`, and opting
//! out of the part brings them back.
//!
//! Where a part cannot be enforced on the machine the enforcement tests skip with a message,
//! except under `CI=true`, where they fail.

use norma::ids::{SessionId, TenantId};
use norma::sandbox::{
    PartStatus, Sandbox, SandboxConfig, SandboxPart, SandboxReport, SandboxSettings,
};
use norma::tools::builtin::tasks::TaskRegistry;
use norma::tools::builtin::{SessionShells, pty::ShellRegistry, shell_tools};
use norma::tools::{DynTool, ToolContext, ToolError, ToolOutput};
use norma::workspace::Workspace;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_norma");
const DATA_SECRET: &str = "data-dir-secret-6f1d";
const NEIGHBOUR_SECRET: &str = "neighbour-secret-93ab";

/// A data dir holding a store file, a signing key and two sessions' workspaces, plus a host
/// UNIX socket outside all of them.
struct Fx {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    neighbour: PathBuf,
    socket: PathBuf,
    _listener: std::os::unix::net::UnixListener,
    env: SessionShells,
    tools: Vec<DynTool>,
    ctx: ToolContext,
}

impl Fx {
    fn new(config: SandboxConfig) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        std::fs::create_dir(&data).expect("data");
        std::fs::write(data.join("norma.db"), DATA_SECRET).expect("db");
        std::fs::write(data.join("dev-signing-key"), DATA_SECRET).expect("key");
        let session = SessionId::generate();
        let ws = Workspace::create(&data.join("workspaces"), &TenantId::new("acme"), &session)
            .expect("workspace");
        let other = Workspace::create(
            &data.join("workspaces"),
            &TenantId::new("globex"),
            &SessionId::generate(),
        )
        .expect("neighbour workspace");
        let neighbour = other.root().to_path_buf();
        std::fs::write(neighbour.join("secret.txt"), NEIGHBOUR_SECRET).expect("secret");
        let socket_dir = tmp.path().join("run");
        std::fs::create_dir(&socket_dir).expect("socket dir");
        let socket = socket_dir.join("host.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("host socket");
        let tasks = TaskRegistry::new(&tmp.path().join("tasks"), &session).expect("tasks");
        let env = SessionShells {
            sandbox: Arc::new(Sandbox::probe(config)),
            network: Default::default(),
            tasks,
            shells: ShellRegistry::new(),
        };
        let tools = shell_tools(&env);
        let mut ctx = ToolContext::for_tests();
        ctx.session_id = session;
        ctx.workspace = Some(ws.root().to_path_buf());
        Self {
            _tmp: tmp,
            data,
            neighbour,
            socket,
            _listener: listener,
            env,
            tools,
            ctx,
        }
    }

    fn full() -> Self {
        Self::new(SandboxConfig::new(LAUNCHER))
    }

    fn report(&self) -> &SandboxReport {
        self.env.sandbox.report()
    }

    async fn call(&self, name: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let tool = self
            .tools
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("tool {name}"));
        tool.call(input, &self.ctx).await
    }

    async fn bash(&self, command: &str) -> String {
        self.call("Bash", json!({"command": command}))
            .await
            .unwrap_or_else(|e| panic!("bash {command:?}: {e:?}"))
            .text
    }
}

/// True when every part is enforced; otherwise skips (prints why) or, under `CI=true`, fails.
fn enforced_or_skip(report: &SandboxReport) -> bool {
    let missing: Vec<String> = SandboxPart::ALL
        .iter()
        .filter(|p| !report.part(**p).is_enforced())
        .map(|p| format!("{}: {:?}", p.name(), report.part(*p)))
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "sandbox parts missing under CI=true: {missing:?}"
    );
    eprintln!("skipped: sandbox parts not enforced on this machine: {missing:?}");
    false
}

#[tokio::test]
async fn every_part_is_enforced_and_commands_are_available() {
    let fx = Fx::full();
    if !enforced_or_skip(fx.report()) {
        return;
    }
    let json = serde_json::to_value(fx.report()).expect("json");
    for part in ["env", "filesystem", "mount", "network", "pid", "rlimits"] {
        assert_eq!(json[part]["status"], "enforced", "{part}: {json}");
    }
    assert_eq!(json["commands"]["available"], true, "{json}");
    assert_eq!(
        json["required"],
        json!(["env", "filesystem", "mount", "network", "pid", "rlimits"])
    );
}

#[tokio::test]
async fn commands_cannot_read_the_data_dir_or_another_workspace() {
    let fx = Fx::full();
    if !enforced_or_skip(fx.report()) {
        return;
    }
    let data = fx.data.display();
    let out = fx
        .bash(&format!(
            "cat {data}/norma.db {data}/dev-signing-key; ls {data}; ls {data}/workspaces; \
             cat {}/secret.txt; ls {}",
            fx.neighbour.display(),
            fx.neighbour.display()
        ))
        .await;
    assert!(!out.contains(DATA_SECRET), "data dir readable:\n{out}");
    assert!(
        !out.contains(NEIGHBOUR_SECRET),
        "neighbour readable:\n{out}"
    );
    // Only the path down to its own workspace exists (as empty mount-point directories).
    for line in out.lines() {
        assert!(
            !["norma.db", "dev-signing-key", "globex", "secret.txt"].contains(&line),
            "listed {line}:\n{out}"
        );
    }
    assert!(out.contains("No such file or directory"), "{out}");
    // Its own workspace works, read and write, at the path HOME names.
    let ws = fx.ctx.workspace.clone().expect("ws");
    let out = fx
        .bash("echo mine > own.txt && cat own.txt && pwd && echo $HOME")
        .await;
    assert_eq!(
        out,
        format!("mine\n{}\n{}\n", ws.display(), ws.display()),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("own.txt")).expect("own"),
        "mine\n"
    );
}

#[tokio::test]
async fn only_system_dirs_are_visible_read_only_and_tmp_is_private() {
    let fx = Fx::full();
    if !enforced_or_skip(fx.report()) {
        return;
    }
    let host_tmp = tempfile::NamedTempFile::new().expect("host tmp file");
    let out = fx
        .bash(&format!(
            "ls /run /var /home /root /sys 2>&1; wc -c < /etc/shadow; \
             echo x > /etc/norma-test 2>&1 || echo etc-ro; touch /new 2>&1 || echo root-ro; \
             echo t > /tmp/t && cat /tmp/t; ls {} 2>&1 || echo host-tmp-hidden; \
             echo DEV: $(ls /dev)",
            host_tmp.path().display()
        ))
        .await;
    for missing in ["/run", "/var", "/home", "/root", "/sys"] {
        assert!(
            out.contains(&format!(
                "cannot access '{missing}': No such file or directory"
            )),
            "{missing} visible:\n{out}"
        );
    }
    assert!(out.contains("\n0\n"), "/etc/shadow not hidden:\n{out}");
    assert!(out.contains("etc-ro") && out.contains("root-ro"), "{out}");
    assert!(out.contains("\nt\n"), "private /tmp not writable:\n{out}");
    assert!(out.contains("host-tmp-hidden"), "{out}");
    assert!(!Path::new("/etc/norma-test").exists());
    let devices: Vec<&str> = out
        .lines()
        .find_map(|l| l.strip_prefix("DEV:"))
        .expect("dev listing")
        .split_whitespace()
        .collect();
    for device in devices {
        assert!(
            [
                "null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
                "stderr", "ptmx", "pts"
            ]
            .contains(&device),
            "unexpected /dev entry {device}: {out}"
        );
    }
}

#[tokio::test]
async fn proc_shows_only_the_commands_own_processes_not_the_servers() {
    let fx = Fx::full();
    if !enforced_or_skip(fx.report()) {
        return;
    }
    let server = std::process::id();
    let out = fx
        .bash(&format!(
            "cat /proc/{server}/environ /proc/{server}/cmdline 2>&1; \
             cat /proc/1/cmdline | tr '\\0' ' '; echo; ps -e -o pid=,comm="
        ))
        .await;
    assert!(
        out.contains(&format!(
            "/proc/{server}/environ: No such file or directory"
        )),
        "{out}"
    );
    assert!(
        !out.contains("sandbox_confinement"),
        "server cmdline leaked:\n{out}"
    );
    assert!(out.contains("/bin/bash -c"), "PID 1 is the command:\n{out}");
    let pids: Vec<u32> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(!pids.is_empty(), "{out}");
    assert!(
        pids.iter().all(|p| *p < 10),
        "processes beyond the command's own:\n{out}"
    );
}

#[tokio::test]
async fn host_unix_sockets_are_unreachable() {
    let fx = Fx::full();
    if !enforced_or_skip(fx.report()) {
        return;
    }
    // The same client reaches the socket from outside the sandbox (the check is real).
    // `@name` is the abstract socket `\0name`.
    let probe = "import socket,sys\n\
                 a=sys.argv[1]\n\
                 a='\\0'+a[1:] if a.startswith('@') else a\n\
                 s=socket.socket(socket.AF_UNIX)\n\
                 try:\n  s.connect(a); print('CONNECTED')\n\
                 except OSError as e: print('REFUSED', e)\n";
    let abstract_name = format!("norma-test-{}", std::process::id());
    let _abstract = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("abstract address");
        std::os::unix::net::UnixListener::bind_addr(&addr).expect("abstract socket")
    };
    let ws = fx.ctx.workspace.clone().expect("ws");
    std::fs::write(ws.join("probe.py"), probe).expect("probe script");
    for target in [fx.socket.display().to_string(), format!("@{abstract_name}")] {
        let outside = std::process::Command::new("/usr/bin/python3")
            .arg(ws.join("probe.py"))
            .arg(&target)
            .output()
            .expect("python3 on the host");
        assert!(
            String::from_utf8_lossy(&outside.stdout).contains("CONNECTED"),
            "{target} from outside: {outside:?}"
        );
    }
    let out = fx
        .bash(&format!(
            "/usr/bin/python3 probe.py {}; /usr/bin/python3 probe.py @{abstract_name}",
            fx.socket.display()
        ))
        .await;
    assert!(!out.contains("CONNECTED"), "host socket reached:\n{out}");
    assert_eq!(out.matches("REFUSED").count(), 2, "{out}");
}

fn without_mount() -> SandboxSettings {
    SandboxSettings {
        disable: vec![SandboxPart::Mount],
        ..SandboxSettings::default()
    }
}

#[tokio::test]
async fn a_required_part_that_is_missing_turns_command_tools_off() {
    let fx = Fx::new(SandboxConfig::from_settings(LAUNCHER, &without_mount()));
    let report = fx.report();
    assert_eq!(report.mount.status, PartStatus::Disabled);
    assert!(!report.commands.available);
    let reason = report.commands.reason.clone().expect("reason");
    assert!(reason.contains("`mount`"), "{reason}");
    for (tool, input) in [
        ("Bash", json!({"command": "echo hi"})),
        (
            "Bash",
            json!({"command": "echo hi", "run_in_background": true}),
        ),
        ("ShellStart", json!({})),
    ] {
        let err = fx.call(tool, input.clone()).await.unwrap_err();
        assert_eq!(err.code, "SANDBOX_UNAVAILABLE", "{tool} {input}: {err:?}");
        assert!(err.message.contains("`mount`"), "{err:?}");
    }
    assert!(
        std::fs::read_dir(fx.ctx.workspace.as_ref().expect("ws"))
            .expect("ws")
            .next()
            .is_none(),
        "nothing ran"
    );
}

#[tokio::test]
async fn opting_out_of_a_part_brings_command_tools_back() {
    let mut settings = without_mount();
    settings.require.retain(|p| *p != SandboxPart::Mount);
    let fx = Fx::new(SandboxConfig::from_settings(LAUNCHER, &settings));
    assert!(fx.report().commands.available, "{:?}", fx.report());
    assert_eq!(fx.report().mount.status, PartStatus::Disabled);
    let out = fx.bash("echo back").await;
    assert_eq!(out, "back\n");
}
