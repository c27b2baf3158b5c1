//! Unit tests of building, folding, merging, splitting and encoding rollups.

use super::*;
use arrow::array::RecordBatch;
use infersight_model::RequestRecord;
use infersight_model::tables::RequestBatchBuilder;

fn record(minute: i64, worker: &str, version: &str, ttft: f64) -> RequestRecord {
    RequestRecord {
        ts: 1_764_381_600_000_000_000 + minute * MINUTE_NS + 1_000,
        worker: Some(worker.into()),
        model_version: Some(version.into()),
        ttft_ms: Some(ttft),
        e2e_ms: Some(ttft * 10.0),
        status: Some(if ttft > 500.0 { "error" } else { "ok" }.into()),
        input_tokens: Some(100),
        output_tokens: Some(50),
        cached_tokens: Some(25),
        ..RequestRecord::default()
    }
}

fn batch(records: &[RequestRecord]) -> RecordBatch {
    let mut builder = RequestBatchBuilder::new();
    for r in records {
        builder.push(r);
    }
    builder.finish()
}

fn spec(max_combinations: usize) -> RollupSpec {
    RollupSpec {
        dimensions: vec!["worker".into(), "model_version".into()],
        max_combinations,
    }
}

fn query(sli: &str, by: &[&str]) -> SliQuery {
    SliQuery {
        sli: Sli::parse(sli).unwrap(),
        quantiles: vec![0.5, 0.99],
        by: by.iter().map(|s| s.to_string()).collect(),
        filters: Vec::new(),
        since_ns: None,
        until_ns: None,
        step_ns: None,
    }
}

#[test]
fn groups_filters_and_steps() {
    let mut records = Vec::new();
    for minute in 0..10 {
        for i in 0..20 {
            records.push(record(minute, "w1", "r1", 100.0 + i as f64));
            let slow = if minute >= 5 { 1000.0 } else { 100.0 };
            records.push(record(minute, "w2", "r2", slow + i as f64));
        }
    }
    let mut rollup = Rollup::new(&spec(100));
    let stats = rollup.add_requests(&batch(&records)).unwrap();
    assert_eq!(stats.rows, 400);
    assert_eq!(rollup.combinations(), 2);

    let by_worker = query_rollups(&[&rollup], &query("ttft", &["worker"])).unwrap();
    assert_eq!(by_worker.len(), 2);
    assert_eq!(by_worker[0].group, vec![("worker".into(), "w1".into())]);
    let w1 = &by_worker[0].points[0];
    assert_eq!(w1.requests, 200);
    assert!((w1.values[1].unwrap() - 118.0).abs() / 118.0 <= 0.01);
    let w2_p99 = by_worker[1].points[0].values[1].unwrap();
    assert!((w2_p99 - 1019.0).abs() / 1019.0 <= 0.01, "{w2_p99}");

    let mut stepped = query("error_rate", &["worker"]);
    stepped.step_ns = Some(5 * MINUTE_NS);
    stepped.filters = vec![("model_version".into(), "r2".into())];
    let series = query_rollups(&[&rollup], &stepped).unwrap();
    assert_eq!(series.len(), 1);
    let values: Vec<f64> = series[0]
        .points
        .iter()
        .map(|p| p.values[0].unwrap())
        .collect();
    assert_eq!(values, vec![0.0, 1.0]);

    let hit = query_rollups(&[&rollup], &query("prefix_cache_hit_rate", &[])).unwrap();
    assert_eq!(hit[0].points[0].values[0], Some(0.25));

    let err = query_rollups(&[&rollup], &query("ttft", &["tenant"])).unwrap_err();
    assert!(matches!(err, RollupError::UnknownDimension { .. }), "{err}");
}

#[test]
fn a_column_of_the_wrong_type_is_an_error_naming_it() {
    use arrow::array::{ArrayRef, StringArray, TimestampNanosecondArray};
    use std::sync::Arc;
    let batch = RecordBatch::try_from_iter([
        (
            "ts",
            Arc::new(TimestampNanosecondArray::from(vec![1_i64])) as ArrayRef,
        ),
        (
            "ttft_ms",
            Arc::new(StringArray::from(vec!["fast"])) as ArrayRef,
        ),
    ])
    .unwrap();
    let err = Rollup::new(&spec(10)).add_requests(&batch).unwrap_err();
    assert!(
        matches!(&err, RollupError::ColumnType { column, .. } if column == "ttft_ms"),
        "{err}"
    );
    assert!(err.to_string().contains("Float64"), "{err}");
}

#[test]
fn budget_folds_into_other_and_counts() {
    let records: Vec<RequestRecord> = (0..10)
        .map(|i| record(0, &format!("w{i}"), "r1", 50.0))
        .collect();
    let mut rollup = Rollup::new(&spec(3));
    let stats = rollup.add_requests(&batch(&records)).unwrap();
    assert_eq!(stats.folded_rows, 7);
    assert_eq!(rollup.combinations(), 4);
    let series = query_rollups(&[&rollup], &query("ttft", &["worker"])).unwrap();
    let other = series.iter().find(|s| s.group[0].1 == OTHER).unwrap();
    assert_eq!(other.points[0].requests, 7);
    assert_eq!(rollup.requests(), 10);
}

#[test]
fn merge_split_and_encode_preserve_answers() {
    let records: Vec<RequestRecord> = (0..180)
        .map(|m| record(m, if m % 2 == 0 { "a" } else { "b" }, "r1", 10.0 + m as f64))
        .collect();
    let mut whole = Rollup::new(&spec(100));
    whole.add_requests(&batch(&records)).unwrap();
    let mut halves = Rollup::new(&spec(100));
    let mut first = Rollup::new(&spec(100));
    first.add_requests(&batch(&records[..90])).unwrap();
    let mut second = Rollup::new(&RollupSpec {
        dimensions: vec!["model_version".into(), "worker".into()],
        max_combinations: 100,
    });
    second.add_requests(&batch(&records[90..])).unwrap();
    halves.merge(&first);
    halves.merge(&second);
    let q = query("ttft", &["worker"]);
    assert_eq!(
        query_rollups(&[&whole], &q).unwrap(),
        query_rollups(&[&halves], &q).unwrap()
    );
    let hours = whole.split_by_hour();
    assert_eq!(hours.len(), 3);
    let decoded: Vec<Rollup> = hours
        .iter()
        .map(|(_, r)| Rollup::decode(&r.encode()).unwrap())
        .collect();
    let refs: Vec<&Rollup> = decoded.iter().collect();
    assert_eq!(
        query_rollups(&refs, &q).unwrap(),
        query_rollups(&[&whole], &q).unwrap()
    );
    let bytes = whole.encode();
    for cut in [3, 10, bytes.len() - 1] {
        assert!(Rollup::decode(&bytes[..cut]).is_err());
    }
}

#[test]
fn a_whole_range_query_open_at_one_end_divides_by_the_datas_extent() {
    let records: Vec<_> = (0..10)
        .flat_map(|minute| (0..20).map(move |i| record(minute, "w1", "r1", 100.0 + i as f64)))
        .collect();
    let mut rollup = Rollup::new(&spec(100));
    rollup.add_requests(&batch(&records)).unwrap();
    let base = 1_764_381_600_000_000_000;
    // since minute 2, until open, no step: minutes 2..=9, 160 requests in 8 minutes
    let mut open_until = query("request_rate", &[]);
    open_until.since_ns = Some(base + 2 * MINUTE_NS);
    let series = query_rollups(&[&rollup], &open_until).unwrap();
    let point = &series[0].points[0];
    assert_eq!(point.requests, 160);
    assert_eq!(point.ts_ns, base + 2 * MINUTE_NS);
    let rate = point.values[0].unwrap();
    assert!((rate - 160.0 / 480.0).abs() < 1e-9, "{rate}");
    // until minute 5, since open: minutes 0..=4, 100 requests in 5 minutes, dated minute 0
    let mut open_since = query("request_rate", &[]);
    open_since.until_ns = Some(base + 5 * MINUTE_NS);
    let point = &query_rollups(&[&rollup], &open_since).unwrap()[0].points[0];
    assert_eq!((point.requests, point.ts_ns), (100, base));
    let rate = point.values[0].unwrap();
    assert!((rate - 100.0 / 300.0).abs() < 1e-9, "{rate}");
}
