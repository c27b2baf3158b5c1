//! An HTTPS receiver for tests of the https clients (notification sinks, the alert and action
//! webhooks, the LLM narrative): a listener on 127.0.0.1 with a fresh self-signed certificate
//! (rcgen, rustls with ring) that answers every request with a fixed status and body and hands
//! each request it read to a channel. A client that refuses the certificate ends the handshake,
//! so nothing reaches the channel: that is how a test sees verification hold. [`TestPki`]: a
//! private CA with server and client certificates, for the TLS of `serve`'s own listeners.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// One request the receiver read.
#[derive(Debug, Clone)]
pub struct Request {
    /// `/api/v2/alerts`.
    pub path: String,
    /// Names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// A running receiver.
pub struct HttpsReceiver {
    pub addr: SocketAddr,
    /// Its certificate, PEM: what a `ca_file` must hold for a client to trust it.
    pub ca_pem: String,
    pub requests: mpsc::Receiver<Request>,
}

/// Starts a receiver for `127.0.0.1` answering `status` with `body` (JSON when not empty).
pub fn https_receiver(status: u16, body: &str) -> HttpsReceiver {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let ca_pem = certified.cert.pem();
    let chain = vec![CertificateDer::from(certified.cert.der().to_vec())];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der()));
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let (tx, requests) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            let Some(request) = read_request(&mut tls) else {
                continue;
            };
            let _ = tls.write_all(answer.as_bytes());
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
            if tx.send(request).is_err() {
                return;
            }
        }
    });
    HttpsReceiver {
        addr,
        ca_pem,
        requests,
    }
}

/// One HTTP/1.1 request, its body as long as its `content-length` (none without one); `None` when the stream ends first.
pub fn read_request(stream: impl Read) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let path = request_line.split_whitespace().nth(1)?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    // a GET has no body and, from most clients, no content-length
    let length: usize = match headers.get("content-length") {
        Some(value) => value.parse().ok()?,
        None => 0,
    };
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        path,
        headers,
        body,
    })
}

/// A private PKI for tests of `serve`'s TLS: a CA, a server certificate for `127.0.0.1` and
/// `localhost` signed by it, and a client certificate (for mTLS) signed by it; all PEM.
#[derive(Debug, Clone)]
pub struct TestPki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

/// The files [`TestPki::write`] wrote.
#[derive(Debug, Clone)]
pub struct PkiFiles {
    pub ca: std::path::PathBuf,
    pub server_cert: std::path::PathBuf,
    pub server_key: std::path::PathBuf,
    pub client_cert: std::path::PathBuf,
    pub client_key: std::path::PathBuf,
}

impl TestPki {
    /// A fresh PKI; `name` goes into the CA's common name (two PKIs are told apart by it).
    pub fn new(name: &str) -> TestPki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf = |names: Vec<String>, purpose: ExtendedKeyUsagePurpose, cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names).unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = vec![purpose];
            // strict verifiers (Python ≥ 3.13's default: X509_STRICT) want the issuer's key id
            params.use_authority_key_identifier_extension = true;
            let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert_pem, server_key_pem) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            "infersight",
        );
        let (client_cert_pem, client_key_pem) =
            leaf(Vec::new(), ExtendedKeyUsagePurpose::ClientAuth, "exporter");
        TestPki {
            ca_pem: ca.pem(),
            server_cert_pem,
            server_key_pem,
            client_cert_pem,
            client_key_pem,
        }
    }

    /// Writes the PEM files into `dir` (`ca.pem`, `server.pem`, `server.key`, `client.pem`,
    /// `client.key`), replacing what is there.
    pub fn write(&self, dir: &std::path::Path) -> PkiFiles {
        let files = PkiFiles {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        };
        for (path, text) in [
            (&files.ca, &self.ca_pem),
            (&files.server_cert, &self.server_cert_pem),
            (&files.server_key, &self.server_key_pem),
            (&files.client_cert, &self.client_cert_pem),
            (&files.client_key, &self.client_key_pem),
        ] {
            std::fs::write(path, text).unwrap();
        }
        files
    }
}
