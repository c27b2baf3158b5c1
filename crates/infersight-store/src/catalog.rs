//! The catalog: the list of live Parquet segments and the highest WAL sequence number already in
//! them. It is the single commit point of flush, compaction and retention: a segment exists for
//! readers only once `catalog.json` names it, and WAL records at or below `flushed_wal_seq` are
//! never replayed. It is replaced atomically (write tmp, fsync, rename, fsync dir: `infersight_model::durable`).

use std::path::{Path, PathBuf};

use infersight_model::Table;
use infersight_model::durable;
use serde::{Deserialize, Serialize};

use crate::types::{SegmentMeta, StoreError};

pub(crate) const CATALOG_FILE: &str = "catalog.json";
const CATALOG_FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Catalog {
    /// Every WAL record with a sequence number `<=` this is in a segment.
    pub flushed_wal_seq: u64,
    pub next_segment_id: u64,
    /// Live segments, sorted by (table, hour, id); paths are absolute.
    pub segments: Vec<SegmentMeta>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog {
            flushed_wal_seq: 0,
            next_segment_id: 1,
            segments: Vec::new(),
        }
    }
}

/// On-disk form: segment paths relative to the data directory, so it can be moved.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    version: u32,
    flushed_wal_seq: u64,
    next_segment_id: u64,
    segments: Vec<SegmentMeta>,
}

impl Catalog {
    /// Loads `catalog.json`; a missing file is an empty catalog (new store).
    pub(crate) fn load(data_dir: &Path) -> Result<Catalog, StoreError> {
        let path = data_dir.join(CATALOG_FILE);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Catalog::default()),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let corrupt = |reason: String| StoreError::Corrupt {
            what: "catalog",
            path: path.clone(),
            reason,
        };
        let file: CatalogFile =
            serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
        if file.version != CATALOG_FORMAT_VERSION {
            return Err(corrupt(format!(
                "unsupported catalog version {}",
                file.version
            )));
        }
        let mut segments = file.segments;
        for segment in &mut segments {
            if segment.path.is_absolute() || segment.id >= file.next_segment_id {
                return Err(corrupt(format!(
                    "segment {} has an invalid path or id",
                    segment.id
                )));
            }
            segment.path = data_dir.join(&segment.path);
        }
        let mut catalog = Catalog {
            flushed_wal_seq: file.flushed_wal_seq,
            next_segment_id: file.next_segment_id,
            segments,
        };
        catalog.sort();
        Ok(catalog)
    }

    /// Replaces `catalog.json` atomically and durably.
    pub(crate) fn save(&self, data_dir: &Path) -> Result<(), StoreError> {
        let segments = self
            .segments
            .iter()
            .map(|segment| {
                let relative = segment
                    .path
                    .strip_prefix(data_dir)
                    .map(PathBuf::from)
                    .map_err(|_| StoreError::Corrupt {
                        what: "catalog",
                        path: segment.path.clone(),
                        reason: "segment lies outside the data directory".into(),
                    })?;
                Ok(SegmentMeta {
                    path: relative,
                    ..segment.clone()
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let file = CatalogFile {
            version: CATALOG_FORMAT_VERSION,
            flushed_wal_seq: self.flushed_wal_seq,
            next_segment_id: self.next_segment_id,
            segments,
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| StoreError::Corrupt {
            what: "catalog",
            path: data_dir.join(CATALOG_FILE),
            reason: e.to_string(),
        })?;
        // through `catalog.json.tmp`, fsynced, renamed, directory fsynced
        Ok(durable::write_atomic(&data_dir.join(CATALOG_FILE), &bytes)?)
    }

    pub(crate) fn sort(&mut self) {
        self.segments.sort_by_key(|s| (s.table, s.hour_ns, s.id));
    }

    pub(crate) fn table_segments(&self, table: Table) -> impl Iterator<Item = &SegmentMeta> {
        self.segments.iter().filter(move |s| s.table == table)
    }

    /// Takes the next segment id.
    pub(crate) fn allocate_id(&mut self) -> u64 {
        let id = self.next_segment_id;
        self.next_segment_id += 1;
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_relative_paths_and_loads_them_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let mut catalog = Catalog {
            flushed_wal_seq: 9,
            ..Catalog::default()
        };
        let id = catalog.allocate_id();
        catalog.segments.push(SegmentMeta {
            id,
            table: Table::Logs,
            hour_ns: 0,
            path: dir.path().join("segments/logs/1970010100/1.parquet"),
            location: None,
            rows: 3,
            bytes: 100,
            min_ts_ns: 1,
            max_ts_ns: 2,
            schema_version: 1,
            rollup_bytes: Some(10),
            checksum: None,
            tier: Default::default(),
            org_rows: None,
        });
        catalog.save(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(CATALOG_FILE)).unwrap();
        assert!(
            text.contains("\"segments/logs/1970010100/1.parquet\""),
            "{text}"
        );
        assert_eq!(Catalog::load(dir.path()).unwrap(), catalog);
        assert!(!dir.path().join("catalog.json.tmp").exists());
    }

    #[test]
    fn missing_catalog_is_empty_and_garbage_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Catalog::load(dir.path()).unwrap(), Catalog::default());
        std::fs::write(dir.path().join(CATALOG_FILE), b"{not json").unwrap();
        let err = Catalog::load(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Corrupt {
                    what: "catalog",
                    ..
                }
            ),
            "{err}"
        );
    }
}
