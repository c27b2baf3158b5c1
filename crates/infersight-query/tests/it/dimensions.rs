//! Dimension discovery over `requests`: low-cardinality columns and attrs keys are listed with
//! their value counts; ids and high-cardinality attributes are not.

use infersight_model::RequestRecord;
use infersight_query::{Dimension, DimensionSource};
use infersight_store::{StorageBackend, TimeRange};

use crate::support::{HOUR_NS, TestStore, base_ns};

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
    let dimensions = engine.dimensions(TimeRange::ALL, 100, 10).await.unwrap();

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
    let dimensions = engine.dimensions(TimeRange::ALL, 1, 10).await.unwrap();
    let names: Vec<&str> = dimensions.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, vec!["model"]);

    // max_values truncates the value list, not the distinct count
    let dimensions = engine.dimensions(TimeRange::ALL, 100, 1).await.unwrap();
    let adapters = find(&dimensions, "llm.lora.adapters").unwrap();
    assert_eq!(adapters.distinct_values, 2);
    assert_eq!(adapters.values, vec![("b".to_string(), 2000)]);

    // the time range restricts the rows counted (first hour: 1800 requests 2 s apart)
    let range = TimeRange {
        since_ns: Some(base_ns()),
        until_ns: Some(base_ns() + HOUR_NS),
    };
    let dimensions = engine.dimensions(range, 100, 10).await.unwrap();
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
    assert!(engine.dimensions(range, 100, 10).await.unwrap().is_empty());
}
