//! Concurrent appenders share fsyncs, and snapshots stay exact while flushes run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use infersight_model::Table;
use infersight_store::{StorageBackend, Store, TimeRange};

use crate::common::*;

#[test]
fn concurrent_appends_share_fsyncs() {
    const THREADS: usize = 8;
    const APPENDS: usize = 50;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut seqs = Vec::new();
                for append in 0..APPENDS {
                    let prefix = format!("t{thread}-{append}");
                    let receipt = store
                        .append(&[requests(&prefix, &[H0 + append as i64])])
                        .unwrap();
                    seqs.push(receipt.wal_seq);
                }
                seqs
            })
        })
        .collect();
    let mut seqs: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    seqs.sort();
    seqs.dedup();
    assert_eq!(
        seqs.len(),
        THREADS * APPENDS,
        "every append got its own record"
    );

    let mut expected = Vec::new();
    for thread in 0..THREADS {
        for append in 0..APPENDS {
            expected.extend(ids(&format!("t{thread}-{append}"), 1));
        }
    }
    let expected = sorted(expected);
    assert_eq!(visible_ids(&store, Table::Requests), expected);
    let stats = store.stats();
    assert_eq!(stats.appends, (THREADS * APPENDS) as u64);
    assert!(stats.fsyncs >= 1);
    assert!(
        stats.fsyncs < (THREADS * APPENDS) as u64,
        "group commit should share fsyncs: {} fsyncs for {} appends",
        stats.fsyncs,
        THREADS * APPENDS
    );
    drop(store);
    let store = open(dir.path());
    assert_eq!(visible_ids(&store, Table::Requests), expected);
}

/// Rows a snapshot exposes, counted from batch lengths and catalog row counts.
fn visible_rows(store: &Store) -> u64 {
    let snapshot = store.snapshot(Table::Requests, TimeRange::ALL).unwrap();
    let memtable: u64 = snapshot.memtable.iter().map(|b| b.num_rows() as u64).sum();
    let segments: u64 = snapshot.segments.iter().map(|s| s.rows).sum();
    memtable + segments
}

#[test]
fn snapshots_see_every_row_exactly_once_while_flushing() {
    const WRITERS: u64 = 3;
    const APPENDS: u64 = 200;
    const ROWS: u64 = 10;
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.fsync = infersight_store::FsyncPolicy::Never;
    let store = Arc::new(Store::open(options).unwrap());
    let acknowledged = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (store, acknowledged) = (Arc::clone(&store), Arc::clone(&acknowledged));
            std::thread::spawn(move || {
                for append in 0..APPENDS {
                    let ts: Vec<i64> = (0..ROWS as i64).map(|i| H0 + i * HOUR / 4).collect();
                    let batch = [requests(&format!("w{writer}-{append}"), &ts)];
                    // odd writers load in bulk: the flush must wait for their rows the same way
                    if writer % 2 == 1 {
                        store.append_unlogged(&batch).unwrap();
                    } else {
                        store.append(&batch).unwrap();
                    }
                    acknowledged.fetch_add(ROWS, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let flusher = {
        let (store, done) = (Arc::clone(&store), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut flushed = 0;
            while !done.load(Ordering::SeqCst) {
                // let rows pile up so one flush moves far more than the in-flight slack below
                std::thread::sleep(std::time::Duration::from_millis(3));
                flushed += store.flush().unwrap().rows;
            }
            flushed
        })
    };
    let mut checks = 0;
    while acknowledged.load(Ordering::SeqCst) < WRITERS * APPENDS * ROWS {
        let before = acknowledged.load(Ordering::SeqCst);
        let visible = visible_rows(&store);
        let after = acknowledged.load(Ordering::SeqCst);
        // a row may become visible just before its append returns, never twice or not at all
        assert!(
            before <= visible && visible <= after + WRITERS * ROWS,
            "visible {visible} outside [{before}, {after} + in flight]"
        );
        checks += 1;
    }
    for writer in writers {
        writer.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let flushed = flusher.join().unwrap();
    assert!(checks > 0);
    assert!(flushed > 0, "the flusher ran concurrently");
    store.flush().unwrap();
    assert_eq!(visible_rows(&store), WRITERS * APPENDS * ROWS);
    let ids = visible_ids(&store, Table::Requests);
    let mut deduplicated = ids.clone();
    deduplicated.dedup();
    assert_eq!(ids.len(), deduplicated.len());
    assert_eq!(ids.len() as u64, WRITERS * APPENDS * ROWS);
}
