//! One session's snapshots: taking one after a mutating call, restoring the head before a run
//! continues, and what this replica knows its local copy matches.
//!
//! The local copy is known to match a snapshot once this replica took or restored it; a
//! mutating call that starts makes it unknown until its snapshot is taken. A run restores
//! the head whenever the copy is not known to match it: after a restart, on the replica that
//! takes a run over, after a call that was interrupted or whose snapshot failed. A copy that
//! matches is left alone (background tasks may have written more since; the next mutating
//! call's snapshot takes that in).

use super::manifest::{self, Bounds, Entry, EntryKind, HashCache, Manifest, StatKey};
use super::{SnapshotError, SnapshotStore};
use crate::ids::{SessionId, TenantId};
use crate::workspace::Workspace;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Attempts of a snapshot whose files changed while they were uploaded.
const TAKE_ATTEMPTS: usize = 3;
/// Bytes per manifest entry allowed when reading one back.
const MANIFEST_BYTES_PER_ENTRY: u64 = 16 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Synced {
    /// A mutating call ran (or was interrupted) since the last snapshot or restore.
    Unknown,
    /// The local copy is this snapshot (`None`: the empty workspace).
    At(Option<String>),
}

/// What the local copy matched before a mutating call began.
pub struct MatchedBefore(Synced);

struct State {
    synced: Synced,
    cache: HashCache,
    /// Blob hashes known to be in the tenant's namespace.
    blobs: HashSet<String>,
}

/// The snapshots of one session's workspace.
pub struct SessionSnapshots {
    store: Arc<SnapshotStore>,
    tenant_dir: String,
    session: String,
    root: PathBuf,
    state: tokio::sync::Mutex<State>,
    /// Snapshot ids taken after calls whose `tool_result` is not written yet.
    taken: std::sync::Mutex<HashMap<String, String>>,
}

/// What a restore did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    pub written: usize,
    pub removed: usize,
    /// Bytes of the restored workspace (its quota measure).
    pub bytes: u64,
}

impl SessionSnapshots {
    pub fn new(
        store: Arc<SnapshotStore>,
        tenant: &TenantId,
        session: &SessionId,
        root: PathBuf,
    ) -> Self {
        Self {
            store,
            tenant_dir: crate::workspace::tenant_dir_name(tenant),
            session: session.to_string(),
            root,
            state: tokio::sync::Mutex::new(State {
                synced: Synced::Unknown,
                cache: HashCache::new(),
                blobs: HashSet::new(),
            }),
            taken: Default::default(),
        }
    }

    /// A mutating call is about to run: the local copy no longer matches a snapshot. Returns
    /// what it matched, for [`SessionSnapshots::undo_mutation`].
    pub async fn begin_mutation(&self) -> MatchedBefore {
        MatchedBefore(std::mem::replace(
            &mut self.state.lock().await.synced,
            Synced::Unknown,
        ))
    }

    /// The call did not run after all (it parked): the local copy matches what it did before.
    pub async fn undo_mutation(&self, before: MatchedBefore) {
        let mut state = self.state.lock().await;
        if state.synced == Synced::Unknown {
            state.synced = before.0;
        }
    }

    /// The snapshot taken after call `tool_use_id`, once (for its `tool_result` event).
    pub fn taken_for(&self, tool_use_id: &str) -> Option<String> {
        self.taken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tool_use_id)
    }

    /// Snapshots the workspace after call `tool_use_id`; the id waits for its result event.
    pub async fn take(&self, tool_use_id: &str, max_bytes: u64) -> Result<String, SnapshotError> {
        let mut state = self.state.lock().await;
        let mut attempt = 0;
        let id = loop {
            attempt += 1;
            match self.take_once(&mut state, max_bytes).await {
                Err(SnapshotError::Changed(_)) if attempt < TAKE_ATTEMPTS => continue,
                other => break other,
            }
        };
        match &id {
            Ok(id) => {
                state.synced = Synced::At(Some(id.clone()));
                self.taken
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(tool_use_id.to_owned(), id.clone());
            }
            Err(_) => state.synced = Synced::Unknown,
        }
        id
    }

    async fn take_once(&self, state: &mut State, max_bytes: u64) -> Result<String, SnapshotError> {
        let bounds = Bounds {
            max_files: self.store.max_files,
            max_bytes,
        };
        let root = self.root.clone();
        let mut cache = std::mem::take(&mut state.cache);
        let (scanned, cache) = tokio::task::spawn_blocking(move || {
            let scanned = open(&root).and_then(|ws| manifest::scan(&ws, &bounds, &mut cache));
            (scanned, cache)
        })
        .await
        .map_err(|error| SnapshotError::Workspace(error.to_string()))?;
        state.cache = cache;
        let scanned = scanned?;
        if scanned.skipped > 0 {
            tracing::info!(
                skipped = scanned.skipped,
                "special or hard-linked files are not part of the workspace snapshot"
            );
        }
        if state.blobs.len() > self.store.max_files.saturating_mul(4) {
            state.blobs.clear();
        }
        let workspace = open(&self.root)?;
        let mut manifest = scanned.manifest;
        for (path, hash, _size) in &scanned.files {
            if state.blobs.contains(hash) {
                continue;
            }
            if self.store.has_blob(&self.tenant_dir, hash).await? {
                state.blobs.insert(hash.clone());
                continue;
            }
            let (file, _) = workspace
                .open_regular(path)
                .map_err(|_| SnapshotError::Changed(path.display().to_string()))?;
            let (sent, size) = self.store.upload_blob(&self.tenant_dir, file).await?;
            if sent != *hash {
                // Written to since the walk: the snapshot holds what was uploaded.
                state.cache.remove(path);
                let encoded = manifest::EncodedPath::encode(path.as_os_str().as_bytes());
                if let Some(entry) = manifest.entries.iter_mut().find(|e| e.path == encoded)
                    && let EntryKind::File {
                        hash: entry_hash,
                        size: entry_size,
                        ..
                    } = &mut entry.kind
                {
                    *entry_hash = sent.clone();
                    *entry_size = size;
                }
            }
            state.blobs.insert(sent);
        }
        if manifest.bytes() > max_bytes {
            return Err(SnapshotError::TooLarge {
                bytes: manifest.bytes(),
                max: max_bytes,
            });
        }
        let (bytes, id) = manifest.encode();
        if state.synced != Synced::At(Some(id.clone())) {
            self.store
                .put_manifest(&self.tenant_dir, &self.session, &id, bytes)
                .await?;
        }
        Ok(id)
    }

    /// Makes the local copy the snapshot `head` (`None`: empty) unless it is known to be it;
    /// writes and removes only what differs. `None` when nothing had to be checked.
    pub async fn restore(
        &self,
        head: Option<&str>,
        max_bytes: u64,
    ) -> Result<Option<Restored>, SnapshotError> {
        let mut state = self.state.lock().await;
        // Ids of earlier runs' calls whose results were never written are stale now.
        self.taken.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let head = head.map(str::to_owned);
        if state.synced == Synced::At(head.clone()) {
            return Ok(None);
        }
        let bounds = Bounds {
            max_files: self.store.max_files,
            max_bytes,
        };
        let wanted = match &head {
            Some(id) => {
                let limit = (bounds.max_files as u64).saturating_mul(MANIFEST_BYTES_PER_ENTRY);
                let bytes = self
                    .store
                    .get_manifest(&self.tenant_dir, &self.session, id, limit)
                    .await?;
                Manifest::decode(&bytes, &bounds)?
            }
            None => Manifest::default(),
        };
        let root = self.root.clone();
        let cache = std::mem::take(&mut state.cache);
        let entries = wanted.entries.clone();
        let limit = bounds.max_files.saturating_mul(4).max(1024);
        let (plan, cache) = tokio::task::spawn_blocking(move || {
            let planned = open(&root).and_then(|ws| plan(&ws, &entries, &cache, limit));
            (planned, cache)
        })
        .await
        .map_err(|error| SnapshotError::Workspace(error.to_string()))?;
        let plan = plan?;
        let mut cache = cache;
        let workspace = open(&self.root)?;
        let dir = workspace.dir();
        let mut restored = Restored {
            bytes: wanted.bytes(),
            ..Restored::default()
        };
        for path in &plan.remove {
            cache.remove(path);
            let removed = match dir.symlink_metadata(path) {
                Ok(meta) if meta.is_dir() => dir.remove_dir_all(path),
                Ok(_) => dir.remove_file(path),
                Err(error) => Err(error),
            };
            match removed {
                Ok(()) => restored.removed += 1,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error.into()),
            }
        }
        for (path, _) in &plan.dirs {
            match dir.create_dir(path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(error) => return Err(error.into()),
            }
        }
        for fetch in &plan.fetch {
            self.fetch(&workspace, fetch).await?;
            cache.remove(&fetch.path);
            restored.written += 1;
        }
        for (path, mode) in &plan.chmod {
            set_mode(dir, path, *mode)?;
        }
        for (path, target) in &plan.links {
            make_symlink(dir, path, target)?;
            restored.written += 1;
        }
        // Directory modes last (deepest first): a read-only directory is filled before.
        for (path, mode) in plan.dirs.iter().rev() {
            set_mode(dir, path, *mode)?;
        }
        state.cache = cache;
        state.synced = Synced::At(head);
        Ok(Some(restored))
    }

    async fn fetch(&self, workspace: &Workspace, fetch: &Fetch) -> Result<(), SnapshotError> {
        let name = fetch
            .path
            .file_name()
            .ok_or_else(|| SnapshotError::BadManifest("a file path names no file".into()))?;
        let parent_rel = fetch.path.parent().unwrap_or(Path::new(""));
        let parent = manifest::open_dir(workspace.dir(), parent_rel)?;
        let tmp = format!(".norma-restore-{}", uuid::Uuid::new_v4().simple());
        let mut options = cap_std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        let out = parent.open_with(&tmp, &options)?.into_std();
        let downloaded = self
            .store
            .download_blob(&self.tenant_dir, &fetch.hash, fetch.size, out, &fetch.path)
            .await;
        let finished = downloaded.and_then(|()| {
            set_mode(&parent, Path::new(&tmp), fetch.mode)?;
            parent.rename(&tmp, &parent, name)?;
            Ok(())
        });
        if finished.is_err() {
            let _ = parent.remove_file(&tmp);
        }
        finished
    }
}

fn open(root: &Path) -> Result<Workspace, SnapshotError> {
    Workspace::open(root).map_err(|error| SnapshotError::Workspace(error.to_string()))
}

/// A file to download.
struct Fetch {
    path: PathBuf,
    hash: String,
    size: u64,
    mode: u32,
}

/// What a restore changes, decided before anything is.
#[derive(Default)]
struct Plan {
    remove: Vec<PathBuf>,
    dirs: Vec<(PathBuf, u32)>,
    fetch: Vec<Fetch>,
    chmod: Vec<(PathBuf, u32)>,
    links: Vec<(PathBuf, Vec<u8>)>,
}

/// What is on the local disk at a path.
enum Local {
    Dir,
    File { key: StatKey, size: u64, mode: u32 },
    Symlink(Vec<u8>),
    Other,
}

/// Compares the local copy with `wanted` (at most `limit` local entries are looked at).
fn plan(
    workspace: &Workspace,
    wanted: &[Entry],
    cache: &HashCache,
    limit: usize,
) -> Result<Plan, SnapshotError> {
    let mut local = list_local(workspace, limit)?;
    let mut plan = Plan::default();
    for entry in wanted {
        let path = manifest::clean_relative(&entry.path.bytes()?)?;
        let here = local.remove(&path);
        match (&entry.kind, here) {
            (EntryKind::Dir { mode }, Some(Local::Dir)) => plan.dirs.push((path, *mode)),
            (EntryKind::Dir { mode }, here) => {
                if here.is_some() {
                    plan.remove.push(path.clone());
                }
                plan.dirs.push((path, *mode));
            }
            (
                EntryKind::File { hash, size, mode },
                Some(Local::File {
                    key,
                    size: local_size,
                    mode: local_mode,
                }),
            ) if *size == local_size && same_content(workspace, &path, key, hash, cache) => {
                if *mode != local_mode {
                    plan.chmod.push((path, *mode));
                }
            }
            (EntryKind::File { hash, size, mode }, here) => {
                if matches!(here, Some(Local::Dir | Local::Symlink(_) | Local::Other)) {
                    plan.remove.push(path.clone());
                }
                plan.fetch.push(Fetch {
                    path,
                    hash: hash.clone(),
                    size: *size,
                    mode: *mode,
                });
            }
            (EntryKind::Symlink { target }, Some(Local::Symlink(local_target)))
                if target.bytes()? == local_target => {}
            (EntryKind::Symlink { target }, here) => {
                if here.is_some() {
                    plan.remove.push(path.clone());
                }
                plan.links.push((path, target.bytes()?));
            }
        }
    }
    // What the snapshot does not hold goes (a directory with everything in it).
    let mut extra: Vec<PathBuf> = local.into_keys().collect();
    extra.sort();
    plan.remove.extend(extra);
    Ok(plan)
}

fn same_content(
    workspace: &Workspace,
    path: &Path,
    key: StatKey,
    hash: &str,
    cache: &HashCache,
) -> bool {
    if let Some((cached, cached_hash)) = cache.get(path)
        && *cached == key
    {
        return cached_hash == hash;
    }
    workspace
        .open_regular(path)
        .ok()
        .and_then(|(file, _)| manifest::hash_reader(file).ok())
        .is_some_and(|(local, _)| local == hash)
}

/// Every local entry (transient files of atomic writes left out), symlinks not followed.
fn list_local(
    workspace: &Workspace,
    limit: usize,
) -> Result<HashMap<PathBuf, Local>, SnapshotError> {
    use std::os::unix::fs::MetadataExt;
    let mut out = HashMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = manifest::open_dir(workspace.dir(), &rel)?;
        for item in dir.entries()? {
            let item = item?;
            let name = item.file_name();
            let path = rel.join(&name);
            if out.len() >= limit {
                return Err(SnapshotError::TooManyFiles { max: limit });
            }
            let kind = item.file_type()?;
            let local = if kind.is_dir() {
                stack.push(path.clone());
                Local::Dir
            } else if kind.is_symlink() {
                Local::Symlink(
                    dir.read_link_contents(&name)?
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else if kind.is_file() && !manifest::is_transient_name(&name) {
                match workspace.open_regular(&path) {
                    Ok((_, meta)) => Local::File {
                        key: StatKey::of(&meta),
                        size: meta.len(),
                        mode: meta.mode() & 0o7777,
                    },
                    Err(_) => Local::Other,
                }
            } else {
                Local::Other
            };
            out.insert(path, local);
        }
    }
    Ok(out)
}

fn set_mode(dir: &cap_std::fs::Dir, path: &Path, mode: u32) -> Result<(), SnapshotError> {
    use cap_std::fs::PermissionsExt;
    dir.set_permissions(path, cap_std::fs::Permissions::from_mode(mode & 0o7777))?;
    Ok(())
}

/// Creates `path` as a symlink holding `target` (never resolved here), beneath `dir`.
fn make_symlink(dir: &cap_std::fs::Dir, path: &Path, target: &[u8]) -> Result<(), SnapshotError> {
    let name = path
        .file_name()
        .ok_or_else(|| SnapshotError::BadManifest("a link path names no link".into()))?;
    let parent = manifest::open_dir(dir, path.parent().unwrap_or(Path::new("")))?;
    nix::unistd::symlinkat(OsStr::from_bytes(target), &parent, name)
        .map_err(|errno| SnapshotError::Io(std::io::Error::from(errno)))?;
    Ok(())
}
