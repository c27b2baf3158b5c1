//! A small [`StorageBackend`] for tests of the query and root-cause crates: appends go to a
//! memtable; `flush` writes one Parquet segment per (table, hour) into a temporary directory,
//! like the real store; `snapshot` prunes segments by time range the way the store's catalog
//! does. Plus the hand-made request records those tests build on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::array::{BooleanArray, TimestampNanosecondArray};
use arrow::compute::filter_record_batch;
use infersight_model::{RequestRecord, Table, TableBatch, tables::ts_range};
use infersight_store::{
    AppendReceipt, FlushReport, ScanSnapshot, SegmentMeta, StorageBackend, StoreError, StoreStats,
    TimeRange,
};
use parquet::arrow::ArrowWriter;

pub const HOUR_NS: i64 = 3_600_000_000_000;
pub const MINUTE_NS: i64 = 60_000_000_000;

/// 2026-11-29T10:00:00Z
pub fn base_ns() -> i64 {
    chrono::DateTime::parse_from_rfc3339("2026-11-29T10:00:00Z")
        .unwrap()
        .timestamp_nanos_opt()
        .unwrap()
}

pub fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[derive(Default)]
struct State {
    memtable: HashMap<Table, Vec<RecordBatch>>,
    segments: HashMap<Table, Vec<SegmentMeta>>,
    next_segment_id: u64,
}

pub struct TestStore {
    dir: tempfile::TempDir,
    state: Mutex<State>,
    closed: AtomicBool,
}

impl TestStore {
    pub fn new() -> Arc<TestStore> {
        Arc::new(TestStore {
            dir: tempfile::tempdir().unwrap(),
            state: Mutex::new(State::default()),
            closed: AtomicBool::new(false),
        })
    }

    pub fn append_requests(&self, records: &[RequestRecord]) {
        let batch = RequestRecord::to_batch(records);
        self.append(&[TableBatch {
            table: Table::Requests,
            batch,
        }])
        .unwrap();
    }

    pub fn segment_count(&self, table: Table) -> usize {
        self.state
            .lock()
            .unwrap()
            .segments
            .get(&table)
            .map_or(0, Vec::len)
    }

    pub fn set_closed(&self, closed: bool) {
        self.closed.store(closed, Ordering::SeqCst);
    }

    fn segment_path(&self, table: Table, hour_ns: i64, id: u64) -> PathBuf {
        // Like the real store: a directory per table and hour, with a `=` in its name.
        let dir = self
            .dir
            .path()
            .join(table.name())
            .join(format!("hour={hour_ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(format!("{id:06}.parquet"))
    }

    fn write_segment(&self, state: &mut State, table: Table, batch: &RecordBatch) -> SegmentMeta {
        let (min_ts_ns, max_ts_ns) = ts_range(batch).unwrap();
        let hour_ns = min_ts_ns - min_ts_ns.rem_euclid(HOUR_NS);
        state.next_segment_id += 1;
        let id = state.next_segment_id;
        let path = self.segment_path(table, hour_ns, id);
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(batch).unwrap();
        writer.close().unwrap();
        SegmentMeta {
            id,
            table,
            hour_ns,
            bytes: std::fs::metadata(&path).unwrap().len(),
            path,
            location: None,
            rows: batch.num_rows() as u64,
            min_ts_ns,
            max_ts_ns,
            schema_version: 1,
            rollup_bytes: None,
            checksum: None,
            tier: Default::default(),
            org_rows: None,
        }
    }
}

/// Splits a batch into one batch per UTC hour of `ts`.
fn split_by_hour(batch: &RecordBatch) -> Vec<RecordBatch> {
    let ts = batch
        .column_by_name("ts")
        .unwrap()
        .as_any()
        .downcast_ref::<TimestampNanosecondArray>()
        .unwrap();
    let mut hours: Vec<i64> = ts
        .values()
        .iter()
        .map(|t| t - t.rem_euclid(HOUR_NS))
        .collect();
    hours.sort_unstable();
    hours.dedup();
    hours
        .into_iter()
        .map(|hour| {
            let mask: BooleanArray = ts
                .values()
                .iter()
                .map(|t| Some(t - t.rem_euclid(HOUR_NS) == hour))
                .collect();
            filter_record_batch(batch, &mask).unwrap()
        })
        .collect()
}

impl StorageBackend for TestStore {
    fn append(&self, batches: &[TableBatch]) -> Result<AppendReceipt, StoreError> {
        let mut state = self.state.lock().unwrap();
        let mut rows = 0;
        for batch in batches {
            rows += batch.batch.num_rows() as u64;
            state
                .memtable
                .entry(batch.table)
                .or_default()
                .push(batch.batch.clone());
        }
        Ok(AppendReceipt { wal_seq: 0, rows })
    }

    fn snapshot(&self, table: Table, range: TimeRange) -> Result<ScanSnapshot, StoreError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(StoreError::Closed);
        }
        let state = self.state.lock().unwrap();
        let all = state.segments.get(&table).cloned().unwrap_or_default();
        let total = all.len();
        let segments: Vec<SegmentMeta> = all
            .into_iter()
            .filter(|s| range.overlaps(s.min_ts_ns, s.max_ts_ns))
            .collect();
        Ok(ScanSnapshot {
            table,
            schema: table.schema(),
            memtable: state.memtable.get(&table).cloned().unwrap_or_default(),
            segments_pruned: total - segments.len(),
            segments,
        })
    }

    fn flush(&self) -> Result<FlushReport, StoreError> {
        let mut state = self.state.lock().unwrap();
        let mut report = FlushReport::default();
        let memtable = std::mem::take(&mut state.memtable);
        for (table, batches) in memtable {
            for batch in batches.iter().filter(|b| b.num_rows() > 0) {
                for hour_batch in split_by_hour(batch) {
                    let segment = self.write_segment(&mut state, table, &hour_batch);
                    report.rows += segment.rows;
                    report.bytes_written += segment.bytes;
                    report.segments_written += 1;
                    state.segments.entry(table).or_default().push(segment);
                }
            }
        }
        Ok(report)
    }

    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }

    fn close(&self) -> Result<(), StoreError> {
        self.flush().map(|_| ())
    }
}

/// A request at `ts_ns` for `model` with an end-to-end latency and raw `attrs` JSON.
pub fn request(ts_ns: i64, model: &str, e2e_ms: f64, attrs: &str) -> RequestRecord {
    RequestRecord {
        ts: ts_ns,
        request_id: Some(format!("req-{ts_ns}")),
        model: Some(model.to_string()),
        e2e_ms: Some(e2e_ms),
        attrs: attrs.to_string(),
        ..Default::default()
    }
}

/// `n` requests spread one second apart starting at `start_ns`.
pub fn requests(start_ns: i64, n: usize, model: &str) -> Vec<RequestRecord> {
    (0..n)
        .map(|i| {
            request(
                start_ns + i as i64 * 1_000_000_000,
                model,
                100.0 + i as f64,
                "{}",
            )
        })
        .collect()
}
