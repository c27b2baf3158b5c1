//! Rollup sidecars: every `requests` segment gets `<id>.rollup` next to its Parquet file, the
//! per-minute SLI sketches of exactly its rows (see `infersight_rollup`; the format is its `codec`). They are
//! written with the segment (before the catalog names it), rebuilt when segments are compacted,
//! removed with them, and cached in memory, so SLI queries never rescan raw rows of flushed data.
//! Sidecars are zstd-compressed. Rows still in the memtable are rolled up at query time (the memtable is small and bounded).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use infersight_model::durable;
use infersight_rollup::{Rollup, RollupSpec};

use crate::types::{SegmentMeta, StoreError};

pub(crate) const ROLLUP_EXTENSION: &str = "rollup";

pub(crate) fn sidecar_path(segment_path: &Path) -> PathBuf {
    segment_path.with_extension(ROLLUP_EXTENSION)
}

/// Rolls up `batches` with `spec`.
pub(crate) fn build(spec: &RollupSpec, batches: &[RecordBatch]) -> Result<Rollup, StoreError> {
    let mut rollup = Rollup::new(spec);
    for batch in batches {
        add(&mut rollup, batch)?;
    }
    rollup.seal();
    Ok(rollup)
}

/// Folds one batch of `requests` rows into `rollup` (sealed by the caller after the last).
pub(crate) fn add(rollup: &mut Rollup, batch: &RecordBatch) -> Result<(), StoreError> {
    rollup
        .add_requests(batch)
        .map(drop)
        .map_err(|e| StoreError::Corrupt {
            what: "requests batch for rollup",
            path: PathBuf::new(),
            reason: e.to_string(),
        })
}

/// Writes the sidecar of `segment` durably (`<id>.rollup.tmp`, fsync, rename, fsync of the
/// directory: `infersight_model::durable`).
/// Answers the sidecar's size and crc32 (kept in the catalog).
pub(crate) fn write_sidecar(
    segment: &SegmentMeta,
    rollup: &Rollup,
) -> Result<(u64, u32), StoreError> {
    let path = sidecar_path(&segment.path);
    let bytes = rollup.encode_sidecar().map_err(StoreError::io(&path))?;
    durable::write_atomic(&path, &bytes)?;
    Ok((bytes.len() as u64, crc32fast::hash(&bytes)))
}

/// `StoreError::Corrupt::what` of a sidecar that is not what was written.
pub(crate) const ROLLUP: &str = "rollup";

/// The cheap check at open: the sidecar the catalog names exists with the recorded size.
pub(crate) fn check_sidecar_size(segment: &SegmentMeta) -> Option<String> {
    let expected = segment.rollup_bytes?;
    let path = sidecar_path(&segment.path);
    match std::fs::metadata(&path) {
        Ok(meta) if meta.len() == expected => None,
        Ok(meta) => Some(format!("{} bytes on disk, {expected} written", meta.len())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            Some("the file is missing".into())
        }
        // not judged: a permission problem is not corruption
        Err(_) => None,
    }
}

/// Reads and decodes the sidecar of `segment`, checking it against its size and checksum when
/// the catalog has them; a mismatch or an undecodable file is `Corrupt` with `what = "rollup"`.
pub(crate) fn read_sidecar(segment: &SegmentMeta) -> Result<Arc<Rollup>, StoreError> {
    let path = sidecar_path(&segment.path);
    let compressed = std::fs::read(&path).map_err(StoreError::io(&path))?;
    decode_sidecar(segment, path, &compressed)
}

/// Decodes the sidecar bytes of `segment` (read from `path`, or fetched from a bucket), checked
/// against their size and checksum when the catalog has them.
pub(crate) fn decode_sidecar(
    segment: &SegmentMeta,
    path: PathBuf,
    compressed: &[u8],
) -> Result<Arc<Rollup>, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: ROLLUP,
        path: path.clone(),
        reason,
    };
    if let Some(expected) = segment.rollup_bytes
        && compressed.len() as u64 != expected
    {
        return Err(corrupt(format!(
            "{} bytes on disk, {expected} written",
            compressed.len()
        )));
    }
    if let Some(expected) = segment.checksum.and_then(|c| c.rollup_crc32)
        && crc32fast::hash(compressed) != expected
    {
        return Err(corrupt("the file does not match its checksum".into()));
    }
    Rollup::decode_sidecar(compressed)
        .map(Arc::new)
        .map_err(|e| corrupt(e.to_string()))
}
