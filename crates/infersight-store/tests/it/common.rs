//! Helpers shared by the integration tests: batches with known ids and times, and a reader that
//! returns every row a snapshot exposes (memtable and segment files alike).

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use infersight_model::time::{NANOS_PER_HOUR, NANOS_PER_SECOND, hour_floor_ns};
use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};
use infersight_store::{FsyncPolicy, StorageBackend, Store, StoreOptions, TimeRange};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// Start of an arbitrary UTC hour: 2023-11-14T22:00:00Z.
pub const H0: i64 = 1_699_999_200 * NANOS_PER_SECOND;
pub const HOUR: i64 = NANOS_PER_HOUR;

#[test]
fn h0_is_an_hour_boundary() {
    assert_eq!(hour_floor_ns(H0), H0);
}

pub fn options(dir: &Path) -> StoreOptions {
    let mut options = StoreOptions::new(dir);
    options.fsync = FsyncPolicy::Always;
    options
}

pub fn open(dir: &Path) -> Store {
    Store::open(options(dir)).unwrap()
}

/// Requests with ids `<prefix>-<i>` at the given times.
pub fn requests(prefix: &str, ts: &[i64]) -> TableBatch {
    let records: Vec<RequestRecord> = ts
        .iter()
        .enumerate()
        .map(|(i, ts)| RequestRecord {
            ts: *ts,
            request_id: Some(format!("{prefix}-{i}")),
            model: Some("llama-3-8b".into()),
            e2e_ms: Some(100.0 + i as f64),
            ..Default::default()
        })
        .collect();
    TableBatch {
        table: Table::Requests,
        batch: RequestRecord::to_batch(&records),
    }
}

pub fn logs(prefix: &str, ts: &[i64]) -> TableBatch {
    let records: Vec<LogRecord> = ts
        .iter()
        .enumerate()
        .map(|(i, ts)| LogRecord {
            ts: *ts,
            request_id: Some(format!("{prefix}-{i}")),
            body: Some(format!("request {prefix}-{i} finished")),
            ..Default::default()
        })
        .collect();
    TableBatch {
        table: Table::Logs,
        batch: LogRecord::to_batch(&records),
    }
}

/// The ids `<prefix>-0 .. <prefix>-(n-1)`.
pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

pub fn read_parquet(path: &Path) -> Vec<RecordBatch> {
    let file = File::open(path).unwrap();
    ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Every `request_id` of `table` visible in a full snapshot, sorted (duplicates kept).
pub fn visible_ids(store: &Store, table: Table) -> Vec<String> {
    let snapshot = store.snapshot(table, TimeRange::ALL).unwrap();
    let mut batches = snapshot.memtable.clone();
    for segment in &snapshot.segments {
        batches.extend(read_parquet(&segment.path));
    }
    let mut ids = Vec::new();
    for batch in &batches {
        let column: Vec<Option<String>> = match table {
            Table::Requests => RequestRecord::from_batch(batch)
                .unwrap()
                .into_iter()
                .map(|r| r.request_id)
                .collect(),
            Table::Logs => LogRecord::from_batch(batch)
                .unwrap()
                .into_iter()
                .map(|r| r.request_id)
                .collect(),
            other => panic!("no id column in test table {other}"),
        };
        ids.extend(column.into_iter().map(Option::unwrap));
    }
    ids.sort();
    ids
}

pub fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// WAL files of a data directory, sorted by name.
pub fn wal_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    files.sort();
    files
}

/// The last WAL file that holds any bytes.
pub fn last_non_empty_wal(dir: &Path) -> PathBuf {
    wal_files(dir)
        .into_iter()
        .rev()
        .find(|p| std::fs::metadata(p).unwrap().len() > 0)
        .expect("a non-empty wal file")
}

/// Requests the store's rollups count over everything (merging changes their cells, never this).
pub fn rolled_up(store: &Store) -> u64 {
    (store.rollups(TimeRange::ALL).unwrap().iter())
        .map(|r| r.requests())
        .sum()
}
