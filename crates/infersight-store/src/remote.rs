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
//! Not yet here: compaction and retention of bucket segments (the `compact` role), the read
//! cache (`infersight_cluster::segments::SegmentCache`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use infersight_cluster::layout::{segment_path, sidecar_path};
use infersight_cluster::object_store::path::Path as ObjectPath;
use infersight_cluster::object_store::{GetOptions, ObjectStore};
use infersight_cluster::{
    Action, Bucket, CatalogBackend, CatalogConfig, CatalogState, ClusterError, NodeId,
    ObjectStoreCatalog, SegmentId,
};
use infersight_model::Table;
use infersight_model::time::hour_floor_ns;
use infersight_rollup::{Rollup, RollupSpec};

use crate::catalog::Catalog;
use crate::rollups;
use crate::segment;
use crate::types::{RemoteOptions, RemoteSegments, SegmentChecksum, SegmentMeta, StoreError};

/// The bucket, its catalog log and the runtime their async clients run on (the store itself is
/// blocking; see [`Remote::run`]).
pub(crate) struct Remote {
    bucket: Bucket,
    scoped: Arc<dyn ObjectStore>,
    catalog: Arc<ObjectStoreCatalog>,
    node: NodeId,
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
    pub(crate) fn open(options: &RemoteOptions) -> Result<(Remote, Arc<CatalogState>), StoreError> {
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
        let remote = Remote {
            bucket,
            scoped,
            catalog,
            node,
            runtime: Some(runtime),
        };
        Ok((remote, state))
    }

    /// How far this node's WAL is in committed segments.
    pub(crate) fn flushed_wal_seq(&self, state: &CatalogState) -> u64 {
        state.flushed_wal.get(&self.node).copied().unwrap_or(0)
    }

    /// Fills `catalog` with the log's segments (every node's), each under a new local id.
    pub(crate) fn load_segments(
        &self,
        state: &CatalogState,
        catalog: &mut Catalog,
    ) -> Result<(), StoreError> {
        for meta in state.segments.values() {
            let table = Table::from_name(&meta.table).map_err(|_| StoreError::Corrupt {
                what: "catalog log",
                path: PathBuf::from(&self.bucket.configured),
                reason: format!("segment {} has an unknown table `{}`", meta.id, meta.table),
            })?;
            let id = catalog.allocate_id();
            catalog.segments.push(self.local_meta(id, table, meta));
        }
        catalog.sort();
        Ok(())
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
        }
    }

    /// Uploads the segments a flush wrote locally (`written`, with their sidecars), then commits
    /// them and `flushed_wal_seq` as one catalog entry. Answers them as bucket segments (same
    /// local ids); the caller deletes the local files. Nothing is committed on error (objects
    /// uploaded before it stay unreferenced).
    pub(crate) fn publish(
        &self,
        written: &[SegmentMeta],
        flushed_wal_seq: u64,
    ) -> Result<Vec<SegmentMeta>, StoreError> {
        let mut uploads: Vec<(ObjectPath, Bytes)> = Vec::new();
        let mut actions = Vec::new();
        let mut published = Vec::new();
        for local in written {
            let bytes =
                Bytes::from(std::fs::read(&local.path).map_err(StoreError::io(&local.path))?);
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
            let key = segment_path(local.table, local.hour_ns, &id);
            let sidecar = match local.rollup_bytes {
                Some(_) => {
                    let path = rollups::sidecar_path(&local.path);
                    let sidecar = Bytes::from(std::fs::read(&path).map_err(StoreError::io(&path))?);
                    let key = sidecar_path(&key);
                    uploads.push((key.clone(), sidecar));
                    Some(key.to_string())
                }
                None => None,
            };
            uploads.push((key.clone(), bytes));
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
            };
            published.push(self.local_meta(local.id, local.table, &meta));
            actions.push(Action::AddSegment { segment: meta });
        }
        actions.push(Action::FlushedWal {
            node: self.node.clone(),
            wal_seq: flushed_wal_seq,
        });
        let scoped = Arc::clone(&self.scoped);
        let catalog = Arc::clone(&self.catalog);
        self.run(async move {
            let puts = uploads.into_iter().map(|(key, bytes)| {
                let scoped = Arc::clone(&scoped);
                async move {
                    infersight_cluster::segments::write_segment(scoped.as_ref(), &key, bytes).await
                }
            });
            futures::future::try_join_all(puts).await?;
            catalog.commit(actions).await
        })?;
        Ok(published)
    }

    /// The bytes of the object at `location` (a full key).
    fn fetch(&self, location: &str) -> Result<Bytes, StoreError> {
        let store = Arc::clone(&self.bucket.store);
        let location = ObjectPath::from(location);
        self.run(async move {
            let got = store.get_opts(&location, GetOptions::default()).await?;
            Ok(got.bytes().await?)
        })
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
            store: Arc::clone(&self.bucket.store),
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
