//! The OTLP/HTTP router tested apart from serving (tower `oneshot`), with a sink double: status
//! codes, Retry-After, partial success, and that nothing reaches the sink from a rejected request.

use std::sync::{Arc, Mutex};

use axum::body::{Body, to_bytes};
use axum::http::{Request, StatusCode};
use infersight_ingest::receivers::ReceiverState;
use infersight_ingest::receivers::otlp_http::router;
use infersight_ingest::{Sink, SinkError, SinkFuture};
use infersight_model::TableBatch;
use infersight_model::mapping::AttributeMapper;
use infersight_model::telemetry::Counters;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use tower::ServiceExt;

use crate::{i, kv, s};

/// Records what it is given; answers with a fixed outcome, and refuses ahead while `refusing`.
struct RecordingSink {
    outcome: Option<SinkError>,
    rows: Mutex<usize>,
    submissions: Mutex<usize>,
    refusing: Mutex<Option<SinkError>>,
}

impl Sink for RecordingSink {
    fn submit(&self, _org: &str, batches: Vec<TableBatch>) -> SinkFuture {
        *self.submissions.lock().unwrap() += 1;
        let outcome = self.outcome.clone();
        if outcome.is_none() {
            *self.rows.lock().unwrap() += batches.iter().map(|b| b.batch.num_rows()).sum::<usize>();
        }
        Box::pin(async move { outcome.map_or(Ok(()), Err) })
    }

    fn refusal(&self) -> Option<SinkError> {
        self.refusing.lock().unwrap().clone()
    }
}

fn export(spans: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|n| Span {
                        trace_id: vec![1; 16],
                        span_id: vec![n as u8 + 1; 8],
                        name: "llm".into(),
                        start_time_unix_nano: 1_700_000_000_000_000_000,
                        end_time_unix_nano: 1_700_000_001_000_000_000,
                        // an engine's span (it knows a phase) and a trace's root: complete, so
                        // its row is not held for spans of its request still to come
                        attributes: vec![
                            kv("gen_ai.request.model", s("m")),
                            kv("gen_ai.usage.input_tokens", i(3)),
                            kv("gen_ai.latency.time_in_queue", crate::d(0.01)),
                        ],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn app(outcome: Option<SinkError>, max_body_bytes: usize) -> (axum::Router, Arc<RecordingSink>) {
    let sink = Arc::new(RecordingSink {
        outcome,
        rows: Mutex::new(0),
        submissions: Mutex::new(0),
        refusing: Mutex::new(None),
    });
    let state = ReceiverState {
        sink: sink.clone(),
        mapper: Arc::new(AttributeMapper::default()),
        span_tree: Default::default(),
        counters: Arc::new(Counters::new()),
        max_body_bytes,
        in_flight: Arc::new(tokio::sync::Semaphore::new(4)),
        decoders: Arc::new(tokio::sync::Semaphore::new(2)),
    };
    (router(state), sink)
}

async fn post(
    app: axum::Router,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, Option<String>, Vec<u8>) {
    let request = Request::post("/v1/traces")
        .header("content-type", content_type)
        .body(Body::from(body))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    (status, retry_after, bytes)
}

#[tokio::test]
async fn full_sink_answers_429_with_retry_after() {
    let (router_, sink) = app(Some(SinkError::Full), 1 << 20);
    let (status, retry_after, _) =
        post(router_, "application/x-protobuf", export(2).encode_to_vec()).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(*sink.rows.lock().unwrap(), 0);
}

#[tokio::test]
async fn unavailable_sink_answers_503_and_internal_500() {
    let (router_, _) = app(Some(SinkError::Unavailable("down".into())), 1 << 20);
    let (status, retry_after, _) =
        post(router_, "application/x-protobuf", export(1).encode_to_vec()).await;
    assert_eq!(
        (status, retry_after.as_deref()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("1"))
    );
    let (router_, _) = app(Some(SinkError::Internal("bug".into())), 1 << 20);
    let (status, _, _) = post(router_, "application/x-protobuf", export(1).encode_to_vec()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn a_sink_refusing_ahead_is_answered_503_before_the_body_is_decoded() {
    let (router_, sink) = app(None, 1 << 20);
    *sink.refusing.lock().unwrap() = Some(SinkError::Unavailable("memtable full".into()));
    // a body that does not decode: refused for the store, not for the body
    let (status, retry_after, body) =
        post(router_.clone(), "application/x-protobuf", vec![0xff; 64]).await;
    assert_eq!(
        (status, retry_after.as_deref()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("1"))
    );
    // the google.rpc.Status names why (its message is plain UTF-8 in the protobuf)
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("memtable full"), "{text}");
    let (status, _, _) = post(
        router_.clone(),
        "application/x-protobuf",
        export(2).encode_to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(*sink.submissions.lock().unwrap(), 0);
    // once the store takes appends again, the same bodies are decoded and judged
    *sink.refusing.lock().unwrap() = None;
    let (status, _, _) = post(router_.clone(), "application/x-protobuf", vec![0xff; 64]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _, _) = post(router_, "application/x-protobuf", export(2).encode_to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(*sink.submissions.lock().unwrap(), 1);
    assert!(*sink.rows.lock().unwrap() >= 2);
}

#[tokio::test]
async fn a_sink_refusing_ahead_is_answered_unavailable_over_grpc_before_conversion() {
    use infersight_ingest::receivers::otlp_grpc::GrpcReceiver;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService;

    let sink = Arc::new(RecordingSink {
        outcome: None,
        rows: Mutex::new(0),
        submissions: Mutex::new(0),
        refusing: Mutex::new(Some(SinkError::Unavailable("memtable full".into()))),
    });
    let counters = Arc::new(Counters::new());
    let receiver = GrpcReceiver {
        state: ReceiverState {
            sink: sink.clone(),
            mapper: Arc::new(AttributeMapper::default()),
            span_tree: Default::default(),
            counters: counters.clone(),
            max_body_bytes: 1 << 20,
            in_flight: Arc::new(tokio::sync::Semaphore::new(4)),
            decoders: Arc::new(tokio::sync::Semaphore::new(2)),
        },
    };
    let status = TraceService::export(&receiver, tonic::Request::new(export(2)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("memtable full"), "{status:?}");
    // a RetryInfo detail: OTLP exporters wait it out and retry
    assert!(
        String::from_utf8_lossy(status.details()).contains("google.rpc.RetryInfo"),
        "{status:?}"
    );
    assert_eq!(*sink.submissions.lock().unwrap(), 0);
    let exposition = counters.render();
    assert!(
        exposition.contains(r#"outcome="unavailable""#),
        "{exposition}"
    );
    *sink.refusing.lock().unwrap() = None;
    TraceService::export(&receiver, tonic::Request::new(export(2)))
        .await
        .unwrap();
    assert_eq!(*sink.submissions.lock().unwrap(), 1);
}

#[tokio::test]
async fn accepted_export_reaches_the_sink_and_answers_in_kind() {
    let (router_, sink) = app(None, 1 << 20);
    let (status, _, body) =
        post(router_, "application/x-protobuf", export(3).encode_to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    let response =
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse::decode(
            &body[..],
        )
        .unwrap();
    assert!(response.partial_success.is_none());
    // 3 spans + 3 request rows
    assert_eq!(*sink.rows.lock().unwrap(), 6);
}

#[tokio::test]
async fn oversized_and_malformed_bodies_never_reach_the_sink() {
    let (app_small, sink) = app(None, 64);
    let (status, _, body) = post(
        app_small,
        "application/x-protobuf",
        export(5).encode_to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let status_message = String::from_utf8_lossy(&body).to_string();
    assert!(status_message.contains("64 bytes"), "{status_message}");
    let (app2, sink2) = app(None, 1 << 20);
    let (status, _, body) = post(app2, "application/json", b"{\"resourceSpans\": [".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error["code"], 3);
    assert!(
        error["message"].as_str().unwrap().contains("json"),
        "{error}"
    );
    assert_eq!(*sink.rows.lock().unwrap() + *sink2.rows.lock().unwrap(), 0);
}

#[tokio::test]
async fn resource_attributes_that_would_expand_past_the_limit_are_refused() {
    let (router_, sink) = app(None, 64 * 1024);
    let mut request = export(200);
    request.resource_spans[0].resource = Some(opentelemetry_proto::tonic::resource::v1::Resource {
        attributes: vec![kv("big.label", s(&"x".repeat(8 * 1024)))],
        ..Default::default()
    });
    let body = request.encode_to_vec();
    assert!(
        body.len() < 64 * 1024,
        "the body itself is within the limit"
    );
    let (status, _, body) = post(router_, "application/x-protobuf", body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let status_message = String::from_utf8_lossy(&body).to_string();
    assert!(status_message.contains("expand"), "{status_message}");
    assert_eq!(*sink.rows.lock().unwrap(), 0);
    // the same attributes on few records are fine
    let (router_, sink) = app(None, 64 * 1024);
    let mut request = export(3);
    request.resource_spans[0].resource = Some(opentelemetry_proto::tonic::resource::v1::Resource {
        attributes: vec![kv("big.label", s(&"x".repeat(8 * 1024)))],
        ..Default::default()
    });
    let (status, _, _) = post(router_, "application/x-protobuf", request.encode_to_vec()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(*sink.rows.lock().unwrap(), 6);
}

#[tokio::test]
async fn exports_wait_for_a_decoder_permit_before_they_are_decoded() {
    use infersight_ingest::receivers::decoder_permits;
    use infersight_ingest::receivers::otlp_grpc::GrpcReceiver;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService;

    // two permits per core unless told
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(decoder_permits(0).available_permits(), 2 * cores);
    assert_eq!(decoder_permits(3).available_permits(), 3);

    let sink = Arc::new(RecordingSink {
        outcome: None,
        rows: Mutex::new(0),
        submissions: Mutex::new(0),
        refusing: Mutex::new(None),
    });
    let decoders = decoder_permits(1);
    let state = ReceiverState {
        sink: sink.clone(),
        mapper: Arc::new(AttributeMapper::default()),
        span_tree: Default::default(),
        counters: Arc::new(Counters::new()),
        max_body_bytes: 1 << 20,
        in_flight: Arc::new(tokio::sync::Semaphore::new(8)),
        decoders: decoders.clone(),
    };
    // the only permit is taken: an export over either protocol is in flight but not decoded
    let taken = decoders.clone().acquire_owned().await.unwrap();
    let http = tokio::spawn(post(
        router(state.clone()),
        "application/x-protobuf",
        export(2).encode_to_vec(),
    ));
    let receiver = GrpcReceiver {
        state: state.clone(),
    };
    let grpc = tokio::spawn(async move {
        TraceService::export(&receiver, tonic::Request::new(export(3)))
            .await
            .map(|_| ())
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!http.is_finished() && !grpc.is_finished());
    assert_eq!(*sink.submissions.lock().unwrap(), 0);
    // both wait their turn: neither is refused
    drop(taken);
    let (status, _, _) = http.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    grpc.await.unwrap().unwrap();
    assert_eq!(*sink.submissions.lock().unwrap(), 2);
    // every permit is back once the exports are answered
    assert_eq!(decoders.available_permits(), 1);
    assert_eq!(state.in_flight.available_permits(), 8);
}
