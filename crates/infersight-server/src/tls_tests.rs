//! TLS on the listeners: bad files are refused naming the file, a reload serves the new
//! certificate to new connections (and a broken one keeps the old), the OTLP listeners ask for
//! a client certificate when a client CA is set while the API does not, and a plain-HTTP client
//! gets no answer from a TLS port.

use std::sync::Arc;
use std::time::Duration;

use infersight_testkit::https::{PkiFiles, TestPki};
use ureq::tls::{Certificate, ClientCert, PemItem, RootCerts, TlsConfig};

use super::*;

fn files_of(pki: &PkiFiles, client_ca: bool) -> TlsFiles {
    TlsFiles {
        cert_file: pki.server_cert.clone(),
        key_file: pki.server_key.clone(),
        client_ca_file: client_ca.then(|| pki.ca.clone()),
    }
}

fn certs(pem: &str) -> Vec<Certificate<'static>> {
    ureq::tls::parse_pem(pem.as_bytes())
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(cert.to_owned()),
            _ => None,
        })
        .collect()
}

/// An https client that trusts only `ca_pem`, presenting `pki`'s client certificate when
/// `client` is set.
fn client(ca_pem: &str, client: Option<&TestPki>) -> ureq::Agent {
    let mut tls = TlsConfig::builder().root_certs(RootCerts::Specific(Arc::new(certs(ca_pem))));
    if let Some(pki) = client {
        let key = ureq::tls::parse_pem(pki.client_key_pem.as_bytes())
            .find_map(|item| match item {
                Ok(PemItem::PrivateKey(key)) => Some(key.to_owned()),
                _ => None,
            })
            .unwrap();
        tls = tls.client_cert(Some(ClientCert::new_with_certs(
            &certs(&pki.client_cert_pem),
            key,
        )));
    }
    ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .new_agent()
}

/// A TLS listener of `kind` on 127.0.0.1 answering `GET /ping` with `pong`; its address.
async fn ping_server(tls: &Arc<Tls>, kind: ListenerKind) -> std::net::SocketAddr {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = tls.listen(tcp, kind, std::future::pending());
    let app = axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// What `agent` gets from `https://addr/ping`: the body, or the error's text.
async fn ping(agent: ureq::Agent, addr: std::net::SocketAddr) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        agent
            .get(&format!("https://{addr}/ping"))
            .call()
            .map_err(|e| e.to_string())
            .and_then(|mut r| r.body_mut().read_to_string().map_err(|e| e.to_string()))
    })
    .await
    .unwrap()
}

#[test]
fn bad_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new("a").write(dir.path());
    let other = tempfile::tempdir().unwrap();
    let stranger = TestPki::new("b").write(other.path());
    let missing = dir.path().join("missing.pem");
    let cases = [
        (
            TlsFiles {
                cert_file: missing.clone(),
                ..files_of(&pki, false)
            },
            "server.tls.cert_file: cannot read",
        ),
        (
            TlsFiles {
                cert_file: pki.server_key.clone(),
                ..files_of(&pki, false)
            },
            "holds no PEM certificate",
        ),
        (
            TlsFiles {
                key_file: pki.server_cert.clone(),
                ..files_of(&pki, false)
            },
            "server.tls.key_file:",
        ),
        (
            TlsFiles {
                key_file: stranger.server_key.clone(),
                ..files_of(&pki, false)
            },
            "do not make a certificate and its key",
        ),
        (
            TlsFiles {
                client_ca_file: Some(missing.clone()),
                ..files_of(&pki, false)
            },
            "server.tls.client_ca_file: cannot read",
        ),
    ];
    for (files, says) in cases {
        let error = Tls::load(files.clone()).err().map(|e| e.to_string());
        assert!(
            error.as_deref().is_some_and(|e| e.contains(says)),
            "{files:?}: {error:?}"
        );
    }
    assert!(Tls::load(files_of(&pki, true)).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_new_certificate_and_a_broken_one_keeps_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (TestPki::new("first"), TestPki::new("second"));
    let files = first.write(dir.path());
    let tls = Tls::load(files_of(&files, false)).unwrap();
    let addr = ping_server(&tls, ListenerKind::Api).await;
    assert_eq!(
        ping(client(&first.ca_pem, None), addr).await.unwrap(),
        "pong"
    );
    assert!(ping(client(&second.ca_pem, None), addr).await.is_err());
    assert!(!tls.reload_if_changed().unwrap(), "nothing changed yet");

    second.write(dir.path());
    tls.reload().unwrap();
    assert_eq!(
        ping(client(&second.ca_pem, None), addr).await.unwrap(),
        "pong"
    );
    let old = ping(client(&first.ca_pem, None), addr).await;
    assert!(old.is_err(), "the old certificate is still served: {old:?}");

    std::fs::write(&files.server_key, "not a key\n").unwrap();
    let error = tls.reload().unwrap_err().to_string();
    assert!(error.contains("server.tls.key_file"), "{error}");
    assert_eq!(
        ping(client(&second.ca_pem, None), addr).await.unwrap(),
        "pong",
        "a broken reload keeps the certificate in use"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_listeners_ask_for_a_client_certificate_when_a_client_ca_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new("mtls");
    let files = pki.write(dir.path());
    let tls = Tls::load(files_of(&files, true)).unwrap();
    let otlp = ping_server(&tls, ListenerKind::OtlpHttp).await;
    let api = ping_server(&tls, ListenerKind::Api).await;
    let without = ping(client(&pki.ca_pem, None), otlp).await;
    assert!(
        without.is_err(),
        "OTLP without a client certificate: {without:?}"
    );
    assert_eq!(
        ping(client(&pki.ca_pem, Some(&pki)), otlp).await.unwrap(),
        "pong"
    );
    // a certificate from another CA is no better than none
    let stranger = TestPki::new("stranger");
    let foreign = TestPki {
        ca_pem: pki.ca_pem.clone(),
        ..stranger
    };
    assert!(
        ping(client(&pki.ca_pem, Some(&foreign)), otlp)
            .await
            .is_err()
    );
    assert_eq!(ping(client(&pki.ca_pem, None), api).await.unwrap(), "pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_client_gets_no_answer_from_a_tls_port() {
    let dir = tempfile::tempdir().unwrap();
    let files = TestPki::new("plain").write(dir.path());
    let tls = Tls::load(files_of(&files, false)).unwrap();
    let addr = ping_server(&tls, ListenerKind::Api).await;
    let answer = tokio::task::spawn_blocking(move || {
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .new_agent()
            .get(&format!("http://{addr}/ping"))
            .call()
            .map(|r| r.status().as_u16())
    })
    .await
    .unwrap();
    assert!(answer.is_err(), "{answer:?}");
}
