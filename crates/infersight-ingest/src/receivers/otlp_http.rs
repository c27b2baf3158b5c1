//! OTLP/HTTP receiver (`:4318`): `POST /v1/traces`, `/v1/logs`, `/v1/metrics` with protobuf or
//! JSON bodies, optionally gzip-compressed. Decodes, converts to canonical batches, submits them to
//! the ingest queue and answers only once they are durable, with OTLP's partial-success and
//! retryable-error semantics (429/503 + Retry-After; 400/413 carry a Status naming the problem).

use crate::otlp::convert::check_expansion;
use crate::otlp::tree::SpanTreeCache;
use crate::{Converted, Encoding, IngestError};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use infersight_model::ErrorKind;
use infersight_model::mapping::AttributeMapper;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;

use crate::receivers::ReceiverState;
use crate::receivers::sink::SinkError;
use infersight_model::telemetry::catalog;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Logs,
    Metrics,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
            Signal::Metrics => "metrics",
        }
    }
}

pub fn router(state: ReceiverState) -> Router {
    Router::new()
        .route(
            "/v1/traces",
            post(|s, o, h, b| handle(s, o, h, b, Signal::Traces)),
        )
        .route(
            "/v1/logs",
            post(|s, o, h, b| handle(s, o, h, b, Signal::Logs)),
        )
        .route(
            "/v1/metrics",
            post(|s, o, h, b| handle(s, o, h, b, Signal::Metrics)),
        )
        .with_state(state)
}

/// The google.rpc.Status message OTLP/HTTP uses for error bodies.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// An error answer in OTLP's shape: `status` with a `google.rpc.Status` body (`grpc_code`,
/// `message`) in `encoding`, and `Retry-After` on 429 / 503. The server's auth gate answers
/// with it too.
pub fn error_response(
    status: StatusCode,
    grpc_code: i32,
    message: String,
    encoding: Encoding,
) -> Response {
    let (content_type, body) = match encoding {
        Encoding::Protobuf => (
            "application/x-protobuf",
            RpcStatus {
                code: grpc_code,
                message,
            }
            .encode_to_vec(),
        ),
        Encoding::Json => (
            "application/json",
            serde_json::json!({ "code": grpc_code, "message": message })
                .to_string()
                .into_bytes(),
        ),
    };
    let mut response = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
    if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

fn ingest_error_response(error: &IngestError, encoding: Encoding) -> Response {
    match error.kind() {
        ErrorKind::TooLarge => error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            8,
            error.to_string(),
            encoding,
        ),
        ErrorKind::BadRequest | ErrorKind::NotFound => {
            error_response(StatusCode::BAD_REQUEST, 3, error.to_string(), encoding)
        }
        ErrorKind::Unavailable => error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            14,
            error.to_string(),
            encoding,
        ),
        ErrorKind::Internal => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            13,
            error.to_string(),
            encoding,
        ),
    }
}

/// The `outcome` label of an export the sink did not take.
pub(crate) fn submit_outcome(error: &SinkError) -> &'static str {
    match error {
        SinkError::Full => "throttled",
        SinkError::Unavailable(_) => "unavailable",
        SinkError::Rejected(_) | SinkError::Internal(_) => "failed",
    }
}

pub(crate) fn sink_error_status(error: &SinkError) -> (StatusCode, i32) {
    match error {
        SinkError::Full => (StatusCode::TOO_MANY_REQUESTS, 8),
        SinkError::Rejected(_) => (StatusCode::BAD_REQUEST, 3),
        SinkError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, 14),
        SinkError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, 13),
    }
}

/// Decodes and converts one OTLP request body; shared by the HTTP receiver and tests.
/// A request may expand to at most this many times the body limit once resource attributes are
/// copied into every record.
pub const EXPANSION_FACTOR: usize = 8;

pub fn convert_body(
    signal: Signal,
    bytes: &[u8],
    encoding: Encoding,
    mapper: &AttributeMapper,
    span_tree: Option<&SpanTreeCache>,
    max_body_bytes: usize,
) -> Result<Converted, IngestError> {
    let limit = max_body_bytes.saturating_mul(EXPANSION_FACTOR);
    match signal {
        Signal::Traces => {
            let request = crate::decode_traces(bytes, encoding)?;
            check_expansion(&request, limit)?;
            crate::traces_to_batches_with(&request, mapper, span_tree)
        }
        Signal::Logs => {
            let request = crate::decode_logs(bytes, encoding)?;
            check_expansion(&request, limit)?;
            crate::logs_to_batches(&request, mapper)
        }
        Signal::Metrics => {
            let request = crate::decode_metrics(bytes, encoding)?;
            check_expansion(&request, limit)?;
            crate::metrics_to_batches(&request, mapper)
        }
    }
}

fn success_body(signal: Signal, converted: &Converted, encoding: Encoding) -> Vec<u8> {
    let rejected = converted.rejected as i64;
    let message = converted.rejection_message.clone().unwrap_or_default();
    macro_rules! respond {
        ($resp:ident, $partial:ident, $field:ident) => {{
            let response = $resp {
                // rejected = 0 with a message is OTLP's warning (e.g. token events skipped)
                partial_success: (rejected > 0 || !message.is_empty()).then(|| $partial {
                    $field: rejected,
                    error_message: message,
                }),
            };
            match encoding {
                Encoding::Protobuf => response.encode_to_vec(),
                Encoding::Json => serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec()),
            }
        }};
    }
    match signal {
        Signal::Traces => respond!(
            ExportTraceServiceResponse,
            ExportTracePartialSuccess,
            rejected_spans
        ),
        Signal::Logs => respond!(
            ExportLogsServiceResponse,
            ExportLogsPartialSuccess,
            rejected_log_records
        ),
        Signal::Metrics => respond!(
            ExportMetricsServiceResponse,
            ExportMetricsPartialSuccess,
            rejected_data_points
        ),
    }
}

/// Bodies over the limit are still read and discarded up to this size (or 4× the limit).
const DRAIN_AT_LEAST_BYTES: usize = 64 * 1024 * 1024;

/// Reads the body up to `limit` bytes. Over the limit it keeps reading (and discarding) up to
/// `max(4 × limit, 64 MiB)`, so the client receives the 413 rather than a reset connection,
/// then gives up; `None` means too large.
async fn read_limited(body: Body, limit: usize) -> Option<bytes::Bytes> {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut buffer = bytes::BytesMut::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { return None };
        seen += chunk.len();
        if seen <= limit {
            buffer.extend_from_slice(&chunk);
        } else if seen > limit.saturating_mul(4).max(DRAIN_AT_LEAST_BYTES) {
            return None;
        }
    }
    (seen <= limit).then(|| buffer.freeze())
}

async fn drain(body: Body, limit: usize) {
    use futures::StreamExt;
    let mut stream = body.into_data_stream();
    let mut seen = 0usize;
    while let Some(Ok(chunk)) = stream.next().await {
        seen += chunk.len();
        if seen > limit {
            break;
        }
    }
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn handle(
    State(state): State<ReceiverState>,
    org: Option<axum::Extension<super::IngestOrg>>,
    headers: HeaderMap,
    body: Body,
    signal: Signal,
) -> Response {
    let counters = &state.counters;
    let outcome = |result: &str| {
        counters.add(
            &catalog::RECEIVER_REQUESTS,
            &[
                ("protocol", "otlp_http"),
                ("signal", signal.name()),
                ("outcome", result),
            ],
            1,
        );
    };
    let content_type = header_str(&headers, header::CONTENT_TYPE);
    // Answer errors in the encoding the client speaks (JSON unless it sent protobuf).
    let reply_encoding = match content_type {
        Some(ct) if ct.contains("protobuf") => Encoding::Protobuf,
        _ => Encoding::Json,
    };
    let Ok(permit) = state.in_flight.clone().try_acquire_owned() else {
        // Read and discard the body (without buffering it) so the client sees the 429 instead of
        // a connection reset while it is still sending.
        drain(body, state.max_body_bytes.max(DRAIN_AT_LEAST_BYTES)).await;
        outcome("throttled");
        return error_response(
            StatusCode::TOO_MANY_REQUESTS,
            8,
            "too many export requests in flight; retry later".into(),
            reply_encoding,
        );
    };
    if let Some(refusal) = state.refusal() {
        // the store would refuse it: neither read into memory nor decoded (drained as above,
        // without holding a slot another export could use)
        drop(permit);
        drain(body, state.max_body_bytes.max(DRAIN_AT_LEAST_BYTES)).await;
        outcome("unavailable");
        let (status, code) = sink_error_status(&refusal);
        return error_response(status, code, refusal.to_string(), reply_encoding);
    }
    let bytes = match read_limited(body, state.max_body_bytes).await {
        Some(bytes) => bytes,
        None => {
            outcome("too_large");
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                8,
                format!(
                    "request body exceeds the limit of {} bytes",
                    state.max_body_bytes
                ),
                reply_encoding,
            );
        }
    };
    let content_encoding = header_str(&headers, header::CONTENT_ENCODING);
    let mapper = state.mapper.clone();
    let org = org.map(|axum::Extension(org)| org).unwrap_or_default();
    let span_tree = state.span_tree.for_org(&org.0);
    let max = state.max_body_bytes;
    let ct = content_type.map(str::to_string);
    let ce = content_encoding.map(str::to_string);
    // Decompression, decoding and conversion are CPU work: keep them off the async workers.
    let converted = state
        .decode(move || {
            let (payload, encoding) =
                crate::decode_body(&bytes, ct.as_deref(), ce.as_deref(), max)?;
            convert_body(signal, &payload, encoding, &mapper, Some(&span_tree), max)
                .map(|c| (c, encoding))
        })
        .await;
    let (converted, encoding) = match converted {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            outcome("rejected");
            return ingest_error_response(&e, reply_encoding);
        }
        Err(e) => {
            outcome("failed");
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                13,
                format!("decoder task failed: {e}"),
                reply_encoding,
            );
        }
    };
    counters.add(
        &catalog::RECEIVER_RECORDS,
        &[
            ("protocol", "otlp_http"),
            ("signal", signal.name()),
            ("outcome", "rejected"),
        ],
        converted.rejected,
    );
    let _permit = permit;
    if let Err(e) = state.submit(&org, &converted).await {
        let (status, code) = sink_error_status(&e);
        outcome(submit_outcome(&e));
        return error_response(status, code, e.to_string(), encoding);
    }
    counters.add(
        &catalog::RECEIVER_RECORDS,
        &[
            ("protocol", "otlp_http"),
            ("signal", signal.name()),
            ("outcome", "accepted"),
        ],
        converted.accepted,
    );
    outcome("ok");
    let content_type = match encoding {
        Encoding::Protobuf => "application/x-protobuf",
        Encoding::Json => "application/json",
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type)],
        success_body(signal, &converted, encoding),
    )
        .into_response()
}
