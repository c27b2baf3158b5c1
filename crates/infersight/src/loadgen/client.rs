//! How one exporter of the load generator talks to `serve`'s receivers: OTLP/gRPC through
//! tonic with a codec that sends the pool's already-encoded bytes as they are, or OTLP/HTTP
//! protobuf through ureq on a blocking thread. Each answer becomes an [`Outcome`]: acknowledged
//! (with the spans a partial success rejected), throttled (429 / RESOURCE_EXHAUSTED),
//! unavailable (503 / UNAVAILABLE) or failed.

use std::time::Duration;

use bytes::BufMut;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::exit::CliError;

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// What a throttled answer waits when it names no time (gRPC's RetryInfo is not read).
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// What one export request came back with.
#[derive(Debug)]
pub enum Outcome {
    Acked { rejected_spans: u64 },
    Throttled(Duration),
    Unavailable(Duration),
    Failed(String),
}

/// The protocol of an exporter, also the index of its tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc = 0,
    Http = 1,
}

/// One exporter's connection; clones share it (HTTP/2 streams, or ureq's connection pool).
#[derive(Clone)]
pub enum Client {
    Grpc(tonic::client::Grpc<Channel>),
    Http { agent: ureq::Agent, url: String },
}

impl Client {
    /// Connects to an OTLP/gRPC receiver such as `http://127.0.0.1:4317`.
    pub async fn grpc(endpoint: &str) -> Result<Client, CliError> {
        let channel = Channel::from_shared(endpoint.to_string())
            .map_err(|e| CliError::usage(format!("--grpc {endpoint}: {e}")))?
            .connect()
            .await
            .map_err(|e| CliError::failed(format!("connecting to {endpoint}: {e}")))?;
        Ok(Client::Grpc(
            tonic::client::Grpc::new(channel).max_decoding_message_size(16 * 1024 * 1024),
        ))
    }

    /// An OTLP/HTTP receiver such as `http://127.0.0.1:4318`; traces go to `/v1/traces`.
    pub fn http(endpoint: &str) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Client::Http {
            agent,
            url: format!("{}/v1/traces", endpoint.trim_end_matches('/')),
        }
    }

    pub fn protocol(&self) -> Protocol {
        match self {
            Client::Grpc(_) => Protocol::Grpc,
            Client::Http { .. } => Protocol::Http,
        }
    }

    /// Sends one encoded `ExportTraceServiceRequest` and waits for its answer.
    pub async fn send(&mut self, body: Vec<u8>) -> Outcome {
        match self {
            Client::Grpc(grpc) => send_grpc(grpc, body).await,
            Client::Http { agent, url } => {
                let (agent, url) = (agent.clone(), url.clone());
                tokio::task::spawn_blocking(move || send_http(&agent, &url, &body))
                    .await
                    .unwrap_or_else(|e| Outcome::Failed(format!("sending task: {e}")))
            }
        }
    }
}

async fn send_grpc(grpc: &mut tonic::client::Grpc<Channel>, body: Vec<u8>) -> Outcome {
    if let Err(e) = grpc.ready().await {
        return Outcome::Failed(format!("grpc channel: {e}"));
    }
    let path = PathAndQuery::from_static(EXPORT_PATH);
    match grpc
        .unary(tonic::Request::new(body), path, PreEncoded)
        .await
    {
        Ok(response) => Outcome::Acked {
            rejected_spans: rejected(&response.into_inner()),
        },
        Err(status) => match status.code() {
            Code::ResourceExhausted => Outcome::Throttled(DEFAULT_RETRY),
            Code::Unavailable => Outcome::Unavailable(DEFAULT_RETRY),
            code => Outcome::Failed(format!("grpc {code:?}: {}", status.message())),
        },
    }
}

fn send_http(agent: &ureq::Agent, url: &str, body: &[u8]) -> Outcome {
    let mut response = match agent
        .post(url)
        .header("content-type", "application/x-protobuf")
        .send(body)
    {
        Ok(response) => response,
        Err(e) => return Outcome::Failed(format!("POST {url}: {e}")),
    };
    let status = response.status().as_u16();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(DEFAULT_RETRY, Duration::from_secs_f64);
    let answer = response.body_mut().read_to_vec().unwrap_or_default();
    match status {
        200..=299 => Outcome::Acked {
            rejected_spans: ExportTraceServiceResponse::decode(answer.as_slice())
                .map(|r| rejected(&r))
                .unwrap_or(0),
        },
        429 => Outcome::Throttled(retry),
        503 => Outcome::Unavailable(retry),
        _ => Outcome::Failed(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(300)])
        )),
    }
}

fn rejected(response: &ExportTraceServiceResponse) -> u64 {
    response
        .partial_success
        .as_ref()
        .map_or(0, |p| p.rejected_spans.max(0) as u64)
}

/// A gRPC codec whose requests are protobuf bytes encoded beforehand (copied into the frame,
/// never re-encoded) and whose answers are `ExportTraceServiceResponse`s.
#[derive(Debug, Clone, Copy, Default)]
struct PreEncoded;

impl Codec for PreEncoded {
    type Encode = Vec<u8>;
    type Decode = ExportTraceServiceResponse;
    type Encoder = PreEncoded;
    type Decoder = PreEncoded;

    fn encoder(&mut self) -> PreEncoded {
        PreEncoded
    }
    fn decoder(&mut self) -> PreEncoded {
        PreEncoded
    }
}

impl Encoder for PreEncoded {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.len());
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for PreEncoded {
    type Item = ExportTraceServiceResponse;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        ExportTraceServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("decoding the export response: {e}")))
    }
}
