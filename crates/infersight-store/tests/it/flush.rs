//! Validation on append, hourly Parquet segments, and snapshot pruning.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, RecordBatch, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, Schema};
use infersight_model::tables::SCHEMA_VERSION_KEY;
use infersight_model::{RequestRecord, SCHEMA_VERSION, Table, TableBatch};
use infersight_store::{StorageBackend, Store, StoreError, TimeRange};
use parquet::basic::Compression;
use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::common::*;

#[test]
fn a_batch_with_the_wrong_schema_is_rejected_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let good = requests("a", &[H0]);
    // a logs batch labelled as requests
    let wrong = TableBatch {
        table: Table::Requests,
        batch: logs("l", &[H0]).batch,
    };
    let err = store.append(&[good.clone(), wrong]).unwrap_err();
    match &err {
        StoreError::SchemaMismatch { table, reason } => {
            assert_eq!(*table, Table::Requests);
            assert!(
                reason.contains("`severity`") && reason.contains("`trace_id`"),
                "{reason}"
            );
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
    // a renamed column
    let batch = &good.batch;
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[4] = Field::new("tenant_id", DataType::Utf8, true);
    let renamed =
        RecordBatch::try_new(Arc::new(Schema::new(fields)), batch.columns().to_vec()).unwrap();
    let err = store
        .append(&[TableBatch {
            table: Table::Requests,
            batch: renamed,
        }])
        .unwrap_err();
    assert!(
        err.to_string().contains("`tenant_id`, expected `tenant`"),
        "{err}"
    );

    assert!(visible_ids(&store, Table::Requests).is_empty());
    let stats = store.stats();
    assert_eq!(stats.appends, 0);
    assert_eq!(stats.wal_bytes, 0, "nothing reached the wal");
    drop(store);
    let store = open(dir.path());
    assert!(visible_ids(&store, Table::Requests).is_empty());
}

/// Rows over three hours, deliberately out of order.
fn three_hours() -> Vec<i64> {
    vec![
        H0 + 2 * HOUR + 7,
        H0 + 10,
        H0 + HOUR,
        H0 + 2 * HOUR,
        H0 + HOUR - 1,
        H0 + HOUR + 5,
        H0,
    ]
}

#[test]
fn flush_writes_one_sorted_zstd_segment_per_table_and_hour() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let ts = three_hours();
    store.append(&[requests("r", &ts[..4])]).unwrap();
    store
        .append(&[requests("s", &ts[4..]), logs("l", &ts)])
        .unwrap();
    let report = store.flush().unwrap();
    assert_eq!(report.rows, 14);
    assert_eq!(report.segments_written, 6);

    for table in [Table::Requests, Table::Logs] {
        let segments = store.segments(table);
        assert_eq!(segments.len(), 3, "{table}");
        let hours: Vec<i64> = segments.iter().map(|s| s.hour_ns).collect();
        assert_eq!(hours, vec![H0, H0 + HOUR, H0 + 2 * HOUR]);
        let rows: Vec<u64> = segments.iter().map(|s| s.rows).collect();
        assert_eq!(rows, vec![3, 2, 2]);
        for (segment, hour_dir) in segments
            .iter()
            .zip(["2023111422", "2023111423", "2023111500"])
        {
            let expected_dir = store
                .data_dir()
                .join("segments")
                .join(table.name())
                .join(hour_dir);
            assert_eq!(segment.path.parent().unwrap(), expected_dir);
            assert_eq!(
                segment.path,
                expected_dir.join(format!("{:020}.parquet", segment.id))
            );
            assert!(segment.path.is_file());
            assert_eq!(
                segment.bytes,
                std::fs::metadata(&segment.path).unwrap().len()
            );
            assert_eq!(segment.schema_version, SCHEMA_VERSION);
            check_parquet_file(table, segment);
        }
    }
    // flushed rows left the memtable and are visible once
    let snapshot = store.snapshot(Table::Requests, TimeRange::ALL).unwrap();
    assert!(snapshot.memtable.is_empty());
    let mut expected = ids("r", 4);
    expected.extend(ids("s", 3));
    assert_eq!(visible_ids(&store, Table::Requests), sorted(expected));
    assert_eq!(visible_ids(&store, Table::Logs), sorted(ids("l", 7)));
    let stats = store.stats();
    assert_eq!(stats.flushes, 1);
    assert_eq!(stats.memtable_bytes, 0);
}

/// A segment's metadata: the schema version, zstd on every column but the floats of `requests`
/// (stored uncompressed: zstd gains little on them and costs every aggregate its decoding), `ts`
/// statistics, rows sorted by `ts` within the segment's bounds.
fn check_parquet_file(table: Table, segment: &infersight_store::SegmentMeta) {
    let reader = SerializedFileReader::new(File::open(&segment.path).unwrap()).unwrap();
    let metadata = reader.metadata();
    let key_values = metadata.file_metadata().key_value_metadata().unwrap();
    let version = key_values
        .iter()
        .find(|kv| kv.key == SCHEMA_VERSION_KEY)
        .unwrap();
    assert_eq!(
        version.value.as_deref(),
        Some(SCHEMA_VERSION.to_string().as_str())
    );
    assert!(metadata.num_row_groups() >= 1);
    for row_group in metadata.row_groups() {
        let mut floats = 0;
        for column in row_group.columns() {
            let float = column.column_type() == parquet::basic::Type::DOUBLE;
            floats += usize::from(float);
            let compression = column.compression();
            let expected = if float && table == Table::Requests {
                compression == Compression::UNCOMPRESSED
            } else {
                matches!(compression, Compression::ZSTD(_))
            };
            assert!(
                expected,
                "{table} {} is {compression:?}",
                column.column_path()
            );
        }
        assert!(floats > 0 || table != Table::Requests);
        // statistics on ts let the query engine prune row groups
        let ts_stats = row_group.column(0).statistics().expect("ts statistics");
        assert!(ts_stats.min_bytes_opt().is_some() && ts_stats.max_bytes_opt().is_some());
    }
    // rows are sorted by ts and within the segment's bounds
    let mut ts: Vec<i64> = Vec::new();
    for batch in read_parquet(&segment.path) {
        assert_eq!(
            batch.schema().field(0).data_type(),
            Table::Requests.schema().field(0).data_type()
        );
        let column = batch
            .column(0)
            .as_any()
            .downcast_ref::<TimestampNanosecondArray>()
            .unwrap();
        ts.extend((0..column.len()).map(|i| column.value(i)));
    }
    assert_eq!(ts.len() as u64, segment.rows);
    assert!(ts.is_sorted(), "{ts:?}");
    assert_eq!(
        (ts[0], ts[ts.len() - 1]),
        (segment.min_ts_ns, segment.max_ts_ns)
    );
}

#[test]
fn snapshots_prune_segments_outside_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&[requests("r", &three_hours())]).unwrap();
    store.flush().unwrap();
    // a memtable batch in the third hour only
    store
        .append(&[requests("m", &[H0 + 2 * HOUR + 1])])
        .unwrap();

    let second_hour = TimeRange {
        since_ns: Some(H0 + HOUR),
        until_ns: Some(H0 + 2 * HOUR),
    };
    let snapshot = store.snapshot(Table::Requests, second_hour).unwrap();
    assert_eq!(snapshot.segments.len(), 1);
    assert_eq!(snapshot.segments[0].hour_ns, H0 + HOUR);
    assert_eq!(snapshot.segments_pruned, 2);
    assert!(
        snapshot.memtable.is_empty(),
        "the memtable batch lies outside the range"
    );
    assert_eq!(snapshot.schema, Table::Requests.schema());

    let from_third = TimeRange {
        since_ns: Some(H0 + 2 * HOUR),
        until_ns: None,
    };
    let snapshot = store.snapshot(Table::Requests, from_third).unwrap();
    assert_eq!(snapshot.segments.len(), 1);
    assert_eq!(snapshot.segments_pruned, 2);
    assert_eq!(snapshot.memtable.len(), 1);

    let all = store.snapshot(Table::Requests, TimeRange::ALL).unwrap();
    assert_eq!((all.segments.len(), all.segments_pruned), (3, 0));
    let other_table = store.snapshot(Table::Spans, TimeRange::ALL).unwrap();
    assert_eq!(
        (other_table.segments.len(), other_table.segments_pruned),
        (0, 0)
    );
}

#[test]
fn row_groups_follow_the_configured_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.parquet_row_group_rows = 10;
    let store = Store::open(options).unwrap();
    let ts: Vec<i64> = (0..25).map(|i| H0 + i).collect();
    store.append(&[requests("r", &ts)]).unwrap();
    store.flush().unwrap();
    let segment = &store.segments(Table::Requests)[0];
    let reader = SerializedFileReader::new(File::open(&segment.path).unwrap()).unwrap();
    assert_eq!(reader.metadata().num_row_groups(), 3);
    let records: Vec<RequestRecord> = read_parquet(&segment.path)
        .iter()
        .flat_map(|b| RequestRecord::from_batch(b).unwrap())
        .collect();
    assert_eq!(records.len(), 25);
    assert_eq!(records[3].model.as_deref(), Some("llama-3-8b"));
}

#[test]
fn maybe_flush_waits_for_a_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.memtable_max_rows = 10;
    options.flush_interval = Duration::from_secs(3600);
    let store = Store::open(options).unwrap();
    assert_eq!(store.maybe_flush().unwrap(), None, "empty memtable");
    store.append(&[requests("a", &[H0; 6])]).unwrap();
    assert_eq!(store.maybe_flush().unwrap(), None);
    store.append(&[requests("b", &[H0; 4])]).unwrap();
    let report = store.maybe_flush().unwrap().expect("row threshold reached");
    assert_eq!(report.rows, 10);
    drop(store);

    let dir = tempfile::tempdir().unwrap();
    let mut options = crate::common::options(dir.path());
    options.memtable_max_bytes = 1;
    let store = Store::open(options).unwrap();
    store.append(&[requests("a", &[H0])]).unwrap();
    assert_eq!(
        store.maybe_flush().unwrap().map(|r| r.rows),
        Some(1),
        "byte threshold"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut options = crate::common::options(dir.path());
    options.flush_interval = Duration::ZERO;
    let store = Store::open(options).unwrap();
    store.append(&[requests("a", &[H0])]).unwrap();
    assert_eq!(
        store.maybe_flush().unwrap().map(|r| r.rows),
        Some(1),
        "interval"
    );
}

/// Appends faster than flushes are refused once the memtable holds twice
/// `memtable_max_bytes` (64 MiB at least): a retryable error, nothing written; after a flush the
/// store takes appends again. (A 10-minute soak at twice the sustainable load grew `serve` past
/// 23 GB before this limit.)
#[test]
fn a_memtable_over_its_hard_limit_refuses_appends_until_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = crate::common::options(dir.path());
    options.memtable_max_bytes = 16 << 20;
    options.fsync = infersight_store::FsyncPolicy::Never;
    assert_eq!(options.memtable_hard_limit_bytes(), 64 << 20);
    let store = Store::open(options).unwrap();
    let big = |n: i64| {
        let records: Vec<infersight_model::LogRecord> = (0..8)
            .map(|i| infersight_model::LogRecord {
                ts: H0 + n * 10 + i,
                body: Some("x".repeat(1 << 20)),
                ..Default::default()
            })
            .collect();
        TableBatch {
            table: Table::Logs,
            batch: infersight_model::LogRecord::to_batch(&records),
        }
    };
    let mut accepted = 0;
    let refused = loop {
        // receivers ask before they decode a request: refused ahead exactly when an append is
        let ahead = store.append_refusal();
        match store.append(&[big(accepted)]) {
            Ok(_) => {
                assert!(ahead.is_none(), "refused ahead at {accepted}: {ahead:?}");
                accepted += 1;
            }
            Err(err) => {
                assert_eq!(ahead.map(|e| e.to_string()), Some(err.to_string()));
                break err;
            }
        }
        assert!(accepted < 100, "never refused");
    };
    // 8 MiB an append: the ninth finds 64 MiB or more
    assert!((8..=9).contains(&accepted), "{accepted}");
    assert!(
        matches!(refused, StoreError::Overloaded { .. }),
        "{refused}"
    );
    assert_eq!(refused.kind(), infersight_model::ErrorKind::Unavailable);
    let wal_seq = store.stats().appends;
    assert_eq!(wal_seq, accepted as u64, "the refused append wrote nothing");
    assert!(store.append_refusal().is_some());
    let flushed = store.flush().unwrap();
    assert_eq!(flushed.rows, 8 * accepted as u64);
    assert!(store.append_refusal().is_none());
    store.append(&[big(1000)]).unwrap();
}
