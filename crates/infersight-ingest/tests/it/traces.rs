//! OTLP traces over protobuf: encode in Rust, decode and convert, check the `spans`,
//! `requests` and `tokens` tables (token events of spans, also over OTLP/JSON).

use infersight_ingest::otlp::{MAX_TOKEN_EVENTS_PER_SPAN, TOKEN_EVENT_NAMES};
use infersight_ingest::{Encoding, decode_body, decode_traces, traces_to_batches};
use infersight_model::mapping::AttributeMapper;
use infersight_model::{ErrorKind, RequestRecord, SpanRecord, Table, TokenRecord};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
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
    assert_eq!(
        requests.len(),
        1,
        "the tokenize span is not a request, the gateway's is the same request as vLLM's"
    );
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
    assert_eq!(
        vllm.status.as_deref(),
        Some("error"),
        "the gateway's error is the request's"
    );
    assert_eq!(
        vllm.tenant.as_deref(),
        Some("acme"),
        "from the gateway's span"
    );
    assert_eq!(
        vllm.trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    assert_eq!(vllm.span_id.as_deref(), Some("eee19b7ec3c1b101"));
    assert_eq!(json(&vllm.attrs)["custom.flag"], true);
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

// ---------------------------------------------------------------------------------------------
// Token events

const MS: u64 = 1_000_000;

fn event(name: &str, at: u64, attributes: Vec<KeyValue>) -> span::Event {
    span::Event {
        time_unix_nano: at,
        name: name.into(),
        attributes,
        dropped_attributes_count: 0,
    }
}

fn bool_value(b: bool) -> opentelemetry_proto::tonic::common::v1::any_value::Value {
    any_value_bool(b)
}

/// One span (span id `…b1<n>`) starting at T0, with the given attributes and events.
fn span_with_events(n: u8, attributes: Vec<KeyValue>, events: Vec<span::Event>) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: span_id(n),
        name: "llm_request".into(),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + 2_000 * MS,
        attributes,
        events,
        ..Default::default()
    }
}

fn export(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("vllm"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn token_rows(converted: &infersight_ingest::Converted) -> Vec<TokenRecord> {
    TokenRecord::from_batch(batch_of(&converted.batches, Table::Tokens)).unwrap()
}

fn request_rows(converted: &infersight_ingest::Converted) -> Vec<RequestRecord> {
    RequestRecord::from_batch(batch_of(&converted.batches, Table::Requests)).unwrap()
}

/// A request span without latency attributes, four token events (one per recognized name) at
/// 300, 320, 370 and 390 ms after its start, and an unrelated event in between.
fn streaming_request() -> ExportTraceServiceRequest {
    let events = vec![
        event("gen_ai.token", T0 + 300 * MS, vec![]),
        event(
            "exception",
            T0 + 310 * MS,
            vec![kv("exception.type", s("X"))],
        ),
        event("llm.token", T0 + 320 * MS, vec![]),
        event("token", T0 + 370 * MS, vec![]),
        event("llm.content.completion.chunk", T0 + 390 * MS, vec![]),
    ];
    let attributes = vec![
        kv("gen_ai.request.model", s("llama-3-8b")),
        kv("gen_ai.request.id", s("cmpl-42")),
        kv("gen_ai.usage.output_tokens", i(4)),
    ];
    export(vec![span_with_events(1, attributes, events)])
}

#[test]
fn token_events_of_every_name_become_token_rows() {
    assert_eq!(TOKEN_EVENT_NAMES.len(), 4);
    let converted = traces_to_batches(&streaming_request(), &AttributeMapper::default()).unwrap();
    assert_eq!(
        (converted.accepted, converted.rejected),
        (1, 0),
        "accepted counts spans, not token rows"
    );
    let tokens = token_rows(&converted);
    assert_eq!(tokens.len(), 4, "the `exception` event is not a token");
    let ts: Vec<i64> = tokens.iter().map(|t| t.ts).collect();
    assert_eq!(
        ts,
        [300, 320, 370, 390]
            .map(|ms| (T0 + ms * MS) as i64)
            .to_vec()
    );
    // ordinal steps, first token prefill, latency since the previous token (the first: since
    // the span start), request id of the normalized request, kv_hit unknown
    let steps: Vec<Option<i64>> = tokens.iter().map(|t| t.step).collect();
    assert_eq!(steps, [Some(0), Some(1), Some(2), Some(3)]);
    let stages: Vec<&str> = tokens.iter().map(|t| t.stage.as_deref().unwrap()).collect();
    assert_eq!(stages, ["prefill", "decode", "decode", "decode"]);
    let latencies: Vec<f64> = tokens.iter().map(|t| t.latency_ms.unwrap()).collect();
    assert_eq!(latencies, [300.0, 20.0, 50.0, 20.0]);
    assert!(
        tokens
            .iter()
            .all(|t| t.request_id.as_deref() == Some("cmpl-42"))
    );
    assert!(tokens.iter().all(|t| t.kv_hit.is_none()));
    // the same over OTLP/JSON
    let body = serde_json::to_vec(&streaming_request()).unwrap();
    let request = decode_traces(&body, Encoding::Json).unwrap();
    let from_json = traces_to_batches(&request, &AttributeMapper::default()).unwrap();
    assert_eq!(token_rows(&from_json), tokens);
}

#[test]
fn token_times_fill_the_breakdown_the_attributes_leave_out() {
    let converted = traces_to_batches(&streaming_request(), &AttributeMapper::default()).unwrap();
    let request = &request_rows(&converted)[0];
    assert_eq!(request.ttft_ms, Some(300.0), "first token − span start");
    assert_eq!(request.decode_ms, Some(90.0), "last − first token");
    assert_eq!(request.tpot_ms, Some(30.0), "mean gap");
    assert_eq!(request.itl_max_ms, Some(50.0), "largest gap");
    assert_eq!(request.e2e_ms, Some(2000.0));

    // attributes win; only the NULL columns come from the tokens
    let mut with_latencies = streaming_request();
    with_latencies.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .extend([
            kv("gen_ai.latency.time_to_first_token", d(0.25)),
            kv("gen_ai.latency.time_per_output_token", d(0.04)),
        ]);
    let converted = traces_to_batches(&with_latencies, &AttributeMapper::default()).unwrap();
    let request = &request_rows(&converted)[0];
    assert_eq!(request.ttft_ms, Some(250.0));
    assert_eq!(request.tpot_ms, Some(40.0));
    assert_eq!(request.decode_ms, Some(90.0));
    assert_eq!(request.itl_max_ms, Some(50.0));

    // a span that is not a request gets token rows but no request row
    let plain = export(vec![span_with_events(
        2,
        vec![kv("http.route", s("/stream"))],
        vec![event("gen_ai.token", T0 + MS, vec![])],
    )]);
    let converted = traces_to_batches(&plain, &AttributeMapper::default()).unwrap();
    assert_eq!(token_rows(&converted).len(), 1);
    assert!(converted.batches.iter().all(|b| b.table != Table::Requests));
}

#[test]
fn token_attribute_variants_are_read() {
    let events = vec![
        event(
            "gen_ai.token",
            T0 + 100 * MS,
            vec![
                kv("gen_ai.token.index", i(7)),
                kv("index", i(99)),
                kv("gen_ai.token.stage", s("decode")),
                kv("gen_ai.token.kv_hit", bool_value(true)),
                kv("gen_ai.token.latency_ms", d(12.5)),
                kv("gen_ai.request.id", s("from-event")),
            ],
        ),
        event(
            "token",
            T0 + 110 * MS,
            vec![
                kv("token.index", s("8")),
                kv("stage", s("prefill")),
                kv("kv_hit", bool_value(false)),
                kv("latency_ms", i(3)),
            ],
        ),
        event("token", T0 + 130 * MS, vec![kv("step", i(9))]),
        event(
            "token",
            T0 + 160 * MS,
            vec![
                kv("index", i(10)),
                kv("stage", s("sampling")),
                kv("latency_ms", d(-1.0)),
            ],
        ),
    ];
    // not a request span: request ids come from the events, then the span's own attribute
    let with_span_id_attr =
        span_with_events(1, vec![kv("request_id", s("from-span"))], events.clone());
    // neither: the span id
    let bare = span_with_events(2, vec![], events[2..].to_vec());
    let converted = traces_to_batches(
        &export(vec![with_span_id_attr, bare]),
        &AttributeMapper::default(),
    )
    .unwrap();
    assert_eq!(converted.rejected, 0);
    let tokens = token_rows(&converted);
    assert_eq!(tokens.len(), 6);
    let steps: Vec<Option<i64>> = tokens.iter().map(|t| t.step).collect();
    assert_eq!(
        steps,
        [Some(7), Some(8), Some(9), Some(10), Some(9), Some(10)]
    );
    let stages: Vec<&str> = tokens.iter().map(|t| t.stage.as_deref().unwrap()).collect();
    assert_eq!(
        stages,
        ["decode", "prefill", "decode", "decode", "prefill", "decode"],
        "an unknown stage falls back to the position"
    );
    let kv_hits: Vec<Option<bool>> = tokens.iter().map(|t| t.kv_hit).collect();
    assert_eq!(kv_hits, [Some(true), Some(false), None, None, None, None]);
    let latencies: Vec<f64> = tokens.iter().map(|t| t.latency_ms.unwrap()).collect();
    assert_eq!(
        latencies,
        [12.5, 3.0, 20.0, 30.0, 130.0, 30.0],
        "a negative latency attribute is ignored and derived instead"
    );
    let ids: Vec<&str> = tokens
        .iter()
        .map(|t| t.request_id.as_deref().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "from-event",
            "from-span",
            "from-span",
            "from-span",
            "eee19b7ec3c1b102",
            "eee19b7ec3c1b102"
        ]
    );
}

#[test]
fn bad_token_events_are_skipped_and_counted_never_rejecting_their_span() {
    let events = vec![
        event("gen_ai.token", T0 + 100 * MS, vec![]),
        event("gen_ai.token", 0, vec![]),
        event("gen_ai.token", T0 - MS, vec![]),
        event("gen_ai.token", T0 + 150 * MS, vec![]),
    ];
    let attributes = vec![kv("gen_ai.request.model", s("m"))];
    let converted = traces_to_batches(
        &export(vec![span_with_events(1, attributes, events)]),
        &AttributeMapper::default(),
    )
    .unwrap();
    // the span is accepted, not rejected; the skipped events are a warning in the message
    assert_eq!((converted.accepted, converted.rejected), (1, 0));
    let message = converted.rejection_message.clone().unwrap();
    assert!(message.contains("token event 1"), "{message}");
    assert!(message.contains("time is zero"), "{message}");
    assert!(message.contains("1 more skipped"), "{message}");
    let tokens = token_rows(&converted);
    let steps: Vec<Option<i64>> = tokens.iter().map(|t| t.step).collect();
    assert_eq!(
        steps,
        [Some(0), Some(3)],
        "ordinals count the skipped events"
    );
    assert_eq!(tokens[1].latency_ms, Some(50.0));
    let request = &request_rows(&converted)[0];
    assert_eq!(request.ttft_ms, Some(100.0));
    assert_eq!(
        (request.tpot_ms, request.itl_max_ms),
        (None, None),
        "tokens are missing: gaps are not inter-token latencies"
    );
    assert_eq!(
        SpanRecord::from_batch(batch_of(&converted.batches, Table::Spans))
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn token_events_per_span_are_capped() {
    let over = 5;
    let events: Vec<span::Event> = (0..MAX_TOKEN_EVENTS_PER_SPAN as u64 + over)
        .map(|k| event("llm.token", T0 + MS + k * 1_000, vec![]))
        .collect();
    let attributes = vec![kv("gen_ai.request.model", s("m"))];
    let converted = traces_to_batches(
        &export(vec![span_with_events(1, attributes, events)]),
        &AttributeMapper::default(),
    )
    .unwrap();
    assert_eq!((converted.accepted, converted.rejected), (1, 0));
    let message = converted.rejection_message.clone().unwrap();
    assert!(message.contains("more than 4096 token events"), "{message}");
    assert!(
        message.contains(&format!("{} more skipped", over - 1)),
        "{message}"
    );
    let tokens = token_rows(&converted);
    assert_eq!(tokens.len(), MAX_TOKEN_EVENTS_PER_SPAN);
    assert_eq!(tokens.last().unwrap().step, Some(4095));
    let request = &request_rows(&converted)[0];
    assert_eq!(request.ttft_ms, Some(1.0));
    assert_eq!(request.itl_max_ms, None, "capped: the stream is incomplete");
}
