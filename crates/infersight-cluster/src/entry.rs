//! What the catalog log says: one [`LogEntry`] per commit (segments added and removed, each node's
//! flushed WAL sequence), the [`CatalogState`] they fold into, and the checks a commit must pass
//! against that state before it is written. Replay is `apply` over the entries in sequence order.

use std::collections::{BTreeMap, BTreeSet};

use infersight_model::Table;
use serde::{Deserialize, Serialize};

use crate::error::ClusterError;
use crate::ulid::{NodeId, SegmentId};

/// The format of log entries and checkpoints this build writes; a reader refuses newer ones
/// rather than silently dropping what it does not know.
pub const FORMAT_VERSION: u32 = 1;

/// One segment in the bucket, as the catalog knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentMeta {
    pub id: SegmentId,
    /// The canonical table's name (`requests`, `spans`, ...).
    pub table: String,
    /// The segment's key in the bucket (`layout::segment_path`).
    pub path: String,
    /// The rollup sidecar's key, for tables that have one.
    pub sidecar: Option<String>,
    pub rows: u64,
    pub bytes: u64,
    pub min_ts_ns: i64,
    pub max_ts_ns: i64,
    /// What the bytes must hash to, taken while the segment was written (entries written before
    /// the store recorded them have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<SegmentChecksum>,
    /// The canonical schema version of the rows (absent: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<u32>,
    /// The storage tier the segment is in (absent: warm, as flushed and compacted).
    #[serde(default, skip_serializing_if = "Tier::is_warm")]
    pub tier: Tier,
    /// Rows per org (the stamped `org` column; null counts as `default`), taken while the
    /// segment was written; absent for segments written before the store counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org_rows: Option<BTreeMap<String, u64>>,
}

/// Where a segment in the bucket stands in its life: `warm` as ingest nodes flushed it and the
/// compactor merged it (under `segments/`), `cold` once the compactor rewrote its (table, hour)
/// with large row groups under the cold prefix (`layout::cold_segment_path`) after the warm
/// tier's age. The hot tier (memtable, local files) is never in the catalog.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    #[default]
    Warm,
    Cold,
}

impl Tier {
    pub fn is_warm(&self) -> bool {
        *self == Tier::Warm
    }

    pub fn name(self) -> &'static str {
        match self {
            Tier::Warm => "warm",
            Tier::Cold => "cold",
        }
    }
}

/// crc32s of a segment and its sidecar, as the single-node store keeps them (arrow-rs writes no
/// Parquet page CRCs): the footer's can be checked with one ranged read, the whole file's on a
/// full read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentChecksum {
    pub file_crc32: u32,
    /// The Parquet footer is the file's last `footer_bytes` bytes.
    pub footer_bytes: u32,
    pub footer_crc32: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_crc32: Option<u32>,
}

/// One change a commit makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Action {
    AddSegment {
        segment: SegmentMeta,
    },
    RemoveSegment {
        id: SegmentId,
    },
    /// Every WAL record of `node` up to `wal_seq` is in committed segments: on restart the node
    /// replays only what comes after it.
    FlushedWal {
        node: NodeId,
        wal_seq: u64,
    },
}

/// A commit made while holding lease `lease` at `epoch`: once a later epoch of the same lease has
/// committed, an older holder's commits are refused (a paused compactor that lost its lease cannot
/// undo its successor's work).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub lease: String,
    pub epoch: u64,
}

/// `catalog/log/<seq>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    pub version: u32,
    pub seq: u64,
    /// Unique per commit call: a committer whose write landed but whose answer was lost finds its
    /// own entry on re-reading the log instead of committing twice.
    pub commit_id: String,
    pub node: NodeId,
    pub committed_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
    pub actions: Vec<Action>,
}

/// The catalog after applying entries `1..=seq` (`seq` 0: empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogState {
    pub seq: u64,
    pub segments: BTreeMap<SegmentId, SegmentMeta>,
    pub flushed_wal: BTreeMap<NodeId, u64>,
    /// The highest lease epoch that has committed, per lease name.
    pub fences: BTreeMap<String, u64>,
}

/// `catalog/checkpoint/<seq>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub version: u32,
    pub state: CatalogState,
}

impl CatalogState {
    /// Whether `actions` (under `fence`) may be committed on top of this state, read in order.
    pub fn check(&self, actions: &[Action], fence: Option<&Fence>) -> Result<(), ClusterError> {
        if let Some(fence) = fence {
            let committed = self.fences.get(&fence.lease).copied().unwrap_or(0);
            if fence.epoch < committed {
                return Err(ClusterError::Conflict(format!(
                    "lease `{}` epoch {} is fenced off: epoch {committed} has committed since",
                    fence.lease, fence.epoch
                )));
            }
        }
        let mut added = BTreeSet::new();
        let mut removed = BTreeSet::new();
        for action in actions {
            match action {
                Action::AddSegment { segment } => {
                    Table::from_name(&segment.table).map_err(|_| ClusterError::Invalid {
                        what: "table",
                        value: segment.table.clone(),
                        reason: "not a canonical table",
                    })?;
                    let present = (self.segments.contains_key(&segment.id)
                        && !removed.contains(&segment.id))
                        || added.contains(&segment.id);
                    if present {
                        return Err(ClusterError::Conflict(format!(
                            "segment `{}` is already in the catalog",
                            segment.id
                        )));
                    }
                    removed.remove(&segment.id);
                    added.insert(segment.id.clone());
                }
                Action::RemoveSegment { id } => {
                    let present = (self.segments.contains_key(id) && !removed.contains(id))
                        || added.contains(id);
                    if !present {
                        return Err(ClusterError::Conflict(format!(
                            "segment `{id}` is not in the catalog"
                        )));
                    }
                    added.remove(id);
                    removed.insert(id.clone());
                }
                Action::FlushedWal { node, wal_seq } => {
                    let flushed = self.flushed_wal.get(node).copied().unwrap_or(0);
                    if *wal_seq < flushed {
                        return Err(ClusterError::Conflict(format!(
                            "node `{node}` flushed WAL sequence {wal_seq} is behind the committed {flushed}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Folds entry `self.seq + 1` in (entries were checked when written).
    pub fn apply(&mut self, entry: &LogEntry) {
        debug_assert_eq!(entry.seq, self.seq + 1, "entries apply in sequence");
        for action in &entry.actions {
            match action {
                Action::AddSegment { segment } => {
                    self.segments.insert(segment.id.clone(), segment.clone());
                }
                Action::RemoveSegment { id } => {
                    self.segments.remove(id);
                }
                Action::FlushedWal { node, wal_seq } => {
                    let flushed = self.flushed_wal.entry(node.clone()).or_insert(0);
                    *flushed = (*flushed).max(*wal_seq);
                }
            }
        }
        if let Some(fence) = &entry.fence {
            let epoch = self.fences.entry(fence.lease.clone()).or_insert(0);
            *epoch = (*epoch).max(fence.epoch);
        }
        self.seq = entry.seq;
    }

    /// The segments of `table`, in id order.
    pub fn segments_of(&self, table: Table) -> impl Iterator<Item = &SegmentMeta> {
        self.segments
            .values()
            .filter(move |segment| segment.table == table.name())
    }
}
