//! `infersight store migrate --to URL`: moves a single-node store's segments into a bucket
//! (issue 21). The memtable is flushed first, so every acknowledged row is in a segment; each
//! segment and sidecar is uploaded under a cluster-wide id of this store's node, and one catalog
//! entry adds them all with the node's flushed WAL sequence: a migration that stops halfway
//! commits nothing (its uploads are garbage the maintaining node collects), and a store that was
//! migrated before is refused rather than listed twice. The local files stay until the store is
//! first opened on the bucket (`serve --storage URL` with the same data directory and node),
//! which removes them.

use infersight_cluster::Action;

use crate::remote::Remote;
use crate::store::Store;
use crate::types::{RemoteOptions, StoreError};

/// What a migration moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MigrateReport {
    /// The bucket, as given.
    pub to: String,
    /// The node the segments were committed under.
    pub node: String,
    pub segments: usize,
    pub rows: u64,
    pub bytes: u64,
    /// The catalog log entry that made them visible.
    pub catalog_seq: u64,
}

impl Store {
    /// Uploads every segment of this (local) store to `target` and commits them in one catalog
    /// entry; `progress(done, total)` after each segment. Errors: the store already uses a
    /// bucket, the bucket cannot be used, the node already has commits there, an upload fails
    /// (nothing is committed then).
    pub fn migrate_to_bucket(
        &self,
        target: &RemoteOptions,
        progress: impl Fn(usize, usize),
    ) -> Result<MigrateReport, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if let Some(remote) = self.remote() {
            return Err(StoreError::Migrate(format!(
                "the store keeps its segments in {} already",
                remote.configured()
            )));
        }
        // every acknowledged row into a segment first: the WAL does not move
        self.flush_locked()?;
        let (remote, state) = Remote::open(target, None)?;
        let node = remote.node().clone();
        let committed_before = state.flushed_wal.contains_key(&node)
            || state.segments.keys().any(|id| *id.node() == node);
        if committed_before {
            return Err(StoreError::Migrate(format!(
                "node `{node}` already has segments in {}: this store was migrated already, or \
                 another node uses the name (set [storage] node); nothing was written",
                remote.configured()
            )));
        }
        let (segments, flushed_wal_seq) = {
            let state = self.state.lock();
            (
                state.catalog.segments.clone(),
                state.catalog.flushed_wal_seq,
            )
        };
        let mut actions: Vec<Action> = Vec::with_capacity(segments.len() + 1);
        for (done, segment) in segments.iter().enumerate() {
            actions.push(remote.upload_uncommitted(segment)?);
            progress(done + 1, segments.len());
        }
        let catalog_seq = remote.commit_uploaded(actions, flushed_wal_seq)?;
        let report = MigrateReport {
            to: target.bucket.url.clone(),
            node: node.to_string(),
            segments: segments.len(),
            rows: segments.iter().map(|s| s.rows).sum(),
            bytes: segments.iter().map(|s| s.bytes).sum(),
            catalog_seq,
        };
        tracing::info!(?report, "store migrated to the bucket");
        Ok(report)
    }
}
