//! Test helpers: segments to commit, catalogs over a shared store, and stores that misbehave the
//! way real ones can (one that ignores conditional writes, one whose answers get lost).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use futures::stream::BoxStream;
use infersight_cluster::layout::segment_path;
use infersight_cluster::{
    CatalogConfig, Clock, NodeId, ObjectStoreCatalog, SegmentId, SegmentMeta,
};
use infersight_model::Table;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

pub fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// A fresh segment of `table` from `node`, in the hour of `ts_ns`.
pub fn segment(node: &NodeId, table: Table, ts_ns: i64) -> SegmentMeta {
    let id = SegmentId::new(node);
    let path = segment_path(table, ts_ns, &id);
    SegmentMeta {
        id,
        table: table.name().to_string(),
        path: path.to_string(),
        sidecar: None,
        rows: 100,
        bytes: 4096,
        min_ts_ns: ts_ns,
        max_ts_ns: ts_ns + 1,
        checksum: None,
        schema_version: None,
        tier: Default::default(),
        org_rows: None,
    }
}

pub async fn open(
    store: &Arc<dyn ObjectStore>,
    name: &str,
    checkpoint_every: u64,
    clock: Arc<dyn Clock>,
) -> ObjectStoreCatalog {
    let mut config = CatalogConfig::new(node(name));
    config.checkpoint_every = checkpoint_every;
    ObjectStoreCatalog::open_with_clock(Arc::clone(store), config, clock)
        .await
        .unwrap()
}

#[derive(Debug)]
pub enum Fault {
    /// Conditional writes are done as plain overwrites, as by a store that ignores the headers.
    IgnoreConditions,
    /// The next N creates under `catalog/log/` land but answer with a transport error.
    LoseAnswers(AtomicU32),
    /// Every put and get yields to the runtime first, as a request over the network would.
    Yield,
    /// Counts the gets (heads included) that reach the inner store.
    CountGets(AtomicU64),
}

/// A store with a fault on its puts; everything else goes to `inner`.
#[derive(Debug)]
pub struct Faulty {
    pub inner: Arc<dyn ObjectStore>,
    pub fault: Fault,
}

impl fmt::Display for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Faulty {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        mut opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match &self.fault {
            Fault::Yield => {
                tokio::task::yield_now().await;
                self.inner.put_opts(location, payload, opts).await
            }
            Fault::CountGets(_) => self.inner.put_opts(location, payload, opts).await,
            Fault::IgnoreConditions => {
                opts.mode = PutMode::Overwrite;
                self.inner.put_opts(location, payload, opts).await
            }
            Fault::LoseAnswers(left) => {
                let log_create = matches!(opts.mode, PutMode::Create)
                    && location.as_ref().starts_with("catalog/log/");
                let result = self.inner.put_opts(location, payload, opts).await;
                let lose = log_create
                    && result.is_ok()
                    && left
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                if lose {
                    return Err(object_store::Error::Generic {
                        store: "faulty",
                        source: "connection reset before the answer".into(),
                    });
                }
                result
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        match &self.fault {
            Fault::Yield => tokio::task::yield_now().await,
            Fault::CountGets(count) => {
                count.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
