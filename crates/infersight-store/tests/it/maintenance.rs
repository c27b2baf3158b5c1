//! Compaction, retention and the background maintenance thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use infersight_model::Table;
use infersight_store::{CompactionReport, FsyncPolicy, StorageBackend, Store};

use crate::common::*;

#[test]
fn compaction_merges_small_segments_of_an_hour_into_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.compaction_min_segments = 3;
    let store = Store::open(options.clone()).unwrap();
    let mut expected = Vec::new();
    for round in 0..4 {
        let prefix = format!("r{round}");
        // interleaved times, so the merged file must be re-sorted
        let ts: Vec<i64> = (0..5).map(|i| H0 + i * 10 + round).collect();
        store.append(&[requests(&prefix, &ts)]).unwrap();
        store.flush().unwrap();
        expected.extend(ids(&prefix, 5));
    }
    // another hour with one segment: below the threshold, left alone
    store.append(&[requests("other", &[H0 + HOUR])]).unwrap();
    store.flush().unwrap();
    expected.extend(ids("other", 1));
    let before = store.segments(Table::Requests);
    assert_eq!(before.len(), 5);

    let report = store.compact().unwrap();
    assert_eq!(
        report,
        CompactionReport {
            partitions_compacted: 1,
            segments_removed: 4,
            segments_written: 1
        }
    );
    let after = store.segments(Table::Requests);
    assert_eq!(after.len(), 2);
    assert_eq!((after[0].hour_ns, after[0].rows), (H0, 20));
    assert_eq!(after[1], before[4], "the other hour is untouched");
    // the replaced files outlive the catalog change by the grace period: a query planned on
    // the old snapshot still reads them; then maintenance deletes them
    for old in &before[..4] {
        let rows: usize = read_parquet(&old.path).iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows as u64, old.rows, "{}", old.path.display());
    }
    let grace = store.options().retired_grace;
    assert_eq!(store.remove_retired(Instant::now() + grace / 2), 0);
    assert!(before[..4].iter().all(|old| old.path.exists()));
    assert_eq!(store.remove_retired(Instant::now() + grace), 4);
    for old in &before[..4] {
        assert!(!old.path.exists(), "{} was not removed", old.path.display());
    }
    let merged: Vec<i64> = read_parquet(&after[0].path)
        .iter()
        .flat_map(|b| infersight_model::RequestRecord::from_batch(b).unwrap())
        .map(|r| r.ts)
        .collect();
    assert!(merged.is_sorted());
    assert_eq!(
        (merged[0], merged[19]),
        (after[0].min_ts_ns, after[0].max_ts_ns)
    );
    assert_eq!(
        visible_ids(&store, Table::Requests),
        sorted(expected.clone())
    );
    assert_eq!(store.stats().compactions, 1);

    // nothing left to do
    assert_eq!(store.compact().unwrap(), CompactionReport::default());
    drop(store);
    let store = Store::open(options).unwrap();
    assert_eq!(store.segments(Table::Requests), after);
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
}

#[test]
fn large_segments_are_not_compacted() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.compaction_min_segments = 2;
    options.compaction_small_bytes = 1;
    let store = Store::open(options).unwrap();
    for round in 0..3 {
        store
            .append(&[requests(&format!("r{round}"), &[H0])])
            .unwrap();
        store.flush().unwrap();
    }
    assert_eq!(store.compact().unwrap(), CompactionReport::default());
    assert_eq!(store.segments(Table::Requests).len(), 3);
}

#[test]
fn retention_removes_old_hours_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.retention = Some(Duration::from_secs(2 * 3600));
    let store = Store::open(options.clone()).unwrap();
    let ts = [H0 + 1, H0 + HOUR + 1, H0 + 2 * HOUR + 1, H0 + 3 * HOUR + 1];
    store.append(&[requests("r", &ts), logs("l", &ts)]).unwrap();
    store.flush().unwrap();
    let before = store.segments(Table::Requests);
    assert_eq!(before.len(), 4);
    let expired_bytes: u64 = [Table::Requests, Table::Logs]
        .into_iter()
        .flat_map(|table| store.segments(table))
        .filter(|s| s.hour_ns < H0 + 2 * HOUR)
        .map(|s| s.bytes)
        .sum();

    // now = end of hour 3: the cutoff is the start of hour 2, so hours 0 and 1 have ended
    // at least two hours ago; hour 2 ended only one hour ago
    let now = H0 + 4 * HOUR;
    let report = store.apply_retention(now).unwrap();
    assert_eq!(report.segments_removed, 4, "two hours of two tables");
    assert_eq!(report.rows_removed, 4);
    assert_eq!(report.bytes_removed, expired_bytes);
    let hours: Vec<i64> = store
        .segments(Table::Requests)
        .iter()
        .map(|s| s.hour_ns)
        .collect();
    assert_eq!(hours, vec![H0 + 2 * HOUR, H0 + 3 * HOUR]);
    assert!(
        before.iter().all(|s| s.path.exists()),
        "retired, not yet removed"
    );
    // closing removes retired files at once (nothing reads them after close)
    store.close().unwrap();
    drop(store);
    assert!(!before[0].path.exists() && !before[1].path.exists());
    assert!(before[2].path.exists() && before[3].path.exists());
    let store = Store::open(options.clone()).unwrap();
    assert_eq!(visible_ids(&store, Table::Requests), vec!["r-2", "r-3"]);
    assert_eq!(store.apply_retention(now).unwrap().segments_removed, 0);
    drop(store);
    let store = Store::open(options).unwrap();
    assert_eq!(store.segments(Table::Requests).len(), 2);
    assert_eq!(store.segments(Table::Logs).len(), 2);
}

#[test]
fn each_table_expires_after_its_own_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    // logs one hour, requests kept whatever the store-wide two hours say, spans the two hours
    options.retention = Some(Duration::from_secs(2 * 3600));
    options.retention_by_table = [
        (Table::Logs, Some(Duration::from_secs(3600))),
        (Table::Requests, None),
    ]
    .into_iter()
    .collect();
    let store = Store::open(options).unwrap();
    let ts = [H0 + 1, H0 + HOUR + 1, H0 + 2 * HOUR + 1];
    store.append(&[requests("r", &ts), logs("l", &ts)]).unwrap();
    store.flush().unwrap();
    // now = end of hour 2: logs of hours 0 and 1 ended an hour ago or more, requests stay
    let report = store.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!(report.segments_removed, 2, "{report:?}");
    assert_eq!(store.segments(Table::Requests).len(), 3);
    let log_hours: Vec<i64> = (store.segments(Table::Logs).iter())
        .map(|s| s.hour_ns)
        .collect();
    assert_eq!(log_hours, vec![H0 + 2 * HOUR]);
    assert_eq!(
        store
            .apply_retention(i64::MAX / 2)
            .unwrap()
            .segments_removed,
        1
    );
    assert_eq!(
        store.segments(Table::Requests).len(),
        3,
        "requests are kept"
    );
}

#[test]
fn without_retention_nothing_expires() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&[requests("r", &[H0])]).unwrap();
    store.flush().unwrap();
    assert_eq!(store.apply_retention(i64::MAX).unwrap().segments_removed, 0);
    assert_eq!(store.segments(Table::Requests).len(), 1);
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_maintenance_thread_flushes_compacts_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.memtable_max_rows = 1;
    options.compaction_min_segments = 2;
    let store = Arc::new(Store::open(options).unwrap());
    let handle = store.spawn_maintenance(Duration::from_millis(5));
    store.append(&[requests("a", &[H0])]).unwrap();
    wait_until("the first flush", || {
        store.segments(Table::Requests).len() == 1
    });
    store.append(&[requests("b", &[H0 + 1])]).unwrap();
    wait_until("flush and compaction", || {
        let stats = store.stats();
        stats.compactions >= 1 && stats.tables[0].1.memtable_rows == 0
    });
    assert_eq!(store.segments(Table::Requests).len(), 1);
    handle.stop();
    // stopped: new rows stay in the memtable
    store.append(&[requests("c", &[H0 + 2])]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(store.stats().tables[0].1.memtable_rows, 1);
    let mut expected = ids("a", 1);
    expected.extend(ids("b", 1));
    expected.extend(ids("c", 1));
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
}

/// A memtable that reaches its flush size is flushed without waiting for the next tick (an
/// hour here), and one that has not is left for the tick; so is one due only by age.
#[test]
fn the_flusher_flushes_a_full_memtable_before_its_tick() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.memtable_max_rows = 3;
    options.flush_interval = Duration::from_millis(1);
    let store = Arc::new(Store::open(options).unwrap());
    let handle = store.spawn_maintenance(Duration::from_secs(3600));
    store.append(&[requests("a", &[H0, H0 + 1])]).unwrap();
    // two rows: not full, and the age rule waits for the tick
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(store.segments(Table::Requests).len(), 0);
    assert!(!store.flush_size_reached());
    store.append(&[requests("b", &[H0 + 2])]).unwrap();
    wait_until("the flush of a full memtable", || {
        store.segments(Table::Requests).len() == 1
    });
    assert_eq!(store.stats().tables[0].1.memtable_rows, 0);
    handle.stop();
    let mut expected = ids("a", 2);
    expected.extend(ids("b", 1));
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
}

#[test]
fn interval_policy_fsyncs_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.fsync = FsyncPolicy::Interval { interval_ms: 5 };
    let store = Arc::new(Store::open(options).unwrap());
    let handle = store.spawn_maintenance(Duration::from_secs(3600));
    store.append(&[requests("a", &[H0])]).unwrap();
    assert_eq!(store.stats().fsyncs, 0, "append does not wait for an fsync");
    wait_until("the periodic fsync", || store.stats().fsyncs >= 1);
    drop(handle); // dropping the handle stops the thread too
    store.close().unwrap();
}

#[test]
fn the_maintenance_thread_does_not_keep_the_store_alive() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let handle = store.spawn_maintenance(Duration::from_millis(1));
    let weak = Arc::downgrade(&store);
    drop(store);
    wait_until("the store to drop", || weak.upgrade().is_none());
    handle.stop();
    // the lock went with it: the last holder may still be running the store's drop (closing,
    // then unlocking) a moment after the last strong reference is gone
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Store::open(options(dir.path())) {
            Ok(_) => break,
            Err(error) if Instant::now() < deadline => {
                assert!(
                    matches!(error, infersight_store::StoreError::Locked { .. }),
                    "{error}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => panic!("the store stayed locked: {error}"),
        }
    }
}

/// The store's per-org usage holds these rows, and the orgs' bytes split the segments' bytes
/// (each share rounded down, so at most one byte per org and segment is no org's).
fn assert_org_usage(store: &Store, rows: &[(&str, u64)]) {
    let stats = store.stats();
    let counted: Vec<(&str, u64)> = (stats.orgs.iter())
        .map(|(org, usage)| (org.as_str(), usage.rows))
        .collect();
    assert_eq!(counted, rows);
    assert_eq!(stats.unattributed, infersight_store::OrgUsage::default());
    let segment_bytes: u64 = stats.tables.iter().map(|(_, t)| t.segment_bytes).sum();
    let segments: u64 = stats.tables.iter().map(|(_, t)| t.segments).sum();
    let org_bytes: u64 = stats.orgs.values().map(|usage| usage.bytes).sum();
    assert!(
        org_bytes <= segment_bytes && segment_bytes - org_bytes <= segments * rows.len() as u64,
        "{org_bytes} of {segment_bytes}"
    );
    assert!(
        stats.orgs.values().all(|usage| usage.bytes > 0),
        "{stats:?}"
    );
}

/// `batch` with every row stamped as `org`'s.
fn of_org(batch: infersight_model::TableBatch, org: &str) -> infersight_model::TableBatch {
    infersight_model::org::stamp_org(&batch, org).unwrap()
}

/// Per-org retention on local segments: an org's rows past its own retention leave every
/// table, the other orgs' rows of the same segments stay (rows, rollups, after a reopen), a
/// segment of only its rows goes, the deletion is reported once, and a second pass reads
/// nothing (the segments' org counts say they hold none of its rows).
#[test]
fn an_orgs_rows_past_its_own_retention_leave_and_the_other_orgs_stay() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options
        .retention_by_org
        .insert("acme".into(), Duration::from_secs(2 * 3600));
    let deletions = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&deletions);
    options.on_delete = Some(infersight_store::DeleteObserver(Arc::new(
        move |d: &infersight_store::DataDeleted| {
            seen.lock()
                .unwrap()
                .push((d.what, d.tables.clone(), d.rows));
        },
    )));
    let store = Store::open(options.clone()).unwrap();
    let ts = |hour: i64, n: i64| -> Vec<i64> { (0..n).map(|i| H0 + hour * HOUR + i).collect() };
    store
        .append(&[
            of_org(requests("acme0", &ts(0, 5)), "acme"),
            of_org(requests("globex0", &ts(0, 4)), "globex"),
            requests("default0", &ts(0, 3)),
            of_org(requests("acme3", &ts(3, 2)), "acme"),
            of_org(logs("acmelog0", &ts(0, 6)), "acme"),
        ])
        .unwrap();
    store.flush().unwrap();
    let h0 = store
        .segments(Table::Requests)
        .into_iter()
        .find(|s| s.hour_ns == H0)
        .unwrap();
    let counted: Vec<(String, u64)> = h0.org_rows.clone().unwrap().into_iter().collect();
    assert_eq!(
        counted,
        [
            ("acme".into(), 5),
            ("default".into(), 3),
            ("globex".into(), 4)
        ]
    );
    assert_eq!(rolled_up(&store), 14);
    assert_org_usage(&store, &[("acme", 13), ("default", 3), ("globex", 4)]);

    // an hour after H0 ended: within acme's two hours
    let report = store.apply_retention(H0 + 2 * HOUR).unwrap();
    assert_eq!(report, infersight_store::RetentionReport::default());
    // two hours after: acme's H0 rows go, from requests (rewritten) and logs (removed)
    let report = store.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!(
        (
            report.segments_rewritten,
            report.segments_removed,
            report.rows_removed
        ),
        (1, 1, 11),
        "{report:?}"
    );
    let kept = sorted([ids("globex0", 4), ids("default0", 3), ids("acme3", 2)].concat());
    assert_eq!(visible_ids(&store, Table::Requests), kept);
    assert!(visible_ids(&store, Table::Logs).is_empty());
    assert_org_usage(&store, &[("acme", 2), ("default", 3), ("globex", 4)]);
    assert_eq!(
        rolled_up(&store),
        9,
        "the rewritten segment's rollup counts the rest"
    );
    assert_eq!(
        *deletions.lock().unwrap(),
        vec![("retention", vec![Table::Requests, Table::Logs], 11)]
    );
    // nothing left to do: the org counts say so without reading a segment
    let again = store.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!(again, infersight_store::RetentionReport::default());
    store.close().unwrap();
    drop(store);
    let reopened = Store::open(options).unwrap();
    assert_eq!(visible_ids(&reopened, Table::Requests), kept);
    assert_eq!(rolled_up(&reopened), 9);
}
