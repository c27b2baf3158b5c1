//! The store's public contract: options, the backend trait, snapshots handed to the query layer,
//! reports and errors. Implementations live in sibling modules.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
pub use infersight_cluster::Tier;
use infersight_model::{ErrorKind, Table, TableBatch};
use infersight_rollup::{Rollup, RollupSpec};
use serde::{Deserialize, Serialize};

/// When the WAL is fsynced relative to acknowledging an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum FsyncPolicy {
    /// fsync before `append` returns (acknowledged data survives power loss). Concurrent appends
    /// share one fsync (group commit). The default.
    Always,
    /// `append` returns after write(2); a background thread fsyncs every `interval_ms`
    /// (acknowledged data survives a process crash, not a power loss within the interval).
    Interval { interval_ms: u64 },
    /// Never fsync explicitly (tests and benchmarks).
    Never,
}

/// The scrub's default pace ([`StoreOptions::verify_bytes_per_sec`]): 64 MiB/s reads 1 TB of
/// segments in under 5 hours, a small share of a disk's bandwidth.
pub const DEFAULT_VERIFY_BYTES_PER_SEC: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct StoreOptions {
    pub data_dir: PathBuf,
    pub fsync: FsyncPolicy,
    /// Flush the memtable when it holds this many rows in total.
    pub memtable_max_rows: usize,
    /// Flush the memtable when its Arrow buffers exceed this many bytes. Logged appends are
    /// refused (retryable, [`StoreError::Overloaded`]) while the memtable holds twice this (at
    /// least 64 MiB): ingest faster than flushes can write must not grow memory without bound.
    /// The flusher starts as soon as the memtable reaches this size, and a flush holds no copy
    /// of the memtable, so twice leaves a flush room to finish under load.
    pub memtable_max_bytes: usize,
    /// Flush a non-empty memtable at least this often.
    pub flush_interval: Duration,
    /// Compact a (table, hour) partition once it has at least this many small segments.
    pub compaction_min_segments: usize,
    /// Segments smaller than this are candidates for compaction.
    pub compaction_small_bytes: u64,
    /// Drop segments whose hour ended longer ago than this; `None` keeps everything.
    pub retention: Option<Duration>,
    /// Per-table retention over `retention` (e.g. `tokens` 2 days, `spans` 7 days); `None` for a
    /// table keeps its segments whatever `retention` says. Rollups are sidecars of `requests`
    /// segments and go with them.
    pub retention_by_table: std::collections::BTreeMap<Table, Option<Duration>>,
    /// Per org (the stamped `org` column; null is `default`): its rows of every table go once
    /// their hour ended this long ago, whatever the table keeps for other orgs (module
    /// `org_retention`). Table retention still applies to every org's rows.
    pub retention_by_org: std::collections::BTreeMap<String, Duration>,
    /// Moving bucket segments to the cold tier and its retention (needs `remote`); `None`:
    /// segments stay warm until their table's retention.
    pub tiers: Option<TierOptions>,
    /// Rows per Parquet row group.
    pub parquet_row_group_rows: usize,
    /// zstd level for Parquet pages: 1 by default (measured on 1M spans it wrote smaller segments
    /// than 3, with a third less compression time).
    pub zstd_level: i32,
    /// SLI rollups of the `requests` table (per minute, per dimension combination); `None`
    /// turns them off.
    pub rollup: Option<RollupSpec>,
    /// Files of segments that compaction or retention removed from the catalog stay on disk
    /// this long, so queries that planned over them before the change still read them; the
    /// next maintenance pass after that (or closing the store) deletes them. Zero deletes at
    /// once.
    pub retired_grace: Duration,
    /// The upkeep maintenance thread reads every local segment and sidecar against its checksum
    /// once after start, then again this often (a scrub: damage at rest is found even in data no
    /// query reads); `None`: only once after start.
    pub verify_interval: Option<Duration>,
    /// Bytes per second those scrubs read at most, on one thread, a slice between the upkeep
    /// thread's other work (compaction, retention and a stop do not wait for a whole scrub);
    /// `None`: as fast as every core reads, in one go.
    pub verify_bytes_per_sec: Option<u64>,
    /// Flushed segments go to this bucket and are listed in its catalog log (module `remote`);
    /// `None`: segments are files under `data_dir` (the single-node default). The WAL stays in
    /// `data_dir` either way.
    pub remote: Option<RemoteOptions>,
    /// Told of every deletion of stored data once it is committed (compaction, retention,
    /// garbage collection), from whichever thread made it: the binary writes the access audit's
    /// line. `None`: nobody is told.
    pub on_delete: Option<DeleteObserver>,
}

/// The tiers of a store whose segments live in a bucket: hot (the memtable and this node's local
/// files), warm (segments in the bucket as flushed and compacted) and cold (each (table, hour)
/// rewritten by the maintaining node into one segment with large row groups, under its own
/// prefix). Table retention ([`StoreOptions::retention_of`]) applies in every tier first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierOptions {
    /// A (table, hour) moves from warm to cold once the hour ended this long ago.
    pub warm_for: Duration,
    /// Cold segments are deleted once their hour ended this long ago; `None`: kept until their
    /// table's retention.
    pub cold_for: Option<Duration>,
    /// Where cold segments go in the bucket (`<prefix>/<table>/<hour>/`): one path segment,
    /// see `infersight_cluster::layout::check_tier_prefix`.
    pub cold_prefix: String,
    /// Rows per Parquet row group in cold segments (larger groups: fewer, longer reads and
    /// better compression for data that is mostly scanned whole).
    pub cold_row_group_rows: usize,
    /// At most this many (table, hour) partitions move per maintenance pass, so one pass after
    /// a long outage does not rewrite days of data at once.
    pub max_partitions_per_pass: usize,
}

impl TierOptions {
    /// Warm for `warm_for`, cold until table retention, under `cold/`, 1 Mi rows per row group,
    /// 16 partitions per pass.
    pub fn new(warm_for: Duration) -> Self {
        Self {
            warm_for,
            cold_for: None,
            cold_prefix: "cold".to_string(),
            cold_row_group_rows: 1 << 20,
            max_partitions_per_pass: 16,
        }
    }
}

/// Stored data a catalog change removed (see [`StoreOptions::on_delete`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DataDeleted {
    /// `compaction` (segments merged into one: rows stay, files go), `retention` (rows go) or
    /// `garbage collection` (unreferenced objects in a bucket).
    pub what: &'static str,
    pub tables: Vec<Table>,
    /// Segments (or, for garbage collection, objects) removed.
    pub segments: usize,
    /// Rows in them (0 for garbage collection: nothing listed them).
    pub rows: u64,
    pub bytes: u64,
}

/// The callback of [`StoreOptions::on_delete`].
#[derive(Clone)]
pub struct DeleteObserver(pub Arc<dyn Fn(&DataDeleted) + Send + Sync>);

impl std::fmt::Debug for DeleteObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeleteObserver")
    }
}

/// A bucket for the segments: where it is and the name this node commits under.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    pub bucket: infersight_cluster::BucketConfig,
    /// This node's id in the catalog log and in segment names (`[A-Za-z0-9_.]`, see
    /// `infersight_cluster::NodeId`); its WAL position is kept under it.
    pub node: String,
    /// This node merges, expires and garbage-collects the bucket's segments (the `compact` and
    /// `all` roles), under the bucket's `compactor` lease where the bucket has leases; other
    /// nodes only add segments and follow the catalog log.
    pub maintain: bool,
    /// An object under `segments/` that no catalog entry names is deleted once it has been seen
    /// unreferenced for this long and was last written at least this long ago: the upload of a
    /// flush that crashed before its commit, a segment that compaction or retention removed (a
    /// query that planned over it before may still read it meanwhile). Longer than any upload
    /// takes to commit.
    pub gc_grace: Duration,
    /// Segments and sidecars read from the bucket are kept in memory up to this many bytes
    /// (least recently used out first; an object over a quarter of it is not kept); 0: off.
    pub read_cache_bytes: u64,
    /// ...and on disk, in the data directory's `bucket-cache/`, up to this many bytes (kept
    /// across restarts; same rules); 0: memory only. Needs the memory level on.
    pub disk_cache_bytes: u64,
}

impl RemoteOptions {
    /// A node that maintains the bucket, with a 10-minute garbage-collection grace and a
    /// 256 MiB read cache.
    pub fn new(bucket: infersight_cluster::BucketConfig, node: impl Into<String>) -> Self {
        Self {
            bucket,
            node: node.into(),
            maintain: true,
            gc_grace: Duration::from_secs(600),
            read_cache_bytes: 256 << 20,
            disk_cache_bytes: 0,
        }
    }
}

impl StoreOptions {
    /// The memtable size beyond which logged appends are refused (see `memtable_max_bytes`).
    pub fn memtable_hard_limit_bytes(&self) -> u64 {
        (self.memtable_max_bytes as u64)
            .saturating_mul(2)
            .max(64 << 20)
    }

    /// How long `table`'s segments are kept: its own retention, else `retention`.
    pub fn retention_of(&self, table: Table) -> Option<Duration> {
        match self.retention_by_table.get(&table) {
            Some(own) => *own,
            None => self.retention,
        }
    }

    /// Whether any table's segments expire (by table retention or the cold tier's).
    pub fn expires_anything(&self) -> bool {
        Table::ALL.iter().any(|t| self.retention_of(*t).is_some())
            || self.tiers.as_ref().is_some_and(|t| t.cold_for.is_some())
            || !self.retention_by_org.is_empty()
    }

    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            fsync: FsyncPolicy::Always,
            memtable_max_rows: 1_000_000,
            memtable_max_bytes: 256 * 1024 * 1024,
            flush_interval: Duration::from_secs(60),
            compaction_min_segments: 4,
            compaction_small_bytes: 64 * 1024 * 1024,
            retention: None,
            retention_by_table: std::collections::BTreeMap::new(),
            retention_by_org: std::collections::BTreeMap::new(),
            tiers: None,
            parquet_row_group_rows: 128 * 1024,
            zstd_level: 1,
            rollup: Some(RollupSpec::default()),
            retired_grace: Duration::from_secs(300),
            verify_interval: Some(Duration::from_secs(7 * 24 * 3600)),
            verify_bytes_per_sec: Some(DEFAULT_VERIFY_BYTES_PER_SEC),
            remote: None,
            on_delete: None,
        }
    }
}

/// Half-open time range on the `ts` column (defined with the timestamp helpers in the model, so
/// the CLI and the API parse it without the store).
pub use infersight_model::time::TimeRange;

/// One Parquet segment as recorded in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    pub id: u64,
    pub table: Table,
    /// Start of the UTC hour all rows of the segment fall in.
    pub hour_ns: i64,
    /// Absolute path of the Parquet file; for a segment in a bucket, the bucket URL and key
    /// (for messages: nothing opens it as a file).
    pub path: PathBuf,
    /// The segment's full key in the bucket ([`RemoteSegments::store`]); `None`: a local file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub rows: u64,
    pub bytes: u64,
    pub min_ts_ns: i64,
    pub max_ts_ns: i64,
    pub schema_version: u32,
    /// Size of the rollup sidecar (`<id>.rollup`), for `requests` segments written with rollups
    /// on; `None` when there is none (then SLI queries roll the segment up on first use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollup_bytes: Option<u64>,
    /// Checksums taken when the segment was written; `None` for segments written before the
    /// store kept them (those are checked by size and Parquet magic only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<SegmentChecksum>,
    /// The bucket tier of a segment with a `location` (see [`SegmentMeta::tier_name`]).
    #[serde(default, skip_serializing_if = "Tier::is_warm")]
    pub tier: Tier,
    /// Rows per org (null `org` counted as `default`), taken while the segment was written;
    /// `None` for segments written before the store counted them (per-org retention reads
    /// those once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_rows: Option<std::collections::BTreeMap<String, u64>>,
}

impl SegmentMeta {
    /// `hot` for a local file, else its bucket tier (`warm` or `cold`).
    pub fn tier_name(&self) -> &'static str {
        match self.location {
            None => "hot",
            Some(_) => self.tier.name(),
        }
    }
}

/// What a segment's bytes must hash to. arrow-rs writes no Parquet page CRCs, so the store keeps
/// its own: the footer's is checked at every open (cheap: one read of the file's tail), the whole
/// file's and the sidecar's by [`crate::Store::verify_segments`] and whenever the store itself
/// reads the segment (compaction, rollup rebuild).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentChecksum {
    /// crc32 of the whole Parquet file.
    pub file_crc32: u32,
    /// Length of the Parquet footer (metadata, its length and the closing magic): the file's
    /// last `footer_bytes` bytes.
    pub footer_bytes: u32,
    pub footer_crc32: u32,
    /// crc32 of the rollup sidecar, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollup_crc32: Option<u32>,
}

/// What a query sees of one table at one instant: in-memory batches not yet flushed plus the
/// Parquet segments that may hold rows in the requested range. Rows are never in both.
#[derive(Debug, Clone)]
pub struct ScanSnapshot {
    pub table: Table,
    pub schema: SchemaRef,
    pub memtable: Vec<RecordBatch>,
    pub segments: Vec<SegmentMeta>,
    /// Segments of the table skipped because their time range lies outside the request.
    pub segments_pruned: usize,
}

/// The bucket segments with a [`SegmentMeta::location`] are read from: a query engine registers
/// `store` under `url` and reads each segment by its location.
#[derive(Debug, Clone)]
pub struct RemoteSegments {
    /// Scheme and authority: `s3://bucket`, `file://`.
    pub url: String,
    pub store: Arc<dyn infersight_cluster::object_store::ObjectStore>,
    /// Where the store's keys start under `store` (its segments' keys begin with it; for
    /// `file://`, the directory standing in for the bucket, without the leading `/`).
    pub prefix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendReceipt {
    /// WAL sequence number of the record holding the appended batches.
    pub wal_seq: u64,
    pub rows: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FlushReport {
    pub rows: u64,
    pub segments_written: usize,
    pub bytes_written: u64,
    pub wal_files_removed: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CompactionReport {
    pub partitions_compacted: usize,
    pub segments_removed: usize,
    pub segments_written: usize,
}

/// What [`crate::Store::refresh_bucket`] found in the bucket's catalog log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BucketRefresh {
    /// The last log entry read.
    pub catalog_seq: u64,
    /// Segments that came in (other nodes' flushes, merged segments).
    pub added: usize,
    /// Segments that left (merged or expired).
    pub removed: usize,
}

/// What [`crate::Store::apply_tiers`] moved from the warm tier to the cold one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TierReport {
    /// (table, hour) partitions rewritten into one cold segment each.
    pub partitions_moved: usize,
    /// Warm segments they replaced.
    pub segments_replaced: usize,
    pub rows_moved: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Partitions due but left for a later pass (`TierOptions::max_partitions_per_pass`).
    pub partitions_left: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    pub segments_removed: usize,
    pub rows_removed: u64,
    pub bytes_removed: u64,
    /// Segments rewritten without the rows of orgs past their own retention
    /// (`StoreOptions::retention_by_org`).
    pub segments_rewritten: usize,
}

impl RetentionReport {
    pub fn add(&mut self, other: &RetentionReport) {
        self.segments_removed += other.segments_removed;
        self.rows_removed += other.rows_removed;
        self.bytes_removed += other.bytes_removed;
        self.segments_rewritten += other.segments_rewritten;
    }
}

/// What [`crate::Store::verify_segments`] read and set aside.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub segments_checked: usize,
    pub bytes_checked: u64,
    /// Segments whose bytes did not match their checksum (or could not be read), quarantined.
    pub segments_quarantined: usize,
    /// Sidecars quarantined (the segment itself was sound).
    pub rollups_quarantined: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableStats {
    pub memtable_rows: u64,
    pub segments: u64,
    pub segment_rows: u64,
    pub segment_bytes: u64,
    /// The segments above by tier ([`SegmentMeta::tier_name`]): local files are hot.
    pub hot: TierUsage,
    pub warm: TierUsage,
    pub cold: TierUsage,
}

/// Segments of one table in one tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TierUsage {
    pub segments: u64,
    pub bytes: u64,
}

/// What one org's rows take in segments, every table and tier together: its rows as the
/// segments counted them while they were written, and its share of their bytes (each segment's
/// bytes split by its rows). Rows not yet flushed count once they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OrgUsage {
    pub rows: u64,
    pub bytes: u64,
}

impl OrgUsage {
    /// Adds `rows` of a segment of `segment_rows` rows and `segment_bytes` bytes.
    pub fn add_share(&mut self, rows: u64, segment_rows: u64, segment_bytes: u64) {
        self.rows += rows;
        if segment_rows > 0 {
            let share = u128::from(segment_bytes) * u128::from(rows) / u128::from(segment_rows);
            self.bytes += u64::try_from(share).unwrap_or(u64::MAX);
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    pub tables: Vec<(Table, TableStats)>,
    pub memtable_bytes: u64,
    pub wal_bytes: u64,
    pub wal_files: u64,
    pub appends: u64,
    pub fsyncs: u64,
    pub flushes: u64,
    pub compactions: u64,
    /// Segment rollups held in memory: read from their sidecars when first asked for, not when
    /// the store opens (a one-shot `infersight query` never needs them).
    pub rollups_in_memory: u64,
    /// Corrupt files this process moved to `<data>/quarantine/` and WAL records it could not
    /// replay (see [`QuarantineStats`]).
    pub quarantine: QuarantineStats,
    /// The read cache in front of the bucket (`RemoteOptions::read_cache_bytes`); `None`
    /// without a bucket or with the cache off.
    pub bucket_cache: Option<BucketCacheStats>,
    /// Each org's rows and bytes in segments (null `org` counted as `default`), from the
    /// per-org counts of the catalog; see [`OrgUsage`].
    pub orgs: std::collections::BTreeMap<String, OrgUsage>,
    /// Segments written before the store counted rows per org: their rows and bytes are no
    /// org's in `orgs` until compaction or retention rewrites them.
    pub unattributed: OrgUsage,
}

/// What the read cache in front of the bucket did since the store opened: every read of a
/// segment or sidecar by a query or by the store itself is a hit (memory), a disk hit, a miss
/// (fetched whole, then kept) or a bypass (too large to cache: over a quarter of the capacity
/// of each level).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BucketCacheStats {
    pub hits: u64,
    /// Reads answered by the disk level (`RemoteOptions::disk_cache_bytes`).
    pub disk_hits: u64,
    pub misses: u64,
    pub bypassed: u64,
    pub evictions: u64,
    pub cached_bytes: u64,
    pub capacity_bytes: u64,
    /// Bytes in the disk level's files, and its bound (0 and 0 without one).
    pub disk_bytes: u64,
    pub disk_capacity_bytes: u64,
}

/// What the store set aside as corrupt since it opened: each is also logged once with its path
/// and reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QuarantineStats {
    /// Parquet segments moved to quarantine (or found missing) and dropped from the catalog.
    pub segments: u64,
    /// Rollup sidecars moved to quarantine (their segments' rollups are rebuilt from rows).
    pub rollups: u64,
    /// WAL files copied to quarantine because part of them could not be replayed.
    pub wal_files: u64,
    /// Unreadable regions of WAL files skipped at replay (each held at least one record).
    pub wal_regions_dropped: u64,
}

/// The seam between receivers/analytics and storage.
pub trait StorageBackend: Send + Sync {
    /// Makes the batches durable (per the fsync policy) and visible to snapshots; all or nothing.
    fn append(&self, batches: &[TableBatch]) -> Result<AppendReceipt, StoreError>;
    /// The error any append would get right now for lack of room (the memtable over its hard
    /// limit while flushes catch up), so a caller can refuse work before doing it; `None` when
    /// appends are taken. A hint: an append can still be refused after `None`.
    fn append_refusal(&self) -> Option<StoreError> {
        None
    }
    fn snapshot(&self, table: Table, range: TimeRange) -> Result<ScanSnapshot, StoreError>;
    fn flush(&self) -> Result<FlushReport, StoreError>;
    fn stats(&self) -> StoreStats;
    /// Flushes everything and syncs; called on shutdown.
    fn close(&self) -> Result<(), StoreError>;
    /// The SLI rollups covering `range` of the `requests` table: one per flushed segment that
    /// may hold rows in it, plus one of the unflushed rows. Cells are whole minutes, so the
    /// caller filters by minute. Backends without rollups say so.
    fn rollups(&self, range: TimeRange) -> Result<Vec<Arc<Rollup>>, StoreError> {
        let _ = range;
        Err(StoreError::RollupsDisabled)
    }
    /// Where segments in a bucket are read from; `None` when every segment is a local file.
    fn remote_segments(&self) -> Option<RemoteSegments> {
        None
    }
    /// A reader of segment `id` (the query engine, checking page checksums) found bytes that do
    /// not match: the store sets a local segment aside as it does one found corrupt at open
    /// (quarantine, counter, log line) and logs one in a bucket. Backends without segments
    /// ignore it.
    fn segment_corrupt(&self, id: u64, reason: String) {
        let _ = (id, reason);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("batch for table `{table}` does not match its schema: {reason}")]
    SchemaMismatch { table: Table, reason: String },
    #[error("store at {path} is locked by another process")]
    Locked { path: PathBuf },
    #[error("i/o on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt {what} at {path}: {reason}")]
    Corrupt {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("store is closed")]
    Closed,
    #[error("sli rollups are disabled in this store (store.rollups = false)")]
    RollupsDisabled,
    /// The bucket (its catalog log or a segment object) could not be used.
    #[error("segment storage {url}: {source}")]
    Remote {
        url: String,
        #[source]
        source: infersight_cluster::ClusterError,
    },
    /// `store migrate` refused: the store or the bucket is not in a state to migrate.
    #[error("cannot migrate: {0}")]
    Migrate(String),
    /// The memtable is over its hard limit while flushes catch up: the append is refused
    /// before anything is written (not acknowledged; the client retries).
    #[error(
        "the memtable holds {bytes} bytes, over its hard limit of {limit} bytes, while flushes catch up; retry shortly"
    )]
    Overloaded { bytes: u64, limit: u64 },
}

impl StoreError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::SchemaMismatch { .. }
            | StoreError::RollupsDisabled
            | StoreError::Migrate(_) => ErrorKind::BadRequest,
            StoreError::Closed | StoreError::Locked { .. } | StoreError::Overloaded { .. } => {
                ErrorKind::Unavailable
            }
            StoreError::Remote { source, .. } => source.kind(),
            // a full disk (or quota) is waited out: the client retries, nothing is dropped
            _ if self.is_out_of_space() => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }

    /// Whether a write failed for want of space (ENOSPC, EDQUOT), however deep in the encoder
    /// the I/O error sits (a Parquet writer wraps it).
    pub fn is_out_of_space(&self) -> bool {
        let mut current: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = current {
            if let Some(io) = error.downcast_ref::<std::io::Error>()
                && is_out_of_space(io)
            {
                return true;
            }
            current = error.source();
        }
        false
    }

    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.into();
        move |source| StoreError::Io { path, source }
    }
}

/// ENOSPC or EDQUOT: no room left for the write.
pub fn is_out_of_space(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl From<infersight_model::durable::DurableError> for StoreError {
    fn from(error: infersight_model::durable::DurableError) -> Self {
        StoreError::Io {
            path: error.path,
            source: error.source,
        }
    }
}
