//! The whole-file check of a running store: [`Store::verify_segments`] reads every segment and
//! sidecar against its checksum on every core, and the upkeep maintenance thread reads them a
//! slice at a time ([`Store::verify_slice`]) after start and on schedule, at a bounded rate; the
//! store's own readers report what they find corrupt here. Either way the files go to
//! quarantine and leave the catalog under the maintenance lock (module `verify` holds the
//! checks).

use crate::parallel::map_in_parallel;
use crate::quarantine::Kind;
use crate::rollups;
use crate::segment;
use crate::store::Store;
use crate::types::{SegmentMeta, StoreError, VerifyReport};
use crate::verify::{Verdict, judge_segment, set_aside};

/// Where a scrub read a slice at a time stands: the last segment id checked, and what the pass
/// found so far.
#[derive(Debug, Default)]
pub(crate) struct ScrubCursor {
    after: Option<u64>,
    pub(crate) report: VerifyReport,
}

/// One segment and its sidecar read against their checksums.
fn verdict(meta: &SegmentMeta) -> Verdict {
    if let Some(reason) = judge_segment(segment::check_file(meta), meta) {
        return Verdict::Segment(reason);
    }
    if meta.rollup_bytes.is_none() {
        return Verdict::Sound;
    }
    match rollups::read_sidecar(meta) {
        Err(StoreError::Corrupt { reason, .. }) => Verdict::Rollup(reason),
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Verdict::Rollup("the file is missing".into())
        }
        _ => Verdict::Sound,
    }
}

impl Store {
    /// Reads every segment and sidecar the catalog names and compares them with their
    /// checksums; what fails is quarantined and leaves the catalog. Runs without blocking
    /// appends or queries (only the final catalog change takes the maintenance lock).
    pub fn verify_segments(&self) -> Result<VerifyReport, StoreError> {
        // local files only: objects in a bucket are checked whenever they are read
        let segments: Vec<_> = (self.state.lock().catalog.segments.iter())
            .filter(|s| s.location.is_none())
            .cloned()
            .collect();
        let verdicts = map_in_parallel(&segments, verdict);
        let mut report = VerifyReport::default();
        self.settle(&segments, verdicts, &mut report)?;
        Ok(report)
    }

    /// The next local segments after `cursor`'s, in id order, read on this thread against
    /// their checksums until `budget` bytes were read (at least one segment); what fails is
    /// quarantined. Returns the bytes read, and whether the pass reached the last segment (the
    /// cursor's report is then the pass's). The upkeep thread scrubs a slice at a time, at
    /// `StoreOptions::verify_bytes_per_sec`, between its other work.
    pub(crate) fn verify_slice(
        &self,
        cursor: &mut ScrubCursor,
        budget: u64,
    ) -> Result<(u64, bool), StoreError> {
        let mut pending: Vec<_> = (self.state.lock().catalog.segments.iter())
            .filter(|s| s.location.is_none() && cursor.after.is_none_or(|after| s.id > after))
            .cloned()
            .collect();
        pending.sort_by_key(|s| s.id);
        let mut slice = Vec::new();
        let mut bytes = 0u64;
        for meta in pending.iter() {
            if bytes >= budget.max(1) {
                break;
            }
            bytes += meta.bytes + meta.rollup_bytes.unwrap_or(0);
            slice.push(meta.clone());
        }
        let done = slice.len() == pending.len();
        let verdicts = slice.iter().map(verdict).collect();
        self.settle(&slice, verdicts, &mut cursor.report)?;
        cursor.after = slice.last().map(|s| s.id).or(cursor.after);
        Ok((bytes, done))
    }

    /// Adds `segments` and their `verdicts` to `report` and sets aside what failed.
    fn settle(
        &self,
        segments: &[SegmentMeta],
        verdicts: Vec<Verdict>,
        report: &mut VerifyReport,
    ) -> Result<(), StoreError> {
        report.segments_checked += segments.len();
        report.bytes_checked += segments
            .iter()
            .map(|s| s.bytes + s.rollup_bytes.unwrap_or(0))
            .sum::<u64>();
        let mut corrupt = Vec::new();
        for (meta, verdict) in segments.iter().zip(verdicts) {
            match verdict {
                Verdict::Sound => {}
                Verdict::Segment(reason) => {
                    report.segments_quarantined += 1;
                    corrupt.push((meta.id, Kind::Segment, reason));
                }
                Verdict::Rollup(reason) => {
                    report.rollups_quarantined += 1;
                    corrupt.push((meta.id, Kind::Rollup, reason));
                }
            }
        }
        if !corrupt.is_empty() {
            let _maintenance = self.maintenance.lock();
            self.set_aside_locked(&corrupt)?;
        }
        Ok(())
    }

    /// Quarantines one segment (or only its sidecar) the store found corrupt while reading it;
    /// the caller does not hold the maintenance lock.
    pub(crate) fn quarantine_found(&self, id: u64, kind: Kind, reason: String) {
        let _maintenance = self.maintenance.lock();
        if let Err(err) = self.set_aside_locked(&[(id, kind, reason)]) {
            tracing::error!(%err, "could not take a corrupt segment out of the catalog");
        }
    }

    /// [`set_aside`] on the live catalog: saved, then published with the rollups of dropped
    /// segments forgotten. Entries no longer in the catalog (compacted meanwhile) are ignored.
    /// The caller holds the maintenance lock.
    pub(crate) fn set_aside_locked(
        &self,
        corrupt: &[(u64, Kind, String)],
    ) -> Result<(), StoreError> {
        let mut catalog = self.state.lock().catalog.clone();
        let live: Vec<_> = corrupt
            .iter()
            .filter(|(id, _, _)| catalog.segments.iter().any(|s| s.id == *id))
            .cloned()
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        set_aside(&self.data_dir, &mut catalog, &live, &self.quarantine);
        catalog.save(&self.data_dir)?;
        let mut state = self.state.lock();
        state.catalog = catalog;
        for (id, _, _) in &live {
            state.rollups.remove(id);
        }
        Ok(())
    }
}
