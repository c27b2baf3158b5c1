//! OTLP/gRPC receiver (`:4317`): the collector's Trace, Logs and Metrics services from the
//! pre-generated `opentelemetry-proto` types. Same conversion and queue as OTLP/HTTP; errors map to
//! INVALID_ARGUMENT (bad input), RESOURCE_EXHAUSTED (queue full: retry) and UNAVAILABLE.

use crate::otlp::convert::{ExpansionEstimate, check_expansion};
use crate::otlp::tree::SpanTreeCache;
use crate::{Converted, IngestError};
use infersight_model::ErrorKind;
use infersight_model::mapping::AttributeMapper;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use crate::receivers::ReceiverState;
use crate::receivers::sink::SinkError;
use infersight_model::telemetry::catalog;

#[derive(Clone)]
pub struct GrpcReceiver {
    /// Shared with the HTTP receiver; `max_body_bytes` caps gRPC messages.
    pub state: ReceiverState,
}

fn to_status(error: &IngestError) -> Status {
    match error.kind() {
        ErrorKind::BadRequest | ErrorKind::NotFound => Status::invalid_argument(error.to_string()),
        ErrorKind::TooLarge => Status::resource_exhausted(error.to_string()),
        ErrorKind::Unavailable => retry_later(tonic::Code::Unavailable, error.to_string()),
        ErrorKind::Internal => Status::internal(error.to_string()),
    }
}

/// `google.protobuf.Duration`, `google.rpc.RetryInfo`, `google.protobuf.Any` and
/// `google.rpc.Status`: the details a retryable gRPC status carries.
mod retry_info {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Duration {
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        pub retry_delay: Option<Duration>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Any {
        #[prost(string, tag = "1")]
        pub type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RpcStatus {
        #[prost(int32, tag = "1")]
        pub code: i32,
        #[prost(string, tag = "2")]
        pub message: String,
        #[prost(message, repeated, tag = "3")]
        pub details: Vec<Any>,
    }
    pub const TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";
}

/// A status the client should retry after a second (a full queue, a full disk): gRPC's
/// Retry-After is a `google.rpc.RetryInfo` detail, which OTLP exporters honour (OTLP spec,
/// "Throttling").
fn retry_later(code: tonic::Code, message: String) -> Status {
    use prost::Message;
    let retry = retry_info::RetryInfo {
        retry_delay: Some(retry_info::Duration {
            seconds: 1,
            nanos: 0,
        }),
    };
    let details = retry_info::RpcStatus {
        code: code as i32,
        message: message.clone(),
        details: vec![retry_info::Any {
            type_url: retry_info::TYPE_URL.into(),
            value: retry.encode_to_vec(),
        }],
    };
    Status::with_details(code, message, details.encode_to_vec().into())
}

fn submit_status(error: &SinkError) -> Status {
    match error {
        SinkError::Full => retry_later(tonic::Code::ResourceExhausted, error.to_string()),
        SinkError::Rejected(m) => Status::invalid_argument(m.clone()),
        SinkError::Unavailable(_) => retry_later(tonic::Code::Unavailable, error.to_string()),
        SinkError::Internal(_) => Status::internal(error.to_string()),
    }
}

/// The org the ingest gate put on the request; the default org without one (no authentication).
fn org_of<T>(request: &Request<T>) -> crate::receivers::IngestOrg {
    request
        .extensions()
        .get::<crate::receivers::IngestOrg>()
        .cloned()
        .unwrap_or_default()
}

impl GrpcReceiver {
    async fn ingest<T: ExpansionEstimate + Send + 'static>(
        &self,
        signal: &'static str,
        org: crate::receivers::IngestOrg,
        request: T,
        convert: fn(&T, &AttributeMapper, &SpanTreeCache) -> Result<Converted, IngestError>,
    ) -> Result<Converted, Status> {
        let outcome = |result: &str| {
            self.state.counters.add(
                &catalog::RECEIVER_REQUESTS,
                &[
                    ("protocol", "otlp_grpc"),
                    ("signal", signal),
                    ("outcome", result),
                ],
                1,
            );
        };
        let Ok(_permit) = self.state.in_flight.clone().try_acquire_owned() else {
            outcome("throttled");
            return Err(Status::resource_exhausted(
                "too many export requests in flight; retry later",
            ));
        };
        if let Some(refusal) = self.state.refusal() {
            // the store would refuse it: not converted
            outcome("unavailable");
            return Err(submit_status(&refusal));
        }
        let mapper = self.state.mapper.clone();
        let span_tree = self.state.span_tree.for_org(&org.0);
        let limit = self
            .state
            .max_body_bytes
            .saturating_mul(super::otlp_http::EXPANSION_FACTOR);
        let converted = self
            .state
            .decode(move || {
                check_expansion(&request, limit)?;
                convert(&request, &mapper, &span_tree)
            })
            .await
            .map_err(|e| Status::internal(format!("decoder task failed: {e}")))?;
        let converted = match converted {
            Ok(c) => c,
            Err(e) => {
                outcome("rejected");
                return Err(to_status(&e));
            }
        };
        if let Err(e) = self.state.submit(&org, &converted).await {
            outcome(super::otlp_http::submit_outcome(&e));
            return Err(submit_status(&e));
        }
        for (result, n) in [
            ("accepted", converted.accepted),
            ("rejected", converted.rejected),
        ] {
            self.state.counters.add(
                &catalog::RECEIVER_RECORDS,
                &[
                    ("protocol", "otlp_grpc"),
                    ("signal", signal),
                    ("outcome", result),
                ],
                n,
            );
        }
        outcome("ok");
        Ok(converted)
    }
}

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let c = self
            .ingest(
                "traces",
                org_of(&request),
                request.into_inner(),
                |r, m, tree| crate::traces_to_batches_with(r, m, Some(tree)),
            )
            .await?;
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: (c.rejected > 0 || c.rejection_message.is_some()).then(|| {
                ExportTracePartialSuccess {
                    rejected_spans: c.rejected as i64,
                    error_message: c.rejection_message.unwrap_or_default(),
                }
            }),
        }))
    }
}

#[tonic::async_trait]
impl LogsService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let c = self
            .ingest("logs", org_of(&request), request.into_inner(), |r, m, _| {
                crate::logs_to_batches(r, m)
            })
            .await?;
        Ok(Response::new(ExportLogsServiceResponse {
            partial_success: (c.rejected > 0 || c.rejection_message.is_some()).then(|| {
                ExportLogsPartialSuccess {
                    rejected_log_records: c.rejected as i64,
                    error_message: c.rejection_message.unwrap_or_default(),
                }
            }),
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcReceiver {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let c = self
            .ingest(
                "metrics",
                org_of(&request),
                request.into_inner(),
                |r, m, _| crate::metrics_to_batches(r, m),
            )
            .await?;
        Ok(Response::new(ExportMetricsServiceResponse {
            partial_success: (c.rejected > 0 || c.rejection_message.is_some()).then(|| {
                ExportMetricsPartialSuccess {
                    rejected_data_points: c.rejected as i64,
                    error_message: c.rejection_message.unwrap_or_default(),
                }
            }),
        }))
    }
}

/// The three services as one tonic router, gzip accepted, messages capped at `max_message_bytes`.
pub fn routes(receiver: GrpcReceiver) -> tonic::service::Routes {
    let max_message_bytes = receiver.state.max_body_bytes;
    let traces = TraceServiceServer::new(receiver.clone())
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message_bytes);
    let logs = LogsServiceServer::new(receiver.clone())
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message_bytes);
    let metrics = MetricsServiceServer::new(receiver)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message_bytes);
    tonic::service::Routes::new(traces)
        .add_service(logs)
        .add_service(metrics)
}

#[cfg(test)]
mod retry_tests {
    use prost::Message;

    use super::*;

    #[test]
    fn retryable_statuses_carry_a_one_second_retry_info() {
        for (error, code) in [
            (
                SinkError::Unavailable("no space left on device".into()),
                tonic::Code::Unavailable,
            ),
            (SinkError::Full, tonic::Code::ResourceExhausted),
        ] {
            let status = submit_status(&error);
            assert_eq!(status.code(), code);
            let details = retry_info::RpcStatus::decode(status.details()).unwrap();
            assert_eq!(details.code, code as i32);
            assert_eq!(details.details[0].type_url, retry_info::TYPE_URL);
            let retry = retry_info::RetryInfo::decode(&details.details[0].value[..]).unwrap();
            assert_eq!(retry.retry_delay.unwrap().seconds, 1);
        }
        let rejected = submit_status(&SinkError::Rejected("bad".into()));
        assert!(rejected.details().is_empty());
    }
}
