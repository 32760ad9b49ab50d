use super::*;

fn ws() -> (tempfile::TempDir, Workspace) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = Workspace::create(tmp.path(), &TenantId::new("acme"), &SessionId::generate())
        .expect("create");
    (tmp, ws)
}

#[test]
fn create_rejects_client_shaped_session_ids() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = Workspace::create(
        tmp.path(),
        &TenantId::new("acme"),
        &SessionId::from_string("ses_../../etc"),
    )
    .expect_err("malformed id");
    assert!(matches!(err, WorkspaceError::MalformedSessionId(_)));
}

#[test]
fn unsafe_tenant_ids_are_hashed() {
    assert_eq!(tenant_dir_name(&TenantId::new("acme-1")), "acme-1");
    let hashed = tenant_dir_name(&TenantId::new("../evil"));
    assert!(hashed.starts_with("t-") && hashed.len() == 66, "{hashed}");
    assert_ne!(tenant_dir_name(&TenantId::new("t-x")), "t-x");
}

#[test]
fn resolve_normalizes_and_confines() {
    let (_tmp, ws) = ws();
    assert_eq!(ws.resolve("a/./b/../c").expect("ok"), PathBuf::from("a/c"));
    assert_eq!(ws.resolve(".").expect("ok"), PathBuf::new());
    let abs = format!("{}/x/y", ws.root().display());
    assert_eq!(ws.resolve(&abs).expect("ok"), PathBuf::from("x/y"));
    for bad in [
        "../x",
        "a/../../x",
        "/etc/passwd",
        "/proc/self/root/etc/passwd",
    ] {
        assert_eq!(
            ws.resolve(bad).expect_err(bad).code,
            codes::PATH_OUTSIDE_WORKSPACE,
            "{bad}"
        );
    }
    assert_eq!(
        ws.resolve("a\0b").expect_err("nul").code,
        codes::PATH_INVALID
    );
    assert_eq!(
        ws.resolve("..\\x").expect_err("bs").code,
        codes::PATH_INVALID
    );
    assert_eq!(
        ws.resolve(&"a".repeat(300)).expect_err("long").code,
        codes::PATH_TOO_LONG
    );
}

#[test]
fn write_atomic_then_read_and_remove() {
    let (_tmp, ws) = ws();
    let rel = ws.resolve("d/e/f.txt").expect("ok");
    ws.write_atomic(&rel, b"hello").expect("write");
    assert_eq!(ws.read_text(&rel, 100).expect("read"), "hello");
    assert_eq!(
        ws.read_file(&rel, 3).expect_err("too large").code,
        codes::FILE_TOO_LARGE
    );
    let root = ws.root().to_path_buf();
    ws.remove().expect("remove");
    assert!(!root.exists());
}

/// A file that grows while it is read: `read_upto` stops one byte past its bound and keeps
/// what it read, `into_bytes` reads on from there to the end, and growth past the limit is
/// `FILE_TOO_LARGE`.
#[test]
fn an_opened_file_is_read_on_from_where_a_bounded_read_stopped() {
    use std::io::Write as _;
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = Workspace::create(tmp.path(), &TenantId::new("acme"), &SessionId::generate())
        .expect("workspace");
    let path = ws.root().join("grows.txt");
    std::fs::write(&path, b"0123456789").expect("write");
    let rel = ws.resolve("grows.txt").expect("rel");

    let mut small = OpenedFile::open(&ws, &rel).expect("open");
    assert!(small.read_upto(50).expect("read"), "10 bytes fit");
    assert_eq!(small.into_bytes(50).expect("bytes"), b"0123456789");

    let mut grown = OpenedFile::open(&ws, &rel).expect("open");
    let mut append = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("append");
    append.write_all(&[b'x'; 90]).expect("grow");
    assert!(!grown.read_upto(50).expect("read"), "grew past the bound");
    let bytes = grown.into_bytes(1000).expect("read on");
    assert_eq!(bytes.len(), 100);
    assert!(bytes.starts_with(b"0123456789x") && bytes.ends_with(b"xx"));

    let opened = OpenedFile::open(&ws, &rel).expect("open");
    append.write_all(&[b'x'; 100]).expect("grow");
    let error = opened.into_bytes(150).expect_err("grew past the limit");
    assert_eq!(error.code, codes::FILE_TOO_LARGE);
    assert!(
        !OpenedFile::open(&ws, &rel)
            .expect("open")
            .read_upto(150)
            .expect("read")
    );
}
