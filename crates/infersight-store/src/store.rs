//! The embedded store: the [`StorageBackend`] receivers write to and the query layer reads from.
//! An append is validated, written to the WAL as one record, made durable per the fsync policy
//! (concurrent appenders share fsyncs), then published in the memtable. A flush moves memtable
//! rows to hourly Parquet segments and commits them in the catalog; retention rewrites the catalog
//! the same way, and a local compaction merges without the maintenance lock, holding it only to
//! plan and to commit (a flush runs beside its merges).
//!
//! Invariants:
//! - a row is visible to snapshots exactly once: the memtable entries a flush wrote are removed
//!   and their segments published under one lock;
//! - every acknowledged append is either in a WAL file with `seq > flushed_wal_seq` or in a
//!   segment named by the catalog, never in both after a restart;
//! - lock order is `compacting` → `maintenance` → `wal` → `state`, and `wal` → `sync`; nothing
//!   takes `wal` while holding `state` or `sync`, nor `compacting` while holding `maintenance`.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs::{File, OpenOptions, TryLockError};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use infersight_model::time::NANOS_PER_HOUR;
use infersight_model::{SCHEMA_VERSION, Table, TableBatch};
use parking_lot::{Condvar, Mutex};

use crate::catalog::Catalog;
use crate::fsutil::{remove_file_if_exists, sync_dir, sync_dir_best_effort};
use crate::memtable::Memtable;
use crate::parallel::map_in_parallel;
use crate::quarantine::{self, QuarantineCounters};
use crate::remote::Remote;
use crate::rollups;
use crate::segment::{self, SEGMENTS_DIR, SegmentFormat};
use crate::types::{
    AppendReceipt, CompactionReport, DataDeleted, FlushReport, FsyncPolicy, OrgUsage,
    RetentionReport, ScanSnapshot, SegmentMeta, StorageBackend, StoreError, StoreOptions,
    StoreStats, TableStats, TimeRange,
};
use crate::verify;
use crate::wal::{self, SealedWal, WalWriter};
use infersight_rollup::Rollup;

pub(crate) const WAL_DIR: &str = "wal";
const LOCK_FILE: &str = "LOCK";

/// One partition [`Store::compact`] merged, waiting for its commit.
struct MergedPartition {
    meta: SegmentMeta,
    rollup: Option<Arc<Rollup>>,
    inputs: Vec<SegmentMeta>,
}

/// What merging one partition gave: its merged segment, or the inputs found corrupt (nothing
/// written).
enum Merged {
    Written(SegmentMeta, Option<Arc<Rollup>>),
    Corrupt(Vec<(u64, quarantine::Kind, String)>),
}

/// Group-commit bookkeeping: the highest WAL seq known to be on disk, and whether some appender
/// is currently fsyncing on behalf of the others.
#[derive(Debug)]
struct SyncState {
    synced_seq: u64,
    leader_active: bool,
    failed: Option<String>,
}

/// What snapshots read: the memtable and the catalog, always changed together.
#[derive(Debug)]
pub(crate) struct State {
    memtable: Memtable,
    pub(crate) catalog: Catalog,
    /// Seqs written to the WAL whose appends have not yet been published or failed; a flush
    /// waits for those at or below its rotation point.
    pending: BTreeSet<u64>,
    last_flush: Instant,
    /// Rollups of `requests` segments, by segment id (loaded at open, kept in step with the
    /// catalog; a segment without a sidecar is rolled up on first use).
    pub(crate) rollups: HashMap<u64, Arc<Rollup>>,
}

/// The embedded store. Share it as `Arc<Store>`; every method takes `&self` and blocks on IO,
/// so async callers run it on blocking threads.
#[derive(Debug)]
pub struct Store {
    options: StoreOptions,
    pub(crate) data_dir: PathBuf,
    pub(crate) format: SegmentFormat,
    wal: Mutex<WalWriter>,
    sync: Mutex<SyncState>,
    sync_cv: Condvar,
    pub(crate) state: Mutex<State>,
    state_cv: Condvar,
    /// Serializes catalog changes: flush, compaction, retention, quarantine and close.
    pub(crate) maintenance: Mutex<()>,
    /// One compaction at a time: local merges run without `maintenance` (see
    /// [`Store::compact`]); taken before `maintenance` wherever both are.
    compacting: Mutex<()>,
    /// Set when `close` starts: a compaction stops before its next partition.
    closing: AtomicBool,
    /// Corrupt files set aside since open (module `quarantine`).
    pub(crate) quarantine: QuarantineCounters,
    closed: AtomicBool,
    lock_file: Mutex<Option<File>>,
    appends: AtomicU64,
    fsyncs: AtomicU64,
    flushes: AtomicU64,
    compactions: AtomicU64,
    /// Segments dropped from the catalog whose files wait out `retired_grace`, with when.
    retired: Mutex<Vec<(Instant, Vec<SegmentMeta>)>>,
    /// WAL frame buffers of earlier appends, reused (see [`wal::encode_frame_into`]).
    frame_buffers: Mutex<Vec<Vec<u8>>>,
    /// The bucket flushed segments go to (`StoreOptions::remote`); `None`: local files.
    remote: Option<Remote>,
}

/// Frame buffers kept for reuse, and the largest one kept: one per concurrent appender is plenty,
/// and an exceptional huge append does not pin its memory.
const KEPT_FRAME_BUFFERS: usize = 4;
const KEPT_FRAME_BUFFER_BYTES: usize = 64 << 20;

impl Store {
    /// Appends without the write-ahead log, for bulk loads whose source is its own log (`infersight
    /// ingest FILE`): the batches are visible at once and durable once flushed (the memtable
    /// limits and `close` flush them). A crash loses what was not flushed yet, which the loader
    /// never reported as stored. Logging a file's rows before writing them to segments doubled
    /// the bytes ingest wrote (the WAL is uncompressed Arrow).
    pub fn append_unlogged(&self, batches: &[TableBatch]) -> Result<AppendReceipt, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let conformed = conform_all(batches)?;
        let rows: u64 = conformed.iter().map(|b| b.batch.num_rows() as u64).sum();
        let seq = {
            let mut wal = self.wal.lock();
            if self.is_closed() {
                return Err(StoreError::Closed);
            }
            if conformed.is_empty() {
                return Ok(AppendReceipt {
                    wal_seq: wal.last_written_seq(),
                    rows: 0,
                });
            }
            let seq = wal.skip()?;
            // a flush that seals up to `seq` waits for these rows (see `flush_locked`)
            self.state.lock().pending.insert(seq);
            seq
        };
        {
            let mut state = self.state.lock();
            state.pending.remove(&seq);
            for table_batch in conformed {
                state.memtable.insert(seq, table_batch);
            }
        }
        self.state_cv.notify_all();
        self.appends.fetch_add(1, Ordering::Relaxed);
        Ok(AppendReceipt { wal_seq: seq, rows })
    }

    /// Writes an encoded append to the WAL (fsynced as configured), then makes its batches
    /// visible in the memtable.
    fn append_frame(
        &self,
        frame: &mut [u8],
        conformed: Vec<TableBatch>,
        rows: u64,
    ) -> Result<AppendReceipt, StoreError> {
        let seq = {
            let mut wal = self.wal.lock();
            // checked again under the lock: close sets the flag while holding it
            if self.is_closed() {
                return Err(StoreError::Closed);
            }
            let seq = wal.write(frame)?;
            self.state.lock().pending.insert(seq);
            seq
        };
        let durable = match self.options.fsync {
            FsyncPolicy::Always => self.sync_up_to(seq),
            FsyncPolicy::Interval { .. } | FsyncPolicy::Never => Ok(()),
        };
        {
            let mut state = self.state.lock();
            state.pending.remove(&seq);
            if durable.is_ok() {
                for table_batch in conformed {
                    state.memtable.insert(seq, table_batch);
                }
            }
        }
        self.state_cv.notify_all();
        durable?;
        self.appends.fetch_add(1, Ordering::Relaxed);
        Ok(AppendReceipt { wal_seq: seq, rows })
    }

    /// Opens (or creates) the store in `options.data_dir`: takes the directory lock, loads the
    /// catalog and replays the WAL records it does not cover into the memtable.
    pub fn open(options: StoreOptions) -> Result<Store, StoreError> {
        let dir = &options.data_dir;
        std::fs::create_dir_all(dir).map_err(StoreError::io(dir))?;
        let data_dir = dir.canonicalize().map_err(StoreError::io(dir))?;
        let wal_dir = data_dir.join(WAL_DIR);
        let segments_dir = data_dir.join(SEGMENTS_DIR);
        for sub in [&wal_dir, &segments_dir] {
            std::fs::create_dir_all(sub).map_err(StoreError::io(sub))?;
        }
        let lock_file = take_lock(&data_dir)?;
        let quarantine = QuarantineCounters::default();
        let (catalog, remote) = match &options.remote {
            None => {
                let mut catalog = Catalog::load(&data_dir)?;
                remove_orphan_segments(&segments_dir, &catalog);
                verify::check_catalog_at_open(&data_dir, &mut catalog, &quarantine)?;
                if options.tiers.is_some() {
                    tracing::warn!(
                        "the warm and cold tiers are segments in a bucket; without one they do nothing"
                    );
                }
                (catalog, None)
            }
            Some(remote_options) => {
                // the bucket's log is the catalog; local segment files are leftovers of a
                // flush that did not commit (their rows are still in the WAL)
                let (remote, state) = Remote::open(remote_options, Some(&data_dir))?;
                let mut catalog = Catalog {
                    flushed_wal_seq: remote.flushed_wal_seq(&state),
                    ..Catalog::default()
                };
                remote.reconcile(&state, &mut catalog)?;
                remove_orphan_segments(&segments_dir, &Catalog::default());
                (catalog, Some(remote))
            }
        };

        let replay = replay_wal(&data_dir, catalog.flushed_wal_seq, &quarantine)?;
        let next_seq = replay.last_seq.max(catalog.flushed_wal_seq) + 1;
        let wal = WalWriter::create(&wal_dir, next_seq, replay.sealed)?;
        tracing::info!(
            data_dir = %data_dir.display(),
            segments = catalog.segments.len(),
            replayed_records = replay.records,
            replayed_rows = replay.memtable.rows(),
            "store opened"
        );
        let format = SegmentFormat {
            zstd_level: options.zstd_level,
            row_group_rows: options.parquet_row_group_rows,
        };
        Ok(Store {
            options: StoreOptions {
                data_dir: data_dir.clone(),
                ..options
            },
            data_dir,
            format,
            wal: Mutex::new(wal),
            sync: Mutex::new(SyncState {
                synced_seq: next_seq - 1,
                leader_active: false,
                failed: None,
            }),
            sync_cv: Condvar::new(),
            state: Mutex::new(State {
                memtable: replay.memtable,
                catalog,
                pending: BTreeSet::new(),
                rollups: HashMap::new(),
                last_flush: Instant::now(),
            }),
            state_cv: Condvar::new(),
            frame_buffers: Mutex::new(Vec::new()),
            maintenance: Mutex::new(()),
            compacting: Mutex::new(()),
            closing: AtomicBool::new(false),
            quarantine,
            closed: AtomicBool::new(false),
            lock_file: Mutex::new(Some(lock_file)),
            appends: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            compactions: AtomicU64::new(0),
            retired: Mutex::new(Vec::new()),
            remote,
        })
    }

    /// The canonical (absolute) data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Live segments of `table`, sorted by hour and id.
    pub fn segments(&self, table: Table) -> Vec<SegmentMeta> {
        self.state
            .lock()
            .catalog
            .table_segments(table)
            .cloned()
            .collect()
    }

    /// fsyncs everything written to the WAL so far (the periodic sync of
    /// [`FsyncPolicy::Interval`]); shares the fsync with concurrent appenders. A no-op under
    /// [`FsyncPolicy::Never`].
    pub fn sync_wal(&self) -> Result<(), StoreError> {
        if !self.sync_policy_fsyncs() {
            return Ok(());
        }
        let target = self.wal.lock().last_written_seq();
        self.sync_up_to(target)
    }

    /// Whether the memtable holds `memtable_max_rows` rows or `memtable_max_bytes` bytes (a
    /// flush is due whatever the time).
    pub fn flush_size_reached(&self) -> bool {
        let state = self.state.lock();
        self.flush_size_reached_in(&state)
    }

    fn flush_size_reached_in(&self, state: &State) -> bool {
        let rows = state.memtable.rows();
        rows > 0
            && (rows >= self.options.memtable_max_rows as u64
                || state.memtable.bytes() >= self.options.memtable_max_bytes as u64)
    }

    /// Flushes when the memtable holds `memtable_max_rows` rows or `memtable_max_bytes` bytes,
    /// or when it is non-empty and the last flush is older than `flush_interval`.
    pub fn maybe_flush(&self) -> Result<Option<FlushReport>, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Ok(None);
        }
        let due = {
            let state = self.state.lock();
            self.flush_size_reached_in(&state)
                || (state.memtable.rows() > 0
                    && state.last_flush.elapsed() >= self.options.flush_interval)
        };
        if !due {
            return Ok(None);
        }
        self.flush_locked().map(Some)
    }

    /// Merges, per (table, hour), the segments smaller than `compaction_small_bytes` once there
    /// are at least `compaction_min_segments` of them.
    ///
    /// On local files the merges run without the maintenance lock, so a flush goes on beside a
    /// long compaction instead of waiting for it while the memtable fills to its hard limit: the
    /// lock is held to choose the partitions and their segment ids, and again to commit. A
    /// partition whose inputs left the catalog meanwhile (retention or a quarantine called from
    /// elsewhere: the API, a query that found a segment corrupt) is not committed and its merged
    /// file is removed. Compactions run one at a time; `close` waits for the one running, which
    /// stops after its partition and commits what it merged. On a bucket the whole compaction
    /// holds the lock, as before.
    pub fn compact(&self) -> Result<CompactionReport, StoreError> {
        let _compacting = self.compacting.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if let Some(remote) = &self.remote {
            let _maintenance = self.maintenance.lock();
            return self.compact_bucket(remote);
        }
        let plan = self.plan_compaction();
        let mut merged: Vec<MergedPartition> = Vec::new();
        // segments found corrupt while reading: quarantined, their partition left as it is
        let mut corrupt: Vec<(u64, quarantine::Kind, String)> = Vec::new();
        for (id, group) in plan {
            if self.closing.load(Ordering::Acquire) {
                break;
            }
            match self.merge_partition(id, &group) {
                Ok(Merged::Written(meta, rollup)) => {
                    debug_assert_eq!(meta.rows, group.iter().map(|s| s.rows).sum::<u64>());
                    merged.push(MergedPartition {
                        meta,
                        rollup,
                        inputs: group,
                    });
                }
                Ok(Merged::Corrupt(found)) => corrupt.extend(found),
                Err(err) if !self.all_listed(&group) => {
                    // an input went (retention, a quarantine) while it was read: not an error
                    tracing::debug!(%err, "compaction input left the catalog while merging");
                }
                Err(err) => {
                    remove_unpublished(&merged.iter().map(|m| m.meta.clone()).collect::<Vec<_>>());
                    return Err(err);
                }
            }
        }
        self.commit_compaction(merged, &corrupt)
    }

    /// The partitions a compaction merges, each with the segment id its merged file takes
    /// (allocated from the live catalog under the maintenance lock, so no flush hands it out).
    fn plan_compaction(&self) -> Vec<(u64, Vec<SegmentMeta>)> {
        let _maintenance = self.maintenance.lock();
        let mut state = self.state.lock();
        let mut partitions: BTreeMap<(Table, i64), Vec<SegmentMeta>> = BTreeMap::new();
        for segment in &state.catalog.segments {
            if segment.bytes < self.options.compaction_small_bytes
                && segment.schema_version == SCHEMA_VERSION
            {
                partitions
                    .entry((segment.table, segment.hour_ns))
                    .or_default()
                    .push(segment.clone());
            }
        }
        let min_segments = self.options.compaction_min_segments.max(2);
        partitions
            .into_values()
            .filter(|group| group.len() >= min_segments)
            .map(|group| (state.catalog.allocate_id(), group))
            .collect()
    }

    /// Merges one partition of [`Store::compact`] into segment `id`, holding no lock.
    fn merge_partition(&self, id: u64, group: &[SegmentMeta]) -> Result<Merged, StoreError> {
        #[cfg(test)]
        compaction_tests::during_merge(self);
        let mut inputs = Vec::new();
        let mut corrupt = Vec::new();
        for meta in group {
            match segment::segment_batches(meta) {
                Ok(batches) => inputs.push(batches),
                Err(StoreError::Corrupt { reason, .. }) => {
                    corrupt.push((meta.id, quarantine::Kind::Segment, reason));
                }
                Err(err) => return Err(err),
            }
        }
        if !corrupt.is_empty() {
            return Ok(Merged::Corrupt(corrupt));
        }
        let (table, hour_ns) = (group[0].table, group[0].hour_ns);
        match self.write_merged(table, hour_ns, id, inputs, self.format) {
            Ok((meta, rollup)) => Ok(Merged::Written(meta, rollup)),
            Err(StoreError::Corrupt {
                what: segment::SEGMENT,
                path,
                reason,
            }) if group.iter().any(|s| s.path == path) => {
                // a segment that stopped decoding midway: set aside like one found at open
                let id = group.iter().find(|s| s.path == path).map(|s| s.id);
                Ok(Merged::Corrupt(
                    id.map(|id| (id, quarantine::Kind::Segment, reason))
                        .into_iter()
                        .collect(),
                ))
            }
            Err(err) => Err(err),
        }
    }

    /// Whether every segment of `group` is still in the catalog.
    fn all_listed(&self, group: &[SegmentMeta]) -> bool {
        let state = self.state.lock();
        group
            .iter()
            .all(|g| state.catalog.segments.iter().any(|s| s.id == g.id))
    }

    /// The commit of [`Store::compact`], under the maintenance lock: the partitions whose inputs
    /// are all still listed replace them, the others' merged files are removed; corrupt inputs
    /// still listed are quarantined.
    fn commit_compaction(
        &self,
        merged: Vec<MergedPartition>,
        corrupt: &[(u64, quarantine::Kind, String)],
    ) -> Result<CompactionReport, StoreError> {
        let mut report = CompactionReport::default();
        if merged.is_empty() && corrupt.is_empty() {
            return Ok(report);
        }
        let _maintenance = self.maintenance.lock();
        let mut catalog = self.state.lock().catalog.clone();
        let listed: HashSet<u64> = catalog.segments.iter().map(|s| s.id).collect();
        let (kept, stale): (Vec<MergedPartition>, Vec<MergedPartition>) = merged
            .into_iter()
            .partition(|m| m.inputs.iter().all(|s| listed.contains(&s.id)));
        remove_unpublished(&stale.into_iter().map(|m| m.meta).collect::<Vec<_>>());
        let corrupt: Vec<(u64, quarantine::Kind, String)> = corrupt
            .iter()
            .filter(|(id, _, _)| listed.contains(id))
            .cloned()
            .collect();
        if kept.is_empty() && corrupt.is_empty() {
            return Ok(report);
        }
        let mut written = Vec::new();
        let mut replaced: Vec<SegmentMeta> = Vec::new();
        let mut new_rollups: Vec<(u64, Arc<Rollup>)> = Vec::new();
        for partition in kept {
            report.partitions_compacted += 1;
            report.segments_removed += partition.inputs.len();
            report.segments_written += 1;
            new_rollups.extend(partition.rollup.map(|r| (partition.meta.id, r)));
            written.push(partition.meta);
            replaced.extend(partition.inputs);
        }
        verify::set_aside(&self.data_dir, &mut catalog, &corrupt, &self.quarantine);
        let gone: HashSet<u64> = (replaced.iter().map(|s| s.id))
            .chain(corrupt.iter().map(|(id, _, _)| *id))
            .collect();
        self.commit_replacement(catalog, &gone, &written, new_rollups)?;
        self.report_deleted(
            "compaction",
            replaced.iter().map(|s| (s.table, s.rows, s.bytes)),
        );
        self.retire(replaced);
        self.compactions.fetch_add(1, Ordering::Relaxed);
        tracing::info!(?report, "compaction finished");
        Ok(report)
    }

    /// Removes the segments whose hour ended at least their table's retention
    /// (`StoreOptions::retention_of`) before `now_ns`: from the catalog first, then from disk.
    /// Does nothing when no table expires.
    pub fn apply_retention(&self, now_ns: i64) -> Result<RetentionReport, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        if !self.options.expires_anything() {
            return Ok(RetentionReport::default());
        }
        let mut report = match &self.remote {
            Some(remote) => self.expire_bucket(remote, now_ns)?,
            None => self.expire_local(now_ns)?,
        };
        report.add(&self.expire_orgs(now_ns)?);
        Ok(report)
    }

    /// Table retention on local segments; the caller holds the maintenance lock.
    fn expire_local(&self, now_ns: i64) -> Result<RetentionReport, StoreError> {
        let mut catalog = self.state.lock().catalog.clone();
        let (expired, live): (Vec<SegmentMeta>, Vec<SegmentMeta>) =
            std::mem::take(&mut catalog.segments)
                .into_iter()
                .partition(|s| self.expired(s.table, s.hour_ns, now_ns));
        if expired.is_empty() {
            return Ok(RetentionReport::default());
        }
        catalog.segments = live;
        catalog.save(&self.data_dir)?;
        {
            let mut state = self.state.lock();
            state.catalog = catalog;
            for segment in &expired {
                state.rollups.remove(&segment.id);
            }
        }
        let report = self.report_expired(expired.iter().map(|s| (s.table, s.rows, s.bytes)));
        self.retire(expired);
        tracing::info!(?report, "retention applied");
        Ok(report)
    }

    /// Whether a segment of `table` for the hour starting at `hour_ns` has outlived its table's
    /// retention at `now_ns` (the whole hour must have).
    pub(crate) fn expired(&self, table: Table, hour_ns: i64, now_ns: i64) -> bool {
        self.options
            .retention_of(table)
            .is_some_and(|retention| hour_ended_before(hour_ns, now_ns, retention))
    }

    /// One maintenance pass: flush if due, follow the bucket, compact, apply retention, move
    /// segments to the cold tier, collect the bucket's garbage. Errors of one step do not
    /// skip the others; the first is returned.
    pub fn run_maintenance(&self, now_ns: i64) -> Result<(), StoreError> {
        let flushed = self.flush_pass();
        let upkept = self.upkeep_pass(now_ns);
        // a compaction of large segments takes a while: a memtable that filled meanwhile is
        // flushed now, not a pass later (appends are refused while it is over its hard limit)
        let flushed_again = self.maybe_flush().map(|_| ());
        flushed.and(upkept).and(flushed_again)
    }

    /// The flushing half of [`Store::run_maintenance`]: retired files whose grace is over go,
    /// and the memtable is flushed when due. The maintenance thread runs it on a thread of its
    /// own, so a long compaction does not hold flushes back.
    pub fn flush_pass(&self) -> Result<(), StoreError> {
        self.remove_retired(Instant::now());
        self.maybe_flush().map(|_| ())
    }

    /// The rest of [`Store::run_maintenance`]: the bucket's log read, compaction, retention,
    /// tiers and the bucket's garbage.
    pub fn upkeep_pass(&self, now_ns: i64) -> Result<(), StoreError> {
        let refreshed = self.refresh_bucket().map(|_| ());
        let compacted = self.compact().map(|_| ());
        let retained = self.apply_retention(now_ns).map(|_| ());
        let tiered = self.apply_tiers(now_ns).map(|_| ());
        let collected = self.collect_bucket_garbage().map(|_| ());
        refreshed
            .and(compacted)
            .and(retained)
            .and(tiered)
            .and(collected)
    }

    /// The retention report of `expired` (table, rows, bytes per segment), told to
    /// `StoreOptions::on_delete` as well.
    pub(crate) fn report_expired(
        &self,
        expired: impl Iterator<Item = (Table, u64, u64)> + Clone,
    ) -> RetentionReport {
        self.report_deleted("retention", expired.clone());
        RetentionReport {
            segments_removed: expired.clone().count(),
            rows_removed: expired.clone().map(|(_, rows, _)| rows).sum(),
            bytes_removed: expired.map(|(_, _, bytes)| bytes).sum(),
            segments_rewritten: 0,
        }
    }

    /// Tells `StoreOptions::on_delete` that `segments` left the catalog by `what`.
    pub(crate) fn report_deleted<'a>(
        &self,
        what: &'static str,
        segments: impl IntoIterator<Item = (Table, u64, u64)> + 'a,
    ) {
        let Some(observer) = &self.options.on_delete else {
            return;
        };
        let mut deleted = DataDeleted {
            what,
            tables: Vec::new(),
            segments: 0,
            rows: 0,
            bytes: 0,
        };
        for (table, rows, bytes) in segments {
            if !deleted.tables.contains(&table) {
                deleted.tables.push(table);
            }
            deleted.segments += 1;
            deleted.rows += rows;
            deleted.bytes += bytes;
        }
        if deleted.segments > 0 {
            deleted.tables.sort();
            (observer.0)(&deleted);
        }
    }

    /// The bucket segments go to, if any.
    pub(crate) fn remote(&self) -> Option<&Remote> {
        self.remote.as_ref()
    }

    pub(crate) fn count_compaction(&self) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
    }

    /// Segments just dropped from the catalog: their files go once `retired_grace` has passed
    /// (a query that took its snapshot before the change may still open them).
    pub(crate) fn retire(&self, segments: Vec<SegmentMeta>) {
        if segments.is_empty() {
            return;
        }
        if self.options.retired_grace.is_zero() {
            remove_segment_files(&segments);
        } else {
            self.retired.lock().push((Instant::now(), segments));
        }
    }

    /// Deletes the files of segments retired at least `retired_grace` before `now`; answers how
    /// many segments' files it removed. Maintenance calls it on every pass.
    pub fn remove_retired(&self, now: Instant) -> usize {
        let due: Vec<SegmentMeta> = {
            let mut retired = self.retired.lock();
            let grace = self.options.retired_grace;
            let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|(at, _)| now.saturating_duration_since(*at) >= grace);
            *retired = waiting;
            due.into_iter().flat_map(|(_, segments)| segments).collect()
        };
        remove_segment_files(&due);
        due.len()
    }

    fn sync_policy_fsyncs(&self) -> bool {
        !matches!(self.options.fsync, FsyncPolicy::Never)
    }

    /// Waits until WAL record `seq` is on disk. The first waiter becomes the leader and fsyncs
    /// everything written so far; appenders arriving meanwhile wait for the next round, which
    /// then covers all of them (group commit).
    fn sync_up_to(&self, seq: u64) -> Result<(), StoreError> {
        let mut sync = self.sync.lock();
        loop {
            if let Some(reason) = &sync.failed {
                return Err(StoreError::Io {
                    path: self.data_dir.join(WAL_DIR),
                    source: std::io::Error::other(format!("an earlier wal fsync failed: {reason}")),
                });
            }
            if sync.synced_seq >= seq {
                return Ok(());
            }
            if sync.leader_active {
                self.sync_cv.wait(&mut sync);
                continue;
            }
            sync.leader_active = true;
            drop(sync);
            let (file, path, target) = {
                let wal = self.wal.lock();
                let (file, path) = wal.active_file();
                (file, path, wal.last_written_seq())
            };
            // earlier files were fsynced when they were sealed, so syncing the active file
            // makes every record up to `target` durable
            let result = file.sync_data();
            if let Err(err) = &result {
                self.wal.lock().poison(format!("fsync failed: {err}"));
            }
            sync = self.sync.lock();
            sync.leader_active = false;
            match result {
                Ok(()) => {
                    sync.synced_seq = sync.synced_seq.max(target);
                    self.fsyncs.fetch_add(1, Ordering::Relaxed);
                }
                Err(err) => {
                    tracing::error!(path = %path.display(), %err, "wal fsync failed");
                    sync.failed = Some(err.to_string());
                }
            }
            self.sync_cv.notify_all();
        }
    }

    /// The rollup of a flushed `requests` segment: read from its sidecar on first use; a segment
    /// written before rollups existed, or whose sidecar is unreadable, is rolled up from its rows
    /// (a corrupt sidecar is quarantined first). `None`: the segment itself is corrupt; it was
    /// quarantined and has no rows to give.
    fn load_rollup(
        &self,
        spec: &infersight_rollup::RollupSpec,
        segment: &SegmentMeta,
    ) -> Result<Option<Arc<Rollup>>, StoreError> {
        if let Some(remote) = &self.remote
            && segment.location.is_some()
        {
            return remote.load_rollup(spec, segment).map(Some);
        }
        if segment.rollup_bytes.is_some() {
            match rollups::read_sidecar(segment) {
                Ok(rollup) => return Ok(Some(rollup)),
                Err(StoreError::Corrupt { reason, .. }) => {
                    self.quarantine_found(segment.id, quarantine::Kind::Rollup, reason);
                }
                Err(err) => tracing::warn!(%err, "rollup sidecar unreadable; rebuilding it"),
            }
        }
        match segment::read_segment(segment) {
            Ok(rows) => Ok(Some(Arc::new(rollups::build(spec, &rows)?))),
            Err(StoreError::Corrupt { reason, .. }) => {
                self.quarantine_found(segment.id, quarantine::Kind::Segment, reason);
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Saves `catalog`, the commit point of a flush or compaction that wrote `written`. When the
    /// save fails (a full disk), the files are removed again if `catalog.json` on disk is still
    /// the one before: left behind, they would hold the space the retry needs, and a retry on
    /// each maintenance pass would leave more. When the new catalog may have been published (the
    /// rename done, the directory fsync failed) they stay, and the next open sorts it out.
    /// Replaces the segments `gone` in `catalog` by `written` (with their `rollups`), saves it
    /// and makes it the store's; the caller retires the replaced files.
    pub(crate) fn commit_replacement(
        &self,
        mut catalog: Catalog,
        gone: &HashSet<u64>,
        written: &[SegmentMeta],
        rollups: Vec<(u64, Arc<Rollup>)>,
    ) -> Result<(), StoreError> {
        catalog.segments.retain(|s| !gone.contains(&s.id));
        catalog.segments.extend(written.iter().cloned());
        catalog.sort();
        self.commit_catalog(&catalog, written)?;
        let mut state = self.state.lock();
        state.catalog = catalog;
        for id in gone {
            state.rollups.remove(id);
        }
        state.rollups.extend(rollups);
        Ok(())
    }

    fn commit_catalog(&self, catalog: &Catalog, written: &[SegmentMeta]) -> Result<(), StoreError> {
        let Err(err) = catalog.save(&self.data_dir) else {
            return Ok(());
        };
        self.keep_segment_ids_allocated(catalog);
        let on_disk = Catalog::load(&self.data_dir);
        let published = on_disk.as_ref().map_or(true, |disk| {
            written
                .iter()
                .any(|new| disk.segments.iter().any(|s| s.id == new.id))
        });
        if !published {
            remove_unpublished(written);
        }
        Err(err)
    }

    /// After a failed flush or compaction, never hands out its segment ids again: a
    /// half-committed `catalog.json` may name those files, so a later writer must not reuse
    /// their paths.
    pub(crate) fn keep_segment_ids_allocated(&self, failed: &Catalog) {
        let mut state = self.state.lock();
        let next = &mut state.catalog.next_segment_id;
        *next = (*next).max(failed.next_segment_id);
    }

    /// Writes one hour of a flush (`rows`, in `ts` order) as segment `id`, with its rollup for
    /// `requests`: the rows go to the writer a batch at a time ([`segment::HourRows::source`]),
    /// and the rollup is built from the same batches on a thread beside it, so it costs ingest
    /// little wall time. On error nothing of it is left on disk.
    pub(crate) fn write_segment_with_rollup(
        &self,
        table: Table,
        hour_ns: i64,
        id: u64,
        rows: &segment::HourRows,
    ) -> Result<(SegmentMeta, Option<Arc<Rollup>>), StoreError> {
        let mut next = rows.source();
        self.write_stream_with_rollup(table, hour_ns, id, &mut next, self.format)
    }

    /// Writes the rows `next` hands over as segment `id` in `format`; for `requests` (with
    /// rollups on) a second thread rolls up each batch as it is written, a few batches behind
    /// at most (the queue between them is bounded).
    fn write_stream_with_rollup(
        &self,
        table: Table,
        hour_ns: i64,
        id: u64,
        next: &mut segment::BatchSource<'_>,
        format: SegmentFormat,
    ) -> Result<(SegmentMeta, Option<Arc<Rollup>>), StoreError> {
        const ROLLUP_QUEUE_BATCHES: usize = 4;
        let spec = self
            .options
            .rollup
            .as_ref()
            .filter(|_| table == Table::Requests);
        let Some(spec) = spec else {
            let meta =
                segment::write_segment_stream(&self.data_dir, table, hour_ns, id, next, format)?;
            return Ok((meta, None));
        };
        let (meta, rollup) = std::thread::scope(|scope| {
            let (sender, receiver) =
                std::sync::mpsc::sync_channel::<RecordBatch>(ROLLUP_QUEUE_BATCHES);
            let builder = scope.spawn(move || {
                let mut rollup = Rollup::new(spec);
                for batch in receiver {
                    rollups::add(&mut rollup, &batch)?;
                }
                rollup.seal();
                Ok(rollup)
            });
            let mut tee = move || -> Result<Option<RecordBatch>, StoreError> {
                let batch = next()?;
                if let Some(batch) = &batch {
                    // a builder that failed has hung up; its error is reported below
                    let _ = sender.send(batch.clone());
                }
                Ok(batch)
            };
            let meta =
                segment::write_segment_stream(&self.data_dir, table, hour_ns, id, &mut tee, format);
            // the sender goes with the closure: the builder sees the end of the rows
            drop(tee);
            let rollup = builder.join().unwrap_or_else(|_| {
                Err(StoreError::Corrupt {
                    what: "rollup",
                    path: PathBuf::new(),
                    reason: "the rollup builder panicked".into(),
                })
            });
            (meta, rollup)
        });
        self.with_sidecar(meta?, rollup)
    }

    /// Merges `inputs` (sorted segments of one table and hour: [`segment::SortedMerge`]) into
    /// segment `id` in `format`, with its rollup, a chunk at a time: the partition is never
    /// held in memory, only each input's current batch, the chunk and the row group being
    /// encoded. A segment that stops decoding midway is `Corrupt` naming its path (nothing
    /// written).
    pub(crate) fn write_merged(
        &self,
        table: Table,
        hour_ns: i64,
        id: u64,
        inputs: Vec<segment::SegmentBatches>,
        format: SegmentFormat,
    ) -> Result<(SegmentMeta, Option<Arc<Rollup>>), StoreError> {
        self.write_merged_without(table, hour_ns, id, inputs, format, &BTreeSet::new())
    }

    /// [`Store::write_merged`] leaving out the rows of `drop_orgs` (per-org retention). A
    /// segment of no row may result; the caller removes it.
    pub(crate) fn write_merged_without(
        &self,
        table: Table,
        hour_ns: i64,
        id: u64,
        inputs: Vec<segment::SegmentBatches>,
        format: SegmentFormat,
        drop_orgs: &BTreeSet<String>,
    ) -> Result<(SegmentMeta, Option<Arc<Rollup>>), StoreError> {
        let mut merge = segment::SortedMerge::new(inputs, segment::GATHER_CHUNK_ROWS)?;
        let mut next = || -> Result<Option<RecordBatch>, StoreError> {
            let mut chunk = merge.next_chunk()?;
            if !drop_orgs.is_empty()
                && let Some(rows) = &chunk
            {
                chunk = Some(segment::without_orgs(rows, drop_orgs)?);
            }
            Ok(chunk)
        };
        self.write_stream_with_rollup(table, hour_ns, id, &mut next, format)
    }

    /// Writes `rollup` as the sidecar of the segment just written (`meta`), recording its size
    /// and checksum; on failure the segment's files are removed.
    fn with_sidecar(
        &self,
        mut meta: SegmentMeta,
        rollup: Result<Rollup, StoreError>,
    ) -> Result<(SegmentMeta, Option<Arc<Rollup>>), StoreError> {
        let sidecar = rollup.and_then(|rollup| {
            let (bytes, crc32) = rollups::write_sidecar(&meta, &rollup)?;
            meta.rollup_bytes = Some(bytes);
            if let Some(checksum) = &mut meta.checksum {
                checksum.rollup_crc32 = Some(crc32);
            }
            sync_dir(meta.path.parent().unwrap_or(&self.data_dir))?;
            Ok(rollup)
        });
        match sidecar {
            Ok(rollup) => Ok((meta, Some(Arc::new(rollup)))),
            Err(err) => {
                remove_unpublished(std::slice::from_ref(&meta));
                Err(err)
            }
        }
    }

    /// The flush itself; the caller holds the maintenance lock.
    pub(crate) fn flush_locked(&self) -> Result<FlushReport, StoreError> {
        // 1. seal the WAL file: records up to `rotation_seq` are in sealed files, later appends
        //    go to the new one
        let rotation_seq = {
            let mut wal = self.wal.lock();
            if wal.rotate(self.sync_policy_fsyncs())? {
                self.fsyncs.fetch_add(1, Ordering::Relaxed);
                let mut sync = self.sync.lock();
                sync.synced_seq = sync.synced_seq.max(wal.last_written_seq());
                drop(sync);
                self.sync_cv.notify_all();
            }
            wal.last_written_seq()
        };
        // 2. wait for appends that wrote a sealed record but have not published it yet
        let (to_flush, mut catalog) = {
            let mut state = self.state.lock();
            while state.pending.range(..=rotation_seq).next().is_some() {
                self.state_cv.wait(&mut state);
            }
            (
                state.memtable.batches_up_to(rotation_seq),
                state.catalog.clone(),
            )
        };
        // 3. write the segments
        let mut report = FlushReport::default();
        let mut written: Vec<SegmentMeta> = Vec::new();
        let mut new_rollups: Vec<(u64, Arc<Rollup>)> = Vec::new();
        let write_result = (|| {
            // Ids are allocated in (table, hour) order, then the segments are encoded on all
            // cores: the same ids, files and catalog as writing them one after the other, without
            // making the appenders wait for one core to encode every table.
            // Tables are sorted where needed on all cores too.
            let tables: Vec<_> = to_flush.iter().filter(|(_, b)| !b.is_empty()).collect();
            let hours = map_in_parallel(&tables, |(table, batches)| {
                segment::sorted_hours(*table, batches)
            });
            let mut parts = Vec::new();
            for ((table, _), hours) in tables.iter().zip(hours) {
                for (hour_ns, rows) in hours? {
                    parts.push((*table, hour_ns, catalog.allocate_id(), rows));
                }
            }
            let results = map_in_parallel(&parts, |(table, hour_ns, id, part)| {
                self.write_segment_with_rollup(*table, *hour_ns, *id, part)
            });
            let mut first_error = None;
            for ((_, _, id, _), result) in parts.iter().zip(results) {
                match result {
                    Ok((meta, rollup)) => {
                        if let Some(rollup) = rollup {
                            new_rollups.push((*id, rollup));
                        }
                        report.rows += meta.rows;
                        report.bytes_written += meta.bytes;
                        report.segments_written += 1;
                        written.push(meta);
                    }
                    Err(err) => {
                        first_error.get_or_insert(err);
                    }
                }
            }
            first_error.map_or(Ok(()), Err)
        })();
        if let Err(err) = write_result {
            remove_unpublished(&written);
            self.keep_segment_ids_allocated(&catalog);
            return Err(err);
        }
        // 4. commit: catalog on disk (or in the bucket), then memtable and catalog in memory
        //    under one lock
        if !written.is_empty() || catalog.flushed_wal_seq < rotation_seq {
            catalog.flushed_wal_seq = catalog.flushed_wal_seq.max(rotation_seq);
            if let Some(remote) = &self.remote {
                let published = remote.publish(&written, catalog.flushed_wal_seq);
                // the local files are copies either way: uploaded and committed, or not
                remove_unpublished(&written);
                written = published.inspect_err(|_| self.keep_segment_ids_allocated(&catalog))?;
                catalog.segments.extend(written);
                catalog.sort();
            } else {
                let new_segments = written.clone();
                catalog.segments.extend(written);
                catalog.sort();
                self.commit_catalog(&catalog, &new_segments)?;
            }
            let mut state = self.state.lock();
            let removed_rows = state.memtable.remove_up_to(rotation_seq);
            debug_assert_eq!(removed_rows, report.rows);
            state.catalog = catalog;
            state.rollups.extend(new_rollups);
            state.last_flush = Instant::now();
        } else {
            self.state.lock().last_flush = Instant::now();
        }
        // 5. the sealed WAL files are now redundant
        let flushed_files = self.wal.lock().take_flushed(rotation_seq);
        let mut failed: Vec<SealedWal> = Vec::new();
        for file in flushed_files {
            match remove_file_if_exists(&file.path) {
                Ok(()) => report.wal_files_removed += 1,
                Err(err) => {
                    tracing::warn!(%err, "could not remove flushed wal file; will retry");
                    failed.push(file);
                }
            }
        }
        if !failed.is_empty() {
            self.wal.lock().restore_sealed(failed);
        }
        if report.wal_files_removed > 0 {
            sync_dir_best_effort(&self.data_dir.join(WAL_DIR));
        }
        if report.rows > 0 {
            self.flushes.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?report, "flush finished");
        }
        Ok(report)
    }
}

impl StorageBackend for Store {
    fn append(&self, batches: &[TableBatch]) -> Result<AppendReceipt, StoreError> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        // backpressure: a memtable flushes cannot keep up with is refused, not grown
        if let Some(refusal) = self.append_refusal() {
            return Err(refusal);
        }
        let conformed = conform_all(batches)?;
        let rows: u64 = conformed.iter().map(|b| b.batch.num_rows() as u64).sum();
        if conformed.is_empty() {
            let wal_seq = self.wal.lock().last_written_seq();
            return Ok(AppendReceipt { wal_seq, rows: 0 });
        }
        let mut frame = self.frame_buffers.lock().pop().unwrap_or_default();
        let encoded = wal::encode_frame_into(&conformed, &mut frame);
        let result = encoded.and_then(|()| self.append_frame(&mut frame, conformed, rows));
        if frame.capacity() <= KEPT_FRAME_BUFFER_BYTES {
            let mut buffers = self.frame_buffers.lock();
            if buffers.len() < KEPT_FRAME_BUFFERS {
                buffers.push(frame);
            }
        }
        result
    }

    fn append_refusal(&self) -> Option<StoreError> {
        let limit = self.options.memtable_hard_limit_bytes();
        let bytes = self.state.lock().memtable.bytes();
        (bytes >= limit).then_some(StoreError::Overloaded { bytes, limit })
    }

    fn snapshot(&self, table: Table, range: TimeRange) -> Result<ScanSnapshot, StoreError> {
        let state = self.state.lock();
        let memtable = state.memtable.overlapping(table, range);
        let mut segments = Vec::new();
        let mut segments_pruned = 0;
        for segment in state.catalog.table_segments(table) {
            if range.overlaps(segment.min_ts_ns, segment.max_ts_ns) {
                segments.push(segment.clone());
            } else {
                segments_pruned += 1;
            }
        }
        Ok(ScanSnapshot {
            table,
            schema: table.schema(),
            memtable,
            segments,
            segments_pruned,
        })
    }

    fn remote_segments(&self) -> Option<crate::types::RemoteSegments> {
        self.remote.as_ref().map(Remote::segments)
    }

    fn segment_corrupt(&self, id: u64, reason: String) {
        let found = (self.state.lock().catalog.segments.iter())
            .find(|s| s.id == id)
            .map(|s| (s.path.clone(), s.location.clone()));
        match found {
            Some((_, None)) => self.quarantine_found(id, quarantine::Kind::Segment, reason),
            Some((path, Some(key))) => tracing::error!(
                segment = %path.display(),
                %key,
                %reason,
                "bucket segment corrupt; queries that read it fail until it is rewritten"
            ),
            // compacted or expired since the query's snapshot: the file is already on its way out
            None => tracing::warn!(id, %reason, "a segment no longer in the catalog was corrupt"),
        }
    }

    fn rollups(&self, range: TimeRange) -> Result<Vec<Arc<Rollup>>, StoreError> {
        let Some(spec) = self.options.rollup.as_ref() else {
            return Err(StoreError::RollupsDisabled);
        };
        let (mut found, missing, memtable) = {
            let state = self.state.lock();
            let mut found = Vec::new();
            let mut missing = Vec::new();
            for segment in state.catalog.table_segments(Table::Requests) {
                if !range.overlaps(segment.min_ts_ns, segment.max_ts_ns) {
                    continue;
                }
                match state.rollups.get(&segment.id) {
                    Some(rollup) => found.push(Arc::clone(rollup)),
                    None => missing.push(segment.clone()),
                }
            }
            (
                found,
                missing,
                state.memtable.overlapping(Table::Requests, range),
            )
        };
        for segment in missing {
            let Some(rollup) = self.load_rollup(spec, &segment)? else {
                continue;
            };
            let mut state = self.state.lock();
            if state.catalog.segments.iter().any(|s| s.id == segment.id) {
                state.rollups.insert(segment.id, Arc::clone(&rollup));
            }
            found.push(rollup);
        }
        if !memtable.is_empty() {
            found.push(Arc::new(rollups::build(spec, &memtable)?));
        }
        Ok(found)
    }

    fn flush(&self) -> Result<FlushReport, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        self.flush_locked()
    }

    fn stats(&self) -> StoreStats {
        let (wal_files, wal_bytes) = self.wal.lock().size();
        let state = self.state.lock();
        let (orgs, unattributed) = org_usage(&state.catalog.segments);
        let tables = Table::ALL
            .into_iter()
            .map(|table| {
                let mut stats = TableStats {
                    memtable_rows: state.memtable.table_rows(table),
                    ..TableStats::default()
                };
                for segment in state.catalog.table_segments(table) {
                    stats.segments += 1;
                    stats.segment_rows += segment.rows;
                    stats.segment_bytes += segment.bytes;
                    let tier = match segment.tier_name() {
                        "hot" => &mut stats.hot,
                        "warm" => &mut stats.warm,
                        _ => &mut stats.cold,
                    };
                    tier.segments += 1;
                    tier.bytes += segment.bytes;
                }
                (table, stats)
            })
            .collect();
        StoreStats {
            tables,
            memtable_bytes: state.memtable.bytes(),
            wal_bytes,
            wal_files,
            appends: self.appends.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            compactions: self.compactions.load(Ordering::Relaxed),
            rollups_in_memory: state.rollups.len() as u64,
            quarantine: self.quarantine.stats(),
            bucket_cache: self.remote.as_ref().and_then(Remote::cache_stats),
            orgs,
            unattributed,
        }
    }

    fn close(&self) -> Result<(), StoreError> {
        // a running compaction stops after its partition and commits what it merged first
        self.closing.store(true, Ordering::Release);
        let _compacting = self.compacting.lock();
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Ok(());
        }
        {
            let _wal = self.wal.lock();
            self.closed.store(true, Ordering::Release);
        }
        // whatever the flush does, what was acknowledged is on disk in the WAL first
        let result = self
            .sync_wal()
            .and_then(|()| self.flush_locked())
            .and_then(|_| {
                self.wal.lock().remove_active_if_empty()?;
                sync_dir(&self.data_dir.join(WAL_DIR))
            });
        // no query runs past close: retired segments can go now (a crash before this leaves
        // them unreferenced, and opening the store removes unreferenced files)
        let retired: Vec<SegmentMeta> = std::mem::take(&mut *self.retired.lock())
            .into_iter()
            .flat_map(|(_, segments)| segments)
            .collect();
        remove_segment_files(&retired);
        if let Some(remote) = &self.remote {
            remote.release_lease();
        }
        if let Some(lock_file) = self.lock_file.lock().take()
            && let Err(err) = lock_file.unlock()
        {
            tracing::warn!(%err, "could not release the store lock");
        }
        tracing::info!(data_dir = %self.data_dir.display(), ok = result.is_ok(), "store closed");
        result
    }
}

/// Checks that `batch` has exactly the columns (names and types, in order) of `table` and
/// returns it carrying the canonical schema, so every later stage can rely on one schema.
/// The non-empty batches, each checked against (and labelled with) its table's schema.
fn conform_all(batches: &[TableBatch]) -> Result<Vec<TableBatch>, StoreError> {
    let mut conformed = Vec::with_capacity(batches.len());
    for table_batch in batches {
        let batch = conform(table_batch.table, &table_batch.batch)?;
        if batch.num_rows() > 0 {
            conformed.push(TableBatch {
                table: table_batch.table,
                batch,
            });
        }
    }
    Ok(conformed)
}

fn conform(table: Table, batch: &RecordBatch) -> Result<RecordBatch, StoreError> {
    let expected = table.schema();
    if Arc::ptr_eq(batch.schema_ref(), &expected) {
        return Ok(batch.clone());
    }
    // a WAL record from before a column was appended (such as `org`): the column reads as null
    let batch = &infersight_model::tables::with_appended_columns(table, batch.clone());
    let mismatch = |reason: String| StoreError::SchemaMismatch { table, reason };
    let actual = batch.schema();
    for (index, want) in expected.fields().iter().enumerate() {
        let Some(got) = actual.fields().get(index) else {
            return Err(mismatch(format!(
                "missing column `{}` at position {index}",
                want.name()
            )));
        };
        if got.name() != want.name() {
            return Err(mismatch(format!(
                "column {index} is `{}`, expected `{}`",
                got.name(),
                want.name()
            )));
        }
        if got.data_type() != want.data_type() {
            return Err(mismatch(format!(
                "column `{}` has type {}, expected {}",
                want.name(),
                got.data_type(),
                want.data_type()
            )));
        }
    }
    if let Some(extra) = actual.fields().get(expected.fields().len()) {
        return Err(mismatch(format!("unexpected column `{}`", extra.name())));
    }
    RecordBatch::try_new(expected, batch.columns().to_vec()).map_err(|e| mismatch(e.to_string()))
}

fn take_lock(data_dir: &Path) -> Result<File, StoreError> {
    let path = data_dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(StoreError::io(&path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked {
            path: data_dir.to_path_buf(),
        }),
        Err(TryLockError::Error(source)) => Err(StoreError::Io { path, source }),
    }
}

struct Replay {
    memtable: Memtable,
    sealed: Vec<SealedWal>,
    /// Highest seq seen in any WAL file (0 when none).
    last_seq: u64,
    records: u64,
}

/// Reads every WAL file in order and rebuilds the memtable from the records the catalog does
/// not cover. A torn record at the very end of the last file was never acknowledged: it is cut
/// off with a warning. Any other unreadable part (a damaged record in the middle, a checksum
/// mismatch, a record that does not decode) is skipped: the file is copied to quarantine, logged
/// and counted, and rewritten with the records that could be read, so the store opens with
/// everything else.
fn replay_wal(
    data_dir: &Path,
    flushed_wal_seq: u64,
    counters: &QuarantineCounters,
) -> Result<Replay, StoreError> {
    let wal_dir = data_dir.join(WAL_DIR);
    let files = wal::list_files(&wal_dir)?;
    let mut replay = Replay {
        memtable: Memtable::default(),
        sealed: Vec::new(),
        last_seq: 0,
        records: 0,
    };
    // the tail of the log is the last file with any bytes: files after it were created
    // (empty) by a rotation or an open and never written
    let sizes: Vec<u64> = files
        .iter()
        .map(|(_, path)| {
            std::fs::metadata(path)
                .map(|m| m.len())
                .map_err(StoreError::io(path))
        })
        .collect::<Result<_, _>>()?;
    let tail_index = sizes.iter().rposition(|len| *len > 0);
    for (index, (_, path)) in files.into_iter().enumerate() {
        let mut scan = wal::scan_file(&path)?;
        let is_tail_file = Some(index) == tail_index;
        let torn_tail = match scan.problems.last() {
            Some(last) if is_tail_file && last.is_tail => scan.problems.pop(),
            _ => None,
        };
        let mut damage = std::mem::take(&mut scan.problems);
        let corrupt = |reason: String| StoreError::Corrupt {
            what: "wal record",
            path: path.clone(),
            reason,
        };
        let mut file_last_seq = 0;
        let mut kept: Vec<Range<usize>> = Vec::with_capacity(scan.records.len());
        for (seq, range) in &scan.records {
            let seq = *seq;
            if seq <= replay.last_seq {
                return Err(corrupt(format!(
                    "record {seq} follows record {}; sequence numbers must increase",
                    replay.last_seq
                )));
            }
            replay.last_seq = seq;
            file_last_seq = seq;
            if seq <= flushed_wal_seq {
                kept.push(wal::frame_range(range));
                continue; // already in a segment
            }
            match decode_record(&scan.data[range.clone()]) {
                Ok(batches) => {
                    for table_batch in batches {
                        replay.memtable.insert(seq, table_batch);
                    }
                    replay.records += 1;
                    kept.push(wal::frame_range(range));
                }
                Err(reason) => damage.push(wal::ScanProblem {
                    offset: wal::frame_range(range).start as u64,
                    skipped: wal::frame_range(range).len() as u64,
                    reason: format!("record {seq}: {reason}"),
                    is_tail: false,
                }),
            }
        }
        let valid_len = if !damage.is_empty() {
            salvage_wal_file(data_dir, &path, &scan.data, &kept, &damage, counters)?
        } else if let Some(problem) = torn_tail {
            tracing::warn!(
                path = %path.display(),
                offset = problem.offset,
                reason = %problem.reason,
                "discarding torn record at the end of the wal (it was never acknowledged)"
            );
            let truncate = || -> std::io::Result<()> {
                let file = OpenOptions::new().write(true).open(&path)?;
                file.set_len(scan.valid_len)?;
                file.sync_all()
            };
            truncate().map_err(StoreError::io(&path))?;
            scan.valid_len
        } else {
            scan.valid_len
        };
        let sealed = SealedWal {
            path,
            last_seq: file_last_seq,
            bytes: valid_len,
        };
        if file_last_seq <= flushed_wal_seq {
            // every record is in a segment (a flush crashed before deleting the file), or the
            // file is empty; if it cannot go now, the next flush retries
            match remove_file_if_exists(&sealed.path) {
                Ok(()) => continue,
                Err(err) => tracing::warn!(%err, "could not remove flushed wal file"),
            }
        }
        replay.sealed.push(sealed);
    }
    sync_dir(&wal_dir)?;
    Ok(replay)
}

/// The batches of one WAL record, each checked against its table's schema.
fn decode_record(payload: &[u8]) -> Result<Vec<TableBatch>, String> {
    let mut out = Vec::new();
    for table_batch in wal::decode_payload(payload)? {
        let batch = conform(table_batch.table, &table_batch.batch).map_err(|e| e.to_string())?;
        out.push(TableBatch {
            table: table_batch.table,
            batch,
        });
    }
    Ok(out)
}

/// A WAL file with unreadable parts: one log line per part, a copy of the whole file in
/// quarantine, the file rewritten (atomically) with the frames that were read. Answers its new
/// length.
fn salvage_wal_file(
    data_dir: &Path,
    path: &Path,
    data: &[u8],
    kept: &[Range<usize>],
    damage: &[wal::ScanProblem],
    counters: &QuarantineCounters,
) -> Result<u64, StoreError> {
    for problem in damage {
        tracing::error!(
            path = %path.display(),
            offset = problem.offset,
            skipped_bytes = problem.skipped,
            reason = %problem.reason,
            "unreadable wal record skipped at replay; the records after it are kept"
        );
    }
    let reason = format!(
        "{} unreadable part(s), first at byte {}: {}",
        damage.len(),
        damage[0].offset,
        damage[0].reason
    );
    quarantine::copy_file(data_dir, path, quarantine::Kind::Wal, &reason)?;
    counters.count(quarantine::Kind::Wal);
    counters.count_wal_regions(damage.len() as u64);
    let mut salvaged = Vec::with_capacity(kept.iter().map(|r| r.len()).sum());
    for frame in kept {
        salvaged.extend_from_slice(&data[frame.clone()]);
    }
    infersight_model::durable::write_atomic(path, &salvaged)?;
    Ok(salvaged.len() as u64)
}

/// Deletes segment files no catalog entry names (left by a flush or compaction that crashed
/// before committing, or after committing but before deleting what it replaced) and `.tmp`
/// files. Best effort: leftovers only cost disk space.
fn remove_orphan_segments(segments_dir: &Path, catalog: &Catalog) {
    let sidecars: Vec<PathBuf> = catalog
        .segments
        .iter()
        .filter(|s| s.rollup_bytes.is_some())
        .map(|s| rollups::sidecar_path(&s.path))
        .collect();
    let live: HashSet<&Path> = catalog
        .segments
        .iter()
        .map(|s| s.path.as_path())
        .chain(sidecars.iter().map(PathBuf::as_path))
        .collect();
    let Ok(tables) = std::fs::read_dir(segments_dir) else {
        return;
    };
    for table_dir in tables.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        let Ok(hours) = std::fs::read_dir(&table_dir) else {
            continue;
        };
        for hour_dir in hours.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
            let Ok(files) = std::fs::read_dir(&hour_dir) else {
                continue;
            };
            for path in files.flatten().map(|e| e.path()) {
                let is_segment_file =
                    path.extension()
                        .and_then(|e| e.to_str())
                        .is_some_and(|ext| {
                            ext == "parquet" || ext == "tmp" || ext == rollups::ROLLUP_EXTENSION
                        });
                if is_segment_file && !live.contains(path.as_path()) {
                    tracing::info!(path = %path.display(), "removing unreferenced segment file");
                    if let Err(err) = std::fs::remove_file(&path) {
                        tracing::warn!(path = %path.display(), %err, "could not remove file");
                    }
                }
            }
            // only succeeds when empty
            let _ = std::fs::remove_dir(&hour_dir);
        }
    }
}

/// Removes files written by a flush or compaction that failed before its catalog commit.
pub(crate) fn remove_unpublished(written: &[SegmentMeta]) {
    for meta in written {
        for path in [meta.path.clone(), rollups::sidecar_path(&meta.path)] {
            if let Err(err) = remove_file_if_exists(&path) {
                tracing::warn!(%err, "could not remove unpublished segment");
            }
        }
    }
}

/// Reads the rollup sidecars the catalog names; an unreadable one is logged and rebuilt from
/// its segment on first use.
/// Removes files of segments already dropped from the catalog, and hour directories left empty.
/// Called once `retired_grace` has passed since the catalog change, so snapshots taken before
/// it (queries being planned or run) could still open them meanwhile.
fn remove_segment_files(segments: &[SegmentMeta]) {
    let mut dirs = BTreeSet::new();
    for meta in segments {
        for path in [meta.path.clone(), rollups::sidecar_path(&meta.path)] {
            if let Err(err) = remove_file_if_exists(&path) {
                tracing::warn!(%err, "could not remove segment file; it is no longer referenced");
            }
        }
        if let Some(dir) = meta.path.parent() {
            dirs.insert(dir.to_path_buf());
        }
    }
    for dir in dirs {
        if std::fs::remove_dir(&dir).is_ok()
            && let Some(parent) = dir.parent()
        {
            sync_dir_best_effort(parent);
        } else {
            sync_dir_best_effort(&dir);
        }
    }
}

/// The ingest runtime's seam (`infersight_pipeline::BatchWriter`): a logged append goes through
/// the write-ahead log like [`StorageBackend::append`]; a bulk one only into the memtable
/// ([`Store::append_unlogged`]).
impl infersight_model::append::BatchAppend for Store {
    fn append_batches(
        &self,
        batches: &[TableBatch],
        durability: infersight_model::append::Durability,
    ) -> Result<infersight_model::append::Appended, infersight_model::append::AppendError> {
        let receipt = match durability {
            infersight_model::append::Durability::Logged => self.append(batches),
            infersight_model::append::Durability::Bulk => self.append_unlogged(batches),
        }
        .map_err(append_error)?;
        Ok(infersight_model::append::Appended {
            wal_seq: receipt.wal_seq,
            rows: receipt.rows,
        })
    }

    fn flush_if_full(&self) -> Result<(), infersight_model::append::AppendError> {
        self.maybe_flush().map(|_| ()).map_err(append_error)
    }
}

fn append_error(error: StoreError) -> infersight_model::append::AppendError {
    infersight_model::append::AppendError {
        kind: error.kind(),
        message: error.to_string(),
    }
}

/// Whether the UTC hour starting at `hour_ns` ended at least `age` before `now_ns`.
pub(crate) fn hour_ended_before(hour_ns: i64, now_ns: i64, age: Duration) -> bool {
    let age_ns = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
    hour_ns.saturating_add(NANOS_PER_HOUR) <= now_ns.saturating_sub(age_ns)
}

/// Each org's share of `segments` ([`OrgUsage`]), and what segments without per-org counts hold.
fn org_usage(segments: &[SegmentMeta]) -> (std::collections::BTreeMap<String, OrgUsage>, OrgUsage) {
    let mut orgs = std::collections::BTreeMap::<String, OrgUsage>::new();
    let mut unattributed = OrgUsage::default();
    for segment in segments {
        match &segment.org_rows {
            Some(counts) => {
                for (org, &rows) in counts {
                    let usage = orgs.entry(org.clone()).or_default();
                    usage.add_share(rows, segment.rows, segment.bytes);
                }
            }
            None => unattributed.add_share(segment.rows, segment.rows, segment.bytes),
        }
    }
    (orgs, unattributed)
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use infersight_model::TokenRecord;

    use super::*;

    #[test]
    fn store_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Store>();
        assert_send_sync::<crate::MaintenanceHandle>();
    }

    #[test]
    fn conform_names_the_first_differing_column() {
        let good = TokenRecord::to_batch(&[TokenRecord {
            ts: 1,
            ..Default::default()
        }]);
        assert!(conform(Table::Tokens, &good).is_ok());
        let err = conform(Table::Requests, &good).unwrap_err();
        assert!(
            err.to_string()
                .contains("column 1 is `request_id`, expected `trace_id`"),
            "{err}"
        );

        // same names, one type changed: `step` as Utf8
        let mut fields: Vec<Field> = Table::Tokens
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields[2] = Field::new("step", DataType::Utf8, true);
        let mut columns = good.columns().to_vec();
        columns[2] = Arc::new(StringArray::from(vec![Some("x")]));
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let err = conform(Table::Tokens, &batch).unwrap_err();
        assert!(
            err.to_string()
                .contains("column `step` has type Utf8, expected Int64"),
            "{err}"
        );
        assert_eq!(err.kind(), infersight_model::ErrorKind::BadRequest);

        // an extra trailing column
        let mut fields: Vec<Field> = Table::Tokens
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("extra", DataType::Int64, true));
        let mut columns = good.columns().to_vec();
        columns.push(Arc::new(Int64Array::from(vec![Some(1)])));
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let err = conform(Table::Tokens, &batch).unwrap_err();
        assert!(
            err.to_string().contains("unexpected column `extra`"),
            "{err}"
        );
    }
}

#[cfg(test)]
#[path = "compaction_tests.rs"]
mod compaction_tests;
