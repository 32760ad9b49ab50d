//! Streaming blob transfers with the content re-hashed on the way: an upload whose bytes do
//! not hash to the blob's name is aborted (the file changed after the walk), a download that
//! does not is refused before it replaces anything.

use super::{SnapshotError, SnapshotStore};
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::buffered::BufWriter;
use sha2::{Digest, Sha256};
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

impl SnapshotStore {
    /// Whether the tenant's namespace holds blob `hash`.
    pub(super) async fn has_blob(
        &self,
        tenant_dir: &str,
        hash: &str,
    ) -> Result<bool, SnapshotError> {
        match self.store.head(&self.blob_path(tenant_dir, hash)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// Uploads `file` as blob `hash`, in `part_bytes` pieces (a multipart upload past one).
    pub(super) async fn upload_blob(
        &self,
        tenant_dir: &str,
        hash: &str,
        file: std::fs::File,
        display: &Path,
    ) -> Result<(), SnapshotError> {
        let path = self.blob_path(tenant_dir, hash);
        let store: std::sync::Arc<dyn ObjectStore> = self.store.clone();
        let mut writer = BufWriter::with_capacity(store, path, self.part_bytes);
        let mut file = tokio::fs::File::from_std(file);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let copied: Result<(), SnapshotError> = async {
            loop {
                let n = file.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                writer.write_all(&buf[..n]).await?;
            }
            Ok(())
        }
        .await;
        let matches = hex::encode(hasher.finalize()) == hash;
        if copied.is_err() || !matches {
            let _ = writer.abort().await;
            copied?;
            return Err(SnapshotError::Changed(display.display().to_string()));
        }
        writer.shutdown().await?;
        Ok(())
    }

    /// Streams blob `hash` into `out` (a fresh file), checking its hash and length.
    pub(super) async fn download_blob(
        &self,
        tenant_dir: &str,
        hash: &str,
        size: u64,
        out: std::fs::File,
        display: &Path,
    ) -> Result<(), SnapshotError> {
        let got = self.store.get(&self.blob_path(tenant_dir, hash)).await?;
        let mut stream = got.into_stream();
        let mut out = tokio::fs::File::from_std(out);
        let mut hasher = Sha256::new();
        let mut len = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            len += chunk.len() as u64;
            if len > size {
                return Err(SnapshotError::Changed(display.display().to_string()));
            }
            hasher.update(&chunk);
            out.write_all(&chunk).await?;
        }
        if len != size || hex::encode(hasher.finalize()) != hash {
            return Err(SnapshotError::Changed(display.display().to_string()));
        }
        out.flush().await?;
        out.sync_all().await?;
        Ok(())
    }

    /// Writes a manifest unless the store holds it already (its name is its hash).
    pub(super) async fn put_manifest(
        &self,
        tenant_dir: &str,
        session: &str,
        id: &str,
        bytes: Vec<u8>,
    ) -> Result<(), SnapshotError> {
        let path = self.manifest_path(tenant_dir, session, id);
        match self.store.head(&path).await {
            Ok(_) => return Ok(()),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        self.store.put(&path, bytes.into()).await?;
        Ok(())
    }

    /// Reads a manifest, refusing one larger than `max_bytes`.
    pub(super) async fn get_manifest(
        &self,
        tenant_dir: &str,
        session: &str,
        id: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, SnapshotError> {
        let got = self
            .store
            .get(&self.manifest_path(tenant_dir, session, id))
            .await?;
        #[allow(clippy::useless_conversion)]
        let size = u64::try_from(got.meta.size).unwrap_or(u64::MAX);
        if size > max_bytes {
            return Err(SnapshotError::BadManifest(format!(
                "the manifest is {size} bytes, more than {max_bytes}"
            )));
        }
        let bytes = got.bytes().await?;
        let digest = hex::encode(Sha256::digest(&bytes));
        if digest != id {
            return Err(SnapshotError::BadManifest(
                "the manifest does not match its id".into(),
            ));
        }
        Ok(bytes.to_vec())
    }
}
