//! Corruption: a damaged WAL record, segment data page, segment footer or rollup sidecar is
//! detected, the file set aside in `<data>/quarantine/` and counted, and the store opens and
//! serves every other row. Each case damages bytes of a different region of the same kind of
//! store, so the checks are shown to cover the region, not one offset.

use std::path::{Path, PathBuf};

use infersight_model::Table;
use infersight_store::{StorageBackend, Store};

use crate::common::*;

fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x5a;
    std::fs::write(path, &bytes).unwrap();
}

/// A store with two flushed `requests` segments, one per hour: "a" (120 rows) and "b" (80 rows);
/// answers the segment of "a".
fn two_segments(dir: &Path) -> PathBuf {
    let store = open(dir);
    let a: Vec<i64> = (0..120).map(|i| H0 + i * 1_000_000_000).collect();
    let b: Vec<i64> = (0..80).map(|i| H0 + HOUR + i * 1_000_000_000).collect();
    store.append(&[requests("a", &a)]).unwrap();
    store.append(&[requests("b", &b)]).unwrap();
    store.flush().unwrap();
    let segments = store.segments(Table::Requests);
    assert_eq!(segments.len(), 2);
    store.close().unwrap();
    segments[0].path.clone()
}

#[test]
fn a_damaged_wal_record_in_the_middle_is_skipped_and_the_records_after_it_replayed() {
    for damage in ["payload", "header"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = open(dir.path());
            for prefix in ["a", "b", "c", "d"] {
                store.append(&[requests(prefix, &[H0, H0 + 1])]).unwrap();
            }
            // crash: every record is only in the wal
        }
        let wal = last_non_empty_wal(dir.path());
        let bytes = std::fs::read(&wal).unwrap();
        let frame_len = bytes.len() / 4; // four records of the same size
        let at = match damage {
            "payload" => frame_len + frame_len / 2, // inside record 2's payload
            _ => frame_len + 5,                     // record 2's length field
        };
        flip(&wal, at);
        let store = open(dir.path());
        let expected = sorted([ids("a", 2), ids("c", 2), ids("d", 2)].concat());
        assert_eq!(visible_ids(&store, Table::Requests), expected, "{damage}");
        let stats = store.stats().quarantine;
        assert_eq!(
            (stats.wal_files, stats.wal_regions_dropped),
            (1, 1),
            "{damage}"
        );
        let quarantined = files_under(&dir.path().join("quarantine"), "wal");
        assert_eq!(quarantined.len(), 1, "{damage}");
        assert_eq!(std::fs::read(&quarantined[0]).unwrap().len(), bytes.len());
        // appends go on, and the next open finds a clean log with the same rows
        store.append(&[requests("e", &[H0 + 2])]).unwrap();
        drop(store);
        let store = open(dir.path());
        let expected = sorted([expected, ids("e", 1)].concat());
        assert_eq!(visible_ids(&store, Table::Requests), expected, "{damage}");
        assert_eq!(
            store.stats().quarantine.wal_files,
            0,
            "{damage}: damage found twice"
        );
    }
}

#[test]
fn a_damaged_segment_data_page_is_found_by_verification_and_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let segment = two_segments(dir.path());
    let len = std::fs::metadata(&segment).unwrap().len() as usize;
    // a byte of the first column chunk's data, well before the footer
    flip(&segment, len / 4);
    let store = open(dir.path());
    let report = store.verify_segments().unwrap();
    assert_eq!(
        (report.segments_checked, report.segments_quarantined),
        (2, 1)
    );
    assert_eq!(visible_ids(&store, Table::Requests), sorted(ids("b", 80)));
    assert_eq!(store.stats().quarantine.segments, 1);
    let moved = dir.path().join("quarantine").join(
        segment
            .strip_prefix(dir.path().canonicalize().unwrap())
            .unwrap(),
    );
    assert!(moved.exists(), "{moved:?} not in quarantine");
    assert!(!segment.exists());
    // the catalog no longer names it: a reopen is clean
    drop(store);
    let store = open(dir.path());
    assert_eq!(store.verify_segments().unwrap().segments_quarantined, 0);
    assert_eq!(visible_ids(&store, Table::Requests), sorted(ids("b", 80)));
}

#[test]
fn a_segment_damaged_while_the_store_runs_is_found_by_the_scheduled_scrub() {
    for every in [Some(std::time::Duration::from_millis(200)), None] {
        let dir = tempfile::tempdir().unwrap();
        let segment = two_segments(dir.path());
        let mut opts = options(dir.path());
        opts.verify_interval = every;
        let store = std::sync::Arc::new(Store::open(opts).unwrap());
        let maintenance = store.spawn_maintenance(std::time::Duration::from_millis(20));
        // the scrub after the first pass has read both segments whole by now
        std::thread::sleep(std::time::Duration::from_millis(800));
        assert_eq!(store.stats().quarantine.segments, 0, "{every:?}");
        let len = std::fs::metadata(&segment).unwrap().len() as usize;
        flip(&segment, len / 4);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while store.stats().quarantine.segments == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        maintenance.stop();
        match every {
            Some(_) => {
                assert_eq!(store.stats().quarantine.segments, 1);
                assert!(!segment.exists());
                assert_eq!(visible_ids(&store, Table::Requests), sorted(ids("b", 80)));
            }
            // once after start only: the damage waits for a read, here the next explicit scrub
            None => {
                assert_eq!(store.stats().quarantine.segments, 0);
                assert_eq!(store.verify_segments().unwrap().segments_quarantined, 1);
            }
        }
    }
}

/// A store of four `requests` segments, one per hour, the last one read by a scrub (the
/// highest id) damaged in its data; answers the bytes a scrub reads before it.
fn damaged_last(dir: &Path) -> u64 {
    let store = open(dir);
    for hour in 0..4 {
        let ts: Vec<i64> = (0..150).map(|i| H0 + hour * HOUR + i * 1_000_000).collect();
        store
            .append(&[requests(&format!("h{hour}-"), &ts)])
            .unwrap();
        store.flush().unwrap();
    }
    let mut segments = store.segments(Table::Requests);
    store.close().unwrap();
    segments.sort_by_key(|s| s.id);
    let last = segments.pop().unwrap();
    let len = std::fs::metadata(&last.path).unwrap().len() as usize;
    flip(&last.path, len / 4);
    (segments.iter())
        .map(|s| s.bytes + s.rollup_bytes.unwrap_or(0))
        .sum()
}

/// How long the scheduled scrub of a [`damaged_last`] store at `rate` (bytes/s of the bytes
/// before the damage) took to quarantine it, from the maintenance threads' start.
fn scrub_finds_damage_after(per_sec_of_before: Option<f64>) -> std::time::Duration {
    let dir = tempfile::tempdir().unwrap();
    let before = damaged_last(dir.path());
    let mut opts = options(dir.path());
    opts.verify_bytes_per_sec = per_sec_of_before.map(|share| (before as f64 * share) as u64);
    let store = std::sync::Arc::new(Store::open(opts).unwrap());
    let started = std::time::Instant::now();
    let maintenance = store.spawn_maintenance(std::time::Duration::from_millis(20));
    while store.stats().quarantine.segments == 0
        && started.elapsed() < std::time::Duration::from_secs(10)
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let found_after = started.elapsed();
    maintenance.stop();
    assert_eq!(
        store.stats().quarantine.segments,
        1,
        "{per_sec_of_before:?}"
    );
    found_after
}

#[test]
fn the_scheduled_scrub_reads_no_faster_than_its_rate_and_stops_between_slices() {
    use std::time::{Duration, Instant};
    // paced at two thirds of the bytes before the damage per second, it is reached after
    // 1.5 s; unpaced (every core, in one go), at once
    let paced = scrub_finds_damage_after(Some(2.0 / 3.0));
    assert!(paced >= Duration::from_millis(1200), "{paced:?}");
    let unpaced = scrub_finds_damage_after(None);
    assert!(unpaced < Duration::from_millis(1200), "{unpaced:?}");
    // a scrub that would take a minute does not hold a stop back: it stops between slices
    let dir = tempfile::tempdir().unwrap();
    let before = damaged_last(dir.path());
    let mut opts = options(dir.path());
    opts.verify_bytes_per_sec = Some(before / 60);
    let store = std::sync::Arc::new(Store::open(opts).unwrap());
    let maintenance = store.spawn_maintenance(Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    maintenance.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopping.elapsed()
    );
    assert_eq!(store.stats().quarantine.segments, 0);
}

#[test]
fn a_damaged_segment_is_quarantined_when_compaction_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.compaction_min_segments = 2;
    opts.retired_grace = std::time::Duration::ZERO;
    let (first, kept) = {
        let store = Store::open(opts.clone()).unwrap();
        for (i, prefix) in ["a", "b", "c"].iter().enumerate() {
            store
                .append(&[requests(
                    prefix,
                    &[H0 + i as i64 * 10, H0 + i as i64 * 10 + 1],
                )])
                .unwrap();
            store.flush().unwrap();
        }
        // another hour, compacted on its own
        store.append(&[requests("x", &[H0 + HOUR])]).unwrap();
        store.flush().unwrap();
        store.append(&[requests("y", &[H0 + HOUR + 1])]).unwrap();
        store.flush().unwrap();
        let segments = store.segments(Table::Requests);
        store.close().unwrap();
        (segments[0].path.clone(), segments.len())
    };
    assert_eq!(kept, 5);
    let len = std::fs::metadata(&first).unwrap().len() as usize;
    flip(&first, len / 4);
    let store = Store::open(opts).unwrap();
    let report = store.compact().unwrap();
    // the damaged hour is left as it is, minus the bad segment; the other hour is compacted
    assert_eq!(report.partitions_compacted, 1);
    assert_eq!(store.stats().quarantine.segments, 1);
    let expected = sorted([ids("b", 2), ids("c", 2), ids("x", 1), ids("y", 1)].concat());
    assert_eq!(visible_ids(&store, Table::Requests), expected);
    assert_eq!(store.compact().unwrap().partitions_compacted, 1);
    assert_eq!(visible_ids(&store, Table::Requests), expected);
}

#[test]
fn a_damaged_segment_footer_is_found_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let segment = two_segments(dir.path());
    let len = std::fs::metadata(&segment).unwrap().len() as usize;
    // inside the footer's metadata (the last 8 bytes are its length and the magic)
    flip(&segment, len - 24);
    let store = open(dir.path());
    assert_eq!(store.stats().quarantine.segments, 1);
    assert_eq!(visible_ids(&store, Table::Requests), sorted(ids("b", 80)));
    assert!(!segment.exists());
    assert_eq!(
        files_under(&dir.path().join("quarantine"), "parquet").len(),
        1
    );
    // a truncated file is found the same way
    let other = store.segments(Table::Requests)[0].path.clone();
    drop(store);
    let bytes = std::fs::read(&other).unwrap();
    std::fs::write(&other, &bytes[..bytes.len() / 2]).unwrap();
    let store = open(dir.path());
    assert_eq!(store.stats().quarantine.segments, 1);
    assert!(visible_ids(&store, Table::Requests).is_empty());
}

#[test]
fn a_damaged_sidecar_is_quarantined_and_its_rollup_rebuilt_from_rows() {
    for damage in ["truncated", "flipped"] {
        let dir = tempfile::tempdir().unwrap();
        let segment = two_segments(dir.path());
        let sidecar = segment.with_extension("rollup");
        let expected_requests = {
            let store = open(dir.path());
            let n: u64 = store
                .rollups(infersight_store::TimeRange::ALL)
                .unwrap()
                .iter()
                .map(|r| r.requests())
                .sum();
            store.close().unwrap();
            n
        };
        assert_eq!(expected_requests, 200);
        let bytes = std::fs::read(&sidecar).unwrap();
        match damage {
            "truncated" => std::fs::write(&sidecar, &bytes[..bytes.len() / 2]).unwrap(),
            _ => flip(&sidecar, bytes.len() / 2),
        }
        let store = open(dir.path());
        let rebuilt: u64 = store
            .rollups(infersight_store::TimeRange::ALL)
            .unwrap()
            .iter()
            .map(|r| r.requests())
            .sum();
        assert_eq!(rebuilt, expected_requests, "{damage}");
        assert_eq!(store.stats().quarantine.rollups, 1, "{damage}");
        assert_eq!(store.stats().quarantine.segments, 0, "{damage}");
        assert_eq!(visible_ids(&store, Table::Requests).len(), 200, "{damage}");
        assert_eq!(
            files_under(&dir.path().join("quarantine"), "rollup").len(),
            1,
            "{damage}"
        );
        assert_eq!(store.verify_segments().unwrap().rollups_quarantined, 0);
    }
}
