//! Phases from the span tree: queue / prefill / decode child spans fill a request's breakdown,
//! within one export and across exports (children exported before their parent), and TGI's
//! duration-string span fields make a request row.

use infersight_ingest::{SpanTreeCache, traces_to_batches, traces_to_batches_with};
use infersight_model::mapping::AttributeMapper;
use infersight_model::normalize::BREAKDOWN_MISMATCH_KEY;
use infersight_model::{RequestRecord, Table};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::{batch_of, i, kv, s};

const T0: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;

fn id(trace: u8, n: u8) -> Vec<u8> {
    vec![0xab, trace, 0, 0, 0, 0, 0, n]
}

fn trace(n: u8) -> Vec<u8> {
    let mut t = vec![0x11; 16];
    t[15] = n;
    t
}

fn span(t: u8, n: u8, parent: Option<u8>, name: &str, from_ms: u64, to_ms: u64) -> Span {
    Span {
        trace_id: trace(t),
        span_id: id(t, n),
        parent_span_id: parent.map(|p| id(t, p)).unwrap_or_default(),
        name: name.into(),
        start_time_unix_nano: T0 + from_ms * MS,
        end_time_unix_nano: T0 + to_ms * MS,
        ..Default::default()
    }
}

fn with_attrs(mut span: Span, attributes: Vec<KeyValue>) -> Span {
    span.attributes = attributes;
    span
}

/// A request span that says what was served but nothing about its phases.
fn request_span(t: u8) -> Span {
    with_attrs(
        span(t, 1, None, "Req", 0, 1_500),
        vec![
            kv("gen_ai.request.model", s("qwen2.5-7b")),
            kv("gen_ai.usage.input_tokens", i(100)),
            kv("gen_ai.usage.output_tokens", i(41)),
        ],
    )
}

/// Below it: scheduler → queued, two prefill chunks, decode; and a detokenize span.
fn phase_spans(t: u8) -> Vec<Span> {
    vec![
        span(t, 2, Some(1), "scheduler", 1, 1_400),
        span(t, 3, Some(2), "queued", 5, 105),
        span(t, 4, Some(2), "Prefill Forward", 110, 200),
        span(t, 5, Some(2), "Prefill Forward", 210, 300),
        span(t, 6, Some(2), "decode_loop", 300, 1_300),
        span(t, 7, Some(1), "detokenize", 1_300, 1_450),
    ]
}

fn export(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("sglang"))],
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

fn requests(converted: &infersight_ingest::Converted) -> Vec<RequestRecord> {
    RequestRecord::from_batch(batch_of(&converted.batches, Table::Requests)).unwrap()
}

fn assert_phases_from_tree(r: &RequestRecord) {
    assert_eq!(r.queue_ms, Some(100.0), "the queued span");
    assert_eq!(
        r.ttft_ms,
        Some(300.0),
        "start → end of the last prefill chunk"
    );
    assert_eq!(r.prefill_ms, Some(200.0), "ttft − queue");
    assert_eq!(r.decode_ms, Some(1_000.0), "the decode span");
    assert_eq!(r.tpot_ms, Some(25.0), "decode / (41 − 1)");
    assert_eq!(r.e2e_ms, Some(1_500.0), "the request span");
    assert!(
        !r.attrs.contains(BREAKDOWN_MISMATCH_KEY),
        "consistent: {}",
        r.attrs
    );
}

#[test]
fn phase_spans_in_the_same_export_fill_the_breakdown() {
    let mut spans = vec![request_span(1)];
    spans.extend(phase_spans(1));
    let converted = traces_to_batches(&export(spans), &AttributeMapper::default()).unwrap();
    let rows = requests(&converted);
    assert_eq!(rows.len(), 1, "phase spans are not requests themselves");
    assert_phases_from_tree(&rows[0]);
}

#[test]
fn children_exported_before_their_parent_are_remembered() {
    let mapper = AttributeMapper::default();
    let cache = SpanTreeCache::default();
    let first = traces_to_batches_with(&export(phase_spans(2)), &mapper, Some(&cache)).unwrap();
    assert!(
        !first.batches.iter().any(|b| b.table == Table::Requests),
        "no request yet"
    );
    assert_eq!(cache.len(), 4, "queued, two prefill chunks, decode");
    let second =
        traces_to_batches_with(&export(vec![request_span(2)]), &mapper, Some(&cache)).unwrap();
    assert_phases_from_tree(&requests(&second)[0]);

    // without the memory the parent alone says nothing about its phases
    let alone = traces_to_batches(&export(vec![request_span(2)]), &mapper).unwrap();
    let r = &requests(&alone)[0];
    assert_eq!((r.queue_ms, r.ttft_ms, r.decode_ms), (None, None, None));
    assert_eq!(r.e2e_ms, Some(1_500.0));
}

#[test]
fn the_memory_is_bounded_and_forgets_the_oldest_traces() {
    let mapper = AttributeMapper::default();
    let cache = SpanTreeCache::new(5);
    traces_to_batches_with(&export(phase_spans(3)), &mapper, Some(&cache)).unwrap();
    traces_to_batches_with(&export(phase_spans(4)), &mapper, Some(&cache)).unwrap();
    assert!(cache.len() <= 5, "{} held", cache.len());
    let old =
        traces_to_batches_with(&export(vec![request_span(3)]), &mapper, Some(&cache)).unwrap();
    assert!(
        !old.batches.iter().any(|b| b.table == Table::Requests),
        "a row that knows no phases waits (a gateway's might, for its engine's)"
    );
    let recent =
        traces_to_batches_with(&export(vec![request_span(4)]), &mapper, Some(&cache)).unwrap();
    assert_phases_from_tree(&requests(&recent)[0]);
    let held = cache.drain_requests();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].queue_ms, None, "trace 3 was forgotten");
}

#[test]
fn attributes_win_and_other_traces_do_not_leak_in() {
    let mut request = request_span(5);
    request
        .attributes
        .push(kv("gen_ai.latency.time_in_queue", crate::d(0.08)));
    let mut spans = vec![request];
    spans.extend(phase_spans(5));
    // a phase span of another trace whose span ids collide with this one's
    spans.push(span(6, 9, Some(1), "decode", 0, 5_000));
    spans[7].trace_id = trace(6);
    let converted = traces_to_batches(&export(spans), &AttributeMapper::default()).unwrap();
    let r = &requests(&converted)[0];
    assert_eq!(r.queue_ms, Some(80.0), "the attribute, not the queued span");
    assert_eq!(r.ttft_ms, Some(300.0));
    assert_eq!(
        r.prefill_ms,
        Some(220.0),
        "derived: ttft − the attribute's queue"
    );
    assert_eq!(
        r.decode_ms,
        Some(1_000.0),
        "trace 6's decode span is not ours"
    );
}

#[test]
fn tgi_request_spans_become_requests() {
    let text = |v: &str| s(v);
    let generate = with_attrs(
        span(7, 1, None, "generate", 0, 2_047),
        vec![
            kv(
                "parameters",
                text("GenerateParameters { max_new_tokens: Some(20) }"),
            ),
            kv("total_time", text("2.046046581s")),
            kv("validation_time", text("311.13µs")),
            kv("queue_time", text("64.16µs")),
            kv("inference_time", text("2.045671466s")),
            kv("time_per_token", text("20.253182ms")),
        ],
    );
    let queued = span(7, 2, Some(1), "queued", 0, 1);
    let converted =
        traces_to_batches(&export(vec![generate, queued]), &AttributeMapper::default()).unwrap();
    let rows = requests(&converted);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r.runtime.as_deref(), Some("tgi"));
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
    assert!(close(r.e2e_ms, 2046.046581), "{:?}", r.e2e_ms);
    assert!(
        close(r.queue_ms, 0.06416),
        "TGI's own field wins: {:?}",
        r.queue_ms
    );
    assert!(close(r.tpot_ms, 20.253182));
}

/// Keeps every batch it is given.
#[derive(Default)]
struct KeepingSink {
    batches: std::sync::Mutex<Vec<infersight_model::TableBatch>>,
}

impl infersight_ingest::Sink for KeepingSink {
    fn submit(
        &self,
        _org: &str,
        batches: Vec<infersight_model::TableBatch>,
    ) -> infersight_ingest::SinkFuture {
        self.batches.lock().unwrap().extend(batches);
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn the_http_receiver_remembers_phase_spans_between_exports() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use infersight_ingest::receivers::ReceiverState;
    use infersight_ingest::receivers::otlp_http::router;
    use prost::Message;
    use std::sync::Arc;
    use tower::ServiceExt;

    let sink = Arc::new(KeepingSink::default());
    let app = router(ReceiverState {
        sink: sink.clone(),
        mapper: Arc::new(AttributeMapper::default()),
        span_tree: Default::default(),
        counters: Arc::new(infersight_model::telemetry::Counters::new()),
        max_body_bytes: 1 << 20,
        in_flight: Arc::new(tokio::sync::Semaphore::new(4)),
        decoders: Arc::new(tokio::sync::Semaphore::new(2)),
    });
    for spans in [phase_spans(8), vec![request_span(8)]] {
        let request = Request::post("/v1/traces")
            .header("content-type", "application/x-protobuf")
            .body(Body::from(export(spans).encode_to_vec()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let batches = sink.batches.lock().unwrap();
    let rows = RequestRecord::from_batch(batch_of(&batches, Table::Requests)).unwrap();
    assert_phases_from_tree(&rows[0]);
}

/// The file reader converts trace lines on several threads; the span-tree memory must still see
/// the lines in file order: children on one line, their parent a few lines later, lines of other
/// traces (one with a request span and its phases in the same export) in between, a malformed
/// line, a blank one. Everything must come out as converting the lines one by one did.
#[test]
fn the_file_reader_attributes_phase_spans_across_lines_as_one_thread_does() {
    use infersight_ingest::otlp::decode::decode_json_serde;
    use infersight_ingest::{FileFormat, FileOptions, read_file};

    let mut lines: Vec<String> = Vec::new();
    let line = |spans: Vec<Span>| serde_json::to_string(&export(spans)).unwrap();
    for t in 1..=60u8 {
        lines.push(line(phase_spans(t)));
        if t > 3 {
            lines.push(line(vec![request_span(t - 3)]));
        }
        if t % 7 == 0 {
            let mut both = vec![request_span(100 + t)];
            both.extend(phase_spans(100 + t));
            lines.push(line(both));
        }
        if t == 20 {
            lines.push(r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"#.to_string());
            lines.push("   ".to_string());
        }
    }
    for t in 58..=60u8 {
        lines.push(line(vec![request_span(t)]));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();

    let mapper = AttributeMapper::default();
    let options = FileOptions {
        format: FileFormat::OtlpJsonl,
        batch_rows: 7,
        ..FileOptions::default()
    };
    let mut handed_over: Vec<Vec<infersight_model::TableBatch>> = Vec::new();
    let summary = read_file(
        &path,
        &options,
        &mapper,
        &mut |batches| {
            handed_over.push(batches);
            Ok(())
        },
        &mut |_| {},
    )
    .unwrap();

    // one line at a time, the way the reader converted before it had workers
    let cache = SpanTreeCache::for_files();
    let mut expected_requests = Vec::new();
    let mut expected_spans = 0;
    for text in &lines {
        let Ok(request) = decode_json_serde::<ExportTraceServiceRequest>(text.as_bytes()) else {
            continue;
        };
        let converted = traces_to_batches_with(&request, &mapper, Some(&cache)).unwrap();
        expected_spans += converted.accepted;
        if converted.batches.iter().any(|b| b.table == Table::Requests) {
            expected_requests.extend(requests(&converted));
        }
    }
    expected_requests.extend(cache.drain_requests());
    let mut got_requests = Vec::new();
    for batches in &handed_over {
        for batch in batches.iter().filter(|b| b.table == Table::Requests) {
            got_requests.extend(RequestRecord::from_batch(&batch.batch).unwrap());
        }
    }
    assert_eq!(got_requests.len(), 60 + 8, "every request span, once");
    assert_eq!(got_requests, expected_requests);
    for r in &got_requests {
        assert_phases_from_tree(r);
    }
    assert_eq!(summary.records_stored, expected_spans);
    assert_eq!(summary.rejected, 1, "the malformed line");
    assert_eq!(summary.first_errors.len(), 1);
    let malformed_line = lines
        .iter()
        .position(|l| l.ends_with(r#""name":"#))
        .unwrap()
        + 1;
    assert!(
        summary.first_errors[0]
            .contains(&format!("traces.jsonl:{malformed_line}: invalid otlp json")),
        "{:?}",
        summary.first_errors
    );
    // the hand-overs follow `batch_rows` as before: every one but the last holds at least 7
    let spans_per_handover: Vec<usize> = handed_over
        .iter()
        .map(|b| {
            b.iter()
                .filter(|b| b.table == Table::Spans)
                .map(|b| b.batch.num_rows())
                .sum()
        })
        .collect();
    let (last, rest) = spans_per_handover.split_last().unwrap();
    assert!(
        rest.iter().all(|n| *n >= 7) && *last > 0,
        "{spans_per_handover:?}"
    );
}

/// A sink that refuses a batch stops the reader while trace lines are still with the workers:
/// the error comes back (no hang), after exactly one refused hand-over.
#[test]
fn a_refusing_sink_stops_the_reader_with_lines_in_flight() {
    use infersight_ingest::{FileFormat, FileOptions, IngestError, read_file};

    let lines: Vec<String> = (1..=50u8)
        .map(|t| serde_json::to_string(&export(vec![request_span(t)])).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    let options = FileOptions {
        format: FileFormat::OtlpJsonl,
        batch_rows: 3,
        ..FileOptions::default()
    };
    let mut calls = 0;
    let err = read_file(
        &path,
        &options,
        &AttributeMapper::default(),
        &mut |_| {
            calls += 1;
            Err("store is full".to_string())
        },
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(calls, 1);
    assert!(matches!(err, IngestError::Sink(_)), "{err:?}");
}
