//! A snapshot's manifest (what a workspace holds: path → kind, content hash, mode, size) and
//! the confined walk that builds one from a workspace directory.
//!
//! The walk goes through `cap_std` directory handles only and descends only into entries
//! listed as directories, so neither a symlink nor a directory swapped for one leads it
//! outside the workspace. Regular files are
//! opened with `O_NOFOLLOW | O_NONBLOCK` beneath their parent and checked with `fstat` on the
//! opened descriptor ([`Workspace::open_regular`]): a FIFO, socket or device is never read,
//! and neither is a file with several hard links (its content may live outside too). Such
//! entries are left out of the snapshot and counted. Symlinks are recorded as their target
//! text, never followed. Hashes are SHA-256 over a streamed read (bounded memory); a file whose
//! size, times, inode and mode did not change since the last walk keeps its hash (`cache`).

use super::SnapshotError;
use crate::workspace::{MAX_COMPONENT_BYTES, MAX_PATH_BYTES, Workspace};
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Manifest format version.
pub const MANIFEST_VERSION: u32 = 1;

/// What one path of the workspace is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    Dir { mode: u32 },
    File { hash: String, size: u64, mode: u32 },
    Symlink { target: EncodedPath },
}

/// A path as bytes: UTF-8 text when it is, else base64 of the raw bytes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EncodedPath {
    Text(String),
    Raw { b64: String },
}

impl EncodedPath {
    pub fn encode(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::Text(text.to_owned()),
            Err(_) => {
                use base64::Engine;
                Self::Raw {
                    b64: base64::engine::general_purpose::STANDARD.encode(bytes),
                }
            }
        }
    }

    pub fn bytes(&self) -> Result<Vec<u8>, SnapshotError> {
        match self {
            Self::Text(text) => Ok(text.as_bytes().to_vec()),
            Self::Raw { b64 } => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|_| SnapshotError::BadManifest("a path is not valid base64".into()))
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: EncodedPath,
    #[serde(flatten)]
    pub kind: EntryKind,
}

/// Everything a workspace held at one point, entries sorted by path bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub entries: Vec<Entry>,
}

impl Manifest {
    /// The manifest's bytes and its id (the hex SHA-256 of those bytes).
    pub fn encode(&self) -> (Vec<u8>, String) {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        let id = hex::encode(Sha256::digest(&bytes));
        (bytes, id)
    }

    /// Parses and checks a manifest read back from the object store: every path is a clean
    /// relative path, every hash well formed, and the bounds hold.
    pub fn decode(bytes: &[u8], bounds: &Bounds) -> Result<Self, SnapshotError> {
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|error| SnapshotError::BadManifest(error.to_string()))?;
        if manifest.version != MANIFEST_VERSION {
            return Err(SnapshotError::BadManifest(format!(
                "unknown manifest version {}",
                manifest.version
            )));
        }
        if manifest.entries.len() > bounds.max_files {
            return Err(SnapshotError::TooManyFiles {
                max: bounds.max_files,
            });
        }
        let mut total = 0u64;
        for entry in &manifest.entries {
            clean_relative(&entry.path.bytes()?)?;
            match &entry.kind {
                EntryKind::File { hash, size, .. } => {
                    if !is_hash(hash) {
                        return Err(SnapshotError::BadManifest("a malformed hash".into()));
                    }
                    total = total.saturating_add(*size);
                }
                EntryKind::Symlink { target } => {
                    let target = target.bytes()?;
                    if target.is_empty() || target.len() > MAX_PATH_BYTES || target.contains(&0) {
                        return Err(SnapshotError::BadManifest("a malformed link".into()));
                    }
                }
                EntryKind::Dir { .. } => {}
            }
        }
        if total > bounds.max_bytes {
            return Err(SnapshotError::TooLarge {
                bytes: total,
                max: bounds.max_bytes,
            });
        }
        Ok(manifest)
    }

    /// Total bytes of the regular files.
    pub fn bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|entry| match entry.kind {
                EntryKind::File { size, .. } => size,
                _ => 0,
            })
            .fold(0u64, u64::saturating_add)
    }
}

/// What one snapshot may hold.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_files: usize,
    pub max_bytes: u64,
}

/// True for a lowercase hex SHA-256.
pub fn is_hash(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `bytes` as a relative path of normal components within the workspace name limits.
pub fn clean_relative(bytes: &[u8]) -> Result<PathBuf, SnapshotError> {
    let bad = |why: &str| SnapshotError::BadManifest(format!("path {why}"));
    if bytes.is_empty() || bytes.len() > MAX_PATH_BYTES || bytes.contains(&0) {
        return Err(bad("empty, too long or with a NUL byte"));
    }
    // Split by hand: `Path::components` would quietly drop `.` and empty pieces.
    for piece in bytes.split(|b| *b == b'/') {
        if piece.is_empty() || piece == b"." || piece == b".." || piece.len() > MAX_COMPONENT_BYTES
        {
            return Err(bad("not a clean relative path"));
        }
    }
    Ok(Path::new(OsStr::from_bytes(bytes)).to_path_buf())
}

/// What decides whether a file's cached hash still holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatKey {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    mode: u32,
}

impl StatKey {
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            mode: meta.mode(),
        }
    }
}

/// Hashes of files by path, valid while their [`StatKey`] holds.
pub type HashCache = HashMap<PathBuf, (StatKey, String)>;

/// A workspace walked into a manifest.
pub struct Scan {
    pub manifest: Manifest,
    /// Paths of the regular files (in manifest order, for uploads).
    pub files: Vec<(PathBuf, String, u64)>,
    /// Entries left out: special files, hard-linked files.
    pub skipped: usize,
}

/// Walks `workspace` into a manifest within `bounds`, hashing changed files.
pub fn scan(
    workspace: &Workspace,
    bounds: &Bounds,
    cache: &mut HashCache,
) -> Result<Scan, SnapshotError> {
    let mut entries = Vec::new();
    let mut files = Vec::new();
    let mut skipped = 0usize;
    let mut total = 0u64;
    let mut seen = HashCache::new();
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = open_dir(workspace.dir(), &rel)?;
        for item in dir.entries()? {
            let item = item?;
            let name = item.file_name();
            let path = rel.join(&name);
            if is_transient_name(&name) {
                continue;
            }
            if entries.len() >= bounds.max_files {
                return Err(SnapshotError::TooManyFiles {
                    max: bounds.max_files,
                });
            }
            let kind = item.file_type()?;
            let encoded = EncodedPath::encode(path.as_os_str().as_bytes());
            if kind.is_dir() {
                let meta = dir.symlink_metadata(&name)?;
                use cap_std::fs::PermissionsExt;
                entries.push(Entry {
                    path: encoded,
                    kind: EntryKind::Dir {
                        mode: meta.permissions().mode() & 0o7777,
                    },
                });
                stack.push(path);
            } else if kind.is_symlink() {
                let target = dir.read_link_contents(&name)?;
                entries.push(Entry {
                    path: encoded,
                    kind: EntryKind::Symlink {
                        target: EncodedPath::encode(target.as_os_str().as_bytes()),
                    },
                });
            } else if kind.is_file() {
                let Ok((file, meta)) = workspace.open_regular(&path) else {
                    // Hard-linked, or swapped for something else meanwhile.
                    skipped += 1;
                    continue;
                };
                let key = StatKey::of(&meta);
                total = total.saturating_add(meta.len());
                if total > bounds.max_bytes {
                    return Err(SnapshotError::TooLarge {
                        bytes: total,
                        max: bounds.max_bytes,
                    });
                }
                let hash = match cache.get(&path) {
                    Some((cached, hash)) if *cached == key => hash.clone(),
                    _ => hash_reader(file)?.0,
                };
                use std::os::unix::fs::MetadataExt;
                let mode = meta.mode() & 0o7777;
                seen.insert(path.clone(), (key, hash.clone()));
                files.push((path, hash.clone(), meta.len()));
                entries.push(Entry {
                    path: encoded,
                    kind: EntryKind::File {
                        hash,
                        size: meta.len(),
                        mode,
                    },
                });
            } else {
                skipped += 1;
            }
        }
    }
    *cache = seen;
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Scan {
        manifest: Manifest {
            version: MANIFEST_VERSION,
            entries,
        },
        files,
        skipped,
    })
}

/// Temporary files of atomic writes and restores: never part of a snapshot.
pub fn is_transient_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    bytes.starts_with(b".")
        && (contains(bytes, b".norma-tmp-") || bytes.starts_with(b".norma-restore-"))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Opens a directory beneath `root`. The walks descend only into entries listed as
/// directories (not links); one swapped for a link meanwhile still resolves inside `root`
/// (cap-std refuses every escape), and the walks' entry bounds cap any loop it makes.
pub fn open_dir(root: &Dir, rel: &Path) -> std::io::Result<Dir> {
    if rel.as_os_str().is_empty() {
        root.try_clone()
    } else {
        root.open_dir(rel)
    }
}

/// SHA-256 and length of everything `reader` yields, read in 64 KiB pieces.
pub fn hash_reader(mut reader: impl Read) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), len))
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
