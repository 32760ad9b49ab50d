use super::*;
use crate::workspace_snapshot::{SessionSnapshots, SnapshotStore};
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

const BIG: Bounds = Bounds {
    max_files: 1000,
    max_bytes: 1 << 30,
};

fn workspace(dir: &Path) -> Workspace {
    Workspace::open(dir).unwrap()
}

#[test]
fn scan_records_files_dirs_and_links_and_skips_fifos_and_hard_links() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("a.txt"), "alpha").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        root.join("sub/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("escape")).unwrap();
    nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(root.join("linked"), "x").unwrap();
    std::fs::hard_link(root.join("linked"), root.join("linked2")).unwrap();
    std::fs::write(root.join(".a.txt.norma-tmp-123"), "half").unwrap();
    let name = OsStr::from_bytes(b"caf\xe9\n.txt");
    std::fs::write(root.join(name), "latin-1 name").unwrap();

    let mut cache = HashCache::new();
    let scan = scan(&workspace(root), &BIG, &mut cache).unwrap();
    let paths: Vec<_> = scan
        .manifest
        .entries
        .iter()
        .map(|e| e.path.clone())
        .collect();
    assert!(paths.contains(&EncodedPath::Text("a.txt".into())));
    assert!(paths.contains(&EncodedPath::Text("sub".into())));
    assert!(paths.contains(&EncodedPath::encode(b"caf\xe9\n.txt")));
    assert!(!paths.contains(&EncodedPath::Text("pipe".into())));
    assert!(!paths.contains(&EncodedPath::Text("linked".into())));
    assert!(
        !paths
            .iter()
            .any(|p| matches!(p, EncodedPath::Text(t) if t.contains("norma-tmp")))
    );
    assert_eq!(scan.skipped, 3, "the FIFO and both hard links");
    let link = scan
        .manifest
        .entries
        .iter()
        .find(|e| e.path == EncodedPath::Text("escape".into()))
        .unwrap();
    assert_eq!(
        link.kind,
        EntryKind::Symlink {
            target: EncodedPath::Text("/etc/passwd".into())
        },
        "a link is kept as its text, never followed"
    );
    let script = scan
        .manifest
        .entries
        .iter()
        .find(|e| e.path == EncodedPath::Text("sub/run.sh".into()))
        .unwrap();
    assert!(matches!(
        script.kind,
        EntryKind::File {
            mode: 0o755,
            size: 10,
            ..
        }
    ));
    // The manifest round-trips through its checks, and its id is its hash.
    let (bytes, id) = scan.manifest.encode();
    assert!(is_hash(&id));
    assert_eq!(Manifest::decode(&bytes, &BIG).unwrap(), scan.manifest);
}

#[test]
fn scan_stops_at_the_file_and_byte_bounds() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5 {
        std::fs::write(dir.path().join(format!("f{i}")), vec![b'x'; 100]).unwrap();
    }
    let ws = workspace(dir.path());
    let few = Bounds {
        max_files: 3,
        max_bytes: 1 << 20,
    };
    assert!(matches!(
        scan(&ws, &few, &mut HashCache::new()),
        Err(SnapshotError::TooManyFiles { max: 3 })
    ));
    let small = Bounds {
        max_files: 100,
        max_bytes: 250,
    };
    let error = scan(&ws, &small, &mut HashCache::new()).err().unwrap();
    assert!(error.is_quota(), "{error}");
}

#[test]
fn hostile_manifests_are_refused_before_anything_is_written() {
    for path in ["../escape", "/etc/passwd", "a/../../b", "", "a/./b"] {
        let manifest = Manifest {
            version: MANIFEST_VERSION,
            entries: vec![Entry {
                path: EncodedPath::Text(path.into()),
                kind: EntryKind::Dir { mode: 0o755 },
            }],
        };
        let (bytes, _) = manifest.encode();
        assert!(
            Manifest::decode(&bytes, &BIG).is_err(),
            "{path:?} must be refused"
        );
    }
    let bad_hash = br#"{"version":1,"entries":[{"path":"a","kind":"file","hash":"../x","size":1,"mode":420}]}"#;
    assert!(Manifest::decode(bad_hash, &BIG).is_err());
}

fn memory_store() -> Arc<SnapshotStore> {
    Arc::new(SnapshotStore::over(
        Arc::new(object_store::memory::InMemory::new()),
        "test",
        1000,
    ))
}

#[tokio::test]
async fn a_snapshot_restores_elsewhere_and_only_what_differs_is_rewritten() {
    let store = memory_store();
    let tenant = crate::ids::TenantId::new("acme");
    let session = crate::ids::SessionId::generate();
    let a = tempfile::tempdir().unwrap();
    std::fs::write(a.path().join("notes.txt"), "remember the lighthouse").unwrap();
    std::fs::create_dir_all(a.path().join("src/empty")).unwrap();
    std::fs::write(a.path().join("src/lib.rs"), "fn main() {}").unwrap();
    std::os::unix::fs::symlink("notes.txt", a.path().join("link")).unwrap();
    let name = OsStr::from_bytes(b"bin\xff");
    std::fs::write(a.path().join(name), [0u8, 1, 2]).unwrap();
    let on_a = SessionSnapshots::new(store.clone(), &tenant, &session, a.path().into());
    on_a.begin_mutation().await;
    let id = on_a.take("toolu_1", 1 << 20).await.unwrap();
    assert_eq!(on_a.taken_for("toolu_1"), Some(id.clone()));
    assert_eq!(on_a.taken_for("toolu_1"), None);

    // Another replica: stale files, a file where a directory belongs, an extra file.
    let b = tempfile::tempdir().unwrap();
    std::fs::write(b.path().join("notes.txt"), "stale").unwrap();
    std::fs::write(b.path().join("src"), "not a dir").unwrap();
    std::fs::write(b.path().join("leftover"), "from an unrecorded call").unwrap();
    let on_b = SessionSnapshots::new(store.clone(), &tenant, &session, b.path().into());
    let restored = on_b.restore(Some(&id), 1 << 20).await.unwrap().unwrap();
    assert_eq!(
        std::fs::read_to_string(b.path().join("notes.txt")).unwrap(),
        "remember the lighthouse"
    );
    assert_eq!(
        std::fs::read_to_string(b.path().join("src/lib.rs")).unwrap(),
        "fn main() {}"
    );
    assert!(b.path().join("src/empty").is_dir());
    assert!(!b.path().join("leftover").exists());
    assert_eq!(
        std::fs::read_link(b.path().join("link")).unwrap(),
        Path::new("notes.txt")
    );
    assert_eq!(std::fs::read(b.path().join(name)).unwrap(), vec![0u8, 1, 2]);
    assert_eq!(restored.removed, 2, "{restored:?}");
    // Known to match: nothing to check.
    assert_eq!(on_b.restore(Some(&id), 1 << 20).await.unwrap(), None);

    // A fresh view of the same copy rewrites nothing that matches.
    let again = SessionSnapshots::new(store.clone(), &tenant, &session, b.path().into());
    let restored = again.restore(Some(&id), 1 << 20).await.unwrap().unwrap();
    assert_eq!((restored.written, restored.removed), (0, 0), "{restored:?}");

    // Restoring "no snapshot" empties the workspace.
    let empty = SessionSnapshots::new(store, &tenant, &session, b.path().into());
    empty.restore(None, 1 << 20).await.unwrap();
    assert_eq!(std::fs::read_dir(b.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_workspace_over_the_quota_is_not_snapshotted() {
    let store = memory_store();
    let tenant = crate::ids::TenantId::new("acme");
    let session = crate::ids::SessionId::generate();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big"), vec![b'x'; 4096]).unwrap();
    let snapshots = SessionSnapshots::new(store, &tenant, &session, dir.path().into());
    let error = snapshots.take("toolu_1", 1000).await.unwrap_err();
    assert!(error.is_quota(), "{error}");
    assert_eq!(snapshots.taken_for("toolu_1"), None);
}

#[tokio::test]
async fn a_file_larger_than_one_part_goes_up_in_parts_and_comes_back_whole() {
    let store = memory_store();
    let tenant = crate::ids::TenantId::new("acme");
    let session = crate::ids::SessionId::generate();
    let a = tempfile::tempdir().unwrap();
    // Over two 5 MiB parts, not a multiple of the read size.
    let content: Vec<u8> = (0..11 * 1024 * 1024 + 123)
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(a.path().join("big.bin"), &content).unwrap();
    let on_a = SessionSnapshots::new(store.clone(), &tenant, &session, a.path().into());
    let id = on_a.take("toolu_1", 1 << 30).await.unwrap();
    let b = tempfile::tempdir().unwrap();
    let on_b = SessionSnapshots::new(store, &tenant, &session, b.path().into());
    on_b.restore(Some(&id), 1 << 30).await.unwrap();
    assert!(std::fs::read(b.path().join("big.bin")).unwrap() == content);
}
