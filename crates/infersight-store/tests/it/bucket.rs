//! Segments in a bucket (`StoreOptions::remote`) on a `file://` bucket: a flush uploads them
//! and commits them to the bucket's catalog log, another node with its own data directory sees
//! them, a restart replays only the WAL the log does not cover, and a bucket that cannot be used
//! is a clear error at open.

use std::path::Path;

use arrow::array::RecordBatch;
use infersight_model::{LogRecord, RequestRecord, Table};
use infersight_store::{RemoteOptions, StorageBackend, Store, StoreError, TimeRange};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::common::{H0, HOUR, ids, logs, options, requests, rolled_up, sorted};

fn bucket_options(data: &Path, bucket_url: &str, node: &str) -> infersight_store::StoreOptions {
    let mut options = options(data);
    let bucket = infersight_cluster::BucketConfig {
        url: bucket_url.to_string(),
        ..Default::default()
    };
    options.remote = Some(RemoteOptions::new(bucket, node));
    options
}

/// Every `request_id` of `table` a full snapshot shows, reading bucket segments from their
/// location (a `file://` bucket's keys are paths from `/`).
fn visible_ids(store: &Store, table: Table) -> Vec<String> {
    let snapshot = store.snapshot(table, TimeRange::ALL).unwrap();
    let mut batches: Vec<RecordBatch> = snapshot.memtable.clone();
    for segment in &snapshot.segments {
        let location = segment.location.as_ref().expect("a bucket segment");
        let file = std::fs::File::open(format!("/{location}")).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        batches.extend(reader.map(Result::unwrap));
    }
    let mut out = Vec::new();
    for batch in &batches {
        let column: Vec<Option<String>> = match table {
            Table::Requests => RequestRecord::from_batch(batch)
                .unwrap()
                .into_iter()
                .map(|r| r.request_id)
                .collect(),
            _ => LogRecord::from_batch(batch)
                .unwrap()
                .into_iter()
                .map(|r| r.request_id)
                .collect(),
        };
        out.extend(column.into_iter().map(Option::unwrap));
    }
    sorted(out)
}

fn files_with_extension(dir: &Path, extension: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for path in entries.map(|e| e.unwrap().path()) {
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                found.push(path.file_name().unwrap().to_string_lossy().to_string());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn flushed_segments_live_in_the_bucket_and_another_node_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let (data_a, data_b) = (dir.path().join("a"), dir.path().join("b"));

    let ingest = Store::open(bucket_options(&data_a, &url, "ingest-1")).unwrap();
    // two hours of requests, one of logs; then a second flush, then rows left in the WAL
    let first: Vec<i64> = (0..50).map(|i| H0 + i * HOUR / 40).collect();
    ingest
        .append(&[requests("a", &first), logs("a", &first[..10])])
        .unwrap();
    // the WAL as it is before the flush, to put back later as a crash would leave it
    let wal_before_flush = crate::common::wal_files(&data_a);
    let saved: Vec<Vec<u8>> = wal_before_flush
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let report = ingest.flush().unwrap();
    assert_eq!(report.rows, 60);
    assert_eq!(report.segments_written, 3, "{report:?}");
    ingest.append(&[requests("b", &[H0 + 5, H0 + 6])]).unwrap();
    ingest.flush().unwrap();
    ingest.append(&[requests("c", &[H0 + 7])]).unwrap();

    // the data directory holds no segment; the bucket holds them under node-ulid names
    assert!(files_with_extension(&data_a.join("segments"), "parquet").is_empty());
    let parquet = files_with_extension(&bucket.join("segments"), "parquet");
    assert_eq!(parquet.len(), 4, "{parquet:?}");
    assert!(
        parquet.iter().all(|name| name.starts_with("ingest-1-")),
        "{parquet:?}"
    );
    assert_eq!(
        files_with_extension(&bucket.join("segments/requests"), "rollup").len(),
        3
    );
    assert_eq!(
        files_with_extension(&bucket.join("catalog/log"), "json").len(),
        2
    );
    let segments = ingest.segments(Table::Requests);
    assert!(
        segments
            .iter()
            .all(|s| s.location.is_some() && s.checksum.is_some())
    );

    let mut expected = sorted([ids("a", 50), ids("b", 2), ids("c", 1)].concat());
    assert_eq!(visible_ids(&ingest, Table::Requests), expected);
    let own_cells: usize = ingest
        .rollups(TimeRange::ALL)
        .unwrap()
        .iter()
        .map(|r| r.cell_count())
        .sum();

    // a second node with its own (empty) data directory sees the flushed rows, and the
    // rollups from the sidecars in the bucket
    let query = Store::open(bucket_options(&data_b, &url, "query-1")).unwrap();
    expected.retain(|id| id != "c-0");
    assert_eq!(visible_ids(&query, Table::Requests), expected);
    assert_eq!(visible_ids(&query, Table::Logs), ids("a", 10));
    let cells: usize = query
        .rollups(TimeRange::ALL)
        .unwrap()
        .iter()
        .map(|r| r.cell_count())
        .sum();
    assert!(cells > 0);
    // node a's rollups also cover its unflushed row (one more cell)
    assert_eq!(own_cells, cells + 1);
    assert!(query.remote_segments().is_some_and(|r| r.url == "file://"));

    // the ingest node dies after committing its first flush but before deleting the WAL file
    // (put back here) and restarts: the log's flushed WAL sequence keeps those records from
    // coming back a second time; the row after its last flush comes back from its WAL
    drop(ingest);
    for (path, bytes) in wal_before_flush.iter().zip(&saved) {
        std::fs::write(path, bytes).unwrap();
    }
    let restarted = Store::open(bucket_options(&data_a, &url, "ingest-1")).unwrap();
    assert_eq!(
        visible_ids(&restarted, Table::Requests),
        sorted([ids("a", 50), ids("b", 2), ids("c", 1)].concat())
    );
    restarted.close().unwrap();
    drop(query);
    let reopened = Store::open(bucket_options(&data_b, &url, "query-1")).unwrap();
    assert_eq!(
        visible_ids(&reopened, Table::Requests).len(),
        53,
        "the restarted node's close flushed its last row to the bucket"
    );
    // three small requests segments in the first hour: under compaction_min_segments (4)
    assert_eq!(reopened.compact().unwrap().segments_removed, 0);
}

#[test]
fn a_bucket_that_cannot_be_used_is_a_clear_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let error = |url: &str, node: &str| -> String {
        match Store::open(bucket_options(&data, url, node)) {
            Ok(_) => panic!("{url} opened"),
            Err(err @ StoreError::Remote { .. }) => err.to_string(),
            Err(other) => panic!("{url}: not a storage error: {other}"),
        }
    };
    let message = error("ftp://host/x", "n1");
    assert!(message.contains("expected s3://bucket/prefix"), "{message}");
    let message = error(&format!("file://{}", dir.path().display()), "no/slash");
    assert!(message.contains("node"), "{message}");
    #[cfg(not(feature = "s3"))]
    {
        let message = error("s3://bucket/prefix", "n1");
        assert!(message.contains("no S3 support"), "{message}");
    }
    // a file in the way of the bucket directory
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"x").unwrap();
    let message = error(&format!("file://{}/sub", blocker.display()), "n1");
    assert!(message.contains("segment storage file://"), "{message}");
}

/// A node's options that only ingests or only reads (`maintain` off).
fn follower_options(data: &Path, bucket_url: &str, node: &str) -> infersight_store::StoreOptions {
    let mut options = bucket_options(data, bucket_url, node);
    if let Some(remote) = &mut options.remote {
        remote.maintain = false;
    }
    options
}

#[test]
fn nodes_follow_the_log_and_the_maintainer_merges_expires_and_collects_every_nodes_segments() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let ingest_a = Store::open(follower_options(&dir.path().join("a"), &url, "ingest-a")).unwrap();
    let ingest_b = Store::open(follower_options(&dir.path().join("b"), &url, "ingest-b")).unwrap();
    let mut maintainer_options = bucket_options(&dir.path().join("c"), &url, "compact-1");
    if let Some(remote) = &mut maintainer_options.remote {
        remote.gc_grace = std::time::Duration::ZERO;
    }
    maintainer_options.retention = Some(std::time::Duration::from_secs(3600));
    let deletions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&deletions);
    maintainer_options.on_delete = Some(infersight_store::DeleteObserver(std::sync::Arc::new(
        move |deleted| {
            let d: &infersight_store::DataDeleted = deleted;
            seen.lock()
                .unwrap()
                .push((d.what, d.tables.clone(), d.segments, d.rows));
        },
    )));
    let maintainer = Store::open(maintainer_options).unwrap();
    assert!(visible_ids(&maintainer, Table::Requests).is_empty());

    // three flushes on a, two on b: five small requests segments of one hour, from two nodes
    for (store, prefix, flushes) in [(&ingest_a, "a", 3), (&ingest_b, "b", 2)] {
        for flush in 0..flushes {
            let ts: Vec<i64> = (0..10).map(|i| H0 + flush * 1_000 + i).collect();
            store
                .append(&[requests(&format!("{prefix}{flush}"), &ts)])
                .unwrap();
            store.flush().unwrap();
        }
    }
    let everything = sorted(
        [
            ids("a0", 10),
            ids("a1", 10),
            ids("a2", 10),
            ids("b0", 10),
            ids("b1", 10),
        ]
        .concat(),
    );
    // a follower sees the other node's segments once it reads the log, not before
    assert_eq!(visible_ids(&ingest_a, Table::Requests).len(), 30);
    let refresh = ingest_a.refresh_bucket().unwrap();
    assert_eq!((refresh.added, refresh.removed), (2, 0), "{refresh:?}");
    assert_eq!(visible_ids(&ingest_a, Table::Requests), everything);
    assert_eq!(ingest_a.refresh_bucket().unwrap().added, 0, "nothing new");

    // followers never merge; the maintainer merges the five into one, in one catalog entry
    assert_eq!(ingest_b.compact().unwrap().segments_removed, 0);
    let report = maintainer.compact().unwrap();
    assert_eq!(
        (report.segments_removed, report.segments_written),
        (5, 1),
        "{report:?}"
    );
    assert_eq!(maintainer.segments(Table::Requests).len(), 1);
    assert_eq!(visible_ids(&maintainer, Table::Requests), everything);
    let merged = maintainer.segments(Table::Requests);
    assert!(merged[0].location.as_ref().unwrap().contains("compact-1-"));
    assert_eq!(merged[0].rows, 50);
    // the maintainer's rollup of the merged segment is the followers' sum of the five
    let cells = |store: &Store| -> u64 {
        (store.rollups(TimeRange::ALL).unwrap().iter())
            .map(|r| r.cell_count() as u64)
            .sum()
    };
    let refresh = ingest_b.refresh_bucket().unwrap();
    assert_eq!((refresh.added, refresh.removed), (1, 2), "{refresh:?}");
    assert_eq!(visible_ids(&ingest_b, Table::Requests), everything);
    assert!(cells(&ingest_b) > 0);
    assert_eq!(cells(&ingest_b), cells(&maintainer));

    // the replaced objects go at the next garbage pass (grace zero here), and so does the
    // upload of a flush that never committed; referenced objects stay
    let stray = bucket.join("segments/requests/2023111410/ingest-a-crashed.parquet");
    std::fs::create_dir_all(stray.parent().unwrap()).unwrap();
    std::fs::write(&stray, b"PAR1 half an upload").unwrap();
    assert_eq!(
        ingest_a.collect_bucket_garbage().unwrap(),
        0,
        "not a maintainer"
    );
    let deleted = maintainer.collect_bucket_garbage().unwrap();
    // five segments and their five sidecars, and the stray upload
    assert_eq!(deleted, 11);
    assert!(!stray.exists());
    assert_eq!(
        files_with_extension(&bucket.join("segments"), "parquet").len(),
        1
    );
    // a follower that has not re-read the log would still have listed the removed five:
    // after its refresh it reads what is there
    ingest_a.refresh_bucket().unwrap();
    assert_eq!(visible_ids(&ingest_a, Table::Requests), everything);

    // a restarted follower replays nothing twice and sees the merged segment once
    drop(ingest_a);
    let restarted = Store::open(follower_options(&dir.path().join("a"), &url, "ingest-a")).unwrap();
    assert_eq!(visible_ids(&restarted, Table::Requests), everything);

    // retention (one hour) removes the hour two hours later, for every node
    assert_eq!(
        restarted
            .apply_retention(H0 + 2 * HOUR)
            .unwrap()
            .segments_removed,
        0,
        "followers do not expire"
    );
    let expired = maintainer.apply_retention(H0 + 2 * HOUR).unwrap();
    assert_eq!((expired.segments_removed, expired.rows_removed), (1, 50));
    restarted.refresh_bucket().unwrap();
    assert!(visible_ids(&restarted, Table::Requests).is_empty());
    assert_eq!(maintainer.collect_bucket_garbage().unwrap(), 2);
    assert!(files_with_extension(&bucket.join("segments"), "parquet").is_empty());
    // every deletion was reported once, as committed (the audit writes these)
    let requests = vec![Table::Requests];
    assert_eq!(
        *deletions.lock().unwrap(),
        vec![
            ("compaction", requests.clone(), 5, 50),
            ("garbage collection", requests.clone(), 11, 0),
            ("retention", requests.clone(), 1, 50),
            ("garbage collection", requests, 2, 0),
        ]
    );
}

#[test]
fn garbage_within_its_grace_stays() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let store = Store::open(bucket_options(&dir.path().join("c"), &url, "compact-1")).unwrap();
    let stray = bucket.join("segments/logs/2023111410/other-uploading.parquet");
    std::fs::create_dir_all(stray.parent().unwrap()).unwrap();
    std::fs::write(&stray, b"PAR1").unwrap();
    // the default grace (10 minutes): a fresh unreferenced object may be an upload whose commit
    // is on its way
    for _ in 0..3 {
        assert_eq!(store.collect_bucket_garbage().unwrap(), 0);
    }
    assert!(stray.exists());
}

/// Two ingest nodes flushing and a maintainer merging and collecting garbage, all at once on
/// one bucket: every committed row is listed exactly once afterwards, on every node, and no
/// upload on its way to its commit is taken for garbage (a grace of 1 s, far longer than an
/// upload to a directory takes to commit).
#[test]
fn a_maintainer_and_two_ingest_nodes_committing_at_once_lose_and_double_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let ingest: Vec<Store> = ["ingest-a", "ingest-b"]
        .iter()
        .map(|node| Store::open(follower_options(&dir.path().join(node), &url, node)).unwrap())
        .collect();
    let mut maintainer_options = bucket_options(&dir.path().join("c"), &url, "compact-1");
    maintainer_options.compaction_min_segments = 2;
    if let Some(remote) = &mut maintainer_options.remote {
        remote.gc_grace = std::time::Duration::from_secs(1);
    }
    let maintainer = Store::open(maintainer_options).unwrap();
    let rounds = 12;
    let done = std::sync::atomic::AtomicBool::new(false);
    let merges = std::thread::scope(|scope| {
        let writers: Vec<_> = ingest
            .iter()
            .enumerate()
            .map(|(node, store)| {
                scope.spawn(move || {
                    for round in 0..rounds {
                        let ts: Vec<i64> = (0..7).map(|i| H0 + round * 100 + i).collect();
                        let prefix = format!("n{node}r{round}");
                        store.append(&[requests(&prefix, &ts)]).unwrap();
                        store.flush().unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(150));
                    }
                })
            })
            .collect();
        let merger = scope.spawn(|| {
            let mut merged = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                merged += maintainer.compact().unwrap().segments_removed;
                maintainer.collect_bucket_garbage().unwrap();
            }
            merged
        });
        for writer in writers {
            writer.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        merger.join().unwrap()
    });
    let last = maintainer.compact().unwrap().segments_removed;
    assert!(merges + last > 0, "the maintainer merged nothing");
    let expected = sorted(
        (0..2)
            .flat_map(|node| (0..rounds).flat_map(move |round| ids(&format!("n{node}r{round}"), 7)))
            .collect(),
    );
    assert_eq!(visible_ids(&maintainer, Table::Requests), expected);
    for store in &ingest {
        store.refresh_bucket().unwrap();
        assert_eq!(visible_ids(store, Table::Requests), expected);
    }
    // once the replaced objects are past the grace, the bucket holds exactly the listed ones
    maintainer.collect_bucket_garbage().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    maintainer.collect_bucket_garbage().unwrap();
    let listed = maintainer.segments(Table::Requests).len();
    assert_eq!(
        files_with_extension(&bucket.join("segments"), "parquet").len(),
        listed
    );
}

#[test]
fn migrate_moves_flushed_and_unflushed_rows_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/bucket", dir.path().display());
    let local = Store::open(options(&dir.path().join("local"))).unwrap();
    local.append(&[requests("a", &[H0, H0 + 1])]).unwrap();
    local.flush().unwrap();
    // still in the memtable and the WAL: migrate flushes it first
    local.append(&[requests("b", &[H0 + HOUR])]).unwrap();
    let target = bucket_options(&dir.path().join("local"), &url, "single")
        .remote
        .unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let report = local
        .migrate_to_bucket(&target, |done, total| {
            seen.lock().unwrap().push((done, total))
        })
        .unwrap();
    assert_eq!((report.segments, report.rows), (2, 3), "{report:?}");
    assert_eq!(*seen.lock().unwrap(), [(1, 2), (2, 2)]);
    let reader = Store::open(follower_options(&dir.path().join("reader"), &url, "reader")).unwrap();
    assert_eq!(
        visible_ids(&reader, Table::Requests),
        sorted([ids("a", 2), ids("b", 1)].concat())
    );
    let again = local.migrate_to_bucket(&target, |_, _| {});
    assert!(
        matches!(&again, Err(StoreError::Migrate(m)) if m.contains("node `single` already has segments")),
        "{again:?}"
    );
    let on_bucket = reader.migrate_to_bucket(&target, |_, _| {});
    assert!(
        matches!(&on_bucket, Err(StoreError::Migrate(m)) if m.contains("already")),
        "{on_bucket:?}"
    );
    reader.refresh_bucket().unwrap();
    assert_eq!(
        visible_ids(&reader, Table::Requests).len(),
        3,
        "nothing twice"
    );
}

/// Row groups of the Parquet file of a bucket segment (a `file://` bucket's keys are paths).
fn row_groups(segment: &infersight_store::SegmentMeta) -> usize {
    let location = segment.location.as_ref().expect("a bucket segment");
    let file = std::fs::File::open(format!("/{location}")).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    builder.metadata().num_row_groups()
}

/// The cold tier: once an hour ended the warm tier's age ago, the maintainer rewrites each
/// (table, hour)'s warm segments, every node's, into one segment with large row groups under
/// the cold prefix, a bounded number of partitions per pass; every node then reads the same
/// rows and rollups from it. Late rows of a cold hour go cold too. Cold segments expire by the
/// cold tier's retention, table retention still applies first, and the replaced warm objects
/// are garbage.
#[test]
fn the_maintainer_moves_old_hours_to_the_cold_tier_and_expires_them_by_its_retention() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let mut ingest_options = follower_options(&dir.path().join("a"), &url, "ingest-a");
    ingest_options.parquet_row_group_rows = 4;
    let ingest = Store::open(ingest_options).unwrap();
    let mut maintainer_options = bucket_options(&dir.path().join("c"), &url, "compact-1");
    if let Some(remote) = &mut maintainer_options.remote {
        remote.gc_grace = Duration::ZERO;
    }
    maintainer_options.tiers = Some(infersight_store::TierOptions {
        warm_for: Duration::from_secs(3600),
        cold_for: Some(Duration::from_secs(3 * 3600)),
        cold_prefix: "archive".into(),
        cold_row_group_rows: 1000,
        max_partitions_per_pass: 1,
    });
    (maintainer_options.retention_by_table).insert(Table::Logs, Some(Duration::from_secs(7200)));
    let deletions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&deletions);
    maintainer_options.on_delete = Some(infersight_store::DeleteObserver(std::sync::Arc::new(
        move |d: &infersight_store::DataDeleted| {
            seen.lock()
                .unwrap()
                .push((d.what, d.tables.clone(), d.rows));
        },
    )));
    let maintainer = Store::open(maintainer_options).unwrap();

    // hour H0: two requests flushes and one of logs; hour H0+1: one requests flush
    for (flush, hour) in [(0, H0), (1, H0), (2, H0 + HOUR)] {
        let ts: Vec<i64> = (0..10).map(|i| hour + flush * 1_000 + i).collect();
        ingest
            .append(&[requests(&format!("r{flush}"), &ts)])
            .unwrap();
        if flush == 0 {
            ingest.append(&[logs("l", &ts)]).unwrap();
        }
        ingest.flush().unwrap();
    }
    maintainer.refresh_bucket().unwrap();
    let requests_before = visible_ids(&maintainer, Table::Requests);
    let logs_before = visible_ids(&maintainer, Table::Logs);
    assert_eq!((requests_before.len(), logs_before.len()), (30, 10));
    assert_eq!(rolled_up(&maintainer), 30);
    let warm = maintainer.segments(Table::Requests);
    assert!(
        warm.iter()
            .all(|s| s.tier_name() == "warm" && row_groups(s) == 3)
    );

    // half an hour after H0 ended: nothing is due; followers never move anything
    let report = maintainer.apply_tiers(H0 + HOUR + HOUR / 2).unwrap();
    assert_eq!(report.partitions_moved, 0, "{report:?}");
    assert_eq!(
        ingest.apply_tiers(H0 + 2 * HOUR).unwrap().partitions_moved,
        0
    );

    // an hour after: H0's two partitions are due, one per pass (the bound), oldest table first
    let first = maintainer.apply_tiers(H0 + 2 * HOUR).unwrap();
    assert_eq!(
        (
            first.partitions_moved,
            first.segments_replaced,
            first.partitions_left
        ),
        (1, 2, 1),
        "{first:?}"
    );
    assert_eq!(first.rows_moved, 20);
    let second = maintainer.apply_tiers(H0 + 2 * HOUR).unwrap();
    assert_eq!((second.partitions_moved, second.partitions_left), (1, 0));
    assert_eq!(
        maintainer
            .apply_tiers(H0 + 2 * HOUR)
            .unwrap()
            .partitions_moved,
        0
    );

    let tiers = |store: &Store, table: Table| -> Vec<&'static str> {
        let mut tiers: Vec<_> = (store.segments(table).iter())
            .map(|s| s.tier_name())
            .collect();
        tiers.sort();
        tiers
    };
    assert_eq!(tiers(&maintainer, Table::Requests), vec!["cold", "warm"]);
    assert_eq!(tiers(&maintainer, Table::Logs), vec!["cold"]);
    let cold: Vec<_> = (maintainer.segments(Table::Requests).into_iter())
        .filter(|s| s.tier_name() == "cold")
        .collect();
    assert_eq!(cold[0].rows, 20);
    assert_eq!(row_groups(&cold[0]), 1, "large row groups in the cold tier");
    assert!(
        (cold[0].location.as_ref().unwrap()).contains("/archive/requests/2023111422/compact-1-"),
        "{:?}",
        cold[0].location
    );
    assert_eq!(visible_ids(&maintainer, Table::Requests), requests_before);
    assert_eq!(visible_ids(&maintainer, Table::Logs), logs_before);
    assert_eq!(rolled_up(&maintainer), 30, "the rollups count the same");
    let stats = maintainer.stats();
    let (_, requests_stats) = (stats.tables.iter())
        .find(|(table, _)| *table == Table::Requests)
        .unwrap();
    assert_eq!(
        (requests_stats.warm.segments, requests_stats.cold.segments),
        (1, 1)
    );
    assert_eq!(requests_stats.cold.bytes, cold[0].bytes);

    // the ingest node follows: same rows, same rollups, the tier from the log
    ingest.refresh_bucket().unwrap();
    assert_eq!(tiers(&ingest, Table::Requests), vec!["cold", "warm"]);
    assert_eq!(visible_ids(&ingest, Table::Requests), requests_before);
    assert_eq!(rolled_up(&ingest), 30);

    // the replaced warm objects are garbage (two segments with sidecars, one logs segment);
    // the cold ones are referenced
    assert_eq!(maintainer.collect_bucket_garbage().unwrap(), 5);
    assert_eq!(
        files_with_extension(&bucket.join("archive"), "parquet").len(),
        2
    );

    // late rows of the cold hour arrive warm, and go cold at the next pass beside the first
    let late: Vec<i64> = (0..5).map(|i| H0 + 50_000 + i).collect();
    ingest.append(&[requests("late", &late)]).unwrap();
    ingest.flush().unwrap();
    let report = maintainer.apply_tiers(H0 + 2 * HOUR).unwrap();
    assert_eq!((report.partitions_moved, report.rows_moved), (1, 5));
    assert_eq!(
        tiers(&maintainer, Table::Requests),
        vec!["cold", "cold", "warm"]
    );
    assert_eq!(
        visible_ids(&maintainer, Table::Requests),
        sorted([requests_before.clone(), ids("late", 5)].concat())
    );

    // three hours after H0 ended: the logs table's own retention (2 h) drops its cold hour;
    // the cold tier keeps requests for 3 h; H0+1 goes cold
    let expired = maintainer.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!((expired.segments_removed, expired.rows_removed), (1, 10));
    assert!(visible_ids(&maintainer, Table::Logs).is_empty());
    assert_eq!(
        maintainer
            .apply_tiers(H0 + 3 * HOUR)
            .unwrap()
            .partitions_moved,
        1
    );
    assert_eq!(
        tiers(&maintainer, Table::Requests),
        vec!["cold", "cold", "cold"]
    );
    // four hours after: the cold tier's retention drops H0's requests, not H0+1's
    let expired = maintainer.apply_retention(H0 + 4 * HOUR).unwrap();
    assert_eq!((expired.segments_removed, expired.rows_removed), (2, 25));
    assert_eq!(visible_ids(&maintainer, Table::Requests), ids("r2", 10));
    let reported: Vec<_> = (deletions.lock().unwrap().iter())
        .filter(|(what, _, _)| *what == "retention")
        .cloned()
        .collect();
    assert_eq!(
        reported,
        vec![
            ("retention", vec![Table::Logs], 10),
            ("retention", vec![Table::Requests], 25),
        ]
    );
}

/// Per-org retention on a bucket: the maintainer rewrites the segments (of every node) holding
/// an org's rows past its retention, a cold one staying cold; followers read the other orgs'
/// rows only after their refresh; followers themselves never rewrite.
#[test]
fn per_org_retention_rewrites_bucket_segments_and_keeps_their_tier() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let mut ingest_options = follower_options(&dir.path().join("a"), &url, "ingest-a");
    ingest_options
        .retention_by_org
        .insert("acme".into(), Duration::from_secs(7200));
    let ingest = Store::open(ingest_options).unwrap();
    let mut maintainer_options = bucket_options(&dir.path().join("c"), &url, "compact-1");
    maintainer_options
        .retention_by_org
        .insert("acme".into(), Duration::from_secs(7200));
    maintainer_options.tiers = Some(infersight_store::TierOptions::new(Duration::from_secs(
        3600,
    )));
    let maintainer = Store::open(maintainer_options).unwrap();
    let stamp = |batch, org| infersight_model::org::stamp_org(&batch, org).unwrap();
    let ts: Vec<i64> = (0..6).map(|i| H0 + i).collect();
    ingest
        .append(&[
            stamp(requests("acme", &ts), "acme"),
            stamp(requests("globex", &ts[..4]), "globex"),
        ])
        .unwrap();
    ingest.flush().unwrap();
    maintainer.refresh_bucket().unwrap();
    assert_eq!(
        maintainer
            .apply_tiers(H0 + 2 * HOUR)
            .unwrap()
            .partitions_moved,
        1
    );
    assert_eq!(
        ingest.apply_retention(H0 + 3 * HOUR).unwrap(),
        infersight_store::RetentionReport::default(),
        "followers do not rewrite"
    );
    let report = maintainer.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!((report.segments_rewritten, report.rows_removed), (1, 6));
    let segments = maintainer.segments(Table::Requests);
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].tier_name(), "cold");
    assert!(
        segments[0]
            .location
            .as_ref()
            .unwrap()
            .contains("/cold/requests/")
    );
    assert_eq!(visible_ids(&maintainer, Table::Requests), ids("globex", 4));
    ingest.refresh_bucket().unwrap();
    assert_eq!(visible_ids(&ingest, Table::Requests), ids("globex", 4));
    let again = maintainer.apply_retention(H0 + 3 * HOUR).unwrap();
    assert_eq!(again.segments_rewritten, 0, "{again:?}");
}

/// The maintainer's garbage collection prunes the catalog log: after 205 commits (checkpoints
/// every 100) the entries up to checkpoint 100 are gone, and a new node, the ingest node that
/// wrote them and its next flushes all still see every row once.
#[test]
fn garbage_collection_prunes_the_log_and_every_node_still_sees_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let bucket = dir.path().join("bucket");
    let url = format!("file://{}", bucket.display());
    let ingest = Store::open(follower_options(&dir.path().join("a"), &url, "ingest-a")).unwrap();
    let maintainer = Store::open(bucket_options(&dir.path().join("c"), &url, "compact-1")).unwrap();
    let flush = |n: i64| {
        ingest
            .append(&[requests(&format!("r{n}-"), &[H0 + n * 1_000])])
            .unwrap();
        ingest.flush().unwrap();
    };
    for n in 0..205 {
        flush(n);
    }
    let log_files = || {
        std::fs::read_dir(bucket.join("catalog/log"))
            .unwrap()
            .count()
    };
    assert_eq!(log_files(), 205);
    maintainer.collect_bucket_garbage().unwrap();
    assert_eq!(log_files(), 105, "entries 1..=100 pruned");
    let checkpoints: Vec<String> = files_with_extension(&bucket.join("catalog/checkpoint"), "json");
    assert_eq!(checkpoints.len(), 2, "{checkpoints:?}");

    let everything =
        |upto: i64| sorted((0..upto).flat_map(|n| ids(&format!("r{n}-"), 1)).collect());
    let fresh = Store::open(follower_options(&dir.path().join("d"), &url, "query-1")).unwrap();
    assert_eq!(visible_ids(&fresh, Table::Requests), everything(205));
    for n in 205..210 {
        flush(n);
    }
    fresh.refresh_bucket().unwrap();
    assert_eq!(visible_ids(&fresh, Table::Requests), everything(210));
    maintainer.refresh_bucket().unwrap();
    assert_eq!(visible_ids(&maintainer, Table::Requests), everything(210));
}
