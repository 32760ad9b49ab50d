//! `snapshot` workspace storage: session workspaces synced to S3-compatible object storage.
//!
//! A workspace lives on the replica's own disk (`<data_dir>/workspaces`) and is snapshotted
//! after every mutating tool call:
//!
//! - **content-addressed**: a regular file is a blob named by the SHA-256 of its content
//!   (`<prefix>/tenants/<tenant>/blobs/<sha256>`), uploaded once per tenant and only when the
//!   store does not hold it yet; a snapshot is a manifest (path → kind, hash, mode, size; see
//!   [`manifest`]) named by the SHA-256 of its bytes
//!   (`<prefix>/tenants/<tenant>/sessions/<session>/manifests/<id>.json`), so an unchanged
//!   workspace is no upload at all;
//! - **incremental**: a walk reuses the hash of a file whose size, times, inode and mode did
//!   not change, and uploads only blobs the tenant's namespace lacks;
//! - **recorded with the result**: the snapshot id travels in the call's `tool_result` event
//!   (`workspace_snapshot`) and the session row's head (`sessions.workspace_snapshot`,
//!   migration 0009) is set in the same store transaction (the run's lease checked), so the
//!   files a resumed run finds match the results it keeps: a call whose result was recorded is
//!   in the head, a call whose result was not (a crash in between) is not;
//! - **restored** on the replica that runs the session next (a takeover after a crash or
//!   lease expiry, a parked run answered elsewhere, a restart), before the run continues:
//!   only what differs from the head is written or removed ([`session`]).
//!
//! Bounds, all tenant-controlled input being hostile: a snapshot holds at most
//! `workspace.snapshot.max_files` entries and at most the tenant's `limits.workspace_bytes`
//! of file content (more answers `WORKSPACE_QUOTA_EXCEEDED`: the call ran, its changes are
//! not saved); files are streamed in `part_bytes` pieces both ways (multipart uploads for big
//! files), never held whole; a blob is named by the hash of the bytes actually uploaded (a
//! file written to after the walk is saved as it was read), and a downloaded blob that does
//! not match its name is refused before it replaces anything. FIFOs, sockets, devices
//! and hard-linked files are left out; symlinks are kept as their target text and never
//! followed; any file name (non-UTF-8 included) round-trips; manifests read back are checked
//! (clean relative paths, bounds) before anything is written, and every write goes through the
//! workspace's confined directory handle.

pub mod manifest;
pub mod session;
mod transfer;

use crate::config::SnapshotSettings;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use secrecy::ExposeSecret;
use std::sync::Arc;
use std::time::Duration;

pub use session::SessionSnapshots;

/// Error codes of snapshot failures in tool results.
pub mod codes {
    /// The workspace could not be saved to the object store (the call ran).
    pub const WORKSPACE_SNAPSHOT_FAILED: &str = "WORKSPACE_SNAPSHOT_FAILED";
}

/// Why a snapshot or a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the workspace holds more than {max} files, directories and links")]
    TooManyFiles { max: usize },
    #[error("the workspace holds {bytes} bytes or more, over the quota of {max} bytes")]
    TooLarge { bytes: u64, max: u64 },
    #[error("workspace I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("a stored snapshot is malformed: {0}")]
    BadManifest(String),
    #[error("{0} changed while it was transferred")]
    Changed(String),
    #[error("workspace: {0}")]
    Workspace(String),
}

impl SnapshotError {
    /// Whether the tenant's own workspace is at fault (its size or file count).
    pub fn is_quota(&self) -> bool {
        matches!(self, Self::TooManyFiles { .. } | Self::TooLarge { .. })
    }
}

/// The object store workspaces are snapshotted to, and its bounds.
pub struct SnapshotStore {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// Where the store is (endpoint and bucket), for messages; no credentials.
    display: String,
    pub max_files: usize,
    pub part_bytes: usize,
}

impl std::fmt::Debug for SnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotStore")
            .field("at", &self.display)
            .finish_non_exhaustive()
    }
}

impl SnapshotStore {
    /// Builds the S3 client from the settings (the `AWS_*` environment fills what they leave
    /// out) and proves the bucket is reachable and writable: a probe object is written and
    /// read back. Fails with the reason otherwise.
    pub async fn connect(settings: &SnapshotSettings, replica: &str) -> Result<Self, String> {
        use object_store::aws::AmazonS3Builder;
        let bucket = settings
            .bucket
            .clone()
            .ok_or("workspace.snapshot.bucket is not set")?;
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_region(&settings.region)
            .with_allow_http(settings.allow_http)
            .with_retry(object_store::RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(20),
                backoff: Default::default(),
            })
            .with_client_options(
                object_store::ClientOptions::new()
                    .with_allow_http(settings.allow_http)
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_timeout(Duration::from_secs(120)),
            );
        if let Some(endpoint) = &settings.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let (Some(id), Some(secret)) = (&settings.access_key_id, &settings.secret_access_key) {
            builder = builder
                .with_access_key_id(id.expose_secret())
                .with_secret_access_key(secret.expose_secret());
        }
        let display = format!(
            "bucket {bucket:?} at {}",
            settings.endpoint.as_deref().unwrap_or("AWS S3")
        );
        let store = builder
            .build()
            .map_err(|error| format!("workspace.snapshot: {error}"))?;
        let prefix = ObjectPath::parse(&settings.prefix)
            .map_err(|error| format!("workspace.snapshot.prefix: {error}"))?;
        let this = Self {
            store: Arc::new(store),
            prefix,
            display,
            max_files: settings.max_files,
            part_bytes: settings.part_bytes,
        };
        this.probe(replica).await.map_err(|error| {
            format!(
                "the snapshot object store ({}) cannot be used: {error}",
                this.display
            )
        })?;
        Ok(this)
    }

    /// A store over any [`ObjectStore`] (tests).
    pub fn over(store: Arc<dyn ObjectStore>, prefix: &str, max_files: usize) -> Self {
        Self {
            store,
            prefix: ObjectPath::from(prefix),
            display: "a test store".into(),
            max_files,
            part_bytes: 5 * 1024 * 1024,
        }
    }

    async fn probe(&self, replica: &str) -> Result<(), object_store::Error> {
        let path = self.prefix.child("probes").child(replica);
        let body = format!("written by replica {replica} at start-up");
        self.store.put(&path, body.clone().into()).await?;
        let read = self.store.get(&path).await?.bytes().await?;
        if read != body.as_bytes() {
            return Err(object_store::Error::Generic {
                store: "S3",
                source: "the probe object read back differs from what was written".into(),
            });
        }
        Ok(())
    }

    fn tenant_root(&self, tenant_dir: &str) -> ObjectPath {
        self.prefix.child("tenants").child(tenant_dir)
    }

    fn blob_path(&self, tenant_dir: &str, hash: &str) -> ObjectPath {
        self.tenant_root(tenant_dir).child("blobs").child(hash)
    }

    fn manifest_path(&self, tenant_dir: &str, session: &str, id: &str) -> ObjectPath {
        self.tenant_root(tenant_dir)
            .child("sessions")
            .child(session)
            .child("manifests")
            .child(format!("{id}.json"))
    }
}
