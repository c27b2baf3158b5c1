//! Maintenance of a store whose segments live in a bucket (`StoreOptions::remote`): every node
//! follows the catalog log ([`Store::refresh_bucket`]: what other nodes flushed comes in, what
//! was merged or expired leaves); the node that maintains the bucket (`RemoteOptions::maintain`,
//! the `compact` and `all` roles) merges small segments of a (table, hour) across nodes, drops
//! expired ones, moves (table, hour) partitions past the warm tier's age to the cold tier
//! (`StoreOptions::tiers`: one segment with large row groups under the cold prefix) and deletes
//! unreferenced objects, committing through the catalog log under the bucket's `compactor` lease
//! (module `remote`). [`Store::compact`], [`Store::apply_retention`], [`Store::apply_tiers`] and
//! [`Store::upkeep_pass`] come here when the store has a bucket.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use infersight_cluster::{CatalogState, Lease, SegmentId, Tier};
use infersight_model::time::hour_floor_ns;
use infersight_model::{SCHEMA_VERSION, Table};
use infersight_rollup::Rollup;

use crate::remote::{Remote, Turn};
use crate::segment::{self, SegmentFormat};
use crate::store::{Store, hour_ended_before, remove_unpublished};
use crate::types::{
    BucketRefresh, CompactionReport, RetentionReport, SegmentMeta, StoreError, TierReport,
};

/// How long a maintenance turn holds the `compactor` lease; renewed when half of it is left.
pub(crate) const LEASE_TTL: Duration = Duration::from_secs(60);

impl Store {
    /// Reads the catalog log's new entries and brings the store's segment list in line: segments
    /// other nodes committed become visible to queries, segments the maintaining node merged or
    /// expired leave (their objects stay for `RemoteOptions::gc_grace`). A no-op without a
    /// bucket. The upkeep maintenance thread runs it every pass.
    pub fn refresh_bucket(&self) -> Result<BucketRefresh, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        match self.remote() {
            Some(remote) => {
                let state = remote.refresh()?;
                self.reconcile(remote, &state)
            }
            None => Ok(BucketRefresh::default()),
        }
    }

    /// Reconciles the segment list with `state`; the caller holds the maintenance lock.
    pub(crate) fn reconcile(
        &self,
        remote: &Remote,
        state: &CatalogState,
    ) -> Result<BucketRefresh, StoreError> {
        let mut guard = self.state.lock();
        let before = guard.catalog.segments.len();
        let removed = remote.reconcile(state, &mut guard.catalog)?;
        for segment in &removed {
            guard.rollups.remove(&segment.id);
        }
        let refresh = BucketRefresh {
            catalog_seq: state.seq,
            added: guard.catalog.segments.len() + removed.len() - before,
            removed: removed.len(),
        };
        drop(guard);
        if refresh.added + refresh.removed > 0 {
            tracing::debug!(?refresh, "segment list follows the bucket's catalog log");
        }
        Ok(refresh)
    }

    /// The lease to commit under, when it is this node's turn to maintain the bucket.
    pub(crate) fn bucket_turn(&self, remote: &Remote) -> Result<Option<Option<Lease>>, StoreError> {
        if !remote.maintain {
            return Ok(None);
        }
        Ok(match remote.maintenance_turn(LEASE_TTL)? {
            Turn::Fenced(lease) => Some(Some(lease)),
            Turn::Unfenced => Some(None),
            Turn::Elsewhere(holder) => {
                tracing::debug!(%holder, "another node maintains the bucket");
                None
            }
        })
    }

    /// [`Store::compact`] on a bucket (the caller holds the maintenance lock): per (table, hour),
    /// the segments of every node smaller than `compaction_small_bytes`, once there are
    /// `compaction_min_segments` of them, become one segment in one catalog entry that adds it
    /// and removes them.
    pub(crate) fn compact_bucket(&self, remote: &Remote) -> Result<CompactionReport, StoreError> {
        let Some(lease) = self.bucket_turn(remote)? else {
            return Ok(CompactionReport::default());
        };
        let state = remote.refresh()?;
        self.reconcile(remote, &state)?;
        let options = self.options();
        let mut partitions: BTreeMap<(Table, i64), Vec<&infersight_cluster::SegmentMeta>> =
            BTreeMap::new();
        for meta in state.segments.values() {
            let Ok(table) = Table::from_name(&meta.table) else {
                continue;
            };
            if meta.bytes < options.compaction_small_bytes
                && meta.tier == Tier::Warm
                && meta.schema_version.unwrap_or(1) == SCHEMA_VERSION
            {
                let hour_ns = hour_floor_ns(meta.min_ts_ns);
                partitions.entry((table, hour_ns)).or_default().push(meta);
            }
        }
        let min_segments = options.compaction_min_segments.max(2);
        let mut report = CompactionReport::default();
        let mut written: Vec<SegmentMeta> = Vec::new();
        let mut rollups: Vec<(u64, Arc<Rollup>)> = Vec::new();
        let mut replaced: Vec<SegmentId> = Vec::new();
        let mut deleted: Vec<(Table, u64, u64)> = Vec::new();
        for ((table, hour_ns), group) in partitions {
            if group.len() < min_segments {
                continue;
            }
            let merged = self.merge_bucket_segments(remote, table, hour_ns, &group, self.format);
            match merged {
                Ok(Some((meta, rollup))) => {
                    report.partitions_compacted += 1;
                    report.segments_removed += group.len();
                    report.segments_written += 1;
                    if let Some(rollup) = rollup {
                        rollups.push((meta.id, rollup));
                    }
                    written.push(meta);
                    replaced.extend(group.iter().map(|meta| meta.id.clone()));
                    deleted.extend(group.iter().map(|meta| (table, meta.rows, meta.bytes)));
                }
                Ok(None) => {}
                Err(err) => {
                    remove_unpublished(&written);
                    return Err(err);
                }
            }
        }
        if written.is_empty() {
            return Ok(report);
        }
        let published = remote.publish_compaction(&written, &replaced, lease.as_ref(), None);
        // the local files are copies either way: uploaded and committed, or not
        remove_unpublished(&written);
        let published = published?;
        {
            let mut guard = self.state.lock();
            guard.catalog.segments.extend(published);
            guard.catalog.sort();
            guard.rollups.extend(rollups);
        }
        // the replaced segments leave the list (their objects wait for garbage collection)
        let state = remote.refresh()?;
        self.reconcile(remote, &state)?;
        self.count_compaction();
        self.report_deleted("compaction", deleted);
        tracing::info!(
            ?report,
            fenced = lease.is_some(),
            "bucket compaction finished"
        );
        Ok(report)
    }

    /// Reads `group` (segments of one table and hour, from any node) and writes them as one
    /// local segment in `format` with its rollup, under a new local id. `None`: a segment of the
    /// group is corrupt; the partition is left as it is (objects in a bucket are not
    /// quarantined).
    #[allow(clippy::type_complexity)]
    fn merge_bucket_segments(
        &self,
        remote: &Remote,
        table: Table,
        hour_ns: i64,
        group: &[&infersight_cluster::SegmentMeta],
        format: SegmentFormat,
    ) -> Result<Option<(SegmentMeta, Option<Arc<Rollup>>)>, StoreError> {
        let unreadable = |path: &std::path::Path, reason: &str| {
            tracing::error!(
                segment = %path.display(),
                %reason,
                "bucket segment unreadable; its partition is not rewritten"
            );
        };
        let mut inputs = Vec::new();
        for meta in group {
            match remote.segment_batches(&remote.local_segment(0, meta)?) {
                Ok(batches) => inputs.push(batches),
                Err(StoreError::Corrupt { path, reason, .. }) => {
                    unreadable(&path, &reason);
                    return Ok(None);
                }
                Err(err) => return Err(err),
            }
        }
        let rows: u64 = group.iter().map(|meta| meta.rows).sum();
        let id = self.state.lock().catalog.allocate_id();
        match self.write_merged(table, hour_ns, id, inputs, format) {
            Ok((meta, rollup)) => {
                debug_assert_eq!(meta.rows, rows);
                Ok(Some((meta, rollup)))
            }
            Err(StoreError::Corrupt {
                what: segment::SEGMENT,
                path,
                reason,
            }) => {
                unreadable(&path, &reason);
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// [`Store::apply_retention`] on a bucket (the caller holds the maintenance lock): removes
    /// every node's segments whose hour ended their table's retention before `now_ns`, in one
    /// catalog entry.
    pub(crate) fn expire_bucket(
        &self,
        remote: &Remote,
        now_ns: i64,
    ) -> Result<RetentionReport, StoreError> {
        let Some(lease) = self.bucket_turn(remote)? else {
            return Ok(RetentionReport::default());
        };
        let state = remote.refresh()?;
        let cold_for = self.options().tiers.as_ref().and_then(|t| t.cold_for);
        let expired: Vec<&infersight_cluster::SegmentMeta> = (state.segments.values())
            .filter(|meta| {
                let hour_ns = hour_floor_ns(meta.min_ts_ns);
                let cold_expired = meta.tier == Tier::Cold
                    && cold_for.is_some_and(|age| hour_ended_before(hour_ns, now_ns, age));
                cold_expired
                    || Table::from_name(&meta.table)
                        .is_ok_and(|table| self.expired(table, hour_ns, now_ns))
            })
            .collect();
        if expired.is_empty() {
            self.reconcile(remote, &state)?;
            return Ok(RetentionReport::default());
        }
        let ids: Vec<SegmentId> = expired.iter().map(|meta| meta.id.clone()).collect();
        remote.commit_removals(&ids, lease.as_ref())?;
        let report = self.report_expired(expired.iter().filter_map(|meta| {
            let table = Table::from_name(&meta.table).ok()?;
            Some((table, meta.rows, meta.bytes))
        }));
        let state = remote.refresh()?;
        self.reconcile(remote, &state)?;
        tracing::info!(?report, "bucket retention applied");
        Ok(report)
    }

    /// Deletes the bucket's unreferenced segment objects once they are past
    /// `RemoteOptions::gc_grace` (see [`Remote::collect_garbage`]); answers how many. Then prunes
    /// the catalog log up to its second newest checkpoint (`ObjectStoreCatalog::prune`). Only on
    /// the node maintaining the bucket, in its turn; 0 without a bucket.
    pub fn collect_bucket_garbage(&self) -> Result<usize, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let Some(remote) = self.remote() else {
            return Ok(0);
        };
        if self.bucket_turn(remote)?.is_none() {
            return Ok(0);
        }
        // an object committed after this refresh is younger than the grace: never deleted
        let state = remote.refresh()?;
        let cold_prefix = (self.options().tiers.as_ref()).map(|t| t.cold_prefix.as_str());
        let (count, deleted) = remote.collect_garbage(&state, cold_prefix)?;
        self.report_deleted("garbage collection", deleted);
        // the log's garbage too: entries and checkpoints older than the second newest; a
        // failure is the next pass's to retry, and takes nothing from the collection
        match remote.prune_log() {
            Ok(pruned) if pruned.entries + pruned.checkpoints > 0 => tracing::info!(
                entries = pruned.entries,
                checkpoints = pruned.checkpoints,
                through = pruned.through,
                "catalog log pruned"
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "catalog log not pruned this pass"),
        }
        Ok(count)
    }

    /// Moves bucket partitions past the warm tier's age to the cold tier
    /// (`StoreOptions::tiers`): per (table, hour) whose hour ended `warm_for` before `now_ns`
    /// and that its table's retention does not drop, oldest first and at most
    /// `max_partitions_per_pass` of them, the warm segments of every node become one segment
    /// with `cold_row_group_rows` rows per row group under the cold prefix, committed in one
    /// catalog entry per partition (adding it, removing them) under the `compactor` lease. Rows
    /// are rewritten, never dropped: a partition with a corrupt segment stays warm. Only on the
    /// node maintaining the bucket, in its turn; a no-op without tiers or a bucket.
    pub fn apply_tiers(&self, now_ns: i64) -> Result<TierReport, StoreError> {
        let _maintenance = self.maintenance.lock();
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let (Some(remote), Some(tiers)) = (self.remote(), self.options().tiers.clone()) else {
            return Ok(TierReport::default());
        };
        if self.bucket_turn(remote)?.is_none() {
            return Ok(TierReport::default());
        }
        let state = remote.refresh()?;
        self.reconcile(remote, &state)?;
        let mut due: BTreeMap<(i64, Table), Vec<&infersight_cluster::SegmentMeta>> =
            BTreeMap::new();
        for meta in state.segments.values() {
            let hour_ns = hour_floor_ns(meta.min_ts_ns);
            let Ok(table) = Table::from_name(&meta.table) else {
                continue;
            };
            if meta.tier == Tier::Warm
                && meta.schema_version.unwrap_or(1) == SCHEMA_VERSION
                && hour_ended_before(hour_ns, now_ns, tiers.warm_for)
                && !self.expired(table, hour_ns, now_ns)
            {
                due.entry((hour_ns, table)).or_default().push(meta);
            }
        }
        let mut report = TierReport {
            partitions_left: due.len().saturating_sub(tiers.max_partitions_per_pass),
            ..TierReport::default()
        };
        let format = SegmentFormat {
            row_group_rows: tiers.cold_row_group_rows.max(1),
            ..self.format
        };
        for ((hour_ns, table), group) in due.into_iter().take(tiers.max_partitions_per_pass) {
            // renews the lease when half of it is gone: a pass may rewrite many partitions
            let Some(lease) = self.bucket_turn(remote)? else {
                break;
            };
            let Some((meta, rollup)) =
                self.merge_bucket_segments(remote, table, hour_ns, &group, format)?
            else {
                continue;
            };
            let replaced: Vec<SegmentId> = group.iter().map(|meta| meta.id.clone()).collect();
            let published = remote.publish_compaction(
                std::slice::from_ref(&meta),
                &replaced,
                lease.as_ref(),
                Some(&tiers.cold_prefix),
            );
            remove_unpublished(std::slice::from_ref(&meta));
            let published = published?;
            {
                let mut guard = self.state.lock();
                if let Some(rollup) = rollup {
                    guard.rollups.insert(meta.id, rollup);
                }
                guard.catalog.segments.extend(published);
                guard.catalog.sort();
            }
            report.partitions_moved += 1;
            report.segments_replaced += group.len();
            report.rows_moved += meta.rows;
            report.bytes_before += group.iter().map(|meta| meta.bytes).sum::<u64>();
            report.bytes_after += meta.bytes;
        }
        if report.partitions_moved > 0 {
            // the warm segments leave the list (their objects wait for garbage collection)
            let state = remote.refresh()?;
            self.reconcile(remote, &state)?;
            tracing::info!(?report, "bucket partitions moved to the cold tier");
        }
        Ok(report)
    }
}
