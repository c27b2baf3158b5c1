//! TLS on `serve`'s listeners: each accepted TCP connection goes through a rustls (ring) server
//! handshake before the API, OTLP HTTP or OTLP gRPC server sees it. The certificate chain and
//! key (PEM files) are read at start and again on SIGHUP or when the files change; a reload
//! that fails keeps the certificate in use and says why. With a client CA file the two OTLP
//! listeners require a client certificate signed by it (mTLS); the API stays on server TLS
//! (browsers and `curl` log in with tokens).
//!
//! Handshakes run on their own tasks (bounded by [`HANDSHAKE_TIMEOUT`]), so a slow or silent
//! client never holds up the accept loop; a failed one is logged at debug level and counted
//! nowhere else (the connection never reached a server).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Longest a client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the files are checked for a change (besides SIGHUP).
pub const RELOAD_POLL: Duration = Duration::from_secs(5);
/// Handshaken connections waiting for their server to take them.
const ACCEPTED_BACKLOG: usize = 64;
/// Handshakes in progress at once, per listener; a connection beyond it is closed at once (a
/// flood of silent clients holds no more than this many tasks and sockets).
const MAX_HANDSHAKES: usize = 1024;

/// Where the certificate, its key and the client CA come from (`[server.tls]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain, PEM, leaf first.
    pub cert_file: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// Client certificates the OTLP listeners require must chain to these (PEM); `None`: no
    /// client certificate is asked for.
    pub client_ca_file: Option<PathBuf>,
}

/// Why the TLS files could not be used; the message names the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// Which listener a configuration is for: they differ in ALPN and client authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// The API and UI: HTTP/1.1, no client certificate.
    Api,
    /// OTLP over HTTP/1.1, a client certificate when a client CA is set.
    OtlpHttp,
    /// OTLP over gRPC (HTTP/2, ALPN `h2`), a client certificate when a client CA is set.
    OtlpGrpc,
}

/// The three listeners' server configurations, replaced whole on a reload.
struct Configs {
    api: Arc<ServerConfig>,
    otlp_http: Arc<ServerConfig>,
    otlp_grpc: Arc<ServerConfig>,
    /// Modification times of the files they were read from.
    stamps: Vec<Option<SystemTime>>,
}

/// The live TLS settings of a `serve`, shared by its listeners and the reloader.
pub struct Tls {
    files: TlsFiles,
    configs: RwLock<Configs>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads `files`; the error says which file is wrong and how.
    pub fn load(files: TlsFiles) -> Result<Arc<Tls>, TlsError> {
        let configs = read_configs(&files)?;
        Ok(Arc::new(Tls {
            files,
            configs: RwLock::new(configs),
        }))
    }

    /// Reads the files again and, when they are good, serves new connections with them
    /// (connections already open keep their session); on error the old ones stay.
    pub fn reload(&self) -> Result<(), TlsError> {
        let configs = read_configs(&self.files)?;
        *self.configs.write() = configs;
        Ok(())
    }

    /// [`Tls::reload`] when a file's modification time changed since the last read; whether it
    /// reloaded.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        if stamps(&self.files) == self.configs.read().stamps {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }

    fn config(&self, kind: ListenerKind) -> Arc<ServerConfig> {
        let configs = self.configs.read();
        Arc::clone(match kind {
            ListenerKind::Api => &configs.api,
            ListenerKind::OtlpHttp => &configs.otlp_http,
            ListenerKind::OtlpGrpc => &configs.otlp_grpc,
        })
    }

    /// Accepts on `tcp` and hands each connection that completes its handshake to the returned
    /// listener, until `stop` resolves.
    pub fn listen(
        self: &Arc<Self>,
        tcp: TcpListener,
        kind: ListenerKind,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> TlsListener {
        let local = tcp.local_addr().ok();
        let (tx, rx) = mpsc::channel(ACCEPTED_BACKLOG);
        let tls = Arc::clone(self);
        let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            tokio::pin!(stop);
            loop {
                let accepted = tokio::select! {
                    _ = &mut stop => return,
                    accepted = tcp.accept() => accepted,
                };
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(error) => {
                        // out of file descriptors and the like: wait instead of spinning
                        tracing::warn!(%error, ?kind, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&handshakes).try_acquire_owned() else {
                    tracing::warn!(%peer, ?kind, "too many TLS handshakes at once; connection closed");
                    continue;
                };
                let acceptor = TlsAcceptor::from(tls.config(kind));
                let tx = tx.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    let handshake =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(error)) => {
                            tracing::debug!(%error, %peer, ?kind, "TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(%peer, ?kind, "TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { rx, local }
    }
}

/// Re-reads `tls`'s files on SIGHUP and when they change (every `poll`), until `stop`; each
/// reload (and refusal) is audited in `audit`.
pub fn spawn_reloader(
    tls: Arc<Tls>,
    poll: Duration,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    audit: Option<Arc<infersight_query::AccessAudit>>,
) -> tokio::task::JoinHandle<()> {
    crate::periodic::spawn_reloader("the TLS certificate", poll, stop, audit, move |forced| {
        let reloaded = if forced {
            tls.reload().map(|()| true)
        } else {
            tls.reload_if_changed()
        }
        .map_err(|e| e.to_string())?;
        Ok(reloaded.then(String::new))
    })
}

/// Connections that finished their handshake, for `axum::serve` (and, through
/// [`TlsListener::into_incoming`], for tonic).
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: Option<SocketAddr>,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(accepted) => accepted,
            // the accept loop ended (shutdown): no more connections, the server's graceful
            // shutdown ends it
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.local
            .ok_or_else(|| io::Error::other("the listener's address is unknown"))
    }
}

impl TlsListener {
    /// The connections as the stream tonic's `serve_with_incoming` takes.
    pub fn into_incoming(
        self,
    ) -> impl futures::Stream<Item = Result<GrpcTlsStream, io::Error>> + Send + 'static {
        let local = self.local;
        futures::stream::unfold(self.rx, move |mut rx| async move {
            rx.recv().await.map(|(stream, peer)| {
                let info = tonic::transport::server::TcpConnectInfo {
                    local_addr: local,
                    remote_addr: Some(peer),
                };
                (Ok(GrpcTlsStream { stream, info }), rx)
            })
        })
    }
}

/// `app` as the service `axum::serve` makes per TLS connection, each request carrying the
/// peer's address as `ConnectInfo<SocketAddr>` (as `into_make_service_with_connect_info` gives
/// a plain TCP listener's).
pub fn with_peer_address(
    app: axum::Router,
) -> impl for<'a> tower::Service<
    axum::serve::IncomingStream<'a, TlsListener>,
    Response = axum::Router,
    Error = std::convert::Infallible,
    Future = std::future::Ready<Result<axum::Router, std::convert::Infallible>>,
> + Clone
+ Send
+ 'static {
    tower::service_fn(
        move |incoming: axum::serve::IncomingStream<'_, TlsListener>| {
            let peer = *incoming.remote_addr();
            std::future::ready(Ok(app
                .clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(peer)))))
        },
    )
}

/// A TLS connection for tonic, with the peer's address where tonic's handlers look for it.
pub struct GrpcTlsStream {
    stream: TlsStream<TcpStream>,
    info: tonic::transport::server::TcpConnectInfo,
}

impl tonic::transport::server::Connected for GrpcTlsStream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.info.clone()
    }
}

impl AsyncRead for GrpcTlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GrpcTlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The modification times of `files`' files (`None` for one that cannot be read).
fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [
        Some(&files.cert_file),
        Some(&files.key_file),
        files.client_ca_file.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
    .collect()
}

fn read_configs(files: &TlsFiles) -> Result<Configs, TlsError> {
    let stamps = stamps(files);
    let chain = read_certs(&files.cert_file, "cert_file")?;
    let key = read_key(&files.key_file)?;
    let client_roots = match &files.client_ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(path, "client_ca_file")? {
                roots.add(cert).map_err(|e| {
                    TlsError(format!(
                        "server.tls.client_ca_file: `{}`: not a CA certificate: {e}",
                        path.display()
                    ))
                })?;
            }
            Some(Arc::new(roots))
        }
        None => None,
    };
    let build = |alpn: &[&[u8]], client_roots: Option<&Arc<RootCertStore>>| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("server.tls: {e}")))?;
        let builder = match client_roots {
            Some(roots) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::clone(roots), provider)
                        .build()
                        .map_err(|e| TlsError(format!("server.tls.client_ca_file: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| {
                TlsError(format!(
                    "server.tls: `{}` and `{}` do not make a certificate and its key: {e}",
                    files.cert_file.display(),
                    files.key_file.display()
                ))
            })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok::<_, TlsError>(Arc::new(config))
    };
    Ok(Configs {
        api: build(&[b"http/1.1"], None)?,
        otlp_http: build(&[b"http/1.1"], client_roots.as_ref())?,
        otlp_grpc: build(&[b"h2"], client_roots.as_ref())?,
        stamps,
    })
}

fn read_file(path: &Path, key: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| {
        TlsError(format!(
            "server.tls.{key}: cannot read `{}`: {e}",
            path.display()
        ))
    })
}

/// The certificates of the PEM file `path` (at least one).
fn read_certs(path: &Path, key: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_file(path, key)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            TlsError(format!(
                "server.tls.{key}: `{}` is not PEM: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "server.tls.{key}: `{}` holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

/// The private key of the PEM file `path`.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_file(path, "key_file")?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        TlsError(format!(
            "server.tls.key_file: `{}` holds no PEM private key: {e}",
            path.display()
        ))
    })
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
