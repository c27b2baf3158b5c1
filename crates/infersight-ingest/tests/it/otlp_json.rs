//! OTLP/JSON as the specification writes it (and as lenient exporters write it) decodes to the
//! same messages as protobuf; bodies are decompressed with a cap; errors name the problem.

use std::io::Write;

use infersight_ingest::otlp::decode::decode_json;
use infersight_ingest::{
    Encoding, IngestError, decode_body, decode_logs, decode_metrics, decode_traces,
};
use infersight_model::ErrorKind;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValueList, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;

use crate::{array, d, i, kv, s};

/// The message every JSON variant below encodes.
fn one_span() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("vllm"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![
                        0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33,
                        0x81, 0x3f, 0xc6, 0x0c,
                    ],
                    span_id: vec![0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74],
                    name: "llm_request".into(),
                    kind: 2,
                    start_time_unix_nano: 1_700_000_000_000_000_000,
                    end_time_unix_nano: 1_700_000_001_500_000_000,
                    attributes: vec![
                        kv("gen_ai.request.model", s("llama-3-8b")),
                        kv("gen_ai.usage.input_tokens", i(5)),
                        kv("gen_ai.latency.time_to_first_token", d(0.125)),
                        kv("llm.lora.adapters", array(vec![])),
                        kv("stream", any_value::Value::BoolValue(true)),
                    ],
                    status: Some(Status {
                        code: 1,
                        message: String::new(),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Spec-conformant: lowerCamelCase keys, upper-case hex ids (hex is case-insensitive), 64-bit
/// integers as decimal strings, enums as numbers.
pub const SPEC_JSON: &str = r#"{"resourceSpans":[{"resource":{"attributes":[
  {"key":"service.name","value":{"stringValue":"vllm"}}]},
 "scopeSpans":[{"spans":[{
  "traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"EEE19B7EC3C1B174",
  "name":"llm_request","kind":2,
  "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001500000000",
  "attributes":[
   {"key":"gen_ai.request.model","value":{"stringValue":"llama-3-8b"}},
   {"key":"gen_ai.usage.input_tokens","value":{"intValue":"5"}},
   {"key":"gen_ai.latency.time_to_first_token","value":{"doubleValue":0.125}},
   {"key":"llm.lora.adapters","value":{"arrayValue":{"values":[]}}},
   {"key":"stream","value":{"boolValue":true}}],
  "status":{"code":1}}]}]}]}"#;

/// Also valid per protobuf's JSON mapping, and seen from real exporters: integers as numbers,
/// enums by name, empty lists omitted, unknown fields (to be ignored).
const LENIENT_JSON: &str = r#"{"resourceSpans":[{"resource":{"attributes":[
  {"key":"service.name","value":{"stringValue":"vllm"}}]},
 "scopeSpans":[{"spans":[{
  "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
  "name":"llm_request","kind":"SPAN_KIND_SERVER","someFutureField":{"x":1},
  "startTimeUnixNano":1700000000000000000,"endTimeUnixNano":1700000001500000000,
  "attributes":[
   {"key":"gen_ai.request.model","value":{"stringValue":"llama-3-8b"}},
   {"key":"gen_ai.usage.input_tokens","value":{"intValue":5}},
   {"key":"gen_ai.latency.time_to_first_token","value":{"doubleValue":0.125}},
   {"key":"llm.lora.adapters","value":{"arrayValue":{}}},
   {"key":"stream","value":{"boolValue":true}}],
  "status":{"code":"STATUS_CODE_OK"}}]}]}]}"#;

#[test]
fn spec_json_decodes_like_protobuf() {
    let from_protobuf = decode_traces(&one_span().encode_to_vec(), Encoding::Protobuf).unwrap();
    let from_json = decode_traces(SPEC_JSON.as_bytes(), Encoding::Json).unwrap();
    assert_eq!(from_json, from_protobuf);
    assert_eq!(from_json, one_span());
}

#[test]
fn lenient_json_decodes_like_protobuf() {
    let from_json = decode_traces(LENIENT_JSON.as_bytes(), Encoding::Json).unwrap();
    assert_eq!(from_json, one_span());
}

#[test]
fn serde_output_of_the_crate_round_trips() {
    let text = serde_json::to_string(&one_span()).unwrap();
    assert_eq!(
        decode_traces(text.as_bytes(), Encoding::Json).unwrap(),
        one_span()
    );
}

#[test]
fn gzip_json_body_decodes() {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(SPEC_JSON.as_bytes()).unwrap();
    let body = encoder.finish().unwrap();
    let (bytes, encoding) = decode_body(
        &body,
        Some("application/json; charset=utf-8"),
        Some("gzip"),
        1 << 20,
    )
    .unwrap();
    assert_eq!(encoding, Encoding::Json);
    assert_eq!(decode_traces(&bytes, encoding).unwrap(), one_span());
}

#[test]
fn truncated_json_names_the_position() {
    let compact =
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(SPEC_JSON).unwrap())
            .unwrap();
    let err = decode_traces(&compact.as_bytes()[..80], Encoding::Json).unwrap_err();
    assert!(matches!(err, IngestError::InvalidJson { .. }), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::BadRequest);
    let message = err.to_string();
    assert!(
        message.starts_with("invalid otlp json at line 1 column 80: "),
        "{message}"
    );
    assert!(message.contains("EOF"), "{message}");
}

#[test]
fn wrong_json_types_name_the_field() {
    let text = SPEC_JSON.replace(r#""intValue":"5""#, r#""intValue":"five""#);
    let message = decode_traces(text.as_bytes(), Encoding::Json)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("invalid otlp json at line "),
        "{message}"
    );
    let text = SPEC_JSON.replace(r#""spanId":"EEE19B7EC3C1B174""#, r#""spanId":"not hex""#);
    let message = decode_traces(text.as_bytes(), Encoding::Json)
        .unwrap_err()
        .to_string();
    assert!(message.contains("invalid otlp json"), "{message}");
}

#[test]
fn garbage_protobuf_is_malformed() {
    let err = decode_traces(&[0xff, 0xff, 0xff, 0xff, 0x0f], Encoding::Protobuf).unwrap_err();
    assert!(matches!(err, IngestError::MalformedProtobuf(_)), "{err:?}");
    assert!(err.to_string().starts_with("malformed protobuf: "), "{err}");
    assert_eq!(err.kind(), ErrorKind::BadRequest);
    // A truncated valid message is malformed too.
    let body = one_span().encode_to_vec();
    assert!(decode_traces(&body[..body.len() - 3], Encoding::Protobuf).is_err());
}

#[test]
fn gzip_bomb_is_too_large() {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(&vec![0u8; 8 << 20]).unwrap();
    let body = encoder.finish().unwrap();
    assert!(body.len() < 64 << 10, "compressed to {} bytes", body.len());
    let err =
        decode_body(&body, Some("application/x-protobuf"), Some("gzip"), 1 << 20).unwrap_err();
    assert!(
        matches!(err, IngestError::TooLarge { limit } if limit == 1 << 20),
        "{err:?}"
    );
    assert_eq!(err.kind(), ErrorKind::TooLarge);
    // The same body under a larger limit inflates fine; exactly at the limit is allowed.
    let (bytes, _) =
        decode_body(&body, Some("application/x-protobuf"), Some("gzip"), 8 << 20).unwrap();
    assert_eq!(bytes.len(), 8 << 20);
    // A plain body over the limit is refused before any work.
    let err = decode_body(&[0u8; 100], Some("application/json"), None, 99).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooLarge);
}

#[test]
fn content_type_and_encoding_are_checked() {
    for content_type in [Some("text/plain"), Some("application/xml"), None] {
        let err = decode_body(b"{}", content_type, None, 1024).unwrap_err();
        assert!(
            matches!(err, IngestError::UnsupportedContentType(_)),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with("unsupported content type"),
            "{err}"
        );
    }
    for ok in [
        "application/x-protobuf",
        "application/protobuf",
        "Application/JSON ; charset=UTF-8",
    ] {
        decode_body(b"{}", Some(ok), Some("identity"), 1024).unwrap();
    }
    let err = decode_body(b"{}", Some("application/json"), Some("br"), 1024).unwrap_err();
    assert!(
        matches!(err, IngestError::UnsupportedContentEncoding(_)),
        "{err:?}"
    );
    let err = decode_body(b"not gzip", Some("application/json"), Some("gzip"), 1024).unwrap_err();
    assert!(matches!(err, IngestError::Gzip(_)), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("invalid compressed body: gzip: "),
        "{err}"
    );
}

#[test]
fn logs_json_with_enum_names_and_kvlist_body() {
    let text = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},
      "scopeLogs":[{"logRecords":[{
        "timeUnixNano":"1700000000000000000","observedTimeUnixNano":1700000000000000001,
        "severityNumber":"SEVERITY_NUMBER_WARN","severityText":"WARNING",
        "traceId":"5b8efff798038103d269b633813fc60c","spanId":"",
        "body":{"kvlistValue":{"values":[{"key":"msg","value":{"stringValue":"preempted"}},{"key":"n","value":{"intValue":"3"}}]}},
        "attributes":[{"key":"gen_ai.request.id","value":{"stringValue":"req-1"}}]}]}]}]}"#;
    let decoded: ExportLogsServiceRequest = decode_logs(text.as_bytes(), Encoding::Json).unwrap();
    let expected = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("vllm"))],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    time_unix_nano: 1_700_000_000_000_000_000,
                    observed_time_unix_nano: 1_700_000_000_000_000_001,
                    severity_number: SeverityNumber::Warn as i32,
                    severity_text: "WARNING".into(),
                    trace_id: one_span().resource_spans[0].scope_spans[0].spans[0]
                        .trace_id
                        .clone(),
                    body: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                        value: Some(any_value::Value::KvlistValue(KeyValueList {
                            values: vec![kv("msg", s("preempted")), kv("n", i(3))],
                        })),
                    }),
                    attributes: vec![kv("gen_ai.request.id", s("req-1"))],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    assert_eq!(decoded, expected);
    assert_eq!(
        decode_logs(&expected.encode_to_vec(), Encoding::Protobuf).unwrap(),
        expected
    );
}

#[test]
fn metrics_json_with_int_strings_and_histograms() {
    let text = r#"{"resourceMetrics":[{"resource":{},"scopeMetrics":[{"metrics":[
      {"name":"vllm:num_requests_running","gauge":{"dataPoints":[{"asInt":"7","timeUnixNano":"1700000000000000000"}]}},
      {"name":"vllm:prompt_tokens_total","sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_CUMULATIVE","isMonotonic":true,
        "dataPoints":[{"asDouble":5,"timeUnixNano":1700000000000000000}]}},
      {"name":"vllm:time_to_first_token_seconds","histogram":{"aggregationTemporality":2,"dataPoints":[
        {"timeUnixNano":"1700000000000000000","count":"4","sum":1.5,"bucketCounts":["1","2",1,"0"],"explicitBounds":[0.1,0.5,1]}]}}
    ]}]}]}"#;
    let decoded = decode_metrics(text.as_bytes(), Encoding::Json).unwrap();
    let metrics = &decoded.resource_metrics[0].scope_metrics[0].metrics;
    let Some(metric::Data::Gauge(gauge)) = &metrics[0].data else {
        panic!("{:?}", metrics[0])
    };
    assert_eq!(
        gauge.data_points[0].value,
        Some(number_data_point::Value::AsInt(7))
    );
    let Some(metric::Data::Sum(sum)) = &metrics[1].data else {
        panic!("{:?}", metrics[1])
    };
    assert_eq!(sum.aggregation_temporality, 2);
    assert_eq!(
        sum.data_points[0].value,
        Some(number_data_point::Value::AsDouble(5.0))
    );
    let Some(metric::Data::Histogram(histogram)) = &metrics[2].data else {
        panic!()
    };
    let point = &histogram.data_points[0];
    assert_eq!((point.count, point.sum), (4, Some(1.5)));
    assert_eq!(point.bucket_counts, vec![1, 2, 1, 0]);
    assert_eq!(point.explicit_bounds, vec![0.1, 0.5, 1.0]);
}

#[test]
fn decode_json_is_generic_over_messages() {
    let request: ExportTraceServiceRequest = decode_json(b"{}").unwrap();
    assert!(request.resource_spans.is_empty());
    let err = decode_json::<ExportTraceServiceRequest>(b"[1,2]").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid otlp json at line 1 column"),
        "{err}"
    );
}

#[test]
fn errors_inside_metric_data_are_not_swallowed() {
    // serde's flatten(Option) would turn these into a metric without data, silently.
    let text = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[
      {"name":"ok","gauge":{"dataPoints":[{"asInt":"1","timeUnixNano":"1"}]}},
      {"name":"vllm:num_requests_waiting","gauge":{"dataPoints":[{"asInt":"1","timeUnixNano":"1",
        "attributes":[{"key":"k","value":{"intValue":"five"}}]}]}}]}]}]}"#;
    let err = decode_metrics(text.as_bytes(), Encoding::Json).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadRequest);
    let message = err.to_string();
    assert!(
        message.starts_with("invalid otlp json: metric `vllm:num_requests_waiting`: gauge: "),
        "{message}"
    );
    let text = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[
      {"name":"c","sum":{"isMonotonic":"yes","dataPoints":[]}}]}]}]}"#;
    let message = decode_metrics(text.as_bytes(), Encoding::Json)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("metric `c`: sum: invalid type"),
        "{message}"
    );
    // A metric without any data stays a metric without data.
    let text = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"empty"}]}]}]}"#;
    let decoded = decode_metrics(text.as_bytes(), Encoding::Json).unwrap();
    assert_eq!(
        decoded.resource_metrics[0].scope_metrics[0].metrics[0].data,
        None
    );
}
