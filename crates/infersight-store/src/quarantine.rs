//! Quarantine: where the store puts files it finds corrupt, so the rest of it opens and serves.
//! A segment or rollup sidecar that fails its checksum (or cannot be read) is moved to
//! `<data>/quarantine/<its path relative to the data directory>` and dropped from the catalog; a
//! WAL file with unreadable records is copied there before it is rewritten with the records that
//! could be read. Each is logged once at `error` with its path and the reason, and counted
//! ([`QuarantineCounters`], shown as `infersight_store_quarantined_total` on `/metrics`), so a
//! loss is never silent and an operator can inspect or salvage the original bytes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fsutil::{sync_dir, sync_dir_best_effort};
use crate::types::{QuarantineStats, StoreError};

pub(crate) const QUARANTINE_DIR: &str = "quarantine";

/// What was quarantined since the store opened.
#[derive(Debug, Default)]
pub(crate) struct QuarantineCounters {
    segments: AtomicU64,
    rollups: AtomicU64,
    wal_files: AtomicU64,
    wal_regions_dropped: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Segment,
    Rollup,
    Wal,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Segment => "segment",
            Kind::Rollup => "rollup sidecar",
            Kind::Wal => "wal file",
        }
    }
}

impl QuarantineCounters {
    pub(crate) fn count(&self, kind: Kind) {
        let counter = match kind {
            Kind::Segment => &self.segments,
            Kind::Rollup => &self.rollups,
            Kind::Wal => &self.wal_files,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_wal_regions(&self, regions: u64) {
        self.wal_regions_dropped
            .fetch_add(regions, Ordering::Relaxed);
    }

    pub(crate) fn stats(&self) -> QuarantineStats {
        QuarantineStats {
            segments: self.segments.load(Ordering::Relaxed),
            rollups: self.rollups.load(Ordering::Relaxed),
            wal_files: self.wal_files.load(Ordering::Relaxed),
            wal_regions_dropped: self.wal_regions_dropped.load(Ordering::Relaxed),
        }
    }
}

/// `<data>/quarantine/<relative path>`, with `.1`, `.2`, ... appended when that name is taken
/// (the same WAL file quarantined twice, a segment id reused after a rebuilt catalog).
fn destination(data_dir: &Path, path: &Path) -> Result<PathBuf, StoreError> {
    let relative = path
        .strip_prefix(data_dir)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from(path.file_name().unwrap_or(path.as_os_str())));
    let base = data_dir.join(QUARANTINE_DIR).join(relative);
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent).map_err(StoreError::io(parent))?;
    }
    let mut candidate = base.clone();
    let mut n = 0u32;
    while candidate.exists() {
        n += 1;
        let mut name = base.as_os_str().to_os_string();
        name.push(format!(".{n}"));
        candidate = PathBuf::from(name);
    }
    Ok(candidate)
}

fn sync_parents(from: &Path, to: &Path) -> Result<(), StoreError> {
    if let Some(dir) = to.parent() {
        sync_dir(dir)?;
    }
    if let Some(dir) = from.parent() {
        sync_dir_best_effort(dir);
    }
    Ok(())
}

/// Moves `path` into quarantine and logs why. `Ok(None)` when the file is already gone (the
/// loss is logged all the same).
pub(crate) fn move_file(
    data_dir: &Path,
    path: &Path,
    kind: Kind,
    reason: &str,
) -> Result<Option<PathBuf>, StoreError> {
    if !path.exists() {
        tracing::error!(
            path = %path.display(),
            reason,
            "{} is missing; dropped from the store",
            kind.name()
        );
        return Ok(None);
    }
    let to = destination(data_dir, path)?;
    std::fs::rename(path, &to).map_err(StoreError::io(path))?;
    sync_parents(path, &to)?;
    tracing::error!(
        path = %path.display(),
        quarantined_to = %to.display(),
        reason,
        "corrupt {} moved to quarantine",
        kind.name()
    );
    Ok(Some(to))
}

/// Puts a copy of `path` in quarantine (a hard link where the file system has them) and logs why;
/// the file itself stays, for the caller to rewrite.
pub(crate) fn copy_file(
    data_dir: &Path,
    path: &Path,
    kind: Kind,
    reason: &str,
) -> Result<PathBuf, StoreError> {
    let to = destination(data_dir, path)?;
    if std::fs::hard_link(path, &to).is_err() {
        std::fs::copy(path, &to).map_err(StoreError::io(path))?;
    }
    sync_parents(path, &to)?;
    tracing::error!(
        path = %path.display(),
        quarantined_to = %to.display(),
        reason,
        "corrupt {} copied to quarantine",
        kind.name()
    );
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_keep_their_relative_path_and_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        let file = data.join("segments/logs/1970010100/1.parquet");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, b"one").unwrap();
        let to = move_file(data, &file, Kind::Segment, "test")
            .unwrap()
            .unwrap();
        assert_eq!(
            to,
            data.join("quarantine/segments/logs/1970010100/1.parquet")
        );
        assert!(!file.exists());
        std::fs::write(&file, b"two").unwrap();
        let copied = copy_file(data, &file, Kind::Wal, "test").unwrap();
        assert_eq!(copied.file_name().unwrap(), "1.parquet.1");
        assert_eq!(std::fs::read(&copied).unwrap(), b"two");
        assert_eq!(std::fs::read(&to).unwrap(), b"one");
        assert!(file.exists());
        assert_eq!(
            move_file(data, &data.join("gone"), Kind::Rollup, "x").unwrap(),
            None
        );
    }
}
