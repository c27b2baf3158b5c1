//! `https://` sinks: a receiver on 127.0.0.1 with a self-signed certificate (rcgen, rustls)
//! gets the alert when `notify.ca_file` holds that certificate, and nothing when it does not
//! (the web's roots do not vouch for it: delivery fails, counted, instead of trusting anyone).

use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Severity};
use infersight_model::telemetry::Counters;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::Notifier;
use super::config::NotifyConfig;
use super::tests::{Received, read_request};

/// An HTTPS receiver answering 200 to every request, with a fresh self-signed certificate for
/// 127.0.0.1; answers its address, the certificate as PEM and the requests it read.
fn https_receiver() -> (SocketAddr, String, mpsc::Receiver<Received>) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let pem = certified.cert.pem();
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
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let Ok(connection) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(connection, stream);
            // a client that refuses the certificate ends the handshake: nothing is read
            let Some(received) = read_request(&mut tls) else {
                continue;
            };
            let _ =
                tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            let _ = tls.flush();
            tls.conn.send_close_notify();
            let _ = tls.flush();
            if tx.send(received).is_err() {
                return;
            }
        }
    });
    (addr, pem, rx)
}

fn notice() -> IncidentNotice {
    IncidentNotice {
        incident_id: "inc-tls".into(),
        alertname: "InferenceIncident".into(),
        severity: Severity::Critical,
        summary: "ttft rose".into(),
        ..IncidentNotice::default()
    }
}

fn notifier(addr: SocketAddr, ca_file: &str, counters: &Arc<Counters>) -> Notifier {
    let config = NotifyConfig {
        alertmanager_urls: vec![format!("https://{addr}")],
        timeout: "2s".into(),
        max_attempts: 1,
        ca_file: ca_file.into(),
        ..NotifyConfig::default()
    };
    let settings = config.settings("http://unused").unwrap().unwrap();
    Notifier::start(&settings, Arc::clone(counters)).unwrap()
}

#[test]
fn an_https_alertmanager_gets_the_alert_when_its_ca_is_given() {
    let (addr, pem, received) = https_receiver();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pem).unwrap();
    let counters = Arc::new(Counters::new());
    let notifier = notifier(addr, ca_file.to_str().unwrap(), &counters);
    notifier.incident_opened(&notice());
    let request = received
        .recv_timeout(Duration::from_secs(20))
        .expect("the alert over TLS");
    assert_eq!(request.path, "/api/v2/alerts");
    let body = String::from_utf8_lossy(&request.body);
    assert!(body.contains("inc-tls"), "{body}");
    notifier.close();
}

#[test]
fn an_https_sink_whose_certificate_nobody_vouches_for_gets_nothing() {
    let (addr, _pem, received) = https_receiver();
    let counters = Arc::new(Counters::new());
    // no ca_file: the web's roots, which do not hold a self-signed certificate
    let notifier = notifier(addr, "", &counters);
    notifier.incident_opened(&notice());
    let deadline = Instant::now() + Duration::from_secs(20);
    while counters.sum("infersight_notifications_failed_total", &[]) < 1.0 {
        assert!(
            Instant::now() < deadline,
            "delivery neither failed nor gave up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        received.try_recv().is_err(),
        "a request got through an unverified certificate"
    );
    assert_eq!(
        counters.sum("infersight_notifications_sent_total", &[]),
        0.0
    );
}

#[test]
fn the_ca_file_must_hold_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let key_only = dir.path().join("key.pem");
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(&key_only, certified.key_pair.serialize_pem()).unwrap();
    for (path, says) in [
        (dir.path().join("missing.pem"), "cannot read"),
        (key_only, "other than certificates"),
    ] {
        let config = NotifyConfig {
            alertmanager_urls: vec!["https://127.0.0.1:9093".into()],
            ca_file: path.display().to_string(),
            ..NotifyConfig::default()
        };
        let errors = config.validate();
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("notify.ca_file:") && e.contains(says)),
            "{errors:?}"
        );
    }
    let ftp = NotifyConfig {
        webhook_url: "ftp://hooks.test/x".into(),
        ..NotifyConfig::default()
    };
    assert!(
        ftp.validate()
            .iter()
            .any(|e| e.contains("http:// or https://"))
    );
}
