//! Landlock rules the launcher applies to itself (the `filesystem` part, a second layer under
//! the minimal root of [`super::rootfs`]): writes only beneath the workspace (plus the private
//! `/tmp` when the minimal root is in place, and a few device files), reads and execution on
//! the system directories, optionally no TCP bind/connect (save connects to the egress
//! proxy's port, see [`super::egress_forwarder`]), and — scoped with ABI 6 — no
//! signals to and no abstract UNIX socket connections with processes outside the sandbox.
//! Without the minimal root this is the only filesystem layer: the data dir, `/run`, `/home`,
//! `/var` and other workspaces are then unreadable, but `/proc` and `/sys` of the host are.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use std::path::PathBuf;

/// The Landlock ABI the rules are written for (file access incl. ioctl, TCP, scopes).
const TARGET_ABI: ABI = ABI::V6;

/// Directories readable (and executable) by sandboxed commands when they exist, besides
/// [`super::rootfs::READ_ONLY_DIRS`].
pub const KERNEL_READ_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Device files a sandboxed command may write to.
pub const WRITABLE_DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
];

/// What the launcher asks Landlock for.
#[derive(Clone, Debug)]
pub struct LandlockRequest {
    /// Restrict file access (writes only beneath `workspace`).
    pub filesystem: bool,
    /// Deny every TCP bind and connect (but connects to `connect_port`).
    pub deny_tcp: bool,
    /// The one TCP port commands may connect to despite `deny_tcp`: the egress proxy's
    /// forwarder on the loopback of the command's own network namespace.
    pub connect_port: Option<u16>,
    /// The only writable tree.
    pub workspace: PathBuf,
    /// Readable trees besides the system directories.
    pub extra_read: Vec<PathBuf>,
    /// `/tmp` is the sandbox's private tmpfs (the minimal root is in place): writable.
    pub private_tmp: bool,
}

/// Applies the request to the calling process. `Ok` carries a note when only part of it is
/// enforced; any failure to enforce what was asked is an `Err`.
pub fn apply(req: &LandlockRequest) -> Result<Option<String>, String> {
    let mut ruleset = Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    if req.filesystem {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(TARGET_ABI))
            .map_err(|e| e.to_string())?;
    }
    if req.deny_tcp {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(|e| e.to_string())?;
    }
    ruleset = ruleset
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(|e| e.to_string())?;
    let mut created = ruleset.create().map_err(|e| e.to_string())?;
    if req.filesystem {
        let read = AccessFs::from_read(TARGET_ABI);
        for dir in super::rootfs::READ_ONLY_DIRS
            .iter()
            .chain(KERNEL_READ_DIRS.iter())
            .map(PathBuf::from)
            .chain(req.extra_read.iter().cloned())
        {
            if let Ok(fd) = PathFd::new(&dir) {
                created = created
                    .add_rule(PathBeneath::new(fd, read))
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
            }
        }
        for dev in WRITABLE_DEVICES {
            if let Ok(fd) = PathFd::new(dev) {
                created = created
                    .add_rule(PathBeneath::new(fd, AccessFs::from_file(TARGET_ABI)))
                    .map_err(|e| format!("{dev}: {e}"))?;
            }
        }
        if req.private_tmp {
            let tmp = PathFd::new("/tmp").map_err(|e| format!("/tmp: {e}"))?;
            created = created
                .add_rule(PathBeneath::new(tmp, AccessFs::from_all(TARGET_ABI)))
                .map_err(|e| format!("/tmp: {e}"))?;
        }
        let ws =
            PathFd::new(&req.workspace).map_err(|e| format!("{}: {e}", req.workspace.display()))?;
        created = created
            .add_rule(PathBeneath::new(ws, AccessFs::from_all(TARGET_ABI)))
            .map_err(|e| format!("{}: {e}", req.workspace.display()))?;
    }
    if let (true, Some(port)) = (req.deny_tcp, req.connect_port) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(|e| format!("TCP port {port}: {e}"))?;
    }
    let status = created.restrict_self().map_err(|e| e.to_string())?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(None),
        RulesetStatus::PartiallyEnforced => Ok(Some(
            "landlock partially enforced: the kernel lacks some requested access rights".into(),
        )),
        RulesetStatus::NotEnforced => Err("landlock is not supported by this kernel".into()),
    }
}
