//! Rollup sidecars: written with `requests` segments, equal to a rollup of the rows, kept through
//! reopen, compaction and retention, rebuilt when damaged, removed with their segment.

use std::path::PathBuf;

use infersight_rollup::{Rollup, RollupSpec, Sli, SliQuery, query_rollups};
use infersight_store::{StorageBackend, Store, TimeRange};

use crate::common::{H0, HOUR, open, options, requests};

const MINUTE: i64 = 60_000_000_000;

fn p99_e2e(store: &Store, range: TimeRange) -> (u64, Option<f64>) {
    let parts = store.rollups(range).unwrap();
    let refs: Vec<&Rollup> = parts.iter().map(|p| p.as_ref()).collect();
    let series = query_rollups(
        &refs,
        &SliQuery {
            sli: Sli::parse("e2e").unwrap(),
            quantiles: vec![0.99],
            by: Vec::new(),
            filters: Vec::new(),
            since_ns: range.since_ns,
            until_ns: range.until_ns,
            step_ns: None,
        },
    )
    .unwrap();
    series
        .first()
        .map_or((0, None), |s| (s.points[0].requests, s.points[0].values[0]))
}

fn sidecars(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.join("segments")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rollup") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn times(start: i64, n: i64) -> Vec<i64> {
    (0..n).map(|i| start + i * MINUTE / 4).collect()
}

#[test]
fn memtable_and_sidecars_answer_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&[requests("a", &times(H0, 200))]).unwrap();
    let before = p99_e2e(&store, TimeRange::ALL);
    assert_eq!(before.0, 200);
    // e2e is 100 + i: p99 of 0..200 is value 297 (rank 197)
    let p99 = before.1.unwrap();
    assert!((p99 - 297.0).abs() / 297.0 <= 0.01, "{p99}");
    store.flush().unwrap();
    assert_eq!(sidecars(dir.path()).len(), 1);
    assert_eq!(p99_e2e(&store, TimeRange::ALL), before);
    store.close().unwrap();
    drop(store);
    let reopened = open(dir.path());
    // sidecars are read when rollups are first asked for, not when the store opens
    assert_eq!(reopened.stats().rollups_in_memory, 0);
    assert_eq!(p99_e2e(&reopened, TimeRange::ALL), before);
    assert_eq!(reopened.stats().rollups_in_memory, 1);
    // a range selects whole minutes
    let first_10_min = TimeRange {
        since_ns: Some(H0),
        until_ns: Some(H0 + 10 * MINUTE),
    };
    assert_eq!(p99_e2e(&reopened, first_10_min).0, 40);
}

#[test]
fn compaction_and_retention_keep_sidecars_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.compaction_min_segments = 2;
    opts.retention = Some(std::time::Duration::from_secs(3600));
    let store = Store::open(opts).unwrap();
    for (i, prefix) in ["a", "b", "c"].iter().enumerate() {
        store
            .append(&[requests(prefix, &times(H0 + i as i64 * 5 * MINUTE, 10))])
            .unwrap();
        store.flush().unwrap();
    }
    store
        .append(&[requests("later", &times(H0 + 2 * HOUR, 10))])
        .unwrap();
    store.flush().unwrap();
    assert_eq!(sidecars(dir.path()).len(), 4);
    let all = p99_e2e(&store, TimeRange::ALL);
    assert_eq!(all.0, 40);
    store.compact().unwrap();
    // the replaced segments' sidecars go with their files, after the grace period
    let later = std::time::Instant::now() + store.options().retired_grace;
    assert_eq!(store.remove_retired(later), 3);
    assert_eq!(sidecars(dir.path()).len(), 2);
    assert_eq!(p99_e2e(&store, TimeRange::ALL), all);
    let report = store.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!(report.segments_removed, 1);
    let grace = store.options().retired_grace;
    assert_eq!(store.remove_retired(std::time::Instant::now() + grace), 1);
    assert_eq!(sidecars(dir.path()).len(), 1);
    assert_eq!(p99_e2e(&store, TimeRange::ALL).0, 10);
}

#[test]
fn a_damaged_sidecar_is_rebuilt_and_an_orphan_removed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&[requests("a", &times(H0, 50))]).unwrap();
    store.flush().unwrap();
    let expected = p99_e2e(&store, TimeRange::ALL);
    store.close().unwrap();
    drop(store);
    let sidecar = sidecars(dir.path()).remove(0);
    std::fs::write(&sidecar, b"ISRU garbage").unwrap();
    let orphan = sidecar.with_file_name("00000000000000099999.rollup");
    std::fs::write(&orphan, b"left by a crashed flush").unwrap();
    let store = open(dir.path());
    assert!(!orphan.exists(), "orphan sidecar survived reopen");
    assert_eq!(p99_e2e(&store, TimeRange::ALL), expected);
}

#[test]
fn rollups_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.rollup = None;
    let store = Store::open(opts).unwrap();
    store.append(&[requests("a", &times(H0, 5))]).unwrap();
    store.flush().unwrap();
    assert!(sidecars(dir.path()).is_empty());
    let err = store.rollups(TimeRange::ALL).unwrap_err();
    assert!(err.to_string().contains("disabled"), "{err}");
    // the default spec keeps the dimensions the API documents
    assert!(
        RollupSpec::default()
            .dimensions
            .contains(&"model_version".to_string())
    );
}
