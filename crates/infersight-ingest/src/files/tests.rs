//! Unit tests of the file receiver's pure parts: JSON times, bounded line reading and the merging
//! of batches before the hand-over (raw-line prefixes are tested in `infersight_model::log_prefix`).

use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};
use serde_json::Value as Json;

use super::input::{LineRead, read_line_bounded};
use super::reader::merge_by_table;
use super::*;

#[test]
fn epoch_units_by_magnitude() {
    let expected = Some(1_700_000_000_000_000_000);
    assert_eq!(json_time_ns(&Json::from(1_700_000_000)), expected);
    assert_eq!(json_time_ns(&Json::from(1_700_000_000_000i64)), expected);
    assert_eq!(
        json_time_ns(&Json::from(1_700_000_000_000_000i64)),
        expected
    );
    assert_eq!(
        json_time_ns(&Json::from(1_700_000_000_000_000_000i64)),
        expected
    );
    assert_eq!(json_time_ns(&Json::from("1700000000")), expected);
    assert_eq!(json_time_ns(&Json::from("2023-11-14T22:13:20Z")), expected);
    assert_eq!(
        json_time_ns(&Json::from(1_732_846_623_123i64)),
        Some(1_732_846_623_123_000_000)
    );
    assert_eq!(
        json_time_ns(&Json::from(1_700_000_000.5)),
        Some(1_700_000_000_500_000_000)
    );
    assert_eq!(
        json_time_ns(&Json::from("1700000000.25")),
        Some(1_700_000_000_250_000_000)
    );
    assert_eq!(json_time_ns(&Json::from(-5)), None);
    assert_eq!(json_time_ns(&Json::from("yesterday")), None);
}

#[test]
fn bounded_lines_skip_overlong_ones() {
    let data = b"short\nthis line is too long\r\nok\nlast-no-newline";
    let mut reader: &[u8] = data;
    let mut line = Vec::new();
    let mut seen = Vec::new();
    loop {
        match read_line_bounded(&mut reader, &mut line, 8).unwrap() {
            LineRead::Eof => break,
            LineRead::Line => seen.push(String::from_utf8(line.clone()).unwrap()),
            LineRead::TooLong(n) => seen.push(format!("<{n}>")),
        }
    }
    assert_eq!(seen, ["short", "<22>", "ok", "<15>"]);
}

#[test]
fn small_batches_are_merged_and_large_ones_handed_on() {
    let requests = |from: i64, rows: i64| TableBatch {
        table: Table::Requests,
        batch: RequestRecord::to_batch(
            &(from..from + rows)
                .map(|ts| RequestRecord {
                    ts,
                    ..Default::default()
                })
                .collect::<Vec<_>>(),
        ),
    };
    let logs = TableBatch {
        table: Table::Logs,
        batch: LogRecord::to_batch(&[LogRecord::default()]),
    };
    let ts_of = |batches: &[TableBatch]| -> Vec<Vec<i64>> {
        batches
            .iter()
            .filter(|b| b.table == Table::Requests)
            .map(|b| {
                RequestRecord::from_batch(&b.batch)
                    .unwrap()
                    .iter()
                    .map(|r| r.ts)
                    .collect()
            })
            .collect()
    };
    // three small exports of one table become one batch, in reading order
    let small = merge_by_table(vec![requests(0, 3), logs.clone(), requests(3, 2)]).unwrap();
    assert_eq!(ts_of(&small), vec![vec![0, 1, 2, 3, 4]]);
    assert_eq!(small.iter().filter(|b| b.table == Table::Logs).count(), 1);
    // large ones stay as they are, without a copy
    let large = vec![requests(0, 1500), requests(1500, 1200)];
    let handed = merge_by_table(large.clone()).unwrap();
    assert_eq!(handed.len(), 2);
    for (out, input) in handed.iter().zip(&large) {
        assert!(
            out.batch.column(0).to_data().buffers()[0].as_ptr()
                == input.batch.column(0).to_data().buffers()[0].as_ptr()
        );
    }
    let rows: Vec<usize> = ts_of(&handed).iter().map(Vec::len).collect();
    assert_eq!(rows, vec![1500, 1200]);
}
