//! Small builders for OTLP protobuf structs (key/values, spans, log records, metric points), so
//! the simulator reads as telemetry rather than struct literals.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::metrics::v1::number_data_point;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, Sum,
    metric,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

pub fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

pub fn s(key: &str, v: impl Into<String>) -> KeyValue {
    kv(key, Value::StringValue(v.into()))
}

pub fn i(key: &str, v: i64) -> KeyValue {
    kv(key, Value::IntValue(v))
}

pub fn f(key: &str, v: f64) -> KeyValue {
    kv(key, Value::DoubleValue(v))
}

pub fn b(key: &str, v: bool) -> KeyValue {
    kv(key, Value::BoolValue(v))
}

pub fn str_array(key: &str, items: &[&str]) -> KeyValue {
    kv(
        key,
        Value::ArrayValue(ArrayValue {
            values: items
                .iter()
                .map(|x| AnyValue {
                    value: Some(Value::StringValue(x.to_string())),
                })
                .collect(),
        }),
    )
}

pub fn resource(attributes: Vec<KeyValue>) -> Option<Resource> {
    Some(Resource {
        attributes,
        ..Default::default()
    })
}

pub fn scope(name: &str, version: &str) -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: name.to_string(),
        version: version.to_string(),
        ..Default::default()
    })
}

pub fn text_body(text: String) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(Value::StringValue(text)),
    })
}

fn point(ts_ns: i64, start_ns: i64, value: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start_ns as u64,
        time_unix_nano: ts_ns as u64,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..Default::default()
    }
}

pub fn gauge(name: &str, unit: &str, ts_ns: i64, value: f64, attrs: Vec<KeyValue>) -> Metric {
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: vec![point(ts_ns, 0, value, attrs)],
        })),
        ..Default::default()
    }
}

/// A cumulative explicit-bounds histogram: `(at, start)` times, `(count, sum, bucket counts,
/// bounds)` (one count more than bounds, the last above them all).
pub fn histogram(
    name: &str,
    unit: &str,
    (ts_ns, start_ns): (i64, i64),
    (count, sum, counts, bounds): (u64, f64, &[u64], &[f64]),
    attrs: Vec<KeyValue>,
) -> Metric {
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                attributes: attrs,
                start_time_unix_nano: start_ns as u64,
                time_unix_nano: ts_ns as u64,
                count,
                sum: Some(sum),
                bucket_counts: counts.to_vec(),
                explicit_bounds: bounds.to_vec(),
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

pub fn counter(name: &str, ts_ns: i64, start_ns: i64, value: f64, attrs: Vec<KeyValue>) -> Metric {
    Metric {
        name: name.to_string(),
        data: Some(metric::Data::Sum(Sum {
            data_points: vec![point(ts_ns, start_ns, value, attrs)],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}
