//! Dimension discovery over `requests`: low-cardinality columns and attrs keys are listed with
//! their value counts; ids and high-cardinality attributes are not.

use infersight_explore::{Dimension, DimensionSource, discover_dimensions};
use infersight_model::RequestRecord;
use infersight_store::{StorageBackend, TimeRange};

use crate::support::{EngineOf, HOUR_NS, TestStore, base_ns};

/// 3000 requests over two hours: adapters a (1/3) and b (2/3), a uuid per request, a batch size
/// in {8, 16}, two workers, and a `flags` array that is not a scalar.
fn fleet() -> std::sync::Arc<TestStore> {
    let store = TestStore::new();
    let rows: Vec<RequestRecord> = (0..3000)
        .map(|i: i64| {
            let adapter = if i % 3 == 0 { "a" } else { "b" };
            RequestRecord {
                ts: base_ns() + i * 2_000_000_000,
                request_id: Some(format!("req-{i}")),
                model: Some("llama".into()),
                worker: Some(format!("w{}", i % 2)),
                batch_size: Some(if i % 4 == 0 { 16 } else { 8 }),
                tenant: Some(format!("tenant-{i}")),
                attrs: format!(
                    r#"{{"llm.lora.adapters":"{adapter}","request_uuid":"{:032x}","sampled":{},"flags":["x"]}}"#,
                    i * 7919,
                    i % 2 == 0
                ),
                ..Default::default()
            }
        })
        .collect();
    store.append_requests(&rows[..2000]);
    store.flush().unwrap();
    store.append_requests(&rows[2000..]);
    store
}

fn find<'a>(dimensions: &'a [Dimension], name: &str) -> Option<&'a Dimension> {
    dimensions.iter().find(|d| d.name == name)
}

#[tokio::test]
async fn low_cardinality_attrs_and_columns_are_listed() {
    let store = fleet();
    let engine = store.engine();
    let dimensions = discover_dimensions(&engine, TimeRange::ALL, 100, 10)
        .await
        .unwrap();

    let adapters = find(&dimensions, "llm.lora.adapters").expect("adapters listed");
    assert_eq!(adapters.source, DimensionSource::Attrs);
    assert_eq!(adapters.distinct_values, 2);
    assert_eq!(adapters.total_rows, 3000);
    assert_eq!(
        adapters.values,
        vec![("b".to_string(), 2000), ("a".to_string(), 1000)]
    );

    let sampled = find(&dimensions, "sampled").expect("booleans are scalars");
    assert_eq!(
        sampled.values,
        vec![("false".to_string(), 1500), ("true".to_string(), 1500)]
    );

    let batch_size = find(&dimensions, "batch_size").expect("settings are listed");
    assert_eq!(batch_size.source, DimensionSource::Column);
    assert_eq!(
        batch_size.values,
        vec![("8".to_string(), 2250), ("16".to_string(), 750)]
    );

    let worker = find(&dimensions, "worker").unwrap();
    assert_eq!((worker.distinct_values, worker.total_rows), (2, 3000));
    let model = find(&dimensions, "model").unwrap();
    assert_eq!(model.values, vec![("llama".to_string(), 3000)]);

    // ids, high-cardinality values, non-scalars and all-null columns are excluded
    for excluded in [
        "request_uuid",
        "tenant",
        "flags",
        "request_id",
        "device",
        "status",
    ] {
        assert!(find(&dimensions, excluded).is_none(), "{excluded} listed");
    }
    let names: Vec<&str> = dimensions.iter().map(|d| d.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(
        names,
        vec![
            "batch_size",
            "llm.lora.adapters",
            "model",
            "sampled",
            "worker"
        ]
    );
}

#[tokio::test]
async fn cardinality_and_value_limits_and_time_range() {
    let store = fleet();
    let engine = store.engine();

    // max_cardinality 1 keeps only single-valued dimensions
    let dimensions = discover_dimensions(&engine, TimeRange::ALL, 1, 10)
        .await
        .unwrap();
    let names: Vec<&str> = dimensions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["model"]);

    // max_values truncates the value list, not the distinct count
    let dimensions = discover_dimensions(&engine, TimeRange::ALL, 100, 1)
        .await
        .unwrap();
    let adapters = find(&dimensions, "llm.lora.adapters").unwrap();
    assert_eq!(adapters.distinct_values, 2);
    assert_eq!(adapters.values, vec![("b".to_string(), 2000)]);

    // the time range restricts the rows counted (first hour: 1800 requests 2 s apart)
    let range = TimeRange {
        since_ns: Some(base_ns()),
        until_ns: Some(base_ns() + HOUR_NS),
    };
    let dimensions = discover_dimensions(&engine, range, 100, 10).await.unwrap();
    let adapters = find(&dimensions, "llm.lora.adapters").unwrap();
    assert_eq!(adapters.total_rows, 1800);
    assert_eq!(
        adapters.values,
        vec![("b".to_string(), 1200), ("a".to_string(), 600)]
    );
    let stats = engine
        .last_scan_stats(infersight_model::Table::Requests)
        .unwrap();
    assert_eq!(stats.range, range);
    assert_eq!(stats.segments_pruned, 1, "{stats:?}");
}

#[tokio::test]
async fn empty_range_has_no_dimensions() {
    let store = fleet();
    store.flush().unwrap();
    let engine = store.engine();
    let range = TimeRange {
        since_ns: Some(base_ns() - 2 * HOUR_NS),
        until_ns: Some(base_ns()),
    };
    assert!(
        discover_dimensions(&engine, range, 100, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// An `attrs` dimension's values are the text `json_get` gives (numbers as JSON renders them,
/// strings unescaped), so they are exactly what a `json_get` filter or GROUP BY sees; counted
/// over several segments (scanned as several partitions) and the memtable.
#[tokio::test]
async fn attrs_values_are_what_json_get_returns() {
    let store = TestStore::new();
    let values = [
        "1",
        "1.0",
        "2.5e3",
        "-0.0",
        "0.1",
        "12345678901234567890",
        "true",
        r#""é""#,
        r#""x\ny""#,
        "null",
    ];
    let rows: Vec<RequestRecord> = (0..1200)
        .map(|i: i64| RequestRecord {
            ts: base_ns() + i * 1_000_000_000,
            model: Some("llama".into()),
            attrs: format!(
                r#"{{"num":{},"tier":"{}","k\"q":{}}}"#,
                values[i as usize % values.len()],
                ["gold", "silver"][i as usize % 2],
                i % 3
            ),
            ..Default::default()
        })
        .collect();
    for (index, chunk) in rows.chunks(300).enumerate() {
        store.append_requests(chunk);
        if index < 3 {
            store.flush().unwrap();
        }
    }
    let engine = store.engine();
    let dimensions = discover_dimensions(&engine, TimeRange::ALL, 100, 100)
        .await
        .unwrap();
    let attrs: Vec<&Dimension> = dimensions
        .iter()
        .filter(|d| d.source == DimensionSource::Attrs)
        .collect();
    let names: Vec<&str> = attrs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec![r#"k"q"#, "num", "tier"]);
    for dimension in attrs {
        let key = dimension.name.replace('\'', "''");
        let sql = format!(
            "SELECT json_get(attrs, '{key}') AS v, count(*) AS n FROM requests \
             WHERE json_get(attrs, '{key}') IS NOT NULL GROUP BY v"
        );
        let output = engine.sql(&sql).await.unwrap();
        let mut expected: Vec<(String, u64)> = Vec::new();
        for batch in &output.batches {
            for row in 0..batch.num_rows() {
                let text = |column| {
                    arrow::util::display::array_value_to_string(batch.column(column), row).unwrap()
                };
                expected.push((text(0), text(1).parse().unwrap()));
            }
        }
        expected.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        assert_eq!(dimension.values, expected, "{}", dimension.name);
        let total: u64 = expected.iter().map(|(_, n)| n).sum();
        assert_eq!(dimension.total_rows, total);
    }
    let num = find(&dimensions, "num").unwrap();
    assert_eq!(num.distinct_values, 9);
    assert!(num.values.contains(&("2500.0".to_string(), 120)));
}
