//! Segment and sidecar bytes in the bucket: written once under their cluster-wide id
//! ([`write_segment`]), and read through [`SegmentCache`], an `ObjectStore` in front of the bucket
//! that keeps recently read segments in memory up to a size bound and, with
//! [`SegmentCache::with_disk`], on this node's disk up to another ([`crate::disk_cache`]).
//! Segments never change once written (a new id for every flush and every merge), so a cached
//! copy is never stale; a delete through the cache drops it.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt as _, PutMode, PutMultipartOptions,
    PutOptions, PutPayload, PutResult,
};

use crate::disk_cache::{DiskCache, DiskCacheStats};
use crate::error::ClusterError;
use crate::layout::SEGMENTS_DIR;

/// Writes a segment (or sidecar) at `path` unless the key exists. A retried upload of the same
/// bytes succeeds; different bytes under an existing key are a `Conflict` (ids are unique, so
/// that is a bug, never overwritten).
pub async fn write_segment(
    store: &dyn ObjectStore,
    path: &Path,
    bytes: Bytes,
) -> Result<(), ClusterError> {
    let put = store
        .put_opts(
            path,
            PutPayload::from(bytes.clone()),
            PutOptions::from(PutMode::Create),
        )
        .await;
    match put {
        Ok(_) => Ok(()),
        Err(object_store::Error::AlreadyExists { .. }) => {
            let existing = store
                .get_opts(path, GetOptions::default())
                .await?
                .bytes()
                .await?;
            if existing == bytes {
                Ok(())
            } else {
                Err(ClusterError::Conflict(format!(
                    "`{path}` already holds other bytes ({} vs {})",
                    existing.len(),
                    bytes.len()
                )))
            }
        }
        Err(error) => Err(error.into()),
    }
}

/// What the cache did since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads answered from memory.
    pub hits: u64,
    /// Reads answered from the disk level (none without one).
    pub disk_hits: u64,
    /// Objects fetched whole from the bucket, then kept.
    pub misses: u64,
    /// Objects too large to cache (over a quarter of the capacity of each level), read from
    /// the bucket.
    pub bypassed: u64,
    /// Objects dropped from memory, and files from the disk level, to stay within the bounds.
    pub evictions: u64,
    pub cached_bytes: u64,
    /// The disk level, if any.
    pub disk: Option<DiskCacheStats>,
}

#[derive(Debug)]
struct Cached {
    data: Bytes,
    meta: ObjectMeta,
    attributes: Attributes,
    last_used: u64,
}

/// Least recently used first: `order` maps each entry's last use to its path.
#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<Path, Cached>,
    order: BTreeMap<u64, Path>,
    bytes: u64,
    clock: u64,
}

impl Lru {
    fn touch(&mut self, path: &Path) -> Option<(Bytes, ObjectMeta, Attributes)> {
        self.clock += 1;
        let now = self.clock;
        let entry = self.entries.get_mut(path)?;
        self.order.remove(&entry.last_used);
        entry.last_used = now;
        self.order.insert(now, path.clone());
        Some((
            entry.data.clone(),
            entry.meta.clone(),
            entry.attributes.clone(),
        ))
    }

    fn remove(&mut self, path: &Path) {
        if let Some(old) = self.entries.remove(path) {
            self.order.remove(&old.last_used);
            self.bytes -= old.data.len() as u64;
        }
    }

    /// Inserts, then evicts the least recently used until within `capacity`; returns evictions.
    fn insert(&mut self, path: Path, cached: Cached, capacity: u64) -> u64 {
        self.remove(&path);
        self.clock += 1;
        let cached = Cached {
            last_used: self.clock,
            ..cached
        };
        self.bytes += cached.data.len() as u64;
        self.order.insert(cached.last_used, path.clone());
        self.entries.insert(path, cached);
        let mut evicted = 0;
        while self.bytes > capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.bytes -= old.data.len() as u64;
                evicted += 1;
            }
        }
        evicted
    }
}

/// A read cache for segments in front of the bucket; everything that is not under `segments/`
/// (the catalog, leases) goes straight through.
#[derive(Debug)]
pub struct SegmentCache {
    remote: Arc<dyn ObjectStore>,
    /// Where segments are in `remote`'s keys: `segments`, or `<prefix>/segments` when `remote`
    /// is the whole bucket ([`SegmentCache::with_segments_dir`]).
    segments_dir: Path,
    capacity_bytes: u64,
    lru: Arc<std::sync::Mutex<Lru>>,
    disk: Option<Arc<DiskCache>>,
    hits: AtomicU64,
    disk_hits: AtomicU64,
    misses: AtomicU64,
    bypassed: AtomicU64,
    evictions: AtomicU64,
}

impl SegmentCache {
    pub fn new(remote: Arc<dyn ObjectStore>, capacity_bytes: u64) -> Self {
        Self {
            remote,
            segments_dir: Path::from(SEGMENTS_DIR),
            capacity_bytes,
            lru: Arc::new(std::sync::Mutex::new(Lru::default())),
            disk: None,
            hits: AtomicU64::new(0),
            disk_hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Caches the objects under `dir` instead of `segments/`: for a cache in front of the whole
    /// bucket, whose segment keys start with the store's prefix.
    pub fn with_segments_dir(mut self, dir: Path) -> Self {
        self.segments_dir = dir;
        self
    }

    /// A second level on this node's disk: objects read from the bucket are kept there too,
    /// and a read that memory misses looks there before the bucket.
    pub fn with_disk(mut self, disk: DiskCache) -> Self {
        self.disk = Some(Arc::new(disk));
        self
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            disk_hits: self.disk_hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            cached_bytes: self.with_lru(|lru| lru.bytes),
            disk: self.disk.as_ref().map(|disk| disk.stats()),
        }
    }

    /// Whether memory keeps an object of `size` bytes (a quarter of its capacity at most).
    fn fits_memory(&self, size: u64) -> bool {
        size <= self.capacity_bytes / 4
    }

    /// Keeps `data` in memory when it fits.
    fn remember(&self, location: &Path, data: &Bytes, meta: &ObjectMeta, attributes: &Attributes) {
        if !self.fits_memory(meta.size) {
            return;
        }
        let cached = Cached {
            data: data.clone(),
            meta: meta.clone(),
            attributes: attributes.clone(),
            last_used: 0,
        };
        let capacity = self.capacity_bytes;
        let evicted = self.with_lru(|lru| lru.insert(location.clone(), cached, capacity));
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    /// The object from the disk level, if it has it: whole when memory keeps it, else only
    /// its size (reads then take their ranges from the file). Read on a blocking thread.
    async fn read_disk(&self, location: &Path) -> Option<Held> {
        let disk = Arc::clone(self.disk.as_ref()?);
        let key = location.clone();
        let capacity = self.capacity_bytes;
        let (data, size) = tokio::task::spawn_blocking(move || {
            let size = disk.size(&key)?;
            if size <= capacity / 4 {
                disk.get(&key).map(|data| (Some(data), size))
            } else {
                Some((None, size))
            }
        })
        .await
        .ok()??;
        let meta = ObjectMeta {
            location: location.clone(),
            last_modified: chrono::DateTime::UNIX_EPOCH,
            size,
            e_tag: None,
            version: None,
        };
        Some(match data {
            Some(data) => Held::Whole(data, meta, Attributes::default()),
            None => Held::OnDisk(meta),
        })
    }

    /// Bytes `range` of an object the disk level holds (read on a blocking thread); `None` when
    /// its file is gone or wrong, and the caller reads from the bucket instead.
    async fn disk_range(&self, location: &Path, range: Range<u64>) -> Option<Bytes> {
        let disk = Arc::clone(self.disk.as_ref()?);
        let key = location.clone();
        tokio::task::spawn_blocking(move || disk.get_range(&key, range))
            .await
            .ok()?
    }

    /// Keeps `data` on the disk level when it fits (written on a blocking thread); a failed
    /// write only costs the copy.
    async fn keep_on_disk(&self, location: &Path, data: &Bytes) {
        let Some(disk) = self
            .disk
            .as_ref()
            .filter(|disk| disk.accepts(location, data.len() as u64))
        else {
            return;
        };
        let (disk, key, data) = (Arc::clone(disk), location.clone(), data.clone());
        match tokio::task::spawn_blocking(move || disk.put(&key, &data)).await {
            Ok(Ok(evicted)) => {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
            }
            Ok(Err(error)) => {
                tracing::warn!(%location, %error, "a segment could not be kept on the disk cache");
            }
            Err(error) => tracing::warn!(%location, %error, "disk cache task failed"),
        }
    }

    /// Drops `location` from both levels.
    fn forget(&self, location: &Path) {
        self.with_lru(|lru| lru.remove(location));
        if let Some(disk) = &self.disk {
            disk.remove(location);
        }
    }

    fn with_lru<T>(&self, f: impl FnOnce(&mut Lru) -> T) -> T {
        f(&mut lock(&self.lru))
    }

    fn cacheable(&self, location: &Path) -> bool {
        location.prefix_matches(&self.segments_dir)
    }

    /// The object from memory, from the disk level, or from the bucket into the cache; `None`
    /// when it is too large to cache anywhere.
    async fn held(&self, location: &Path) -> object_store::Result<Option<Held>> {
        if let Some((data, meta, attributes)) = self.with_lru(|lru| lru.touch(location)) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(Held::Whole(data, meta, attributes)));
        }
        if let Some(held) = self.read_disk(location).await {
            self.disk_hits.fetch_add(1, Ordering::Relaxed);
            if let Held::Whole(data, meta, attributes) = &held {
                self.remember(location, data, meta, attributes);
            }
            return Ok(Some(held));
        }
        let meta = self.remote.head(location).await?;
        let on_disk = self
            .disk
            .as_ref()
            .is_some_and(|disk| disk.accepts(location, meta.size));
        if !self.fits_memory(meta.size) && !on_disk {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let got = self
            .remote
            .get_opts(location, GetOptions::default())
            .await?;
        let (meta, attributes) = (got.meta.clone(), got.attributes.clone());
        let data = got.bytes().await?;
        self.keep_on_disk(location, &data).await;
        self.remember(location, &data, &meta, &attributes);
        Ok(Some(Held::Whole(data, meta, attributes)))
    }

    /// Bytes `range` of `held`, or `None` when the disk level no longer has them.
    async fn slice(&self, location: &Path, held: &Held, range: Range<u64>) -> Option<Bytes> {
        match held {
            Held::Whole(data, ..) => Some(data.slice(range.start as usize..range.end as usize)),
            Held::OnDisk(_) => self.disk_range(location, range).await,
        }
    }
}

/// An object as the cache holds it.
enum Held {
    /// Its bytes (from memory, or just read).
    Whole(Bytes, ObjectMeta, Attributes),
    /// On the disk level only, too large for memory: reads take their ranges from the file.
    OnDisk(ObjectMeta),
}

impl Held {
    fn meta(&self) -> &ObjectMeta {
        match self {
            Held::Whole(_, meta, _) | Held::OnDisk(meta) => meta,
        }
    }
}

impl std::fmt::Display for SegmentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SegmentCache({})", self.remote)
    }
}

/// The LRU is consistent after every call, so a poisoned lock still holds a valid one.
fn lock(lru: &std::sync::Mutex<Lru>) -> std::sync::MutexGuard<'_, Lru> {
    lru.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn range_error(error: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: "SegmentCache",
        source: Box::new(error),
    }
}

#[async_trait]
impl ObjectStore for SegmentCache {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.forget(location);
        self.remote.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.forget(location);
        self.remote.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if !self.cacheable(location) || options.head || options.version.is_some() {
            return self.remote.get_opts(location, options).await;
        }
        let Some(held) = self.held(location).await? else {
            return self.remote.get_opts(location, options).await;
        };
        let meta = held.meta().clone();
        options.check_preconditions(&meta)?;
        let range = match &options.range {
            Some(range) => range.as_range(meta.size).map_err(range_error)?,
            None => 0..meta.size,
        };
        let Some(slice) = self.slice(location, &held, range.clone()).await else {
            return self.remote.get_opts(location, options).await;
        };
        let attributes = match held {
            Held::Whole(_, _, attributes) => attributes,
            Held::OnDisk(_) => Attributes::default(),
        };
        let stream = futures::stream::once(futures::future::ready(Ok(slice)));
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream.boxed()),
            meta,
            range,
            attributes,
        })
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        if !self.cacheable(location) {
            return self.remote.get_ranges(location, ranges).await;
        }
        let Some(held) = self.held(location).await? else {
            return self.remote.get_ranges(location, ranges).await;
        };
        let size = held.meta().size;
        let mut out = Vec::with_capacity(ranges.len());
        for range in ranges {
            let checked = GetRange::Bounded(range.clone())
                .as_range(size)
                .map_err(range_error)?;
            match self.slice(location, &held, checked).await {
                Some(bytes) => out.push(bytes),
                None => return self.remote.get_ranges(location, ranges).await,
            }
        }
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        // a path leaves the cache before it is deleted and again once it is (a read in between
        // may have cached it anew)
        let before = Arc::clone(&self.lru);
        let disk = self.disk.clone();
        let locations = locations
            .map(move |location| {
                if let Ok(path) = &location {
                    lock(&before).remove(path);
                    if let Some(disk) = &disk {
                        disk.remove(path);
                    }
                }
                location
            })
            .boxed();
        let after = Arc::clone(&self.lru);
        let disk = self.disk.clone();
        self.remote
            .delete_stream(locations)
            .map(move |deleted| {
                if let Ok(path) = &deleted {
                    lock(&after).remove(path);
                    if let Some(disk) = &disk {
                        disk.remove(path);
                    }
                }
                deleted
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.remote.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.remote.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.forget(to);
        self.remote.copy_opts(from, to, options).await
    }
}
