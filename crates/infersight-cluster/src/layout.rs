//! The bucket's layout, one place for every key the cluster writes:
//!
//! ```text
//! segments/<table>/<YYYYMMDDHH>/<node>-<ulid>.parquet   (+ .rollup sidecar beside it)
//! <cold>/<table>/<YYYYMMDDHH>/<node>-<ulid>.parquet       the cold tier (prefix `cold` unless set)
//! catalog/log/<seq:020>.json                             one commit each, written once (pruned
//!                                                        up to the second newest checkpoint)
//! catalog/checkpoint/<seq:020>.json                      the catalog's state after entry <seq>
//! catalog/self-check/<ulid>                              the startup probe, deleted after it
//! leases/<name>                                          one holder at a time, updated with If-Match
//! ```
//!
//! The same names as the single-node store's data directory (table, UTC hour), so a local store
//! and a bucket hold segments alike; the file name is the cluster-wide segment id instead of a
//! per-process counter.

use chrono::{DateTime, Utc};
use infersight_model::Table;
use object_store::path::Path;

use crate::error::ClusterError;
use crate::ulid::{SegmentId, Ulid};

pub const SEGMENTS_DIR: &str = "segments";
pub const LOG_DIR: &str = "catalog/log";
pub const CHECKPOINT_DIR: &str = "catalog/checkpoint";
pub const SELF_CHECK_DIR: &str = "catalog/self-check";
pub const LEASES_DIR: &str = "leases";
pub const SEGMENT_EXTENSION: &str = "parquet";
pub const SIDECAR_EXTENSION: &str = "rollup";

/// `YYYYMMDDHH` of the UTC hour holding `ts_ns`.
pub fn hour_dir_name(ts_ns: i64) -> String {
    DateTime::<Utc>::from_timestamp_nanos(ts_ns)
        .format("%Y%m%d%H")
        .to_string()
}

/// Where segment `id` of (`table`, the hour holding `hour_ns`) lives in the bucket.
pub fn segment_path(table: Table, hour_ns: i64, id: &SegmentId) -> Path {
    Path::from(format!(
        "{SEGMENTS_DIR}/{}/{}/{id}.{SEGMENT_EXTENSION}",
        table.name(),
        hour_dir_name(hour_ns)
    ))
}

/// Where cold-tier segment `id` of (`table`, the hour holding `hour_ns`) lives in the bucket:
/// the warm layout under `prefix` (checked by [`check_tier_prefix`]) instead of `segments`.
pub fn cold_segment_path(prefix: &str, table: Table, hour_ns: i64, id: &SegmentId) -> Path {
    Path::from(format!(
        "{prefix}/{}/{}/{id}.{SEGMENT_EXTENSION}",
        table.name(),
        hour_dir_name(hour_ns)
    ))
}

/// A cold tier's prefix is one path segment of `[A-Za-z0-9._-]` that is none of the bucket's
/// own directories (`segments`, `catalog`, `leases`).
pub fn check_tier_prefix(prefix: &str) -> Result<(), ClusterError> {
    let reserved = [SEGMENTS_DIR, "catalog", LEASES_DIR].contains(&prefix);
    if reserved || lease_path(prefix).is_err() {
        return Err(ClusterError::Invalid {
            what: "cold tier prefix",
            value: prefix.to_string(),
            reason: "must be one path segment of letters, digits, `.`, `_` and `-`, \
                     other than `segments`, `catalog` and `leases`",
        });
    }
    Ok(())
}

/// The rollup sidecar of the segment at `segment`.
pub fn sidecar_path(segment: &Path) -> Path {
    let text = segment.as_ref();
    let stem = text
        .strip_suffix(&format!(".{SEGMENT_EXTENSION}"))
        .unwrap_or(text);
    Path::from(format!("{stem}.{SIDECAR_EXTENSION}"))
}

pub fn log_entry_path(seq: u64) -> Path {
    Path::from(format!("{LOG_DIR}/{seq:020}.json"))
}

pub fn checkpoint_path(seq: u64) -> Path {
    Path::from(format!("{CHECKPOINT_DIR}/{seq:020}.json"))
}

/// The sequence of a log entry's key, `None` for a key that is not one.
pub fn log_entry_seq(path: &Path) -> Option<u64> {
    checkpoint_seq(path)
}

/// The sequence of a checkpoint's key, `None` for a key that is not one.
pub fn checkpoint_seq(path: &Path) -> Option<u64> {
    let name = path.filename()?;
    let digits = name.strip_suffix(".json")?;
    if digits.len() != 20 {
        return None;
    }
    digits.parse().ok()
}

pub fn self_check_path(probe: Ulid) -> Path {
    Path::from(format!("{SELF_CHECK_DIR}/{probe}"))
}

/// `leases/<name>`; `name` is one path segment of `[A-Za-z0-9._-]`.
pub fn lease_path(name: &str) -> Result<Path, ClusterError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid {
        return Err(ClusterError::Invalid {
            what: "lease name",
            value: name.to_string(),
            reason: "must be 1 to 64 characters of letters, digits, `.`, `_` and `-`",
        });
    }
    Ok(Path::from(format!("{LEASES_DIR}/{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ulid::NodeId;

    #[test]
    fn segment_and_sidecar_paths_follow_the_single_node_layout() {
        let id = SegmentId::from_parts(
            NodeId::new("ingest-1").unwrap(),
            Ulid::from_parts(1_700_000_000_000, 1),
        );
        let hour_ns = 1_700_000_000_000_000_000; // 2023-11-14 22:13:20 UTC
        let path = segment_path(Table::Requests, hour_ns, &id);
        assert_eq!(
            path.as_ref(),
            format!("segments/requests/2023111422/{id}.parquet")
        );
        assert_eq!(
            sidecar_path(&path).as_ref(),
            format!("segments/requests/2023111422/{id}.rollup")
        );
        let cold = cold_segment_path("cold", Table::Requests, hour_ns, &id);
        assert_eq!(
            cold.as_ref(),
            format!("cold/requests/2023111422/{id}.parquet")
        );
        assert_eq!(
            sidecar_path(&cold).as_ref(),
            format!("cold/requests/2023111422/{id}.rollup")
        );
    }

    #[test]
    fn checkpoint_keys_round_trip_and_strangers_are_ignored() {
        assert_eq!(checkpoint_seq(&checkpoint_path(42)), Some(42));
        assert_eq!(
            checkpoint_seq(&Path::from("catalog/checkpoint/42.json")),
            None
        );
        assert_eq!(
            checkpoint_seq(&Path::from("catalog/checkpoint/x.tmp")),
            None
        );
        assert_eq!(
            log_entry_path(7).as_ref(),
            "catalog/log/00000000000000000007.json"
        );
        assert!(lease_path("compact").is_ok());
        assert!(check_tier_prefix("cold").is_ok());
        assert!(check_tier_prefix("archive-2026").is_ok());
        for bad in ["segments", "catalog", "leases", "a/b", "", "..", ".x"] {
            assert!(check_tier_prefix(bad).is_err(), "{bad:?} accepted");
        }
        assert!(lease_path("../x").is_err());
        assert!(lease_path("a/b").is_err());
    }
}
