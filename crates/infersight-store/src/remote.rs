//! Segments in a bucket (`StoreOptions::remote`, issue 21). A flush encodes each segment as the
//! single-node store does (a local file, its checksums taken while it is written), then uploads
//! it and its rollup sidecar under a cluster-wide id (`segments/<table>/<hour>/<node>-<ulid>`,
//! `infersight_cluster::layout`), commits them to the bucket's catalog log in one entry together
//! with how far this node's WAL is flushed, and deletes the local copy. The log is the commit
//! point: opening the store replays it for the segments (every node's) and for this node's
//! flushed WAL sequence, and `catalog.json` is not used. The store's own reads (rollup sidecars,
//! rows to roll up) fetch the objects; query engines read them through the same client
//! ([`crate::StorageBackend::remote_segments`]).
//!
//! Every maintenance pass re-reads the log's new entries ([`Remote::refresh`]) and reconciles
//! the store's catalog with it ([`Remote::reconcile`]): segments other nodes flushed come in,
//! segments compaction or retention removed leave. The node that maintains the bucket (module
//! `bucket_maintenance`) commits its merges and removals through [`Remote::publish_compaction`]
//! and [`Remote::commit_removals`], fenced by the `compactor` lease where the bucket has leases,
//! and deletes unreferenced objects ([`Remote::collect_garbage`]).
//!
//! Reads of segments and sidecars, the query engine's and the store's own, go through one
//! size-bounded read cache in memory (`infersight_cluster::segments::SegmentCache`,
//! `RemoteOptions::read_cache_bytes`) and, with `RemoteOptions::disk_cache_bytes`, one on disk
//! under the data directory (`bucket-cache/`, kept across restarts); segments never change once
//! written, so neither is ever stale.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use infersight_cluster::disk_cache::DiskCache;
use infersight_cluster::layout::{cold_segment_path, segment_path, sidecar_path};
use infersight_cluster::object_store::path::Path as ObjectPath;
use infersight_cluster::object_store::{GetOptions, ObjectStore, ObjectStoreExt};
use infersight_cluster::segments::SegmentCache;
use infersight_cluster::{
    Acquire, Action, Bucket, CatalogBackend, CatalogConfig, CatalogState, Clock, ClusterError,
    Lease, NodeId, ObjectStoreCatalog, SegmentId, Tier,
};
use infersight_model::Table;
use infersight_model::time::hour_floor_ns;
use infersight_rollup::{Rollup, RollupSpec};
use parking_lot::Mutex;

use crate::catalog::Catalog;
use crate::rollups;
use crate::segment;
use crate::types::{RemoteOptions, RemoteSegments, SegmentChecksum, SegmentMeta, StoreError};

/// The bucket, its catalog log and the runtime their async clients run on (the store itself is
/// blocking; see [`Remote::run`]).
pub(crate) struct Remote {
    bucket: Bucket,
    /// What segments and sidecars are read through: the read cache in front of the whole
    /// bucket, or the bucket itself with the cache off.
    reader: Arc<dyn ObjectStore>,
    cache: Option<Arc<SegmentCache>>,
    scoped: Arc<dyn ObjectStore>,
    catalog: Arc<ObjectStoreCatalog>,
    node: NodeId,
    /// This node maintains the bucket (`RemoteOptions::maintain`).
    pub(crate) maintain: bool,
    gc_grace: Duration,
    read_cache_bytes: u64,
    /// Whether the bucket has leases: `None` until the first maintenance pass asked.
    leases: Mutex<Option<bool>>,
    /// The `compactor` lease as last taken or renewed, while this node holds it.
    held: Mutex<Option<Lease>>,
    /// Unreferenced objects under `segments/` and when a garbage pass first saw them so.
    unreferenced: Mutex<HashMap<ObjectPath, Instant>>,
    /// Some until drop, which shuts it down without waiting (a runtime dropped on an async
    /// thread would panic).
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("bucket", &self.bucket.configured)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Remote {
    /// Opens the bucket and its catalog log (the conditional-write self-check is the first
    /// request: an unreachable or misconfigured bucket fails here) and answers the catalog.
    /// `data_dir` holds the read cache's disk level (`bucket-cache/`) when the options ask for
    /// one.
    pub(crate) fn open(
        options: &RemoteOptions,
        data_dir: Option<&std::path::Path>,
    ) -> Result<(Remote, Arc<CatalogState>), StoreError> {
        let url = options.bucket.url.clone();
        let error = |source: ClusterError| StoreError::Remote {
            url: match &options.bucket.endpoint {
                Some(endpoint) => format!("{url} (endpoint {endpoint})"),
                None => url.clone(),
            },
            source,
        };
        let node = NodeId::new(&options.node).map_err(error)?;
        let bucket = Bucket::open(&options.bucket).map_err(error)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("store-bucket")
            .enable_all()
            .build()
            .map_err(StoreError::io(PathBuf::from(&url)))?;
        let scoped = bucket.scoped();
        let config = CatalogConfig::new(node.clone());
        let catalog = {
            let scoped = Arc::clone(&scoped);
            wait(&runtime, async move {
                ObjectStoreCatalog::open(scoped, config).await
            })
            .map_err(error)?
        };
        let catalog = Arc::new(catalog);
        let state = {
            let catalog = Arc::clone(&catalog);
            wait(&runtime, async move { catalog.refresh().await }).map_err(error)?
        };
        tracing::info!(
            bucket = %bucket.configured,
            node = %node,
            segments = state.segments.len(),
            catalog_seq = state.seq,
            "segment bucket opened"
        );
        let disk = match data_dir.filter(|_| options.disk_cache_bytes > 0) {
            Some(data_dir) => {
                let dir = data_dir.join(DISK_CACHE_DIR);
                Some(DiskCache::open(&dir, options.disk_cache_bytes).map_err(StoreError::io(dir))?)
            }
            None => None,
        };
        let cache = (options.read_cache_bytes > 0).then(|| {
            let dir = bucket.key(&ObjectPath::from(infersight_cluster::layout::SEGMENTS_DIR));
            let cache = SegmentCache::new(Arc::clone(&bucket.store), options.read_cache_bytes)
                .with_segments_dir(dir);
            Arc::new(match disk {
                Some(disk) => cache.with_disk(disk),
                None => cache,
            })
        });
        let reader = match &cache {
            Some(cache) => Arc::clone(cache) as Arc<dyn ObjectStore>,
            None => Arc::clone(&bucket.store),
        };
        let remote = Remote {
            bucket,
            reader,
            cache,
            scoped,
            catalog,
            node,
            maintain: options.maintain,
            gc_grace: options.gc_grace,
            read_cache_bytes: options.read_cache_bytes,
            leases: Mutex::new(None),
            held: Mutex::new(None),
            unreferenced: Mutex::new(HashMap::new()),
            runtime: Some(runtime),
        };
        Ok((remote, state))
    }

    /// How far this node's WAL is in committed segments.
    pub(crate) fn flushed_wal_seq(&self, state: &CatalogState) -> u64 {
        state.flushed_wal.get(&self.node).copied().unwrap_or(0)
    }

    /// The catalog with every entry committed so far (one GET per new entry, and one for the
    /// next sequence, which is not there yet).
    pub(crate) fn refresh(&self) -> Result<Arc<CatalogState>, StoreError> {
        let catalog = Arc::clone(&self.catalog);
        self.run(async move { catalog.refresh().await })
    }

    /// Brings `catalog` in line with the log's `state`: its segments not in `catalog` come in
    /// (every node's, each under a new local id), bucket segments the log no longer names leave.
    /// Answers the segments that left.
    pub(crate) fn reconcile(
        &self,
        state: &CatalogState,
        catalog: &mut Catalog,
    ) -> Result<Vec<SegmentMeta>, StoreError> {
        let listed: HashSet<String> = state
            .segments
            .values()
            .map(|meta| self.location(meta))
            .collect();
        let (kept, removed): (Vec<SegmentMeta>, Vec<SegmentMeta>) =
            std::mem::take(&mut catalog.segments)
                .into_iter()
                .partition(|s| s.location.as_ref().is_none_or(|l| listed.contains(l)));
        catalog.segments = kept;
        let known: HashSet<String> = (catalog.segments.iter())
            .filter_map(|s| s.location.clone())
            .collect();
        for meta in state.segments.values() {
            if known.contains(&self.location(meta)) {
                continue;
            }
            let id = catalog.allocate_id();
            catalog.segments.push(self.local_segment(id, meta)?);
        }
        catalog.sort();
        Ok(removed)
    }

    /// The full key of a catalog segment (what [`SegmentMeta::location`] holds).
    fn location(&self, meta: &infersight_cluster::SegmentMeta) -> String {
        self.bucket
            .key(&ObjectPath::from(meta.path.as_str()))
            .to_string()
    }

    /// A catalog segment as the store lists it, under local id `id`.
    pub(crate) fn local_segment(
        &self,
        id: u64,
        meta: &infersight_cluster::SegmentMeta,
    ) -> Result<SegmentMeta, StoreError> {
        let table = Table::from_name(&meta.table).map_err(|_| StoreError::Corrupt {
            what: "catalog log",
            path: PathBuf::from(&self.bucket.configured),
            reason: format!("segment {} has an unknown table `{}`", meta.id, meta.table),
        })?;
        Ok(self.local_meta(id, table, meta))
    }

    fn local_meta(
        &self,
        id: u64,
        table: Table,
        meta: &infersight_cluster::SegmentMeta,
    ) -> SegmentMeta {
        let relative = ObjectPath::from(meta.path.as_str());
        SegmentMeta {
            id,
            table,
            hour_ns: hour_floor_ns(meta.min_ts_ns),
            path: PathBuf::from(self.bucket.display_key(&relative)),
            location: Some(self.bucket.key(&relative).to_string()),
            rows: meta.rows,
            bytes: meta.bytes,
            min_ts_ns: meta.min_ts_ns,
            max_ts_ns: meta.max_ts_ns,
            schema_version: meta.schema_version.unwrap_or(1),
            rollup_bytes: meta
                .sidecar
                .as_ref()
                .map(|_| meta.checksum.and_then(|c| c.sidecar_bytes).unwrap_or(0)),
            checksum: meta.checksum.map(|c| SegmentChecksum {
                file_crc32: c.file_crc32,
                footer_bytes: c.footer_bytes,
                footer_crc32: c.footer_crc32,
                rollup_crc32: c.sidecar_crc32,
            }),
            tier: meta.tier,
            org_rows: meta.org_rows.clone(),
        }
    }

    /// Uploads the segments a flush wrote locally (`written`, with their sidecars), then commits
    /// them and `flushed_wal_seq` as one catalog entry. Answers them as bucket segments (same
    /// local ids); the caller deletes the local files. Nothing is committed on error (objects
    /// uploaded before it stay unreferenced until garbage collection).
    pub(crate) fn publish(
        &self,
        written: &[SegmentMeta],
        flushed_wal_seq: u64,
    ) -> Result<Vec<SegmentMeta>, StoreError> {
        let (uploads, mut actions, published) = self.prepare_uploads(written, None)?;
        actions.push(Action::FlushedWal {
            node: self.node.clone(),
            wal_seq: flushed_wal_seq,
        });
        self.upload_and_commit(uploads, actions, None)?;
        Ok(published)
    }

    /// Uploads the segments a compaction wrote locally and commits them together with the
    /// removal of the segments they replace (`replaced`), under `lease` when the bucket has
    /// leases. `cold_prefix`: they go to the cold tier under it, else they stay warm. Answers
    /// them as bucket segments (same local ids).
    pub(crate) fn publish_compaction(
        &self,
        written: &[SegmentMeta],
        replaced: &[SegmentId],
        lease: Option<&Lease>,
        cold_prefix: Option<&str>,
    ) -> Result<Vec<SegmentMeta>, StoreError> {
        let (uploads, mut actions, published) = self.prepare_uploads(written, cold_prefix)?;
        actions.extend(
            replaced
                .iter()
                .map(|id| Action::RemoveSegment { id: id.clone() }),
        );
        self.upload_and_commit(uploads, actions, lease.cloned())?;
        Ok(published)
    }

    /// Removes `expired` from the catalog in one entry, under `lease` when there is one.
    pub(crate) fn commit_removals(
        &self,
        expired: &[SegmentId],
        lease: Option<&Lease>,
    ) -> Result<(), StoreError> {
        let actions = expired
            .iter()
            .map(|id| Action::RemoveSegment { id: id.clone() })
            .collect();
        self.upload_and_commit(Vec::new(), actions, lease.cloned())
    }

    /// The objects to upload for `written` (segments and sidecars under new cluster ids), the
    /// catalog actions adding them, and the segments as the store lists them afterwards.
    #[allow(clippy::type_complexity)]
    fn prepare_uploads(
        &self,
        written: &[SegmentMeta],
        cold_prefix: Option<&str>,
    ) -> Result<(Vec<(ObjectPath, Bytes)>, Vec<Action>, Vec<SegmentMeta>), StoreError> {
        let mut uploads: Vec<(ObjectPath, Bytes)> = Vec::new();
        let mut actions = Vec::new();
        let mut published = Vec::new();
        for local in written {
            let (objects, meta) = self.prepare_upload(local, cold_prefix)?;
            uploads.extend(objects);
            published.push(self.local_meta(local.id, local.table, &meta));
            actions.push(Action::AddSegment { segment: meta });
        }
        Ok((uploads, actions, published))
    }

    /// The objects of one local segment (its file, checked against its checksum, and its
    /// sidecar) under a new cluster id, warm or in the cold tier under `cold_prefix`, and its
    /// catalog entry.
    fn prepare_upload(
        &self,
        local: &SegmentMeta,
        cold_prefix: Option<&str>,
    ) -> Result<(Vec<(ObjectPath, Bytes)>, infersight_cluster::SegmentMeta), StoreError> {
        let bytes = Bytes::from(std::fs::read(&local.path).map_err(StoreError::io(&local.path))?);
        if let Some(checksum) = local.checksum
            && crc32fast::hash(&bytes) != checksum.file_crc32
        {
            return Err(StoreError::Corrupt {
                what: segment::SEGMENT,
                path: local.path.clone(),
                reason: "the file changed on disk before its upload".into(),
            });
        }
        let id = SegmentId::new(&self.node);
        let (key, tier) = match cold_prefix {
            Some(prefix) => (
                cold_segment_path(prefix, local.table, local.hour_ns, &id),
                Tier::Cold,
            ),
            None => (segment_path(local.table, local.hour_ns, &id), Tier::Warm),
        };
        let mut objects = Vec::new();
        let sidecar = match local.rollup_bytes {
            Some(_) => {
                let path = rollups::sidecar_path(&local.path);
                let sidecar = Bytes::from(std::fs::read(&path).map_err(StoreError::io(&path))?);
                let key = sidecar_path(&key);
                objects.push((key.clone(), sidecar));
                Some(key.to_string())
            }
            None => None,
        };
        objects.push((key.clone(), bytes));
        let meta = infersight_cluster::SegmentMeta {
            id,
            table: local.table.name().to_string(),
            path: key.to_string(),
            sidecar,
            rows: local.rows,
            bytes: local.bytes,
            min_ts_ns: local.min_ts_ns,
            max_ts_ns: local.max_ts_ns,
            checksum: local.checksum.map(|c| infersight_cluster::SegmentChecksum {
                file_crc32: c.file_crc32,
                footer_bytes: c.footer_bytes,
                footer_crc32: c.footer_crc32,
                sidecar_bytes: local.rollup_bytes,
                sidecar_crc32: c.rollup_crc32,
            }),
            schema_version: Some(local.schema_version),
            tier,
            org_rows: local.org_rows.clone(),
        };
        Ok((objects, meta))
    }

    /// Uploads one local segment (and sidecar) under a new cluster id without committing it;
    /// answers the action that adds it (`store migrate` commits them all at once).
    pub(crate) fn upload_uncommitted(&self, local: &SegmentMeta) -> Result<Action, StoreError> {
        let (objects, meta) = self.prepare_upload(local, None)?;
        let scoped = Arc::clone(&self.scoped);
        self.run(async move {
            for (key, bytes) in objects {
                infersight_cluster::segments::write_segment(scoped.as_ref(), &key, bytes).await?;
            }
            Ok(())
        })?;
        Ok(Action::AddSegment { segment: meta })
    }

    /// Commits `actions` (segments [`Remote::upload_uncommitted`] wrote) with this node's
    /// flushed WAL sequence, as one entry; answers its sequence.
    pub(crate) fn commit_uploaded(
        &self,
        mut actions: Vec<Action>,
        flushed_wal_seq: u64,
    ) -> Result<u64, StoreError> {
        actions.push(Action::FlushedWal {
            node: self.node.clone(),
            wal_seq: flushed_wal_seq,
        });
        let catalog = Arc::clone(&self.catalog);
        self.run(async move { catalog.commit(actions).await })
    }

    /// This node's name in the bucket.
    pub(crate) fn node(&self) -> &NodeId {
        &self.node
    }

    /// The bucket's URL as configured, for messages.
    pub(crate) fn configured(&self) -> &str {
        &self.bucket.configured
    }

    /// Uploads every object, then commits `actions` as one entry (fenced by `lease` if given).
    fn upload_and_commit(
        &self,
        uploads: Vec<(ObjectPath, Bytes)>,
        actions: Vec<Action>,
        lease: Option<Lease>,
    ) -> Result<(), StoreError> {
        let fenced = lease.is_some();
        let scoped = Arc::clone(&self.scoped);
        let catalog = Arc::clone(&self.catalog);
        let committed = self.run(async move {
            let puts = uploads.into_iter().map(|(key, bytes)| {
                let scoped = Arc::clone(&scoped);
                async move {
                    infersight_cluster::segments::write_segment(scoped.as_ref(), &key, bytes).await
                }
            });
            futures::future::try_join_all(puts).await?;
            match lease {
                Some(lease) => catalog.commit_fenced(actions, &lease).await,
                None => catalog.commit(actions).await,
            }
        });
        if fenced && committed.is_err() {
            // fenced off or unanswered: take the lease afresh before the next commit under it
            *self.held.lock() = None;
        }
        committed.map(|_| ())
    }

    /// Gives the `compactor` lease up, if this node holds it, so another node can take over at
    /// once instead of after its expiry (closing the store).
    pub(crate) fn release_lease(&self) {
        let Some(lease) = self.held.lock().take() else {
            return;
        };
        let catalog = Arc::clone(&self.catalog);
        if let Err(err) = self.run(async move { catalog.release_lease(lease).await }) {
            tracing::warn!(%err, "could not release the compactor lease; it expires by itself");
        }
    }

    /// Whether this node may maintain the bucket now: `Turn::Fenced` holding (or renewing) the
    /// bucket's `compactor` lease for `ttl`; `Turn::Unfenced` on a bucket without conditional
    /// updates (a `file://` directory: the catalog's own check still refuses removing a segment
    /// twice, so two maintainers cannot lose data, only repeat work); `Turn::Elsewhere` while
    /// another node holds the lease.
    pub(crate) fn maintenance_turn(&self, ttl: Duration) -> Result<Turn, StoreError> {
        if *self.leases.lock() == Some(false) {
            return Ok(Turn::Unfenced);
        }
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let now_ms = infersight_cluster::SystemClock.now_ms();
        if let Some(lease) = self.held.lock().as_ref()
            && lease.expires_at_ms.saturating_sub(now_ms) > ttl_ms / 2
        {
            return Ok(Turn::Fenced(lease.clone()));
        }
        let catalog = Arc::clone(&self.catalog);
        let acquired = self.run(async move {
            match catalog.acquire_lease(COMPACTOR_LEASE, ttl_ms).await {
                Err(ClusterError::UnsafeStore(reason)) => Ok(Err(reason)),
                other => other.map(Ok),
            }
        })?;
        let turn = match acquired {
            Ok(Acquire::Acquired(lease)) => Turn::Fenced(lease),
            Ok(Acquire::HeldBy { holder, .. }) => Turn::Elsewhere(holder.to_string()),
            Err(reason) => {
                tracing::info!(
                    bucket = %self.bucket.configured,
                    %reason,
                    "the bucket has no leases: maintaining it unfenced (the catalog log still refuses conflicting removals)"
                );
                Turn::Unfenced
            }
        };
        *self.leases.lock() = Some(!matches!(turn, Turn::Unfenced));
        *self.held.lock() = match &turn {
            Turn::Fenced(lease) => Some(lease.clone()),
            Turn::Unfenced | Turn::Elsewhere(_) => None,
        };
        Ok(turn)
    }

    /// Deletes the objects under `segments/`, under `cold_prefix` and under the first directory
    /// of any segment `state` names, that `state` does not name, once they have been seen so for
    /// `gc_grace` and were last written at least `gc_grace` ago. Answers how many objects it
    /// deleted, and the table (from the key), 0 rows and the size of each whose key names a
    /// table.
    #[allow(clippy::type_complexity)]
    pub(crate) fn collect_garbage(
        &self,
        state: &CatalogState,
        cold_prefix: Option<&str>,
    ) -> Result<(usize, Vec<(Table, u64, u64)>), StoreError> {
        let mut prefixes: std::collections::BTreeSet<String> =
            [infersight_cluster::layout::SEGMENTS_DIR.to_string()].into();
        prefixes.extend(cold_prefix.map(str::to_string));
        prefixes.extend((state.segments.values()).filter_map(|meta| {
            let (first, _) = meta.path.split_once('/')?;
            Some(first.to_string())
        }));
        let scoped = Arc::clone(&self.scoped);
        let listed = self.run(async move {
            use futures::TryStreamExt;
            let mut objects = Vec::new();
            for prefix in prefixes {
                let prefix = ObjectPath::from(prefix);
                let under: Vec<_> = scoped.list(Some(&prefix)).try_collect().await?;
                objects.extend(under);
            }
            Ok(objects)
        })?;
        let referenced: HashSet<&str> = state
            .segments
            .values()
            .flat_map(|meta| std::iter::once(meta.path.as_str()).chain(meta.sidecar.as_deref()))
            .collect();
        let now = Instant::now();
        let written_before = SystemTime::now()
            .checked_sub(self.gc_grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let due: Vec<(ObjectPath, u64)> = {
            let mut unreferenced = self.unreferenced.lock();
            let mut seen = HashMap::new();
            let mut due = Vec::new();
            for object in listed {
                if referenced.contains(object.location.as_ref()) {
                    continue;
                }
                let since = unreferenced.remove(&object.location).unwrap_or(now);
                let old_enough = SystemTime::from(object.last_modified) <= written_before;
                if old_enough && now.saturating_duration_since(since) >= self.gc_grace {
                    due.push((object.location, object.size));
                } else {
                    seen.insert(object.location, since);
                }
            }
            *unreferenced = seen;
            due
        };
        if due.is_empty() {
            return Ok((0, Vec::new()));
        }
        let count = due.len();
        // segments/<table>/<hour>/<name>, <cold prefix>/<table>/<hour>/<name>
        let deleted: Vec<(Table, u64, u64)> = (due.iter())
            .filter_map(|(location, size)| {
                let table = location.parts().nth(1)?;
                Some((Table::from_name(table.as_ref()).ok()?, 0, *size))
            })
            .collect();
        let locations: Vec<ObjectPath> = due.into_iter().map(|(location, _)| location).collect();
        let scoped = Arc::clone(&self.scoped);
        self.run(async move {
            for location in locations {
                match scoped.delete(&location).await {
                    Ok(()) | Err(infersight_cluster::object_store::Error::NotFound { .. }) => {}
                    Err(error) => return Err(error.into()),
                }
            }
            Ok(())
        })?;
        tracing::info!(bucket = %self.bucket.configured, objects = count, "unreferenced objects deleted");
        Ok((count, deleted))
    }

    /// What the read cache did so far, with its capacity; `None` with the cache off.
    pub(crate) fn cache_stats(&self) -> Option<crate::types::BucketCacheStats> {
        self.cache.as_ref().map(|cache| {
            let stats = cache.stats();
            let disk = stats.disk.unwrap_or_default();
            crate::types::BucketCacheStats {
                hits: stats.hits,
                disk_hits: stats.disk_hits,
                misses: stats.misses,
                bypassed: stats.bypassed,
                evictions: stats.evictions,
                cached_bytes: stats.cached_bytes,
                capacity_bytes: self.read_cache_bytes,
                disk_bytes: disk.bytes,
                disk_capacity_bytes: disk.capacity_bytes,
            }
        })
    }

    /// Deletes the catalog log's entries and checkpoints no reader needs any more (see
    /// `ObjectStoreCatalog::prune`).
    pub(crate) fn prune_log(&self) -> Result<infersight_cluster::catalog::PruneReport, StoreError> {
        let catalog = Arc::clone(&self.catalog);
        self.run(async move { catalog.prune().await })
    }

    /// The bytes of the object at `location` (a full key), through the read cache.
    fn fetch(&self, location: &str) -> Result<Bytes, StoreError> {
        let store = Arc::clone(&self.reader);
        let location = ObjectPath::from(location);
        self.run(async move {
            let got = store.get_opts(&location, GetOptions::default()).await?;
            Ok(got.bytes().await?)
        })
    }

    /// The rows of a bucket segment a batch at a time, its bytes (fetched whole, compressed)
    /// checked against its checksum first.
    pub(crate) fn segment_batches(
        &self,
        meta: &SegmentMeta,
    ) -> Result<segment::SegmentBatches, StoreError> {
        let location = meta.location.as_deref().unwrap_or_default();
        segment::segment_bytes_batches(meta, self.fetch(location)?)
    }

    /// The rows of a bucket segment, checked against its checksum.
    pub(crate) fn read_segment(
        &self,
        meta: &SegmentMeta,
    ) -> Result<Vec<arrow::array::RecordBatch>, StoreError> {
        let location = meta.location.as_deref().unwrap_or_default();
        segment::read_segment_bytes(meta, self.fetch(location)?)
    }

    /// The rollup of a bucket segment: its sidecar, else rolled up from its rows (a sidecar that
    /// does not match its checksum is logged and passed over; objects are not quarantined).
    pub(crate) fn load_rollup(
        &self,
        spec: &RollupSpec,
        meta: &SegmentMeta,
    ) -> Result<Arc<Rollup>, StoreError> {
        if meta.rollup_bytes.is_some()
            && let Some(location) = &meta.location
        {
            let key = sidecar_path(&ObjectPath::from(location.as_str()));
            let sidecar = self.fetch(key.as_ref())?;
            match rollups::decode_sidecar(meta, rollups::sidecar_path(&meta.path), &sidecar) {
                Ok(rollup) => return Ok(rollup),
                Err(err) => {
                    tracing::warn!(%err, "rollup sidecar in the bucket unreadable; rolling up the rows")
                }
            }
        }
        Ok(Arc::new(rollups::build(spec, &self.read_segment(meta)?)?))
    }

    /// What query engines register to read bucket segments.
    pub(crate) fn segments(&self) -> RemoteSegments {
        RemoteSegments {
            url: self.bucket.url.clone(),
            store: Arc::clone(&self.reader),
            prefix: self.bucket.prefix.to_string(),
        }
    }

    /// Runs `future` on the bucket's runtime and waits for it on this thread.
    fn run<T: Send + 'static>(
        &self,
        future: impl Future<Output = Result<T, ClusterError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let error = |source: ClusterError| StoreError::Remote {
            url: self.bucket.configured.clone(),
            source,
        };
        match &self.runtime {
            Some(runtime) => wait(runtime, future).map_err(error),
            None => Err(StoreError::Closed),
        }
    }
}

/// The read cache's disk level, under the data directory.
pub(crate) const DISK_CACHE_DIR: &str = "bucket-cache";

/// The lease the node maintaining a bucket holds.
pub(crate) const COMPACTOR_LEASE: &str = "compactor";

/// Whose turn maintaining the bucket is (see [`Remote::maintenance_turn`]).
#[derive(Debug)]
pub(crate) enum Turn {
    Fenced(Lease),
    Unfenced,
    Elsewhere(String),
}

/// Spawns `future` on `runtime` and blocks this thread until it ends. Works from any thread,
/// also one of another runtime's (where `Runtime::block_on` would panic).
fn wait<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    future: impl Future<Output = Result<T, ClusterError>> + Send + 'static,
) -> Result<T, ClusterError> {
    let task = runtime.spawn(future);
    futures::executor::block_on(task).map_err(|join| {
        ClusterError::Store(infersight_cluster::object_store::Error::Generic {
            store: "bucket",
            source: Box::new(join),
        })
    })?
}
