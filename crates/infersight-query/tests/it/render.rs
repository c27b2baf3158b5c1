//! Golden output of the three formats and the HTTP JSON shape for a tiny fixed result.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use infersight_query::{OutputFormat, QueryOutput};

use crate::support::{EngineOf, TestStore, base_ns, request};

fn tiny() -> QueryOutput {
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
            false,
        ),
        Field::new("model", DataType::Utf8, true),
        Field::new("e2e_ms", DataType::Float64, true),
        Field::new("n", DataType::Int64, true),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampNanosecondArray::from(vec![base_ns(), base_ns() + 1_500_000_000])
                .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from(vec![Some("llama, 8b"), None])),
        Arc::new(Float64Array::from(vec![Some(820.5), Some(1700.0)])),
        Arc::new(Int64Array::from(vec![Some(3), None])),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
    QueryOutput {
        schema,
        batches: vec![batch],
        elapsed_ms: 1.25,
    }
}

#[test]
fn table_golden() {
    let expected = "\
+--------------------------+-----------+--------+---+
| ts                       | model     | e2e_ms | n |
+--------------------------+-----------+--------+---+
| 2026-11-29T10:00:00Z     | llama, 8b | 820.5  | 3 |
| 2026-11-29T10:00:01.500Z |           | 1700.0 |   |
+--------------------------+-----------+--------+---+";
    assert_eq!(tiny().render(OutputFormat::Table), expected);
}

#[test]
fn csv_golden() {
    let expected = "\
ts,model,e2e_ms,n
2026-11-29T10:00:00Z,\"llama, 8b\",820.5,3
2026-11-29T10:00:01.500Z,,1700.0,
";
    assert_eq!(tiny().render(OutputFormat::Csv), expected);
}

#[test]
fn json_golden() {
    let expected = concat!(
        r#"[{"ts":"2026-11-29T10:00:00Z","model":"llama, 8b","e2e_ms":820.5,"n":3},"#,
        r#"{"ts":"2026-11-29T10:00:01.500Z","model":null,"e2e_ms":1700.0,"n":null}]"#
    );
    assert_eq!(tiny().render(OutputFormat::Json), expected);
}

#[test]
fn http_json_value() {
    let value = tiny().to_json_value().unwrap();
    let expected = serde_json::json!({
        "columns": [
            {"name": "ts", "type": "Timestamp(ns, \"UTC\")"},
            {"name": "model", "type": "Utf8"},
            {"name": "e2e_ms", "type": "Float64"},
            {"name": "n", "type": "Int64"},
        ],
        "rows": [
            {"ts": "2026-11-29T10:00:00Z", "model": "llama, 8b", "e2e_ms": 820.5, "n": 3},
            {"ts": "2026-11-29T10:00:01.500Z", "model": null, "e2e_ms": 1700.0, "n": null},
        ],
        "row_count": 2,
        "elapsed_ms": 1.25,
    });
    assert_eq!(value, expected);
}

#[test]
fn format_names_parse() {
    assert_eq!(
        "table".parse::<OutputFormat>().unwrap(),
        OutputFormat::Table
    );
    assert_eq!("csv".parse::<OutputFormat>().unwrap(), OutputFormat::Csv);
    assert_eq!("json".parse::<OutputFormat>().unwrap(), OutputFormat::Json);
    assert!("yaml".parse::<OutputFormat>().is_err());
}

#[tokio::test]
async fn empty_results_still_have_headers() {
    let store = TestStore::new();
    store.append_requests(&[request(base_ns(), "m", 1.0, "{}")]);
    let engine = store.engine();
    let output = engine
        .sql("SELECT model, e2e_ms FROM requests WHERE model = 'none'")
        .await
        .unwrap();
    assert_eq!(output.render(OutputFormat::Csv), "model,e2e_ms\n");
    assert_eq!(output.render(OutputFormat::Json), "[]");
    assert_eq!(
        output.render(OutputFormat::Table),
        "+-------+--------+\n| model | e2e_ms |\n+-------+--------+\n+-------+--------+"
    );
    let value = output.to_json_value().unwrap();
    assert_eq!(value["row_count"], 0);
    assert_eq!(value["rows"], serde_json::json!([]));
}
