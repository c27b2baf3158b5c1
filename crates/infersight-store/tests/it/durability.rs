//! Acknowledged data survives restarts exactly once; torn WAL records; the lock (damaged
//! records: `integrity`).

use std::fs::OpenOptions;

use infersight_model::Table;
use infersight_store::{StorageBackend, Store, StoreError};

use crate::common::*;

#[test]
fn appended_rows_are_visible_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let receipt = store
        .append(&[requests("a", &[H0, H0 + 1, H0 + 2]), logs("l", &[H0 + 5])])
        .unwrap();
    assert_eq!(receipt.rows, 4);
    assert_eq!(receipt.wal_seq, 1);
    assert_eq!(visible_ids(&store, Table::Requests), ids("a", 3));
    assert_eq!(visible_ids(&store, Table::Logs), ids("l", 1));
    let second = store.append(&[requests("b", &[H0])]).unwrap();
    assert_eq!(second.wal_seq, 2);

    // an empty append is accepted and changes nothing
    let empty = store.append(&[]).unwrap();
    assert_eq!(empty.rows, 0);
    let stats = store.stats();
    assert_eq!(stats.appends, 2);
    let requests_stats = &stats
        .tables
        .iter()
        .find(|(t, _)| *t == Table::Requests)
        .unwrap()
        .1;
    assert_eq!(requests_stats.memtable_rows, 4);
}

#[test]
fn rows_survive_a_crash_through_wal_replay() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.append(&[requests("a", &[H0, H0 + 1])]).unwrap();
        store
            .append(&[requests("b", &[H0 + 2]), logs("l", &[H0 + 3, H0 + 4])])
            .unwrap();
        // dropped without close: only the WAL has the rows
    }
    let store = open(dir.path());
    assert_eq!(store.segments(Table::Requests).len(), 0);
    let mut expected = ids("a", 2);
    expected.extend(ids("b", 1));
    assert_eq!(
        visible_ids(&store, Table::Requests),
        sorted(expected.clone())
    );
    assert_eq!(visible_ids(&store, Table::Logs), ids("l", 2));
    // sequence numbers continue after the replayed ones
    assert_eq!(store.append(&[requests("c", &[H0])]).unwrap().wal_seq, 3);
    drop(store);
    let store = open(dir.path());
    expected.extend(ids("c", 1));
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
}

#[test]
fn unlogged_rows_are_durable_once_flushed_and_lost_only_before() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        assert_eq!(store.append(&[requests("a", &[H0])]).unwrap().wal_seq, 1);
        let bulk = store
            .append_unlogged(&[requests("b", &[H0 + 1, H0 + 2])])
            .unwrap();
        assert_eq!((bulk.wal_seq, bulk.rows), (2, 2));
        assert_eq!(
            visible_ids(&store, Table::Requests),
            sorted([ids("a", 1), ids("b", 2)].concat())
        );
        assert_eq!(store.flush().unwrap().rows, 3);
        let wal_before = wal_files(dir.path())
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum::<u64>();
        store.append_unlogged(&[requests("c", &[H0 + 3])]).unwrap();
        let wal_after = wal_files(dir.path())
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum::<u64>();
        assert_eq!(
            wal_before, wal_after,
            "an unlogged append writes no wal bytes"
        );
        assert_eq!(
            store.append(&[requests("d", &[H0 + 4])]).unwrap().wal_seq,
            4
        );
        assert_eq!(store.append_unlogged(&[]).unwrap().rows, 0);
        // crash: "a" and "b" are in a segment, "d" in the wal, "c" only in memory
    }
    let store = open(dir.path());
    let expected = sorted([ids("a", 1), ids("b", 2), ids("d", 1)].concat());
    assert_eq!(visible_ids(&store, Table::Requests), expected);
    assert_eq!(store.append(&[requests("e", &[H0])]).unwrap().wal_seq, 5);
    // flushed by close, unlogged rows stay
    store.append_unlogged(&[requests("f", &[H0 + 5])]).unwrap();
    store.close().unwrap();
    drop(store);
    let store = open(dir.path());
    let expected = sorted(
        [
            ids("a", 1),
            ids("b", 2),
            ids("d", 1),
            ids("e", 1),
            ids("f", 1),
        ]
        .concat(),
    );
    assert_eq!(visible_ids(&store, Table::Requests), expected);
    assert!(matches!(
        {
            store.close().unwrap();
            store.append_unlogged(&[requests("g", &[H0])])
        },
        Err(StoreError::Closed)
    ));
}

#[test]
fn rows_survive_close_and_flush_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.append(&[requests("a", &[H0, H0 + 1])]).unwrap();
        let report = store.flush().unwrap();
        assert_eq!(report.rows, 2);
        assert_eq!(report.segments_written, 1);
        assert!(report.wal_files_removed >= 1);
        store
            .append(&[requests("b", &[H0 + 2, H0 + 3, H0 + 4])])
            .unwrap();
        // crash: "b" is only in the WAL, "a" only in a segment
    }
    let mut expected = ids("a", 2);
    expected.extend(ids("b", 3));
    {
        let store = open(dir.path());
        assert_eq!(
            visible_ids(&store, Table::Requests),
            sorted(expected.clone())
        );
        store.close().unwrap();
        assert!(
            wal_files(dir.path()).is_empty(),
            "close leaves no wal behind"
        );
    }
    let store = open(dir.path());
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
    assert_eq!(
        store
            .snapshot(Table::Requests, Default::default())
            .unwrap()
            .memtable
            .len(),
        0
    );
}

#[test]
fn a_wal_file_left_behind_by_a_flush_is_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let backup = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.append(&[requests("a", &[H0, H0 + 1])]).unwrap();
        store.append(&[requests("b", &[H0 + 2])]).unwrap();
        for file in wal_files(dir.path()) {
            std::fs::copy(&file, backup.path().join(file.file_name().unwrap())).unwrap();
        }
        store.flush().unwrap();
        store.append(&[requests("c", &[H0 + 3])]).unwrap();
    }
    // the flush wrote segments and the catalog, then "crashed" before deleting its WAL file
    for file in std::fs::read_dir(backup.path()).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(
            &file,
            dir.path().join("wal").join(file.file_name().unwrap()),
        )
        .unwrap();
    }
    let store = open(dir.path());
    let mut expected = ids("a", 2);
    expected.extend(ids("b", 1));
    expected.extend(ids("c", 1));
    assert_eq!(
        visible_ids(&store, Table::Requests),
        sorted(expected.clone())
    );
    // the stale file is gone, so it cannot be mistaken for live records later either
    for file in std::fs::read_dir(backup.path()).unwrap() {
        let name = file.unwrap().file_name();
        assert!(!dir.path().join("wal").join(name).exists());
    }
    store.flush().unwrap();
    drop(store);
    let store = open(dir.path());
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
}

#[test]
fn a_torn_tail_record_is_dropped_and_earlier_records_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.append(&[requests("a", &[H0])]).unwrap();
        store
            .append(&[requests("b", &[H0 + 1]), logs("l", &[H0 + 1])])
            .unwrap();
        store.append(&[requests("c", &[H0 + 2, H0 + 3])]).unwrap();
    }
    let wal = last_non_empty_wal(dir.path());
    let len = std::fs::metadata(&wal).unwrap().len();
    // cut the last record in its middle, as a crash during write(2) would
    OpenOptions::new()
        .write(true)
        .open(&wal)
        .unwrap()
        .set_len(len - 40)
        .unwrap();
    // an empty file after it (a rotation that was never written to) keeps it the tail
    std::fs::write(dir.path().join("wal").join(format!("{:020}.wal", 999)), b"").unwrap();
    let mut expected = ids("a", 1);
    expected.extend(ids("b", 1));
    {
        let store = open(dir.path());
        assert_eq!(
            visible_ids(&store, Table::Requests),
            sorted(expected.clone())
        );
        assert_eq!(visible_ids(&store, Table::Logs), ids("l", 1));
        // the torn bytes were cut off: new records do not end up behind garbage
        store.append(&[requests("d", &[H0 + 4])]).unwrap();
    }
    let store = open(dir.path());
    expected.extend(ids("d", 1));
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
}

#[test]
fn a_second_open_of_the_same_directory_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    match Store::open(options(dir.path())) {
        Err(err @ StoreError::Locked { .. }) => {
            assert!(err.to_string().contains("locked"), "{err}");
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    store.append(&[requests("a", &[H0])]).unwrap();
    store.close().unwrap();
    // close releases the lock even while the closed store is still around
    let reopened = open(dir.path());
    assert_eq!(visible_ids(&reopened, Table::Requests), ids("a", 1));
    assert!(matches!(
        store.append(&[requests("b", &[H0])]),
        Err(StoreError::Closed)
    ));
    assert!(matches!(store.flush(), Err(StoreError::Closed)));
    assert!(store.close().is_ok(), "close is idempotent");
}
