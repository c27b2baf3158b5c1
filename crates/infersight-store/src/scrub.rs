//! The whole-file check of a running store: [`Store::verify_segments`] reads every segment and
//! sidecar against its checksum (the upkeep maintenance thread runs it once after start), and the
//! store's own readers report what they find corrupt here; either way the files go to quarantine
//! and leave the catalog under the maintenance lock (module `verify` holds the checks).

use crate::parallel::map_in_parallel;
use crate::quarantine::Kind;
use crate::rollups;
use crate::segment;
use crate::store::Store;
use crate::types::{StoreError, VerifyReport};
use crate::verify::{Verdict, judge_segment, set_aside};

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
        let verdicts = map_in_parallel(&segments, |meta| {
            if let Some(reason) = judge_segment(segment::check_file(meta), meta) {
                return Verdict::Segment(reason);
            }
            if meta.rollup_bytes.is_none() {
                return Verdict::Sound;
            }
            match rollups::read_sidecar(meta) {
                Err(StoreError::Corrupt { reason, .. }) => Verdict::Rollup(reason),
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    Verdict::Rollup("the file is missing".into())
                }
                _ => Verdict::Sound,
            }
        });
        let mut report = VerifyReport {
            segments_checked: segments.len(),
            bytes_checked: segments
                .iter()
                .map(|s| s.bytes + s.rollup_bytes.unwrap_or(0))
                .sum(),
            ..VerifyReport::default()
        };
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
        Ok(report)
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
