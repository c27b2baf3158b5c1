//! Per-org retention (`StoreOptions::retention_by_org`, `[auth.orgs.<org>] retention`), the last
//! step of [`Store::apply_retention`]: an org's rows of every table leave once their hour ended
//! longer ago than the org's retention, whatever the table keeps for other orgs. A segment holds
//! every org's rows of one table and hour, so the segments holding such rows are rewritten
//! without them, streamed (`Store::write_merged_without`), and a segment left with no row is
//! removed; the rest of the store is untouched. Which orgs a segment holds is in its catalog
//! entry (`SegmentMeta::org_rows`), so only segments with due rows are read; one written before
//! the store counted orgs is read, and rewritten, once.
//!
//! Local segments are replaced in one catalog save (the replaced files retired as compaction
//! retires them); segments in a bucket are replaced one catalog entry each, by the node
//! maintaining the bucket under its `compactor` lease, a cold segment staying cold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use infersight_cluster::Tier;
use infersight_model::Table;
use infersight_model::time::hour_floor_ns;
use infersight_rollup::Rollup;

use crate::remote::Remote;
use crate::segment::{self, SegmentBatches, SegmentFormat};
use crate::store::{Store, hour_ended_before, remove_unpublished};
use crate::types::{RetentionReport, SegmentMeta, StoreError};

/// At most this many bucket segments are rewritten per pass (one catalog entry each).
const BUCKET_REWRITES_PER_PASS: usize = 64;

/// What rewriting one segment left: the new segment (`None`: no row stayed) and its rollup.
type Rewritten = (Option<SegmentMeta>, Option<Arc<Rollup>>);

impl Store {
    /// The orgs whose rows of the hour starting at `hour_ns` are past their retention at
    /// `now_ns`.
    fn due_orgs(&self, hour_ns: i64, now_ns: i64) -> BTreeSet<String> {
        (self.options().retention_by_org.iter())
            .filter(|(_, retention)| hour_ended_before(hour_ns, now_ns, **retention))
            .map(|(org, _)| org.clone())
            .collect()
    }

    /// The orgs due in a segment of `hour_ns` with `org_rows`: empty when it holds none of
    /// their rows (a segment whose orgs were not counted may hold any).
    fn due_in(
        &self,
        hour_ns: i64,
        org_rows: Option<&BTreeMap<String, u64>>,
        now_ns: i64,
    ) -> BTreeSet<String> {
        let due = self.due_orgs(hour_ns, now_ns);
        match org_rows {
            Some(rows) if !rows.keys().any(|org| due.contains(org)) => BTreeSet::new(),
            _ => due,
        }
    }

    /// Removes every org's rows past its own retention; the caller holds the maintenance lock.
    pub(crate) fn expire_orgs(&self, now_ns: i64) -> Result<RetentionReport, StoreError> {
        if self.options().retention_by_org.is_empty() {
            return Ok(RetentionReport::default());
        }
        let report = match self.remote() {
            Some(remote) => self.expire_orgs_in_bucket(remote, now_ns)?,
            None => self.expire_orgs_locally(now_ns)?,
        };
        if report.rows_removed > 0 || report.segments_rewritten > 0 {
            tracing::info!(?report, "per-org retention applied");
        }
        Ok(report)
    }

    /// Writes `segment`'s rows without those of `due` as segment `id` in `format`. A segment
    /// that fails its check or stops decoding is `Corrupt`; nothing is left written then.
    fn rewrite_without(
        &self,
        segment: &SegmentMeta,
        inputs: SegmentBatches,
        id: u64,
        format: SegmentFormat,
        due: &BTreeSet<String>,
    ) -> Result<Rewritten, StoreError> {
        let (meta, rollup) = self.write_merged_without(
            segment.table,
            segment.hour_ns,
            id,
            vec![inputs],
            format,
            due,
        )?;
        if meta.rows == 0 {
            remove_unpublished(std::slice::from_ref(&meta));
            return Ok((None, None));
        }
        Ok((Some(meta), rollup))
    }

    /// Per-org retention on local segments: every segment with due rows rewritten, then one
    /// catalog save.
    fn expire_orgs_locally(&self, now_ns: i64) -> Result<RetentionReport, StoreError> {
        let mut catalog = self.state.lock().catalog.clone();
        let candidates: Vec<(SegmentMeta, BTreeSet<String>)> = (catalog.segments.iter())
            .filter_map(|s| {
                let due = self.due_in(s.hour_ns, s.org_rows.as_ref(), now_ns);
                (!due.is_empty()).then(|| (s.clone(), due))
            })
            .collect();
        if candidates.is_empty() {
            return Ok(RetentionReport::default());
        }
        let mut report = RetentionReport::default();
        let mut written: Vec<SegmentMeta> = Vec::new();
        let mut replaced: Vec<SegmentMeta> = Vec::new();
        let mut rollups: Vec<(u64, Arc<Rollup>)> = Vec::new();
        let mut deleted: Vec<(Table, u64, u64)> = Vec::new();
        for (segment, due) in candidates {
            let id = catalog.allocate_id();
            let rewritten = segment::segment_batches(&segment)
                .and_then(|inputs| self.rewrite_without(&segment, inputs, id, self.format, &due));
            let (meta, rollup) = match rewritten {
                Ok(rewritten) => rewritten,
                Err(StoreError::Corrupt { reason, .. }) => {
                    // verification quarantines it; its rows are not this pass's to judge
                    tracing::error!(segment = %segment.path.display(), %reason, "segment unreadable; per-org retention skips it");
                    continue;
                }
                Err(err) => {
                    remove_unpublished(&written);
                    self.keep_segment_ids_allocated(&catalog);
                    return Err(err);
                }
            };
            count_rewrite(&mut report, &mut deleted, &segment, meta.as_ref());
            if let Some(rollup) = rollup.zip(meta.as_ref()) {
                rollups.push((rollup.1.id, rollup.0));
            }
            written.extend(meta);
            replaced.push(segment);
        }
        let gone = replaced.iter().map(|s| s.id).collect();
        self.commit_replacement(catalog, &gone, &written, rollups)?;
        self.report_deleted("retention", deleted);
        self.retire(replaced);
        Ok(report)
    }

    /// Per-org retention on a bucket's segments, by the node maintaining it in its turn: each
    /// segment with due rows replaced in its own catalog entry, its tier kept.
    fn expire_orgs_in_bucket(
        &self,
        remote: &Remote,
        now_ns: i64,
    ) -> Result<RetentionReport, StoreError> {
        let mut report = RetentionReport::default();
        if self.bucket_turn(remote)?.is_none() {
            return Ok(report);
        }
        let state = remote.refresh()?;
        let candidates: Vec<(&infersight_cluster::SegmentMeta, BTreeSet<String>)> =
            (state.segments.values())
                .filter_map(|meta| {
                    let hour_ns = hour_floor_ns(meta.min_ts_ns);
                    let due = self.due_in(hour_ns, meta.org_rows.as_ref(), now_ns);
                    (!due.is_empty()).then_some((meta, due))
                })
                .take(BUCKET_REWRITES_PER_PASS)
                .collect();
        let tiers = self.options().tiers.clone();
        let mut deleted: Vec<(Table, u64, u64)> = Vec::new();
        for (meta, due) in candidates {
            // renews the lease when half of it is gone
            let Some(lease) = self.bucket_turn(remote)? else {
                break;
            };
            let segment = remote.local_segment(0, meta)?;
            let (format, cold_prefix) = match (&tiers, meta.tier) {
                (Some(tiers), Tier::Cold) => (
                    SegmentFormat {
                        row_group_rows: tiers.cold_row_group_rows.max(1),
                        ..self.format
                    },
                    Some(tiers.cold_prefix.as_str()),
                ),
                _ => (self.format, None),
            };
            let id = self.state.lock().catalog.allocate_id();
            let rewritten = remote
                .segment_batches(&segment)
                .and_then(|inputs| self.rewrite_without(&segment, inputs, id, format, &due));
            let (written, rollup) = match rewritten {
                Ok(rewritten) => rewritten,
                Err(StoreError::Corrupt { reason, .. }) => {
                    tracing::error!(segment = %segment.path.display(), %reason, "bucket segment unreadable; per-org retention skips it");
                    continue;
                }
                Err(err) => return Err(err),
            };
            let replaced = [meta.id.clone()];
            let committed = match &written {
                Some(new) => remote
                    .publish_compaction(
                        std::slice::from_ref(new),
                        &replaced,
                        lease.as_ref(),
                        cold_prefix,
                    )
                    .map(Some),
                None => remote
                    .commit_removals(&replaced, lease.as_ref())
                    .map(|()| None),
            };
            if let Some(new) = &written {
                // the local file is a copy either way: uploaded and committed, or not
                remove_unpublished(std::slice::from_ref(new));
            }
            let published = committed?;
            count_rewrite(&mut report, &mut deleted, &segment, written.as_ref());
            let mut guard = self.state.lock();
            if let (Some(published), Some(new)) = (published, &written) {
                guard.catalog.segments.extend(published);
                guard.catalog.sort();
                if let Some(rollup) = rollup {
                    guard.rollups.insert(new.id, rollup);
                }
            }
        }
        // the replaced segments leave the list (their objects wait for garbage collection)
        let state = remote.refresh()?;
        self.reconcile(remote, &state)?;
        self.report_deleted("retention", deleted);
        Ok(report)
    }
}

/// Counts one segment rewritten into `written` (`None`: removed) in `report`, and its rows and
/// bytes that went in `deleted` (for the audit).
fn count_rewrite(
    report: &mut RetentionReport,
    deleted: &mut Vec<(Table, u64, u64)>,
    segment: &SegmentMeta,
    written: Option<&SegmentMeta>,
) {
    let (rows, bytes) = written.map_or((0, 0), |w| (w.rows, w.bytes));
    let rows_removed = segment.rows.saturating_sub(rows);
    let bytes_removed = segment.bytes.saturating_sub(bytes);
    match written {
        Some(_) => report.segments_rewritten += 1,
        None => report.segments_removed += 1,
    }
    report.rows_removed += rows_removed;
    report.bytes_removed += bytes_removed;
    if rows_removed > 0 {
        deleted.push((segment.table, rows_removed, bytes_removed));
    }
}
