//! The cluster's shared state in an object store (issue 21): where segments live in the bucket
//! (`layout`, ids from `ulid`), the append-only catalog log that says which segments exist and how
//! far each ingest node's WAL is flushed (`catalog`, its state in `entry`), the leases that let one
//! compactor act at a time (`lease`), the startup check that refuses a store whose conditional
//! writes do not answer 412 on conflict (`self_check`), and segment bytes written once and read
//! through a bounded cache (`segments`).
//!
//! Data flow: an ingest node flushes a segment, writes it under `layout::segment_path`
//! (`segments::write_segment`) and commits an `Action::AddSegment` (with its flushed WAL sequence)
//! through a [`CatalogBackend`]; query nodes replay the log (latest checkpoint + later entries) to
//! know the segments to scan and read them through `segments::SegmentCache`; the compactor takes
//! the `compact` lease and commits removals and merged segments in one entry.
//!
//! A store names its bucket by one URL (`bucket`: `s3://bucket/prefix` or `file:///dir`).
//!
//! The single-node store uses it only when a storage URL is configured; S3 support is the `s3`
//! cargo feature.

pub mod bucket;
pub mod catalog;
pub mod clock;
pub mod disk_cache;
pub mod entry;
pub mod error;
pub mod layout;
pub mod lease;
#[cfg(feature = "s3")]
pub mod s3;
pub mod segments;
pub mod self_check;
pub mod ulid;

pub use bucket::{Bucket, BucketConfig, StorageUrl};
pub use catalog::{CatalogBackend, CatalogConfig, ObjectStoreCatalog};
pub use clock::{Clock, ManualClock, SystemClock};
pub use entry::{Action, CatalogState, LogEntry, SegmentChecksum, SegmentMeta, Tier};
pub use error::ClusterError;
pub use lease::{Acquire, Lease};
/// The object store client crate, at the version DataFusion links: users name its types through here.
pub use object_store;
pub use ulid::{NodeId, SegmentId, Ulid};
