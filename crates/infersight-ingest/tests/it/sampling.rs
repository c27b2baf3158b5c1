//! Head-sampled spans: the weight OTel's consistent probability sampling writes in `tracestate`
//! (`ot=th:…`, also over OTLP/JSON's `traceState`), or a `SampleRate` attribute, reaches the
//! request row's and the span's `attrs` as `infersight.sample_weight`; unsampled spans carry none.

use infersight_ingest::{Encoding, decode_traces, traces_to_batches};
use infersight_model::mapping::AttributeMapper;
use infersight_model::normalize::SAMPLE_WEIGHT_KEY;
use infersight_model::{RequestRecord, SpanRecord, Table};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::{batch_of, i, json, kv, s};

fn engine_span(
    n: u8,
    trace_state: &str,
    extra: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
) -> Span {
    let mut attributes = vec![
        kv("gen_ai.request.model", s("llama-3-8b")),
        kv("gen_ai.usage.input_tokens", i(10)),
    ];
    attributes.extend(extra);
    Span {
        trace_id: vec![n; 16],
        span_id: vec![n; 8],
        name: "llm_request".into(),
        trace_state: trace_state.into(),
        start_time_unix_nano: 1_700_000_000_000_000_000,
        end_time_unix_nano: 1_700_000_001_000_000_000,
        attributes,
        ..Default::default()
    }
}

fn weights(request: &ExportTraceServiceRequest) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let converted = traces_to_batches(request, &AttributeMapper::default()).unwrap();
    let weight = |attrs: &str| json(attrs)[SAMPLE_WEIGHT_KEY].as_f64();
    let rows = RequestRecord::from_batch(batch_of(&converted.batches, Table::Requests)).unwrap();
    let spans = SpanRecord::from_batch(batch_of(&converted.batches, Table::Spans)).unwrap();
    (
        rows.iter().map(|r| weight(&r.attrs)).collect(),
        spans.iter().map(|r| weight(&r.attrs)).collect(),
    )
}

#[test]
fn sampled_spans_carry_their_weight_into_the_request_row() {
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    engine_span(1, "ot=th:c", Vec::new()),
                    engine_span(2, "vendor=abc,ot=rv:0123456789abcd;th:e", Vec::new()),
                    engine_span(3, "", Vec::new()),
                    engine_span(4, "ot=th:0", Vec::new()),
                    engine_span(5, "", vec![kv("SampleRate", i(20))]),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let (rows, spans) = weights(&request);
    let expected = vec![Some(4.0), Some(8.0), None, None, Some(20.0)];
    assert_eq!(rows, expected);
    assert_eq!(spans, expected);
}

#[test]
fn the_json_trace_state_is_read_too() {
    let body = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
        "traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331",
        "traceState":"ot=th:8","name":"llm_request",
        "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001000000000",
        "attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"m"}}]}]}]}]}"#;
    let request = decode_traces(body.as_bytes(), Encoding::Json).unwrap();
    let (rows, _) = weights(&request);
    assert_eq!(rows, vec![Some(2.0)]);
}
