//! The minimal filesystem a sandboxed command sees (the `mount` part).
//!
//! Inside its own user, mount and PID namespaces (see [`super::namespaces`]) the launcher's
//! PID-1 child builds a new root and `pivot_root`s into it, the way bubblewrap does:
//!
//! 1. every mount is made private, so nothing below propagates back to the host;
//! 2. a small tmpfs is mounted on `/tmp` and made the root (`pivot_root`), the host root
//!    staying reachable at `/oldroot` while the new tree is assembled under `/newroot`;
//! 3. `/newroot` gets read-only bind mounts of [`READ_ONLY_DIRS`] (symlinked ones such as a
//!    merged-`/usr` `/bin` are recreated as symlinks), with [`HIDDEN_PATHS`] covered by
//!    empty read-only mounts; a `/dev` holding only [`DEVICES`] (bind mounts of the host's
//!    nodes), `/dev/fd`-style symlinks and a fresh `devpts`; a private size-limited tmpfs
//!    `/tmp`; a fresh `/proc` of the command's own PID namespace; and the workspace, bound
//!    read-write (no setuid, no devices) at its real path so commands see the same path the
//!    file tools and `HOME` use;
//! 4. the host root is detached, `/newroot` becomes `/` (`pivot_root(".", ".")`) and the
//!    process changes into the workspace.
//!
//! Nothing else of the host exists inside: not the data dir, other workspaces, the server's
//! configuration or secret files, `/run` (and with it the host's path-named UNIX sockets),
//! `/home`, `/root`, `/var` or `/sys`. Landlock (see [`super::landlock`]) still applies on
//! top as a second layer.

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::unistd::{chdir, pivot_root};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Host directories bound read-only (at the same path) when they exist.
pub const READ_ONLY_DIRS: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Sensitive paths inside [`READ_ONLY_DIRS`] that are covered by an empty read-only file or
/// directory (password hashes, sudo rules, SSH host keys, TLS private keys).
pub const HIDDEN_PATHS: [&str; 10] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
];

/// Device nodes of the host bound into the sandbox's `/dev`.
pub const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Options of the sandbox's private `/tmp`: 256 MiB, 65,536 inodes.
pub const TMP_OPTIONS: &str = "mode=1777,size=268435456,nr_inodes=65536";

/// `AT_RECURSIVE` of `mount_setattr(2)`.
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// What to make visible besides the fixed system directories.
#[derive(Clone, Debug)]
pub struct RootSpec {
    /// Bound read-write; the command's working directory.
    pub workspace: PathBuf,
    /// Bound read-only at their own paths.
    pub extra_read: Vec<PathBuf>,
}

/// Builds the minimal root and changes into it and then into the workspace. Must run in a
/// process that owns a fresh mount namespace (and, for `/proc`, is inside the PID namespace
/// the `/proc` should show).
pub fn enter_minimal_root(spec: &RootSpec) -> Result<(), String> {
    // Resolve host paths while the host root is still `/`.
    let workspace_src = canonical(&spec.workspace)?;
    let extra: Vec<(PathBuf, PathBuf, bool)> = spec
        .extra_read
        .iter()
        .filter_map(|p| {
            canonical(p)
                .ok()
                .map(|c| (c.clone(), p.clone(), c.is_dir()))
        })
        .collect();

    mnt(
        None::<&str>,
        "/",
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    mnt(
        Some("tmpfs"),
        "/tmp",
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=1048576"),
    )?;
    chdir("/tmp").map_err(|e| format!("chdir /tmp: {e}"))?;
    for dir in ["newroot", "oldroot"] {
        std::fs::create_dir(dir).map_err(|e| format!("mkdir {dir}: {e}"))?;
    }
    mnt(
        Some("newroot"),
        "newroot",
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    pivot_root(".", "oldroot").map_err(|e| format!("pivot_root to the staging tmpfs: {e}"))?;
    chdir("/").map_err(|e| format!("chdir /: {e}"))?;

    for dir in READ_ONLY_DIRS {
        let src = under("/oldroot", Path::new(dir));
        match std::fs::symlink_metadata(&src) {
            Err(_) => continue,
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&src).map_err(|e| format!("{dir}: {e}"))?;
                std::os::unix::fs::symlink(&target, under("/newroot", Path::new(dir)))
                    .map_err(|e| format!("symlink {dir}: {e}"))?;
            }
            Ok(_) => bind(&src, &under("/newroot", Path::new(dir)), true, true)?,
        }
    }
    for (src, dst, is_dir) in &extra {
        bind(
            &under("/oldroot", src),
            &under("/newroot", dst),
            true,
            *is_dir,
        )?;
    }
    for path in HIDDEN_PATHS {
        hide(&under("/newroot", Path::new(path)))?;
    }
    build_dev()?;
    let tmp = Path::new("/newroot/tmp");
    mkdir_all(tmp)?;
    mnt(
        Some("tmpfs"),
        tmp,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(TMP_OPTIONS),
    )?;
    let proc = Path::new("/newroot/proc");
    mkdir_all(proc)?;
    mnt(
        Some("proc"),
        proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    )?;
    // After /tmp and /proc: the workspace may live below either path.
    bind(
        &under("/oldroot", &workspace_src),
        &under("/newroot", &spec.workspace),
        false,
        true,
    )?;
    // The root directory itself (only mount points and symlinks) is read-only.
    set_attr(Path::new("/newroot"), MOUNT_ATTR_RDONLY, false)?;

    umount2("/oldroot", MntFlags::MNT_DETACH).map_err(|e| format!("detach the host root: {e}"))?;
    chdir("/newroot").map_err(|e| format!("chdir /newroot: {e}"))?;
    pivot_root(".", ".").map_err(|e| format!("pivot_root to the new root: {e}"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("detach the staging root: {e}"))?;
    chdir("/").map_err(|e| format!("chdir /: {e}"))?;
    chdir(&spec.workspace).map_err(|e| format!("chdir {}: {e}", spec.workspace.display()))?;
    Ok(())
}

/// `/dev` with only the allowed device nodes, the `fd`/`std*` symlinks and a private
/// `devpts` (for programs that open their own terminals).
fn build_dev() -> Result<(), String> {
    let dev = Path::new("/newroot/dev");
    mkdir_all(dev)?;
    mnt(
        Some("tmpfs"),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("mode=0755,size=65536"),
    )?;
    for name in DEVICES {
        let src = Path::new("/oldroot/dev").join(name);
        if src.exists() {
            bind(&src, &dev.join(name), false, false)?;
        }
    }
    let links = [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ];
    for (name, target) in links {
        std::os::unix::fs::symlink(target, dev.join(name))
            .map_err(|e| format!("symlink /dev/{name}: {e}"))?;
    }
    let pts = dev.join("pts");
    mkdir_all(&pts)?;
    // A private devpts instance; without one only inherited terminals work (PTY shells get
    // theirs from the server), so a failure here is not fatal.
    let _ = mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    );
    set_attr(dev, MOUNT_ATTR_RDONLY, false)
}

/// Covers `path` (if it exists) with an empty read-only directory or file.
fn hide(path: &Path) -> Result<(), String> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if meta.is_dir() {
        mnt(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0755,size=4096"),
        )
    } else if meta.is_file() {
        bind(Path::new("/oldroot/dev/null"), path, true, false)
    } else {
        // A symlink resolves inside the read-only tree; nothing to cover.
        Ok(())
    }
}

/// Bind-mounts `src` on `dst` (created as a directory or an empty file), recursively, then
/// sets no-setuid and no-devices (except for device nodes) and optionally read-only on the
/// whole bound tree.
fn bind(src: &Path, dst: &Path, readonly: bool, dir: bool) -> Result<(), String> {
    if dir {
        mkdir_all(dst)?;
    } else {
        if let Some(parent) = dst.parent() {
            mkdir_all(parent)?;
        }
        if std::fs::symlink_metadata(dst).is_err() {
            std::fs::File::create(dst).map_err(|e| format!("create {}: {e}", dst.display()))?;
        }
    }
    mnt(
        Some(src),
        dst,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    let device = std::fs::metadata(src).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_char_device()
    });
    let mut attrs = MOUNT_ATTR_NOSUID;
    if !device {
        attrs |= MOUNT_ATTR_NODEV;
    }
    if readonly {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    set_attr(dst, attrs, true)
}

/// `mount_setattr(2)`: adds `attrs` to the mount at `path` (and its submounts when
/// `recursive`), keeping every flag the host locked.
fn set_attr(path: &Path, attrs: u64, recursive: bool) -> Result<(), String> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: NUL in path", path.display()))?;
    let mut attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: the path is a valid C string and `attr` a valid `struct mount_attr` of the size
    // passed; the kernel only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            flags,
            &mut attr as *mut MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "mount_setattr {}: {} (needs Linux 5.12 or later)",
            path.display(),
            std::io::Error::last_os_error()
        ))
    }
}

fn mnt(
    source: Option<impl AsRef<Path>>,
    target: impl AsRef<Path>,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    let target = target.as_ref();
    let source = source.as_ref().map(|s| s.as_ref());
    mount(source, target, fstype, flags, data).map_err(|e| {
        format!(
            "mount {} on {}: {e}",
            source.map_or("-".into(), |s| s.display().to_string()),
            target.display()
        )
    })
}

fn mkdir_all(path: &Path) -> Result<(), String> {
    std::fs::create_dir_all(path).map_err(|e| format!("mkdir {}: {e}", path.display()))
}

fn canonical(path: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `root` joined with the absolute `path`, lexically (`..` and `.` are dropped).
fn under(root: &str, path: &Path) -> PathBuf {
    let mut out = PathBuf::from(root);
    for part in path.components() {
        if let Component::Normal(name) = part {
            out.push(name);
        }
    }
    out
}

/// The directory of `readable` (the directories sandboxed commands can read) that holds
/// `path`, comparing both as written and with symlinks resolved (a merged-`/usr` `/bin` is
/// `/usr/bin`); `path` need not exist yet. Used at start-up to refuse data dirs and secret
/// files there.
pub fn readable_dir_containing(path: &Path, readable: &[PathBuf]) -> Option<PathBuf> {
    let resolved = resolve_existing_prefix(path);
    readable
        .iter()
        .find(|dir| {
            let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            resolved.starts_with(&canonical) || path.starts_with(dir)
        })
        .cloned()
}

/// `path` made absolute with its longest existing prefix canonicalized (the rest appended
/// as written), so a data dir that does not exist yet is still placed correctly.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    let mut existing = absolute.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return absolute,
        }
    }
    let mut out = std::fs::canonicalize(&existing).unwrap_or(existing);
    for name in rest.into_iter().rev() {
        out.push(name);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_joins_lexically_and_drops_dot_dot() {
        assert_eq!(
            under("/newroot", Path::new("/a/../b/./c")),
            PathBuf::from("/newroot/a/b/c")
        );
    }

    #[test]
    fn readable_dirs_are_detected_through_symlinks_and_for_missing_paths() {
        let dirs: Vec<PathBuf> = READ_ONLY_DIRS
            .iter()
            .map(PathBuf::from)
            .chain([PathBuf::from("/srv/ro")])
            .collect();
        let found = |p: &str| readable_dir_containing(Path::new(p), &dirs);
        assert_eq!(found("/etc/norma/secret"), Some(PathBuf::from("/etc")));
        assert_eq!(found("/usr/share/x/y"), Some(PathBuf::from("/usr")));
        assert_eq!(found("/srv/ro/data"), Some(PathBuf::from("/srv/ro")));
        assert_eq!(found("/var/lib/norma"), None);
        assert_eq!(found("/tmp/data"), None);
        // A prefix by component, not by string: /etcetera is not /etc.
        assert_eq!(found("/etcetera/x"), None);
        // Through a symlink into a readable directory.
        let tmp = tempfile::tempdir().expect("tempdir");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink("/etc", &link).expect("symlink");
        assert_eq!(
            readable_dir_containing(&link.join("x"), &dirs),
            Some(PathBuf::from("/etc"))
        );
    }
}
