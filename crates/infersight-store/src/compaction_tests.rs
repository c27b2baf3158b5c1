//! Compaction beside flushes (module `store`): the merges of a local compaction hold no lock, so
//! a flush, or a retention pass that removes an input, can land between its plan and its commit.
//! Each interleaving is driven step by step here (plan, then the other change, then merge and
//! commit), and the maintenance threads are shown to flush while a compaction runs.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use infersight_model::{RequestRecord, Table, TableBatch};

use super::*;
use crate::types::{FsyncPolicy, StorageBackend, StoreOptions};

/// Start of a UTC hour: 2023-11-14T22:00:00Z.
const H0: i64 = 1_699_999_200_000_000_000;
const HOUR: i64 = 3_600_000_000_000;

type Hook = Box<dyn FnMut(&Store)>;

thread_local! {
    /// Run by `merge_partition` (on the compacting thread) before it reads a partition.
    static DURING_MERGE: RefCell<Option<Hook>> = RefCell::new(None);
}

/// Called by `Store::merge_partition` in tests: runs this thread's hook, if any.
pub(super) fn during_merge(store: &Store) {
    let hook = DURING_MERGE.with(|h| h.borrow_mut().take());
    if let Some(mut hook) = hook {
        hook(store);
        DURING_MERGE.with(|h| *h.borrow_mut() = Some(hook));
    }
}

/// [`Store::compact`] with `hook` run before each partition's merge.
fn compact_with(store: &Store, hook: impl FnMut(&Store) + 'static) -> CompactionReport {
    DURING_MERGE.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
    let report = store.compact();
    DURING_MERGE.with(|h| *h.borrow_mut() = None);
    report.unwrap()
}

fn requests(prefix: &str, n: usize) -> TableBatch {
    let records: Vec<RequestRecord> = (0..n)
        .map(|i| RequestRecord {
            ts: H0 + i as i64 * 1_000,
            request_id: Some(format!("{prefix}-{i}")),
            e2e_ms: Some(i as f64),
            ..Default::default()
        })
        .collect();
    TableBatch {
        table: Table::Requests,
        batch: RequestRecord::to_batch(&records),
    }
}

fn store_with_segments(dir: &std::path::Path, segments: usize) -> Store {
    let mut options = StoreOptions::new(dir);
    options.fsync = FsyncPolicy::Always;
    options.compaction_min_segments = 2;
    let store = Store::open(options).unwrap();
    for s in 0..segments {
        store.append(&[requests(&format!("s{s}"), 10)]).unwrap();
        store.flush().unwrap();
    }
    store
}

fn rows_listed(store: &Store) -> u64 {
    store.segments(Table::Requests).iter().map(|s| s.rows).sum()
}

/// Merges the one planned partition and commits it.
fn merge_and_commit(store: &Store, id: u64, group: Vec<SegmentMeta>) -> CompactionReport {
    let Merged::Written(meta, rollup) = store.merge_partition(id, &group).unwrap() else {
        panic!("an input was found corrupt");
    };
    let merged = MergedPartition {
        meta,
        rollup,
        inputs: group,
    };
    store.commit_compaction(vec![merged], &[]).unwrap()
}

#[test]
fn a_flush_between_plan_and_commit_is_kept_and_takes_another_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path(), 3);
    let mut plan = store.plan_compaction();
    assert_eq!(plan.len(), 1, "one partition of three segments");
    let (id, group) = plan.remove(0);
    // the flush a long merge no longer holds back
    store.append(&[requests("late", 7)]).unwrap();
    store.flush().unwrap();
    let late = store
        .segments(Table::Requests)
        .into_iter()
        .find(|s| s.rows == 7)
        .expect("the late flush is listed");
    assert_ne!(late.id, id, "the flush reused the id the compaction holds");

    let report = merge_and_commit(&store, id, group);
    assert_eq!(report.partitions_compacted, 1);
    assert_eq!(report.segments_removed, 3);
    let listed = store.segments(Table::Requests);
    let ids: Vec<u64> = listed.iter().map(|s| s.id).collect();
    assert_eq!(listed.len(), 2, "{ids:?}");
    assert!(ids.contains(&id) && ids.contains(&late.id), "{ids:?}");
    assert_eq!(rows_listed(&store), 37);
    let options = store.options().clone();
    store.close().unwrap();
    drop(store);
    let store = Store::open(options).unwrap();
    assert_eq!(rows_listed(&store), 37, "after reopening");
}

#[test]
fn a_partition_whose_input_left_during_the_merge_is_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path(), 3);
    let (id, group) = store.plan_compaction().remove(0);
    // retention (or a quarantine) drops an input while the merge runs
    let dropped = group[1].id;
    {
        let _maintenance = store.maintenance.lock();
        let mut catalog = store.state.lock().catalog.clone();
        catalog.segments.retain(|s| s.id != dropped);
        store
            .commit_replacement(catalog, &HashSet::new(), &[], Vec::new())
            .unwrap();
    }
    let report = merge_and_commit(&store, id, group);
    assert_eq!(report, CompactionReport::default());
    let listed = store.segments(Table::Requests);
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|s| s.id != id && s.id != dropped));
    assert_eq!(rows_listed(&store), 20, "the dropped rows came back");
    let merged = segment::segment_path(dir.path(), Table::Requests, H0, id);
    assert!(
        !merged.exists(),
        "merged file left behind: {}",
        merged.display()
    );
    assert!(!rollups::sidecar_path(&merged).exists());
}

#[test]
fn the_flusher_flushes_while_a_compaction_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = StoreOptions::new(dir.path());
    options.fsync = FsyncPolicy::Always;
    options.memtable_max_rows = 5;
    let store = Arc::new(Store::open(options).unwrap());
    // a compaction that does not end until the test lets it: the upkeep thread waits here
    let compaction = store.compacting.lock();
    let handle = store.spawn_maintenance(Duration::from_millis(5));
    // by now every thread has made its first pass: a thread that compacts is waiting
    std::thread::sleep(Duration::from_millis(200));
    store.append(&[requests("while-compacting", 10)]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows_listed(&store) < 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let flushed = rows_listed(&store);
    drop(compaction);
    handle.stop();
    assert_eq!(flushed, 10, "nothing flushed while a compaction ran");
}

#[test]
fn a_merge_holds_no_maintenance_lock_and_a_flush_lands_during_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path(), 3);
    store.append(&[requests("during", 4)]).unwrap();
    let free = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&free);
    let report = compact_with(&store, move |store| {
        // a merge that held the lock would deadlock the flush: try it first
        let unlocked = store.maintenance.try_lock().is_some();
        seen.store(unlocked, Ordering::SeqCst);
        if unlocked {
            store.flush().unwrap();
        }
    });
    assert!(
        free.load(Ordering::SeqCst),
        "the merge held the maintenance lock"
    );
    assert_eq!(report.partitions_compacted, 1);
    let listed = store.segments(Table::Requests);
    assert_eq!(listed.len(), 2, "the merged segment and the flush's");
    assert_eq!(rows_listed(&store), 34);
}

#[test]
fn an_input_deleted_before_its_merge_skips_the_partition_without_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path(), 3);
    let before = store.segments(Table::Requests);
    let gone = before[0].clone();
    // retention with no grace: the input leaves the catalog and its file goes at once
    let report = compact_with(&store, move |store| {
        let _maintenance = store.maintenance.lock();
        let mut catalog = store.state.lock().catalog.clone();
        catalog.segments.retain(|s| s.id != gone.id);
        store
            .commit_replacement(catalog, &HashSet::new(), &[], Vec::new())
            .unwrap();
        std::fs::remove_file(&gone.path).unwrap();
    });
    assert_eq!(report, CompactionReport::default());
    assert_eq!(store.segments(Table::Requests), before[1..].to_vec());
}

#[test]
fn closing_stops_a_compaction_after_its_partition_and_keeps_what_it_merged() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_segments(dir.path(), 2);
    for s in 0..2 {
        let mut batch = requests(&format!("h1-{s}"), 5);
        let mut records = RequestRecord::from_batch(&batch.batch).unwrap();
        for r in &mut records {
            r.ts += HOUR;
        }
        batch.batch = RequestRecord::to_batch(&records);
        store.append(&[batch]).unwrap();
        store.flush().unwrap();
    }
    assert_eq!(store.plan_compaction().len(), 2, "two hours to merge");
    // the first merge sees `close` begin
    let report = compact_with(&store, |store| store.closing.store(true, Ordering::Release));
    assert_eq!(report.partitions_compacted, 1);
    assert_eq!(store.segments(Table::Requests).len(), 3);
    assert_eq!(rows_listed(&store), 30);
}
