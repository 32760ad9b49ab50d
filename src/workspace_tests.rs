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
