//! Integration tests of infersight-ingest: OTLP decoding (protobuf, JSON, gzip, errors), the
//! conversion to canonical batches, and the file reader. One test binary, one module per topic.

// Test code: a failed step should fail the test loudly, so unwrapping is fine here.
#![allow(clippy::unwrap_used)]

mod correlate;
mod files;
mod fuzz;
mod logs_metrics;
mod otlp_json;
mod prom_scrape;
mod prometheus;
mod receivers;
mod sampling;
mod sniff;
mod span_tree;
mod trace_json;
mod traces;

use infersight_model::{Table, TableBatch};
use opentelemetry_proto::tonic::common::v1::{AnyValue, ArrayValue, KeyValue, any_value};

pub fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

pub fn s(value: &str) -> any_value::Value {
    any_value::Value::StringValue(value.to_string())
}

pub fn i(value: i64) -> any_value::Value {
    any_value::Value::IntValue(value)
}

pub fn d(value: f64) -> any_value::Value {
    any_value::Value::DoubleValue(value)
}

pub fn array(values: Vec<any_value::Value>) -> any_value::Value {
    any_value::Value::ArrayValue(ArrayValue {
        values: values
            .into_iter()
            .map(|v| AnyValue { value: Some(v) })
            .collect(),
    })
}

/// The one batch of `table` among `batches` (panics when absent or repeated).
pub fn batch_of(batches: &[TableBatch], table: Table) -> &arrow::array::RecordBatch {
    let found: Vec<_> = batches.iter().filter(|b| b.table == table).collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {table} batch, got {}",
        found.len()
    );
    &found[0].batch
}

pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}
