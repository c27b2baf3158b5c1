//! Request rows rebuilt from stored spans, for what a crash took away: the receivers hold a
//! request's candidate rows until its other spans arrive ([`super::correlate`]), while the spans
//! themselves are appended and acknowledged at once. A `serve` that dies in that window loses
//! the held rows, not the spans; at its next start the rows are made again from the stored spans
//! of the last minutes, by the same conversion and merge the receivers use, and those the store
//! already holds are left out, so no request is written twice.
//!
//! Stored spans keep their attributes (resource ones included, in one JSON object), ids, names,
//! times and status; phase child spans are spans too, so latency breakdowns come back. Token
//! events are in their own table and are not read: a row whose only source of timings was its
//! token events is rebuilt without them.

use std::collections::{HashMap, HashSet};

use infersight_model::mapping::AttributeMapper;
use infersight_model::{RequestRecord, SpanRecord};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use serde_json::Value;

use super::convert::{Converted, traces_to_batches};
use crate::IngestError;
use infersight_model::Table;

/// The `requests` rows of `spans` (stored spans, in any order) that `stored` (the stored rows of
/// the same time and a while before) lacks: the rows the receivers held when they stopped.
pub fn rebuild_requests(
    spans: &[SpanRecord],
    stored: &[RequestRecord],
    mapper: &AttributeMapper,
) -> Result<Vec<RequestRecord>, IngestError> {
    if spans.is_empty() {
        return Ok(Vec::new());
    }
    let export = spans_to_export(spans);
    let Converted { batches, .. } = traces_to_batches(&export, mapper)?;
    let mut rows = Vec::new();
    for batch in batches.iter().filter(|b| b.table == Table::Requests) {
        rows.extend(RequestRecord::from_batch(&batch.batch)?);
    }
    let known = StoredRows::new(stored);
    rows.retain(|row| !known.holds(row));
    Ok(rows)
}

/// What the store already holds of the rebuilt rows' requests.
struct StoredRows<'a> {
    /// (trace, span) of every stored row.
    spans: HashSet<(&'a str, &'a str)>,
    /// Traces with a stored row.
    traces: HashSet<&'a str>,
    by_request_id: HashMap<&'a str, Vec<&'a RequestRecord>>,
}

impl<'a> StoredRows<'a> {
    fn new(stored: &'a [RequestRecord]) -> StoredRows<'a> {
        let mut known = StoredRows {
            spans: HashSet::new(),
            traces: HashSet::new(),
            by_request_id: HashMap::new(),
        };
        for row in stored {
            if let Some(trace) = row.trace_id.as_deref() {
                known.traces.insert(trace);
                if let Some(span) = row.span_id.as_deref() {
                    known.spans.insert((trace, span));
                }
            }
            if let Some(id) = row.request_id.as_deref().filter(|id| !id.is_empty()) {
                known.by_request_id.entry(id).or_default().push(row);
            }
        }
        known
    }

    /// The row's span is stored as a row; or another row of its request is (the same request
    /// id, model and time, as the receivers merge them); or it is an outer span (it knows no
    /// latency phase) of a trace with a stored row, which was merged into that row.
    fn holds(&self, row: &RequestRecord) -> bool {
        let trace = row.trace_id.as_deref();
        if let (Some(trace), Some(span)) = (trace, row.span_id.as_deref())
            && self.spans.contains(&(trace, span))
        {
            return true;
        }
        let same_request = row
            .request_id
            .as_deref()
            .and_then(|id| self.by_request_id.get(id))
            .is_some_and(|rows| {
                rows.iter()
                    .any(|other| super::correlate::same_request(row, other))
            });
        let outer = [
            row.queue_ms,
            row.prefill_ms,
            row.ttft_ms,
            row.decode_ms,
            row.tpot_ms,
        ]
        .iter()
        .all(Option::is_none);
        same_request || (outer && trace.is_some_and(|t| self.traces.contains(t)))
    }
}

/// Stored spans as one OTLP export, a resource per service; the stored attributes (resource ones
/// merged in) become the span's.
fn spans_to_export(spans: &[SpanRecord]) -> ExportTraceServiceRequest {
    let mut by_service: HashMap<Option<&str>, Vec<Span>> = HashMap::new();
    for record in spans {
        let (Some(trace_id), Some(span_id)) = (
            record.trace_id.as_deref().and_then(id_bytes),
            record.span_id.as_deref().and_then(id_bytes),
        ) else {
            continue;
        };
        let span = Span {
            trace_id,
            span_id,
            parent_span_id: record
                .parent_span_id
                .as_deref()
                .and_then(id_bytes)
                .unwrap_or_default(),
            name: record.name.clone().unwrap_or_default(),
            kind: span_kind(record.kind.as_deref()) as i32,
            start_time_unix_nano: u64::try_from(record.ts).unwrap_or_default(),
            end_time_unix_nano: record
                .end_ts
                .and_then(|end| u64::try_from(end).ok())
                .unwrap_or_default(),
            attributes: attributes(&record.attrs),
            status: Some(Status {
                message: record.status_message.clone().unwrap_or_default(),
                code: status_code(record.status.as_deref()) as i32,
            }),
            ..Default::default()
        };
        by_service
            .entry(record.service.as_deref())
            .or_default()
            .push(span);
    }
    let mut services: Vec<_> = by_service.into_iter().collect();
    services.sort_by(|a, b| a.0.cmp(&b.0));
    ExportTraceServiceRequest {
        resource_spans: services
            .into_iter()
            .map(|(service, spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: service
                        .map(|name| key_value("service.name", Value::String(name.to_string())))
                        .into_iter()
                        .collect(),
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    }
}

/// A stored hex id as bytes (`None` when it is not hex).
fn id_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

fn span_kind(name: Option<&str>) -> SpanKind {
    match name {
        Some("internal") => SpanKind::Internal,
        Some("server") => SpanKind::Server,
        Some("client") => SpanKind::Client,
        Some("producer") => SpanKind::Producer,
        Some("consumer") => SpanKind::Consumer,
        _ => SpanKind::Unspecified,
    }
}

fn status_code(name: Option<&str>) -> StatusCode {
    match name {
        Some("ok") => StatusCode::Ok,
        Some("error") => StatusCode::Error,
        _ => StatusCode::Unset,
    }
}

/// The members of a stored `attrs` object as OTLP attributes (nothing when it is no object).
fn attributes(attrs: &str) -> Vec<KeyValue> {
    match serde_json::from_str::<serde_json::Map<String, Value>>(attrs) {
        Ok(members) => members
            .into_iter()
            .map(|(key, value)| key_value(&key, value))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn key_value(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(any_value(value)),
        ..Default::default()
    }
}

fn any_value(value: Value) -> AnyValue {
    use any_value::Value as V;
    let value = match value {
        Value::Null => None,
        Value::Bool(b) => Some(V::BoolValue(b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64().unwrap_or_default()),
        }),
        Value::String(s) => Some(V::StringValue(s)),
        Value::Array(items) => Some(V::ArrayValue(ArrayValue {
            values: items.into_iter().map(any_value).collect(),
        })),
        Value::Object(members) => Some(V::KvlistValue(KeyValueList {
            values: members
                .into_iter()
                .map(|(key, value)| key_value(&key, value))
                .collect(),
        })),
    };
    AnyValue { value }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_bad_hex_is_none() {
        assert_eq!(id_bytes("0a0b"), Some(vec![10, 11]));
        assert_eq!(id_bytes("0a0"), None);
        assert_eq!(id_bytes("zz"), None);
    }

    #[test]
    fn attributes_keep_their_types() {
        let kv = attributes(r#"{"a":1,"b":1.5,"c":"x","d":true,"e":[1],"f":{"g":2}}"#);
        assert_eq!(kv.len(), 6);
        assert!(matches!(
            kv[0].value.as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::IntValue(1))
        ));
        assert!(attributes("not json").is_empty());
    }
}
