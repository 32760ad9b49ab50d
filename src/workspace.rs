//! The session workspace (D5, D10): a server-created directory per session and the only place
//! file tools may touch.
//!
//! The directory path is derived from server-issued ids only. Every access resolves the model's
//! path lexically (relative, or absolute inside the root), rejects NUL bytes, backslashes and
//! over-long paths, and then opens it beneath a `cap_std::fs::Dir`, which refuses `..` escapes,
//! absolute paths and symlinks that lead outside — also when one is swapped in during the call.
//! Regular files with more than one hard link are refused: their content lives outside too.
//!
//! Only regular files are opened for reading. The parent directory is opened beneath the
//! handle, then the last component with `O_NONBLOCK | O_NOFOLLOW` relative to it; the opened
//! descriptor is `fstat`ed and anything but a regular file — a FIFO, a socket, a device, a
//! directory, a symlink as the last component — is refused with `NOT_A_REGULAR_FILE` before a
//! single byte is read. Without this a FIFO made by a command (`mkfifo p`) would block a
//! thread forever on `open` or `read` (a tokio worker, where Read and Write do small files on
//! a local workspace, or a blocking-pool thread).

use crate::ids::{SessionId, TenantId};
use crate::tools::ToolError;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, MetadataExt, OpenOptions};
use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

/// Error codes the workspace hands to file tools.
pub mod codes {
    pub const PATH_OUTSIDE_WORKSPACE: &str = "PATH_OUTSIDE_WORKSPACE";
    pub const PATH_INVALID: &str = "PATH_INVALID";
    pub const PATH_TOO_LONG: &str = "PATH_TOO_LONG";
    pub const FILE_NOT_FOUND: &str = "FILE_NOT_FOUND";
    pub const NOT_A_REGULAR_FILE: &str = "NOT_A_REGULAR_FILE";
    pub const NOT_A_DIRECTORY: &str = "NOT_A_DIRECTORY";
    pub const HARD_LINKED_FILE: &str = "HARD_LINKED_FILE";
    pub const FILE_TOO_LARGE: &str = "FILE_TOO_LARGE";
    pub const WORKSPACE_UNAVAILABLE: &str = "WORKSPACE_UNAVAILABLE";
    pub const IO_ERROR: &str = "IO_ERROR";
}

/// Longest accepted model path, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted single path component, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// Why a workspace could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("session id {0:?} is not a server-issued id")]
    MalformedSessionId(String),
    #[error("workspace I/O error: {0}")]
    Io(#[from] io::Error),
}

/// A session's workspace: its absolute root path and a capability handle on it.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    dir: Dir,
}

impl Workspace {
    /// Creates (or reopens) `<root_dir>/<tenant dir>/<session id>`.
    ///
    /// The tenant directory is the tenant id itself when it is a short `[A-Za-z0-9_-]` token,
    /// otherwise `t-` + the hex SHA-256 of it. The session id must be well formed.
    pub fn create(
        root_dir: &Path,
        tenant: &TenantId,
        session: &SessionId,
    ) -> Result<Self, WorkspaceError> {
        if !session.is_well_formed() {
            return Err(WorkspaceError::MalformedSessionId(session.to_string()));
        }
        let root = root_dir
            .join(tenant_dir_name(tenant))
            .join(session.as_str());
        std::fs::create_dir_all(&root)?;
        Self::open(&root)
    }

    /// Opens an existing workspace directory (the path a [`crate::tools::ToolContext`] carries).
    pub fn open(root: &Path) -> Result<Self, WorkspaceError> {
        Ok(Self::open_canonical(std::fs::canonicalize(root)?)?)
    }

    /// Opens a workspace directory whose path is already canonical.
    fn open_canonical(root: PathBuf) -> io::Result<Self> {
        let dir = Dir::open_ambient_dir(&root, ambient_authority())?;
        Ok(Self { root, dir })
    }

    /// Opens the workspace of a tool call, or fails with `WORKSPACE_UNAVAILABLE`. `root` is the
    /// canonical root the session's environment got from [`Workspace::create`] (a
    /// [`crate::tools::ToolContext`]'s `workspace`), so it is not canonicalized again: one
    /// directory open per call instead of a `readlink` per path component as well. Every open
    /// beneath it stays confined by the directory handle whatever the path's spelling.
    pub fn for_tool(root: Option<&PathBuf>) -> Result<Self, ToolError> {
        let root = root.ok_or_else(|| {
            ToolError::new(
                codes::WORKSPACE_UNAVAILABLE,
                "this session has no workspace directory",
            )
        })?;
        Self::open_canonical(root.clone())
            .map_err(|e| ToolError::new(codes::WORKSPACE_UNAVAILABLE, e.to_string()))
    }

    /// The canonical absolute root path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The capability handle; every open beneath it is confined.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Deletes the workspace and everything in it.
    pub fn remove(self) -> io::Result<()> {
        let root = self.root.clone();
        drop(self.dir);
        std::fs::remove_dir_all(root)
    }

    /// Resolves a model-supplied path to a normalized path relative to the root.
    ///
    /// Accepts relative paths and absolute paths inside the root. `..` is resolved lexically
    /// and may not climb above the root. The empty path and `.` mean the root itself.
    pub fn resolve(&self, model_path: &str) -> Result<PathBuf, ToolError> {
        if model_path.contains('\0') {
            return Err(ToolError::new(
                codes::PATH_INVALID,
                "path contains a NUL byte",
            ));
        }
        if model_path.contains('\\') {
            return Err(ToolError::new(
                codes::PATH_INVALID,
                "path contains a backslash; use '/' as the separator",
            ));
        }
        if model_path.len() > MAX_PATH_BYTES {
            return Err(ToolError::new(
                codes::PATH_TOO_LONG,
                format!("path is longer than {MAX_PATH_BYTES} bytes"),
            ));
        }
        let path = Path::new(model_path);
        let relative = if path.is_absolute() {
            path.strip_prefix(&self.root)
                .map_err(|_| outside(model_path))?
        } else {
            path
        };
        let mut out = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::Normal(name) => {
                    if name.len() > MAX_COMPONENT_BYTES {
                        return Err(ToolError::new(
                            codes::PATH_TOO_LONG,
                            format!("a path component is longer than {MAX_COMPONENT_BYTES} bytes"),
                        ));
                    }
                    out.push(name);
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(outside(model_path));
                    }
                }
                Component::RootDir | Component::Prefix(_) => return Err(outside(model_path)),
            }
        }
        Ok(out)
    }

    /// The path shown to the model for a resolved relative path.
    pub fn display(&self, rel: &Path) -> String {
        if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.to_string_lossy().into_owned()
        }
    }

    /// Opens `rel` for reading if and only if it is a regular file with one link.
    ///
    /// The last component is opened with `O_NONBLOCK | O_NOFOLLOW` beneath its (confined)
    /// parent directory and checked with `fstat` on the opened descriptor, so neither a FIFO nor
    /// a symlink or file swapped in between check and open is ever read.
    pub fn open_regular(
        &self,
        rel: &Path,
    ) -> Result<(std::fs::File, std::fs::Metadata), ToolError> {
        use nix::fcntl::{OFlag, openat};
        use nix::sys::stat::Mode;
        let display = self.display(rel);
        let Some(name) = rel.file_name() else {
            return Err(not_regular(&display, "a directory"));
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        // A file at the root is opened beneath the root's own handle: its name is one normal
        // component (never `..`, never a `/`), so no second handle on the root is needed.
        let opened_parent;
        let parent_dir = if parent.as_os_str().is_empty() {
            &self.dir
        } else {
            opened_parent = self.dir.open_dir(parent).map_err(|e| map_io(e, &display))?;
            &opened_parent
        };
        let flags = OFlag::O_RDONLY
            | OFlag::O_NONBLOCK
            | OFlag::O_NOFOLLOW
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = match openat(parent_dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            // O_NOFOLLOW on a symlink: ELOOP. Say what it is rather than "outside".
            Err(nix::errno::Errno::ELOOP) => {
                return Err(not_regular(&display, "a symbolic link"));
            }
            Err(errno) => return Err(map_io(io::Error::from(errno), &display)),
        };
        let file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(|e| map_io(e, &display))?;
        let kind = meta.file_type();
        if !kind.is_file() {
            use std::os::unix::fs::FileTypeExt;
            let what = if kind.is_dir() {
                "a directory"
            } else if kind.is_fifo() {
                "a FIFO (named pipe)"
            } else if kind.is_socket() {
                "a socket"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else {
                "not a regular file"
            };
            return Err(not_regular(&display, what));
        }
        if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
            return Err(hard_linked(&display));
        }
        Ok((file, meta))
    }

    /// Reads a regular file (see [`Workspace::open_regular`]), refusing files over `max_bytes`.
    pub fn read_file(&self, rel: &Path, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        OpenedFile::open(self, rel)?.into_bytes(max_bytes)
    }

    /// Reads a UTF-8 text file (see [`Workspace::read_file`]); binary content is `BINARY_FILE`.
    pub fn read_text(&self, rel: &Path, max_bytes: u64) -> Result<String, ToolError> {
        OpenedFile::open(self, rel)?.into_text(max_bytes)
    }

    /// Writes `contents` atomically: a temporary file beside the target, then a rename.
    ///
    /// Not fsynced: a reader — or the process after a crash of its own — sees the old file or
    /// the new one, never a part; only a crash of the machine itself can lose the newest
    /// writes. An fsync per write cost a few milliseconds of the run's thread and ~4 % of the
    /// server's CPU in the approval bench (one `Write` per run), for a durability the rest of
    /// a run's effects do not have either (commands write without it).
    ///
    /// Parent directories are created. An existing target must be a regular file with a single
    /// link; a symlink at the target is replaced by the rename, never followed.
    pub fn write_atomic(&self, rel: &Path, contents: &[u8]) -> Result<(), ToolError> {
        let display = self.display(rel);
        let name = rel
            .file_name()
            .ok_or_else(|| ToolError::new(codes::PATH_INVALID, "path names no file"))?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let parent_dir = match self.dir.open_dir(dot_if_empty(parent)) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.dir
                    .create_dir_all(parent)
                    .map_err(|e| map_io(e, &display))?;
                self.dir.open_dir(parent).map_err(|e| map_io(e, &display))?
            }
            Err(e) => return Err(map_io(e, &display)),
        };
        match parent_dir.symlink_metadata(name) {
            Ok(meta) if meta.is_dir() => return Err(not_regular(&display, "a directory")),
            Ok(meta) if meta.is_file() && meta.nlink() > 1 => return Err(hard_linked(&display)),
            Ok(meta) if !meta.is_file() && !meta.is_symlink() => {
                // FIFOs, sockets, devices: never replaced or written through.
                return Err(not_regular(&display, "not a regular file"));
            }
            Ok(meta) if meta.is_symlink() => {
                // A link leading outside is refused; one staying inside is replaced by the
                // new file (the rename never writes through a link).
                match parent_dir.metadata(name) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(map_io(e, &display)),
                }
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(map_io(e, &display)),
        }
        let tmp_name = format!(
            ".{}.norma-tmp-{}",
            name.to_string_lossy(),
            uuid::Uuid::new_v4().simple()
        );
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let result = (|| -> io::Result<()> {
            let mut tmp = parent_dir.open_with(&tmp_name, &options)?;
            tmp.write_all(contents)?;
            parent_dir.rename(&tmp_name, &parent_dir, name)
        })();
        if let Err(e) = result {
            // Best effort: the temporary file may not exist if creating it failed.
            let _ = parent_dir.remove_file(&tmp_name);
            return Err(map_io(e, &display));
        }
        Ok(())
    }

    /// Opens a directory beneath the root.
    pub fn open_dir(&self, rel: &Path) -> Result<Dir, ToolError> {
        let display = self.display(rel);
        match self.dir.open_dir(dot_if_empty(rel)) {
            Ok(dir) => Ok(dir),
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => Err(ToolError::new(
                codes::NOT_A_DIRECTORY,
                format!("{display} is not a directory"),
            )),
            Err(e) => Err(map_io(e, &display)),
        }
    }
}

/// True when the bytes look like binary data (a NUL in the first 8 KiB).
pub fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(8192)].contains(&0)
}

/// The directory name used for a tenant: the id itself when it is a safe token, else a hash.
pub fn tenant_dir_name(tenant: &TenantId) -> String {
    let id = tenant.as_str();
    let safe = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('-')
        && !id.starts_with("t-")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if safe {
        id.to_string()
    } else {
        format!("t-{}", hex::encode(Sha256::digest(id.as_bytes())))
    }
}

/// A regular file opened for reading (see [`Workspace::open_regular`]) and what has been read
/// of it so far.
pub struct OpenedFile {
    display: String,
    file: std::fs::File,
    /// Its size when it was opened (`fstat`).
    len: u64,
    bytes: Vec<u8>,
}

impl OpenedFile {
    /// Opens `rel` beneath `ws` (a regular file with one link).
    pub fn open(ws: &Workspace, rel: &Path) -> Result<Self, ToolError> {
        let (file, meta) = ws.open_regular(rel)?;
        Ok(Self {
            display: ws.display(rel),
            file,
            len: meta.len(),
            bytes: Vec::new(),
        })
    }

    /// Reads the file to its end if that is at most `upto` bytes: `true` when it is read
    /// whole. A file larger when opened is not read at all; one that grows past `upto` while
    /// it is read stops there (what was read is kept for [`OpenedFile::into_bytes`]).
    pub fn read_upto(&mut self, upto: u64) -> Result<bool, ToolError> {
        if self.len > upto {
            return Ok(false);
        }
        self.read_on(upto)
    }

    /// The whole file, read on to its end; over `max_bytes` is `FILE_TOO_LARGE`, also when
    /// it grows past the limit while it is read.
    pub fn into_bytes(mut self, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        if self.len > max_bytes {
            return Err(ToolError::new(
                codes::FILE_TOO_LARGE,
                format!(
                    "{} is {} bytes, more than the {max_bytes}-byte limit",
                    self.display, self.len
                ),
            ));
        }
        if !self.read_on(max_bytes)? {
            return Err(ToolError::new(
                codes::FILE_TOO_LARGE,
                format!("{} is larger than the {max_bytes}-byte limit", self.display),
            ));
        }
        Ok(self.bytes)
    }

    /// The whole file as UTF-8 text ([`OpenedFile::into_bytes`]); binary content is
    /// `BINARY_FILE`.
    pub fn into_text(self, max_bytes: u64) -> Result<String, ToolError> {
        let display = self.display.clone();
        text_of(&display, self.into_bytes(max_bytes)?)
    }

    /// Reads on until the end or one byte past `upto` in all; `true` at the end.
    fn read_on(&mut self, upto: u64) -> Result<bool, ToolError> {
        let room = (upto + 1).saturating_sub(self.bytes.len() as u64);
        if self.bytes.capacity() == 0 {
            self.bytes.reserve_exact(self.len.min(upto) as usize);
        }
        (&self.file)
            .take(room)
            .read_to_end(&mut self.bytes)
            .map_err(|e| map_io(e, &self.display))?;
        Ok(self.bytes.len() as u64 <= upto)
    }
}

/// A file's bytes as UTF-8 text; binary content is `BINARY_FILE`.
fn text_of(display: &str, bytes: Vec<u8>) -> Result<String, ToolError> {
    if looks_binary(&bytes) {
        return Err(ToolError::new(
            crate::tools::builtin::codes::BINARY_FILE,
            format!("{display} is a binary file"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        ToolError::new(
            crate::tools::builtin::codes::BINARY_FILE,
            format!("{display} is not valid UTF-8 text"),
        )
    })
}

fn dot_if_empty(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

fn outside(model_path: &str) -> ToolError {
    ToolError::new(
        codes::PATH_OUTSIDE_WORKSPACE,
        format!("{model_path:?} is outside the session workspace"),
    )
}

fn not_regular(display: &str, what: &str) -> ToolError {
    ToolError::new(
        codes::NOT_A_REGULAR_FILE,
        format!("{display} is {what}; file tools open regular files only"),
    )
}

fn hard_linked(display: &str) -> ToolError {
    ToolError::new(
        codes::HARD_LINKED_FILE,
        format!("{display} has more than one hard link; refusing to open it"),
    )
}

/// Maps an I/O error from a confined operation to a tool error code.
pub fn map_io(e: io::Error, display: &str) -> ToolError {
    use nix::libc;
    match e.raw_os_error() {
        Some(libc::ENOENT) => {
            ToolError::new(codes::FILE_NOT_FOUND, format!("{display} does not exist"))
        }
        Some(libc::ENAMETOOLONG) => {
            ToolError::new(codes::PATH_TOO_LONG, format!("{display}: name too long"))
        }
        Some(libc::ENOTDIR) => ToolError::new(
            codes::NOT_A_DIRECTORY,
            format!("{display}: a path component is not a directory"),
        ),
        Some(libc::EISDIR) => not_regular(display, "a directory"),
        // Opening a FIFO for writing without a reader, or a device without its driver.
        Some(libc::ENXIO) | Some(libc::ENODEV) => not_regular(display, "not a regular file"),
        // cap-std reports escapes (`..`, absolute symlinks, links leaving the root) as EPERM
        // or EXDEV; symlink loops as ELOOP.
        Some(libc::EPERM) | Some(libc::EXDEV) | Some(libc::ELOOP) | Some(libc::EACCES) => {
            ToolError::new(
                codes::PATH_OUTSIDE_WORKSPACE,
                format!("{display} resolves outside the session workspace or is not accessible"),
            )
        }
        // cap-std's own escape check reports PermissionDenied without an OS code.
        _ if e.kind() == io::ErrorKind::PermissionDenied => ToolError::new(
            codes::PATH_OUTSIDE_WORKSPACE,
            format!("{display} resolves outside the session workspace"),
        ),
        _ if e.kind() == io::ErrorKind::NotFound => {
            ToolError::new(codes::FILE_NOT_FOUND, format!("{display} does not exist"))
        }
        _ => ToolError::new(codes::IO_ERROR, format!("{display}: {e}")),
    }
}

#[cfg(test)]
#[path = "workspace_tests.rs"]
mod tests;
