//! `https://` sinks: a receiver on 127.0.0.1 with a self-signed certificate (the testkit's)
//! gets the alert when `notify.ca_file` holds that certificate, and nothing when it does not
//! (the web's roots do not vouch for it: delivery fails, counted, instead of trusting anyone).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Severity};
use infersight_model::telemetry::Counters;
use infersight_testkit::https::{HttpsReceiver, https_receiver};

use super::Notifier;
use super::config::NotifyConfig;

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
    let HttpsReceiver {
        addr,
        ca_pem: pem,
        requests: received,
    } = https_receiver(200, "");
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
    let HttpsReceiver {
        addr,
        requests: received,
        ..
    } = https_receiver(200, "");
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
