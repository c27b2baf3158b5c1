//! The embedded store: canonical table batches arrive from the pipeline, are made durable in a
//! write-ahead log, kept in an Arrow memtable, and flushed to zstd Parquet segments partitioned
//! by table and hour, listed in a catalog. The query layer reads a [`ScanSnapshot`] of it.
//!
//! Receivers and analytics see only the [`StorageBackend`] trait, so another backend (ClickHouse)
//! can be added without touching them.
//!
//! On disk (`data_dir`):
//!
//! ```text
//! LOCK                                   exclusive lock of the open store
//! catalog.json                           live segments + highest WAL seq already in them
//! wal/<first seq>.wal                    WAL files (module `wal`)
//! segments/<table>/<YYYYMMDDHH>/<id>.parquet
//! quarantine/<same relative path>        files found corrupt, set aside (module `quarantine`)
//! ```
//!
//! With a bucket configured (`StoreOptions::remote`, module `remote`) the segments live there
//! instead, listed in the bucket's catalog log, and `data_dir` keeps the lock and the WAL; every
//! node follows the log, and the one maintaining the bucket merges, expires and garbage-collects
//! its segments (module `bucket_maintenance`).

mod bucket_maintenance;
mod catalog;
mod fsutil;
mod maintenance;
mod memtable;
mod migrate;
mod org_retention;
pub mod page_crc;
mod parallel;
mod quarantine;
mod remote;
mod rollups;
mod scrub;
mod segment;
mod store;
pub mod types;
mod verify;
mod wal;

/// Where a bucket is (`StoreOptions::remote`): its URL, endpoint, region and credentials.
pub use infersight_cluster::BucketConfig;
pub use maintenance::MaintenanceHandle;
pub use migrate::MigrateReport;
pub use segment::string_column_has_dictionary;
pub use store::Store;
pub use types::{
    AppendReceipt, BucketCacheStats, BucketRefresh, CompactionReport, DataDeleted, DeleteObserver,
    FlushReport, FsyncPolicy, OrgUsage, QuarantineStats, RemoteOptions, RemoteSegments,
    RetentionReport, ScanSnapshot, SegmentChecksum, SegmentMeta, StorageBackend, StoreError,
    StoreOptions, StoreStats, TableStats, Tier, TierOptions, TierReport, TierUsage, TimeRange,
    VerifyReport,
};
