//! Small durable-filesystem helpers shared by the WAL, the segment writer and the catalog. Every
//! file the store publishes (catalog, segments, rollup sidecars) goes through
//! `infersight_model::durable`: written, fsynced, renamed into place, and its directory fsynced.

use std::path::Path;

use crate::types::StoreError;

/// fsyncs a directory so that file creations, renames and deletions in it survive power loss.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    Ok(infersight_model::durable::sync_dir(dir)?)
}

/// Like [`sync_dir`], for cleanup paths where a failure only costs durability of a deletion.
pub(crate) fn sync_dir_best_effort(dir: &Path) {
    if let Err(err) = sync_dir(dir) {
        tracing::warn!(%err, "fsync of directory failed");
    }
}

/// Removes a file; a file that is already gone counts as removed.
pub(crate) fn remove_file_if_exists(path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(StoreError::Io {
            path: path.to_path_buf(),
            source: err,
        }),
    }
}
