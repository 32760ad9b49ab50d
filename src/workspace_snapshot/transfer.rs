//! Streaming blob transfers with the content hashed on the way: an upload is named by the
//! hash of the bytes it sent, a download that does not match its name is refused before it
//! replaces anything.

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

    /// Uploads `file` as the blob of what is read from it now, and returns that content's
    /// hash and length (which differ from the walk's when the file changed since: a file a
    /// background task keeps writing is saved as it was read, never under a wrong name). A
    /// file that fits in one part is read, hashed and written in one request; a larger one is
    /// streamed to a staging object in `part_bytes` pieces (a multipart upload), hashed on the
    /// way, then copied to its name in the store.
    pub(super) async fn upload_blob(
        &self,
        tenant_dir: &str,
        file: std::fs::File,
    ) -> Result<(String, u64), SnapshotError> {
        let mut file = tokio::fs::File::from_std(file);
        let mut first = Vec::with_capacity(self.part_bytes.min(1 << 20));
        (&mut file)
            .take(self.part_bytes as u64 + 1)
            .read_to_end(&mut first)
            .await?;
        if first.len() <= self.part_bytes {
            let hash = hex::encode(Sha256::digest(&first));
            let len = first.len() as u64;
            self.store
                .put(&self.blob_path(tenant_dir, &hash), first.into())
                .await?;
            return Ok((hash, len));
        }
        let staging = self
            .tenant_root(tenant_dir)
            .child("staging")
            .child(uuid::Uuid::new_v4().simple().to_string());
        let store: std::sync::Arc<dyn ObjectStore> = self.store.clone();
        let mut writer = BufWriter::with_capacity(store, staging.clone(), self.part_bytes);
        let mut hasher = Sha256::new();
        let mut len = first.len() as u64;
        hasher.update(&first);
        let copied: Result<(), SnapshotError> = async {
            writer.write_all(&first).await?;
            drop(first);
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = file.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                len += n as u64;
                writer.write_all(&buf[..n]).await?;
            }
            writer.shutdown().await?;
            Ok(())
        }
        .await;
        if let Err(error) = copied {
            let _ = writer.abort().await;
            let _ = self.store.delete(&staging).await;
            return Err(error);
        }
        let hash = hex::encode(hasher.finalize());
        let copied = self
            .store
            .copy(&staging, &self.blob_path(tenant_dir, &hash))
            .await;
        let _ = self.store.delete(&staging).await;
        copied?;
        Ok((hash, len))
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
