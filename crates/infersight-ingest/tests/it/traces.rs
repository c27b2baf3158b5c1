//! OTLP traces over protobuf: encode in Rust, decode and convert, check both tables.

use infersight_ingest::{Encoding, decode_body, decode_traces, traces_to_batches};
use infersight_model::mapping::AttributeMapper;
use infersight_model::{ErrorKind, RequestRecord, SpanRecord, Table};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use prost::Message;

use crate::{array, batch_of, d, i, json, kv, s};

pub const T0: u64 = 1_700_000_000_000_000_000;
pub const TRACE: [u8; 16] = [
    0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f, 0xc6, 0x0c,
];

fn span_id(n: u8) -> Vec<u8> {
    vec![0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, n]
}

/// Three spans: a vLLM request span (deprecated GenAI names + vLLM latencies in seconds), a
/// gateway span with current GenAI names, and a plain HTTP span that is not a request.
pub fn sample_request() -> ExportTraceServiceRequest {
    let vllm_span = Span {
        trace_id: TRACE.to_vec(),
        span_id: span_id(1),
        parent_span_id: span_id(2),
        name: "llm_request".into(),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 2_100_000_000,
        attributes: vec![
            kv("gen_ai.request.model", s("llama-3-8b")),
            kv("gen_ai.system", s("vllm")),
            kv("gen_ai.usage.prompt_tokens", i(512)),
            kv("gen_ai.usage.completion_tokens", i(64)),
            kv("gen_ai.latency.time_in_queue", d(0.25)),
            kv("gen_ai.latency.time_to_first_token", d(0.5)),
            kv("gen_ai.latency.e2e", d(2.0)),
            kv("gen_ai.response.finish_reasons", array(vec![s("length")])),
            kv("custom.flag", any_value_bool(true)),
        ],
        status: Some(Status {
            code: status::StatusCode::Ok as i32,
            message: String::new(),
        }),
        ..Default::default()
    };
    let gateway_span = Span {
        trace_id: TRACE.to_vec(),
        span_id: span_id(2),
        name: "chat llama-3-8b".into(),
        kind: span::SpanKind::Client as i32,
        start_time_unix_nano: T0 - 1_000_000,
        end_time_unix_nano: T0 + 2_200_000_000,
        attributes: vec![
            kv("gen_ai.request.model", s("llama-3-8b")),
            kv("gen_ai.usage.input_tokens", i(512)),
            kv("gen_ai.usage.output_tokens", i(64)),
            kv("tenant", s("acme")),
        ],
        status: Some(Status {
            code: status::StatusCode::Error as i32,
            message: "upstream 503".into(),
        }),
        ..Default::default()
    };
    let http_span = Span {
        trace_id: TRACE.to_vec(),
        span_id: span_id(3),
        parent_span_id: span_id(1),
        name: "tokenize".into(),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: T0 + 1_000,
        end_time_unix_nano: T0 + 2_000_000,
        attributes: vec![kv("http.route", s("/tokenize"))],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", s("vllm")),
                    kv("k8s.pod.name", s("worker-1")),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "vllm.tracing".into(),
                    ..Default::default()
                }),
                spans: vec![vllm_span, gateway_span, http_span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn any_value_bool(b: bool) -> opentelemetry_proto::tonic::common::v1::any_value::Value {
    opentelemetry_proto::tonic::common::v1::any_value::Value::BoolValue(b)
}

#[test]
fn protobuf_round_trip_fills_requests_and_spans() {
    let body = sample_request().encode_to_vec();
    let (bytes, encoding) =
        decode_body(&body, Some("application/x-protobuf"), None, 1 << 20).unwrap();
    assert_eq!(encoding, Encoding::Protobuf);
    let request = decode_traces(&bytes, encoding).unwrap();
    assert_eq!(request, sample_request());
    let converted = traces_to_batches(&request, &AttributeMapper::default()).unwrap();
    assert_eq!((converted.accepted, converted.rejected), (3, 0));
    assert_eq!(converted.rejection_message, None);

    let spans = SpanRecord::from_batch(batch_of(&converted.batches, Table::Spans)).unwrap();
    assert_eq!(spans.len(), 3);
    let server = &spans[0];
    assert_eq!(server.ts, T0 as i64);
    assert_eq!(server.end_ts, Some((T0 + 2_100_000_000) as i64));
    assert_eq!(server.duration_ms, Some(2100.0));
    assert_eq!(
        server.trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(server.span_id.as_deref(), Some("eee19b7ec3c1b101"));
    assert_eq!(server.parent_span_id.as_deref(), Some("eee19b7ec3c1b102"));
    assert_eq!(server.name.as_deref(), Some("llm_request"));
    assert_eq!(server.kind.as_deref(), Some("server"));
    assert_eq!(server.service.as_deref(), Some("vllm"));
    assert_eq!(server.status.as_deref(), Some("ok"));
    let attrs = json(&server.attrs);
    assert_eq!(attrs["gen_ai.request.model"], "llama-3-8b");
    assert_eq!(attrs["k8s.pod.name"], "worker-1");
    assert_eq!(attrs["otel.scope.name"], "vllm.tracing");
    assert_eq!(spans[1].kind.as_deref(), Some("client"));
    assert_eq!(spans[1].status.as_deref(), Some("error"));
    assert_eq!(spans[1].status_message.as_deref(), Some("upstream 503"));
    assert_eq!(spans[2].kind.as_deref(), Some("internal"));
    assert_eq!(spans[2].status.as_deref(), Some("unset"));

    let requests =
        RequestRecord::from_batch(batch_of(&converted.batches, Table::Requests)).unwrap();
    assert_eq!(requests.len(), 2, "the tokenize span is not a request");
    let vllm = &requests[0];
    assert_eq!(vllm.model.as_deref(), Some("llama-3-8b"));
    assert_eq!(vllm.runtime.as_deref(), Some("vllm"));
    assert_eq!(
        (vllm.input_tokens, vllm.output_tokens),
        (Some(512), Some(64))
    );
    assert_eq!(
        (vllm.queue_ms, vllm.ttft_ms, vllm.e2e_ms),
        (Some(250.0), Some(500.0), Some(2000.0))
    );
    assert_eq!(vllm.finish_reason.as_deref(), Some("length"));
    assert_eq!(vllm.service.as_deref(), Some("vllm"));
    assert_eq!(vllm.worker.as_deref(), Some("worker-1"));
    assert_eq!(vllm.status.as_deref(), Some("ok"));
    assert_eq!(
        vllm.trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(vllm.span_id.as_deref(), Some("eee19b7ec3c1b101"));
    assert_eq!(json(&vllm.attrs)["custom.flag"], true);
    let gateway = &requests[1];
    assert_eq!(
        (gateway.input_tokens, gateway.output_tokens),
        (Some(512), Some(64))
    );
    assert_eq!(gateway.tenant.as_deref(), Some("acme"));
    assert_eq!(gateway.status.as_deref(), Some("error"));
    assert_eq!(
        gateway.e2e_ms,
        Some(2201.0),
        "e2e falls back to the span duration"
    );
}

#[test]
fn wrong_attribute_type_rejects_the_whole_request() {
    let mut request = sample_request();
    request.resource_spans[0].scope_spans[0].spans[1].attributes[1] =
        kv("gen_ai.usage.input_tokens", array(vec![i(1), i(2)]));
    let err = traces_to_batches(&request, &AttributeMapper::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadRequest);
    let message = err.to_string();
    assert!(message.contains("gen_ai.usage.input_tokens"), "{message}");
    assert!(message.contains("array"), "{message}");
}

#[test]
fn invalid_spans_are_rejected_one_by_one() {
    let mut request = sample_request();
    let spans = &mut request.resource_spans[0].scope_spans[0].spans;
    spans[0].span_id = vec![1, 2, 3];
    spans[2].start_time_unix_nano = 0;
    let mut bad_trace = spans[1].clone();
    bad_trace.trace_id = vec![0; 16];
    spans.push(bad_trace);
    let converted = traces_to_batches(&request, &AttributeMapper::default()).unwrap();
    assert_eq!((converted.accepted, converted.rejected), (1, 3));
    let message = converted.rejection_message.unwrap();
    assert!(
        message.contains("span_id has 3 bytes, expected 8"),
        "{message}"
    );
    assert!(message.contains("2 more"), "{message}");
    let spans = SpanRecord::from_batch(batch_of(&converted.batches, Table::Spans)).unwrap();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].name.as_deref(), Some("chat llama-3-8b"));
    let requests =
        RequestRecord::from_batch(batch_of(&converted.batches, Table::Requests)).unwrap();
    assert_eq!(requests.len(), 1);
}

#[test]
fn empty_request_converts_to_nothing() {
    let converted = traces_to_batches(
        &ExportTraceServiceRequest::default(),
        &AttributeMapper::default(),
    )
    .unwrap();
    assert!(converted.batches.is_empty());
    assert_eq!((converted.accepted, converted.rejected), (0, 0));
}
