//! How one exporter of the load generator talks to `serve`'s receivers: OTLP/gRPC through
//! tonic with a codec that sends the pool's already-encoded bytes as they are, or OTLP/HTTP
//! protobuf through ureq on a blocking thread. Each answer becomes an [`Outcome`]: acknowledged
//! (with the spans a partial success rejected), throttled (429 / RESOURCE_EXHAUSTED),
//! unavailable (503 / UNAVAILABLE) or failed. `https://` endpoints go over TLS (rustls, the CA of
//! `--ca-file`; gRPC with ALPN h2), and `--token` is sent as a bearer token.

use std::sync::Arc;
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
    Grpc {
        grpc: tonic::client::Grpc<Channel>,
        token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    },
    Http {
        agent: ureq::Agent,
        url: String,
        token: Option<String>,
    },
}

/// How every exporter reaches a receiver that wants TLS or a token: the CA to trust for
/// `https://` endpoints and the bearer token.
pub struct Access {
    ca_pem: Option<Vec<u8>>,
    token: Option<String>,
}

impl Access {
    pub fn new(ca_file: Option<&std::path::Path>, token: Option<&str>) -> Result<Access, CliError> {
        let ca_pem = ca_file
            .map(|path| {
                std::fs::read(path)
                    .map_err(|e| CliError::usage(format!("--ca-file {}: {e}", path.display())))
            })
            .transpose()?;
        Ok(Access {
            ca_pem,
            token: token.map(str::to_string),
        })
    }

    /// The rustls client configuration of an `https://` gRPC endpoint: the CA file's roots,
    /// ALPN h2.
    fn grpc_tls(&self) -> Result<Arc<rustls::ClientConfig>, CliError> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let pem = self
            .ca_pem
            .as_deref()
            .ok_or_else(|| CliError::usage("an https:// --grpc endpoint needs --ca-file"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| CliError::usage(format!("--ca-file: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| CliError::usage(format!("--ca-file: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CliError::failed(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

impl Client {
    /// Connects to an OTLP/gRPC receiver such as `http://127.0.0.1:4317` (or `https://…`,
    /// over TLS with `access`'s CA).
    pub async fn grpc(endpoint: &str, access: &Access) -> Result<Client, CliError> {
        let builder = Channel::from_shared(endpoint.to_string())
            .map_err(|e| CliError::usage(format!("--grpc {endpoint}: {e}")))?;
        let connected = if endpoint.starts_with("https://") {
            let connector = TlsConnector(tokio_rustls::TlsConnector::from(access.grpc_tls()?));
            builder.connect_with_connector(connector).await
        } else {
            builder.connect().await
        };
        let channel =
            connected.map_err(|e| CliError::failed(format!("connecting to {endpoint}: {e}")))?;
        let token = access
            .token
            .as_ref()
            .map(|t| {
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| CliError::usage("--token: not a valid header value"))
            })
            .transpose()?;
        Ok(Client::Grpc {
            grpc: tonic::client::Grpc::new(channel).max_decoding_message_size(16 * 1024 * 1024),
            token,
        })
    }

    /// An OTLP/HTTP receiver such as `http://127.0.0.1:4318` (or `https://…`, verified against
    /// `access`'s CA when it has one); traces go to `/v1/traces`.
    pub fn http(endpoint: &str, access: &Access) -> Client {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)));
        if let Some(pem) = &access.ca_pem {
            let roots: Vec<_> = ureq::tls::parse_pem(pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert.to_owned()),
                    _ => None,
                })
                .collect();
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
                    .build(),
            );
        }
        Client::Http {
            agent: config.build().into(),
            url: format!("{}/v1/traces", endpoint.trim_end_matches('/')),
            token: access.token.clone(),
        }
    }

    pub fn protocol(&self) -> Protocol {
        match self {
            Client::Grpc { .. } => Protocol::Grpc,
            Client::Http { .. } => Protocol::Http,
        }
    }

    /// Sends one encoded `ExportTraceServiceRequest` and waits for its answer.
    pub async fn send(&mut self, body: Vec<u8>) -> Outcome {
        match self {
            Client::Grpc { grpc, token } => send_grpc(grpc, token.as_ref(), body).await,
            Client::Http { agent, url, token } => {
                let (agent, url, token) = (agent.clone(), url.clone(), token.clone());
                tokio::task::spawn_blocking(move || {
                    send_http(&agent, &url, token.as_deref(), &body)
                })
                .await
                .unwrap_or_else(|e| Outcome::Failed(format!("sending task: {e}")))
            }
        }
    }
}

async fn send_grpc(
    grpc: &mut tonic::client::Grpc<Channel>,
    token: Option<&tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    body: Vec<u8>,
) -> Outcome {
    if let Err(e) = grpc.ready().await {
        return Outcome::Failed(format!("grpc channel: {e}"));
    }
    let path = PathAndQuery::from_static(EXPORT_PATH);
    let mut request = tonic::Request::new(body);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", token.clone());
    }
    match grpc.unary(request, path, PreEncoded).await {
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

fn send_http(agent: &ureq::Agent, url: &str, token: Option<&str>, body: &[u8]) -> Outcome {
    let mut request = agent
        .post(url)
        .header("content-type", "application/x-protobuf");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let mut response = match request.send(body) {
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

/// Opens a gRPC channel's connections over TLS: TCP to the URI's host and port, then a rustls
/// handshake naming that host.
#[derive(Clone)]
struct TlsConnector(tokio_rustls::TlsConnector);

impl tower::Service<tonic::codegen::http::Uri> for TlsConnector {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: tonic::codegen::http::Uri) -> Self::Future {
        let connector = self.0.clone();
        Box::pin(async move {
            let host = uri.host().unwrap_or("127.0.0.1").to_string();
            let port = uri.port_u16().unwrap_or(443);
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name =
                rustls::pki_types::ServerName::try_from(host).map_err(std::io::Error::other)?;
            let tls = connector.connect(name, tcp).await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}
