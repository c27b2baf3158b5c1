//! Segment integrity: the checks between the catalog and the files it names. At every open each
//! segment's footer is checked against its checksum and each sidecar's size against the catalog
//! ([`check_catalog_at_open`]: one read of every file's tail, on all cores); the whole files are
//! read by `Store::verify_segments` (module `scrub`: run by the upkeep maintenance thread after start,
//! and callable at any time) and whenever the store reads a segment itself. Whatever fails goes to quarantine
//! (module `quarantine`) and leaves the catalog, so the store keeps serving the rest.

use std::collections::HashSet;
use std::path::Path;

use crate::catalog::Catalog;
use crate::parallel::map_in_parallel;
use crate::quarantine::{self, Kind, QuarantineCounters};
use crate::rollups;
use crate::segment::{self, FileCheck};
use crate::types::{SegmentMeta, StoreError};

/// What to do about one catalog entry.
pub(crate) enum Verdict {
    Sound,
    /// The segment file is corrupt or missing: quarantine it (with its sidecar).
    Segment(String),
    /// Only the sidecar is: quarantine it, keep the segment (its rollup is rebuilt from rows).
    Rollup(String),
}

pub(crate) fn judge_segment(check: FileCheck, meta: &SegmentMeta) -> Option<String> {
    match check {
        FileCheck::Sound => None,
        FileCheck::Corrupt(reason) => Some(reason),
        FileCheck::Unreadable(err) => {
            tracing::warn!(path = %meta.path.display(), %err, "segment could not be checked");
            None
        }
    }
}

/// The cheap check of every segment the catalog names, at open, before anything reads them.
/// Corrupt files are quarantined and the catalog saved without them.
pub(crate) fn check_catalog_at_open(
    data_dir: &Path,
    catalog: &mut Catalog,
    counters: &QuarantineCounters,
) -> Result<(), StoreError> {
    let verdicts = map_in_parallel(&catalog.segments, |meta| {
        if let Some(reason) = judge_segment(segment::check_footer(meta), meta) {
            return Verdict::Segment(reason);
        }
        match rollups::check_sidecar_size(meta) {
            Some(reason) => Verdict::Rollup(reason),
            None => Verdict::Sound,
        }
    });
    let mut corrupt = Vec::new();
    for (meta, verdict) in catalog.segments.iter().zip(verdicts) {
        match verdict {
            Verdict::Sound => {}
            Verdict::Segment(reason) => corrupt.push((meta.id, Kind::Segment, reason)),
            Verdict::Rollup(reason) => corrupt.push((meta.id, Kind::Rollup, reason)),
        }
    }
    if corrupt.is_empty() {
        return Ok(());
    }
    set_aside(data_dir, catalog, &corrupt, counters);
    catalog.save(data_dir)
}

/// Moves the files of `corrupt` entries to quarantine and takes them out of `catalog` (a
/// segment) or clears its sidecar (a rollup). The caller saves the catalog.
pub(crate) fn set_aside(
    data_dir: &Path,
    catalog: &mut Catalog,
    corrupt: &[(u64, Kind, String)],
    counters: &QuarantineCounters,
) {
    let mut dropped: HashSet<u64> = HashSet::new();
    for (id, kind, reason) in corrupt {
        let Some(meta) = catalog.segments.iter_mut().find(|s| s.id == *id) else {
            continue;
        };
        let sidecar = rollups::sidecar_path(&meta.path);
        let reason = format!("{reason} ({} rows)", meta.rows);
        let moved = match kind {
            Kind::Segment => {
                dropped.insert(*id);
                let moved = quarantine::move_file(data_dir, &meta.path, Kind::Segment, &reason);
                if meta.rollup_bytes.is_some()
                    && let Err(err) = quarantine::move_file(
                        data_dir,
                        &sidecar,
                        Kind::Rollup,
                        "its segment was quarantined",
                    )
                {
                    tracing::warn!(%err, "could not move a sidecar to quarantine");
                }
                moved
            }
            Kind::Rollup | Kind::Wal => {
                meta.rollup_bytes = None;
                if let Some(checksum) = &mut meta.checksum {
                    checksum.rollup_crc32 = None;
                }
                quarantine::move_file(data_dir, &sidecar, Kind::Rollup, &reason)
            }
        };
        counters.count(*kind);
        if let Err(err) = moved {
            // it leaves the catalog all the same; the orphan sweep of the next open removes it
            tracing::warn!(%err, "could not move a corrupt file to quarantine");
        }
    }
    catalog.segments.retain(|s| !dropped.contains(&s.id));
}
