//! First stage of OTLP ingestion: request body bytes (as the HTTP or gRPC receiver got them) →
//! decompressed payload → `Export*ServiceRequest` messages. Protobuf goes through prost, OTLP/JSON
//! through opentelemetry-proto's serde impls, after repairing the spec-valid forms those impls
//! reject (enum names instead of numbers, omitted empty lists). [`super::convert`] comes next.

use std::io::Read;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::SeverityNumber;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, ExponentialHistogram, Gauge, Histogram, Sum, Summary,
};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::error::IngestError;

/// Wire encoding of an OTLP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    /// Parses a `Content-Type` header value, ignoring parameters such as `charset`.
    pub fn from_content_type(content_type: Option<&str>) -> Result<Encoding, IngestError> {
        let Some(raw) = content_type else {
            return Err(IngestError::UnsupportedContentType("(missing)".into()));
        };
        let media_type = raw
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media_type.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(Encoding::Protobuf),
            "application/json" => Ok(Encoding::Json),
            _ => Err(IngestError::UnsupportedContentType(format!("`{raw}`"))),
        }
    }

    /// The `Content-Type` a response in this encoding carries.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Checks the content type, undoes the content encoding and enforces `max_bytes` on both the
/// received and the decompressed size (a small gzip body can inflate a thousandfold, so the
/// decompressed size is capped while inflating, never after).
pub fn decode_body(
    body: &[u8],
    content_type: Option<&str>,
    content_encoding: Option<&str>,
    max_bytes: usize,
) -> Result<(Vec<u8>, Encoding), IngestError> {
    let encoding = Encoding::from_content_type(content_type)?;
    if body.len() > max_bytes {
        return Err(IngestError::TooLarge { limit: max_bytes });
    }
    let coding = content_encoding
        .map(|c| c.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let bytes = match coding.as_str() {
        "" | "identity" => body.to_vec(),
        "gzip" | "x-gzip" => inflate(flate2::read::MultiGzDecoder::new(body), max_bytes, "gzip")?,
        "deflate" => inflate(flate2::read::ZlibDecoder::new(body), max_bytes, "deflate")?,
        other => return Err(IngestError::UnsupportedContentEncoding(other.to_string())),
    };
    Ok((bytes, encoding))
}

/// Decompresses at most `max_bytes`; one byte more means the body is too large.
fn inflate(reader: impl Read, max_bytes: usize, what: &str) -> Result<Vec<u8>, IngestError> {
    let mut out = Vec::new();
    let cap = (max_bytes as u64).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| IngestError::Gzip(format!("{what}: {e}")))?;
    if out.len() > max_bytes {
        return Err(IngestError::TooLarge { limit: max_bytes });
    }
    Ok(out)
}

pub fn decode_traces(
    bytes: &[u8],
    encoding: Encoding,
) -> Result<ExportTraceServiceRequest, IngestError> {
    decode(bytes, encoding)
}

pub fn decode_logs(
    bytes: &[u8],
    encoding: Encoding,
) -> Result<ExportLogsServiceRequest, IngestError> {
    decode(bytes, encoding)
}

pub fn decode_metrics(
    bytes: &[u8],
    encoding: Encoding,
) -> Result<ExportMetricsServiceRequest, IngestError> {
    decode(bytes, encoding)
}

fn decode<T: OtlpMessage>(bytes: &[u8], encoding: Encoding) -> Result<T, IngestError> {
    match encoding {
        Encoding::Protobuf => {
            T::decode(bytes).map_err(|e| IngestError::MalformedProtobuf(e.to_string()))
        }
        Encoding::Json => decode_json(bytes),
    }
}

/// An OTLP export request, with what its JSON decoding needs beyond serde.
///
/// serde's `flatten` on an `Option` (how opentelemetry-proto maps protobuf `oneof`s such as a
/// metric's data) turns any error inside into `None`: a metric whose `sum` holds one bad field
/// would vanish without a word. Messages with such fields say when a decoded value may have lost
/// data, and check the JSON for the errors serde swallowed.
pub trait OtlpMessage: prost::Message + Default + DeserializeOwned {
    /// Whether a decoded message has an empty `oneof` that the JSON may have had.
    fn may_have_lost_data(&self) -> bool {
        false
    }

    /// The first error inside a flattened `oneof` of the JSON document, named.
    fn check_json(_value: &Json) -> Result<(), String> {
        Ok(())
    }

    /// The message decoded without serde, or `None` when the document needs the serde path
    /// (which then decodes, repairs or rejects it). Only ever the same message serde would give.
    fn decode_json_fast(_bytes: &[u8]) -> Option<Self> {
        None
    }
}

impl OtlpMessage for ExportTraceServiceRequest {
    fn decode_json_fast(bytes: &[u8]) -> Option<Self> {
        super::trace_json::decode_traces_fast(bytes)
    }
}

impl OtlpMessage for ExportLogsServiceRequest {}

impl OtlpMessage for ExportMetricsServiceRequest {
    fn may_have_lost_data(&self) -> bool {
        self.resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .any(|m| m.data.is_none())
    }

    fn check_json(value: &Json) -> Result<(), String> {
        for resource in items(value, "resourceMetrics") {
            for scope in items(resource, "scopeMetrics") {
                for metric in items(scope, "metrics") {
                    let name = metric
                        .get("name")
                        .and_then(Json::as_str)
                        .unwrap_or_default();
                    for key in [
                        "gauge",
                        "sum",
                        "histogram",
                        "exponentialHistogram",
                        "summary",
                    ] {
                        let Some(data) = metric.get(key) else {
                            continue;
                        };
                        let checked = match key {
                            "gauge" => Gauge::deserialize(data).map(drop),
                            "sum" => Sum::deserialize(data).map(drop),
                            "histogram" => Histogram::deserialize(data).map(drop),
                            "exponentialHistogram" => {
                                ExponentialHistogram::deserialize(data).map(drop)
                            }
                            _ => Summary::deserialize(data).map(drop),
                        };
                        checked.map_err(|e| format!("metric `{name}`: {key}: {e}"))?;
                    }
                }
            }
        }
        Ok(())
    }
}

fn items<'a>(value: &'a Json, key: &str) -> impl Iterator<Item = &'a Json> {
    value
        .get(key)
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
}

/// Decodes OTLP/JSON. The fastest path is the message's own decoder where it has one (traces,
/// see [`super::trace_json`]); the next hands the bytes straight to serde; only when that fails on
/// the data (not the syntax), or may have silently lost data, is the document parsed into a
/// `Value`, repaired, checked and decoded again, so conformant payloads pay little and syntax
/// errors keep their line and column.
pub fn decode_json<T: OtlpMessage>(bytes: &[u8]) -> Result<T, IngestError> {
    if let Some(message) = T::decode_json_fast(bytes) {
        return Ok(message);
    }
    decode_json_serde(bytes)
}

/// [`decode_json`] without the message's own decoder: serde, then repair. Public so tests and
/// benchmarks can compare both paths.
pub fn decode_json_serde<T: OtlpMessage>(bytes: &[u8]) -> Result<T, IngestError> {
    let first_error = match serde_json::from_slice::<T>(bytes) {
        Ok(message) if !message.may_have_lost_data() => return Ok(message),
        Ok(_) => None,
        Err(e) if !e.is_data() => return Err(IngestError::from_json(&e)),
        Err(e) => Some(e),
    };
    let value = serde_json::from_slice::<Json>(bytes).map_err(|e| IngestError::from_json(&e))?;
    decode_repaired(value, first_error.as_ref())
}

/// Decodes an OTLP/JSON document that is already parsed (the file reader parses each line once to
/// tell traces, logs and metrics apart). Errors carry no position: the caller knows the line.
pub fn decode_json_value<T: OtlpMessage>(value: Json) -> Result<T, IngestError> {
    decode_repaired(value, None)
}

/// Repairs, checks and decodes a parsed document. When it still fails, the error of the direct
/// decode (with its position) is reported if there was one.
fn decode_repaired<T: OtlpMessage>(
    mut value: Json,
    first_error: Option<&serde_json::Error>,
) -> Result<T, IngestError> {
    let invalid = |message: String| IngestError::InvalidJson {
        message,
        line: 0,
        column: 0,
    };
    repair_otlp_json(&mut value);
    T::check_json(&value).map_err(invalid)?;
    serde_json::from_value::<T>(value).map_err(|e| match first_error {
        Some(first) => IngestError::from_json(first),
        None => invalid(e.to_string()),
    })
}

/// Rewrites spec-valid OTLP/JSON forms that opentelemetry-proto's serde does not accept into
/// forms it does. Returns whether anything changed.
///
/// * enum fields given by name (`"kind": "SPAN_KIND_SERVER"`) → their number (the spec asks for
///   numbers, but protobuf's JSON mapping accepts names and some exporters send them);
/// * `arrayValue` / `kvlistValue` objects that omit their empty `values` list;
/// * key/value pairs that omit an empty `key`.
pub fn repair_otlp_json(value: &mut Json) -> bool {
    let mut changed = false;
    repair(value, None, &mut changed);
    changed
}

fn repair(value: &mut Json, field: Option<&str>, changed: &mut bool) {
    match value {
        Json::Object(map) => {
            for (key, child) in map.iter_mut() {
                if let Json::String(name) = child
                    && let Some(number) = enum_number(key, name)
                {
                    *child = Json::from(number);
                    *changed = true;
                    continue;
                }
                if matches!(key.as_str(), "arrayValue" | "kvlistValue")
                    && let Json::Object(inner) = child
                    && !inner.contains_key("values")
                {
                    inner.insert("values".into(), Json::Array(Vec::new()));
                    *changed = true;
                }
                repair(child, Some(key.as_str()), changed);
            }
        }
        Json::Array(items) => {
            // Lists of KeyValue: attributes anywhere, and the values of a kvlistValue.
            let key_values = matches!(field, Some("attributes") | Some("values"));
            for item in items.iter_mut() {
                // An AnyValue never has a `value` field, a KeyValue always may.
                if key_values
                    && let Json::Object(pair) = item
                    && pair.contains_key("value")
                    && !pair.contains_key("key")
                {
                    pair.insert("key".into(), Json::String(String::new()));
                    *changed = true;
                }
                repair(item, None, changed);
            }
        }
        _ => {}
    }
}

/// Number of an OTLP enum given by its protobuf name, for the fields that hold enums.
fn enum_number(field: &str, name: &str) -> Option<i32> {
    match field {
        "kind" => SpanKind::from_str_name(name).map(|k| k as i32),
        "code" => StatusCode::from_str_name(name).map(|c| c as i32),
        "severityNumber" => SeverityNumber::from_str_name(name).map(|s| s as i32),
        "aggregationTemporality" => AggregationTemporality::from_str_name(name).map(|a| a as i32),
        _ => None,
    }
}
