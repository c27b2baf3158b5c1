//! Segments in a bucket (`StoreOptions::remote`) on a `file://` bucket: a flush uploads them
//! and commits them to the bucket's catalog log, another node with its own data directory sees
//! them, a restart replays only the WAL the log does not cover, and a bucket that cannot be used
//! is a clear error at open.

use std::path::Path;

use arrow::array::RecordBatch;
use infersight_model::{LogRecord, RequestRecord, Table};
use infersight_store::{RemoteOptions, StorageBackend, Store, StoreError, TimeRange};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::common::{H0, HOUR, ids, logs, options, requests, sorted};

fn bucket_options(data: &Path, bucket_url: &str, node: &str) -> infersight_store::StoreOptions {
    let mut options = options(data);
    options.remote = Some(RemoteOptions {
        bucket: infersight_cluster::BucketConfig {
            url: bucket_url.to_string(),
            ..Default::default()
        },
        node: node.to_string(),
    });
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
    // segments in a bucket are not compacted by the node (the compact role will)
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
